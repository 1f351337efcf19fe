//! SharpDraft's cardinality-aware query scaling (derivation.md §7): each query row i of a drafter is
//! multiplied by `s(n_i)`, `n_i` the number of keys that row sees (its mask row-sum), after q_norm and
//! RoPE, immediately before attention. One multiply in place on the pass's own query tensor: no cache
//! change and no buffer beyond the `[H, T]` factors.

use crate::error::{ModelError, Result};
use sharpdraft_math::{logn_scale, ScaleSchedule};
use tch::{Kind, Tensor};

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
}

impl ScalingMode {
    pub fn name(&self) -> &'static str {
        match self {
            ScalingMode::Off => "off",
            ScalingMode::Fixed(_) => "fixed",
            ScalingMode::Exact(_) => "exact",
            ScalingMode::Logn { .. } => "logn",
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
        }
    }

    /// `q * s(n_i)` out of place (training: the product joins the autograd graph). Off returns `q`.
    pub fn scaled(&self, q: &Tensor, layer: usize, counts: &[i64]) -> Result<Tensor> {
        Ok(match self.factors(q, layer, counts)? {
            None => q.shallow_clone(),
            Some(factors) => q * factors,
        })
    }

    /// Multiplies queries `q` `[H, T, D]` of `layer` in place by `s(n_i)`, `counts` the `[T]` visible-key
    /// counts n_i (see [`visible_counts`]). Nothing happens when off.
    pub fn apply(&self, q: &mut Tensor, layer: usize, counts: &[i64]) -> Result<()> {
        if let Some(factors) = self.factors(q, layer, counts)? {
            let _ = q.f_mul_(&factors)?;
        }
        Ok(())
    }

    /// The `[H, T, 1]` factors for queries `q` `[H, T, D]`, in q's kind on q's device (computed in f32,
    /// derivation.md §7); `None` when off.
    fn factors(&self, q: &Tensor, layer: usize, counts: &[i64]) -> Result<Option<Tensor>> {
        if self.is_off() {
            return Ok(None);
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
        let mut factors = Vec::with_capacity((heads * rows) as usize);
        for head in 0..heads as usize {
            factors.extend(
                counts
                    .iter()
                    .map(|&n| self.scale(n as f64, layer, head) as f32),
            );
        }
        Ok(Some(
            Tensor::from_slice(&factors)
                .view([heads, rows, 1])
                .to_device(q.device())
                .to_kind(q.kind()),
        ))
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
