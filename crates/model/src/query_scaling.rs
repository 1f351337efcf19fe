//! SharpDraft's cardinality-aware query scaling (derivations/top-k-mass-scaling.md §6): each query row i of a drafter is
//! multiplied by `s(n_i)`, `n_i` the number of keys that row sees (its mask row-sum), after q_norm and
//! RoPE, immediately before attention. One multiply in place on the pass's own query tensor: no cache
//! change and no buffer beyond the `[H, T]` factors.

use crate::error::{ModelError, Result};
use sharpdraft_math::{llama4_scale, logn_scale, yarn_scale, ScaleSchedule};
use tch::{Device, Kind, Tensor};

/// How a drafter's queries are scaled.
#[derive(Debug, Clone, PartialEq)]
pub enum ScalingMode {
    /// No scaling: the unmodified drafter.
    Off,
    /// `s(n) = 1 + beta max(0, ln(n / n0))`, beta global, per layer or per head.
    Fixed(ScaleSchedule),
    /// The per-length-bin exact corrections of a calibration, interpolated in `ln n`.
    Exact(ScaleSchedule),
    /// Qwen's `s = max(1, ln n / ln n0)` (a baseline).
    Logn { n0: f64 },
    /// Llama 4's attention temperature tuning, `1 + attn_scale ln(floor(n / floor_scale) + 1)` (a
    /// baseline; its own constants are 0.1 and 8192).
    Llama4 { floor_scale: f64, attn_scale: f64 },
    /// YaRN's logit scale `(1 + 0.1 ln(n / n0))^2` past n0 (a baseline).
    Yarn { n0: f64 },
}

impl ScalingMode {
    pub fn name(&self) -> &'static str {
        match self {
            ScalingMode::Off => "off",
            ScalingMode::Fixed(_) => "fixed",
            ScalingMode::Exact(_) => "exact",
            ScalingMode::Logn { .. } => "logn",
            ScalingMode::Llama4 { .. } => "llama4",
            ScalingMode::Yarn { .. } => "yarn",
        }
    }

    /// The slope beta this mode drafts with, for placing it beside a beta sweep: 0 when off, a
    /// schedule's mean beta over layers and heads, and the literature's rules at their nominal slope
    /// (logn `1 / ln n0`; YaRN 0.2, its slope in `ln n` at n0; Llama 4 its attention scale, the slope
    /// its steps follow far past the floor). `None` for exact corrections, which have no one slope.
    pub fn slope(&self) -> Option<f64> {
        match self {
            ScalingMode::Off => Some(0.0),
            ScalingMode::Fixed(schedule) => Some(schedule.mean_beta()),
            ScalingMode::Exact(_) => None,
            ScalingMode::Logn { n0 } => Some(1.0 / n0.ln()),
            ScalingMode::Llama4 { attn_scale, .. } => Some(*attn_scale),
            ScalingMode::Yarn { .. } => Some(0.2),
        }
    }
}

/// A scaling mode checked against the drafter it scales.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryScaling {
    mode: ScalingMode,
    layers: usize,
    heads: usize,
}

impl QueryScaling {
    pub fn off() -> Self {
        Self {
            mode: ScalingMode::Off,
            layers: 0,
            heads: 0,
        }
    }

    /// Checks that `mode`'s schedule fits `layers` x `heads` query heads (and, for `exact`, that it has an
    /// exact table); errors name the offending entry.
    pub fn new(mode: ScalingMode, layers: usize, heads: usize) -> Result<Self> {
        let schedule_error = |e: sharpdraft_math::MathError| {
            ModelError::tensor("query scaling schedule", e.to_string())
        };
        match &mode {
            ScalingMode::Off => {}
            ScalingMode::Fixed(schedule) => schedule
                .check_shape(layers, heads)
                .map_err(schedule_error)?,
            ScalingMode::Exact(schedule) => {
                if schedule.exact.is_none() {
                    return Err(ModelError::tensor("query scaling schedule", "mode `exact` needs a schedule with an `exact:` table (written by `sharpdraft calibrate`)"));
                }
                schedule
                    .check_shape(layers, heads)
                    .map_err(schedule_error)?
            }
            ScalingMode::Logn { n0 } if !(n0.is_finite() && *n0 > 1.0) => {
                return Err(ModelError::tensor(
                    "query scaling n0",
                    format!("logn needs n0 > 1, got {n0}"),
                ));
            }
            ScalingMode::Logn { .. } => {}
            ScalingMode::Yarn { n0 } if !(n0.is_finite() && *n0 >= 1.0) => {
                return Err(ModelError::tensor(
                    "query scaling n0",
                    format!("yarn needs n0 >= 1, got {n0}"),
                ));
            }
            ScalingMode::Yarn { .. } => {}
            ScalingMode::Llama4 {
                floor_scale,
                attn_scale,
            } => {
                if !(floor_scale.is_finite() && *floor_scale >= 1.0) {
                    return Err(ModelError::tensor(
                        "query scaling n0",
                        format!("llama4's floor scale (n0) must be >= 1, got {floor_scale}"),
                    ));
                }
                if !(attn_scale.is_finite() && *attn_scale >= 0.0) {
                    return Err(ModelError::tensor(
                        "query scaling beta",
                        format!("llama4's attention scale (beta) must be finite and >= 0, got {attn_scale}"),
                    ));
                }
            }
        }
        Ok(Self {
            mode,
            layers,
            heads,
        })
    }

    pub fn mode(&self) -> &ScalingMode {
        &self.mode
    }

    pub fn is_off(&self) -> bool {
        self.mode == ScalingMode::Off
    }

