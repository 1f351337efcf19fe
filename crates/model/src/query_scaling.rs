//! SharpDraft's cardinality-aware query scaling (derivations/top-k-mass-scaling.md §6): each query row i of a drafter is
//! multiplied by `s(n_i)`, `n_i` the number of keys that row sees (its mask row-sum), after q_norm and
//! RoPE, immediately before attention. One multiply in place on the pass's own query tensor: no cache
//! change and no buffer beyond the `[H, T]` factors.

use crate::error::{ModelError, Result};
use sharpdraft_math::{llama4_scale, logn_scale, yarn_scale, ScaleSchedule};
use tch::{Device, Kind, Tensor};

/// How a drafter's queries are scaled: one list for the applied scaling ([`QueryScaling`]), YAML
/// (`scaling: {mode: ..}`) and the command line (`--scaling`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum ScalingMode {
    /// The unmodified drafter.
    #[default]
    Off,
    /// `s(n) = 1 + beta max(0, ln(n / n0))`: beta from a schedule (global, per layer, per head) or `beta`.
    Fixed,
    /// The per-length-bin exact corrections of a calibrated schedule, interpolated in `ln n`.
    Exact,
    /// Qwen's `s = max(1, ln n / ln n0)`.
    Logn,
    /// Llama 4's attention temperature tuning, `1 + 0.1 ln(floor(n / 8192) + 1)`, with its own
    /// constants; `n0`, where given, replaces its floor scale 8192 (the drafter's n0, say).
    Llama4,
    /// YaRN's logit scale `(1 + 0.1 ln(n / n0))^2` past n0, n0 the drafter's training length unless
    /// given.
    Yarn,
}

impl ScalingMode {
    pub fn name(self) -> &'static str {
        match self {
            ScalingMode::Off => "off",
            ScalingMode::Fixed => "fixed",
            ScalingMode::Exact => "exact",
            ScalingMode::Logn => "logn",
            ScalingMode::Llama4 => "llama4",
            ScalingMode::Yarn => "yarn",
        }
    }
}

/// A drafter's query scaling, checked against the drafter it scales: its mode, with the schedule a
/// `fixed` or `exact` mode reads or the constants of a rule from the literature.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryScaling {
    mode: ScalingMode,
    /// `fixed` and `exact`: the schedule (global, per layer or per head; `exact` with its table).
    schedule: Option<ScaleSchedule>,
    /// `logn` and `yarn`: n0; `llama4`: its floor scale.
    n0: f64,
    /// `llama4`: its attention scale (the slope its steps follow far past the floor).
    attn_scale: f64,
    layers: usize,
    heads: usize,
}

impl QueryScaling {
    pub fn off() -> Self {
        Self {
            mode: ScalingMode::Off,
            schedule: None,
            n0: 0.0,
            attn_scale: 0.0,
            layers: 0,
            heads: 0,
        }
    }

    /// `fixed` or `exact` scaling from `schedule`, checked to fit `layers` x `heads` query heads (and,
    /// for `exact`, to have an exact table); errors name the offending entry.
    pub fn from_schedule(
        mode: ScalingMode,
        schedule: ScaleSchedule,
        layers: usize,
        heads: usize,
    ) -> Result<Self> {
        let what = "query scaling schedule";
        match mode {
            ScalingMode::Fixed => {}
            ScalingMode::Exact if schedule.exact.is_none() => {
                return Err(ModelError::tensor(what, "mode `exact` needs a schedule with an `exact:` table (written by `sharpdraft calibrate`)"));
            }
            ScalingMode::Exact => {}
            other => {
                return Err(ModelError::tensor(
                    what,
                    format!("mode `{}` reads no schedule", other.name()),
                ))
            }
        }
        schedule
            .check_shape(layers, heads)
            .map_err(|e| ModelError::tensor(what, e.to_string()))?;
        Ok(Self {
            mode,
            schedule: Some(schedule),
            n0: 0.0,
            attn_scale: 0.0,
            layers,
            heads,
        })
    }