    /// `s(n)` of one (layer, head).
    pub fn scale(&self, n: f64, layer: usize, head: usize) -> f64 {
        match &self.mode {
            ScalingMode::Off => 1.0,
            ScalingMode::Fixed(schedule) => schedule.scale(n, layer, head),
            ScalingMode::Exact(schedule) => schedule.exact_scale(n, layer, head).unwrap_or(1.0),
            ScalingMode::Logn { n0 } => logn_scale(n, *n0),
            ScalingMode::Llama4 {
                floor_scale,
                attn_scale,
            } => llama4_scale(n, *floor_scale, *attn_scale),
            ScalingMode::Yarn { n0 } => yarn_scale(n, *n0),
        }
    }

    /// Whether every layer gets the same factors (global beta, logn): then one `[H, T]` block serves them all.
    fn layer_invariant(&self) -> bool {
        match &self.mode {
            ScalingMode::Off
            | ScalingMode::Logn { .. }
            | ScalingMode::Llama4 { .. }
            | ScalingMode::Yarn { .. } => true,
            ScalingMode::Fixed(schedule) => {
                matches!(schedule.beta, sharpdraft_math::Beta::Global(_))
            }
            ScalingMode::Exact(_) => false,
        }
    }

    /// The factors of every layer of one pass over rows with visible-key counts `counts`, built on the
    /// host once and uploaded in one copy; `None` when off. Models with many layers call this once per
    /// forward pass and [`PassFactors::apply`] per layer.
    pub fn pass_factors(&self, counts: &[i64], device: Device, kind: Kind) -> Option<PassFactors> {
        if self.is_off() {
            return None;
        }
        let layers = if self.layer_invariant() {
            0..1
        } else {
            0..self.layers
        };
        Some(self.upload(layers, counts, device, kind))
    }

    /// `q * s(n_i)` out of place (training: the product joins the autograd graph). Off returns `q`.
    pub fn scaled(&self, q: &Tensor, layer: usize, counts: &[i64]) -> Result<Tensor> {
        self.check(q, layer, counts)?;
        Ok(match self.is_off() {
            true => q.shallow_clone(),
            false => {
                q * self
                    .upload(layer..layer + 1, counts, q.device(), q.kind())
                    .layer(0)
            }
        })
    }

    /// Multiplies queries `q` `[H, T, D]` of `layer` in place by `s(n_i)`, `counts` the `[T]` visible-key
    /// counts n_i (see [`visible_counts`]). Nothing happens when off.
    pub fn apply(&self, q: &mut Tensor, layer: usize, counts: &[i64]) -> Result<()> {
        self.check(q, layer, counts)?;
        match self.is_off() {
            true => Ok(()),
            false => self
                .upload(layer..layer + 1, counts, q.device(), q.kind())
                .apply(q, layer),
        }
    }

    fn check(&self, q: &Tensor, layer: usize, counts: &[i64]) -> Result<()> {
        if self.is_off() {
            return Ok(());
        }
        let (heads, rows, _) = q
            .size3()
            .map_err(|e| ModelError::tensor("queries", e.to_string()))?;
        if counts.len() != rows as usize {
            return Err(ModelError::tensor(
                "visible counts",
                format!("{} counts for {rows} query rows", counts.len()),
            ));
        }
        if layer >= self.layers || heads as usize != self.heads {
            return Err(ModelError::tensor(
                "queries",
                format!("layer {layer} with {heads} heads, the scaling was built for {} layers of {} heads", self.layers, self.heads),
            ));
        }
        Ok(())
    }

    /// `[layers, H, T, 1]` factors computed in f32 (derivations/top-k-mass-scaling.md §6), in `kind` on `device`.
    fn upload(
        &self,
        layers: std::ops::Range<usize>,
        counts: &[i64],
        device: Device,
        kind: Kind,
    ) -> PassFactors {
        let (count, rows) = (layers.len() as i64, counts.len() as i64);
        let mut factors = Vec::with_capacity(layers.len() * self.heads * counts.len());
        for layer in layers.clone() {
            for head in 0..self.heads {
                factors.extend(
                    counts
                        .iter()
                        .map(|&n| self.scale(n as f64, layer, head) as f32),
                );
            }
        }
        let factors = Tensor::from_slice(&factors)
            .view([count, self.heads as i64, rows, 1])
            .to_device(device)
            .to_kind(kind);
        PassFactors {
            factors,
            first_layer: layers.start,
        }
    }
}

/// The factors of one forward pass: `[layers, H, T, 1]`, or `[1, H, T, 1]` shared by every layer.
pub struct PassFactors {
    factors: Tensor,
    first_layer: usize,
}

impl PassFactors {
    /// `[H, T, 1]` for `layer`.
    fn layer(&self, layer: usize) -> Tensor {
        let layers = self.factors.size()[0] as usize;
        self.factors.get(if layers == 1 {
            0
        } else {
            (layer - self.first_layer) as i64
        })
    }

    /// Multiplies `layer`'s queries `q` `[H, T, D]` in place: the one place a drafting pass's queries
    /// are scaled (after q_norm and RoPE, before attention; no buffer beyond the factors).
    pub fn apply(&self, q: &mut Tensor, layer: usize) -> Result<()> {
        let _ = q.f_mul_(&self.layer(layer))?;
        Ok(())
    }
}

/// Row-sums of a `[T, L]` visibility mask (small draft masks: trees, blocks), or `L` for every row when
/// `visible` is `None`.
pub fn visible_counts(visible: Option<&Tensor>, rows: i64, keys: i64) -> Result<Vec<i64>> {
    Ok(match visible {
        None => vec![keys; rows as usize],
        Some(mask) => Vec::<i64>::try_from(
            mask.sum_dim_intlist(&[1i64][..], false, Kind::Int64)
                .to_device(tch::Device::Cpu),
        )?,
    })
}