    /// A rule from the literature with its constants: `logn` (n0 > 1) and `yarn` (n0 >= 1) at `n0`,
    /// `llama4` at floor scale `n0` (>= 1) and attention scale `attn_scale` (finite, >= 0), which the
    /// other two do not read. `off` gives the unmodified drafter.
    pub fn rule(
        mode: ScalingMode,
        n0: f64,
        attn_scale: f64,
        layers: usize,
        heads: usize,
    ) -> Result<Self> {
        match mode {
            ScalingMode::Off => return Ok(Self::off()),
            ScalingMode::Fixed | ScalingMode::Exact => {
                return Err(ModelError::tensor(
                    "query scaling",
                    format!("mode `{}` reads a schedule", mode.name()),
                ))
            }
            ScalingMode::Logn if !(n0.is_finite() && n0 > 1.0) => {
                return Err(ModelError::tensor(
                    "query scaling n0",
                    format!("logn needs n0 > 1, got {n0}"),
                ));
            }
            ScalingMode::Yarn if !(n0.is_finite() && n0 >= 1.0) => {
                return Err(ModelError::tensor(
                    "query scaling n0",
                    format!("yarn needs n0 >= 1, got {n0}"),
                ));
            }
            ScalingMode::Llama4 if !(n0.is_finite() && n0 >= 1.0) => {
                return Err(ModelError::tensor(
                    "query scaling n0",
                    format!("llama4's floor scale (n0) must be >= 1, got {n0}"),
                ));
            }
            ScalingMode::Llama4 if !(attn_scale.is_finite() && attn_scale >= 0.0) => {
                return Err(ModelError::tensor(
                    "query scaling beta",
                    format!(
                        "llama4's attention scale (beta) must be finite and >= 0, got {attn_scale}"
                    ),
                ));
            }
            ScalingMode::Logn | ScalingMode::Yarn | ScalingMode::Llama4 => {}
        }
        Ok(Self {
            mode,
            schedule: None,
            n0,
            attn_scale,
            layers,
            heads,
        })
    }

    pub fn mode(&self) -> ScalingMode {
        self.mode
    }

    /// The slope beta this scaling drafts with, for placing it beside a beta sweep: 0 when off, a
    /// schedule's mean beta over layers and heads, and the literature's rules at their nominal slope
    /// (logn `1 / ln n0`; YaRN 0.2, its slope in `ln n` at n0; Llama 4 its attention scale, the slope
    /// its steps follow far past the floor). `None` for exact corrections, which have no one slope.
    pub fn slope(&self) -> Option<f64> {
        match self.mode {
            ScalingMode::Off => Some(0.0),
            ScalingMode::Fixed => self.schedule.as_ref().map(ScaleSchedule::mean_beta),
            ScalingMode::Exact => None,
            ScalingMode::Logn => Some(1.0 / self.n0.ln()),
            ScalingMode::Llama4 => Some(self.attn_scale),
            ScalingMode::Yarn => Some(0.2),
        }
    }

    pub fn is_off(&self) -> bool {
        self.mode == ScalingMode::Off
    }

    /// `s(n)` of one (layer, head).
    pub fn scale(&self, n: f64, layer: usize, head: usize) -> f64 {
        match (self.mode, &self.schedule) {
            (ScalingMode::Fixed, Some(schedule)) => schedule.scale(n, layer, head),
            (ScalingMode::Exact, Some(schedule)) => {
                schedule.exact_scale(n, layer, head).unwrap_or(1.0)
            }
            (ScalingMode::Logn, _) => logn_scale(n, self.n0),
            (ScalingMode::Llama4, _) => llama4_scale(n, self.n0, self.attn_scale),
            (ScalingMode::Yarn, _) => yarn_scale(n, self.n0),
            // Off; a schedule mode always holds its schedule (`from_schedule`).
            _ => 1.0,
        }
    }

    /// Whether every layer gets the same factors (global beta, logn): then one `[H, T]` block serves them all.
    fn layer_invariant(&self) -> bool {
        match (self.mode, &self.schedule) {
            (ScalingMode::Exact, _) => false,
            (ScalingMode::Fixed, Some(schedule)) => {
                matches!(schedule.beta, sharpdraft_math::Beta::Global(_))
            }
            _ => true,
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
