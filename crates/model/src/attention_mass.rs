//! Top-k attention mass of many rows at once on libtorch: the tensor form of `sharpdraft_math::mass`,
//! which the attention-statistics probe applies chunk by chunk.
//!
//! Shapes: `logits` is `[rows, n]` (the softmax inputs `q.k / sqrt(d_h)`, any float kind, any device);
//! every output is `[rows]` in f64 on the same device. Invisible keys are given as `-inf` logits.

use crate::error::{ModelError, Result};
use tch::{Kind, Tensor};

/// Per-row statistics at one query scale s.
pub struct TopKMassBatch {
    /// `M_k`, `[rows]`.
    pub mass: Tensor,
    /// `G = ln A - ln Z_B`, `[rows]`.
    pub logit: Tensor,
    /// `dG/ds = <l>_{R,s} - <l>_{B,s}`, `[rows]`.
    pub gap: Tensor,
}

/// Value-ranked top-k mass of each row of `logits` at scale `s`.
pub fn top_k_mass_batch(logits: &Tensor, k: i64, s: f64) -> Result<TopKMassBatch> {
    let size = logits.size();
    if size.len() != 2 {
        return Err(ModelError::tensor(
            "logits",
            format!("expected [rows, n], got {size:?}"),
        ));
    }
    if k < 1 || k >= size[1] {
        return Err(ModelError::tensor(
            "logits",
            format!("k = {k} must lie in [1, n = {})", size[1]),
        ));
    }
    // f64 throughout: the probe compares masses that differ in the fourth digit.
    let logits = logits.f_to_kind(Kind::Double)?;
    let (top, top_index) = logits.f_topk(k, -1, true, false)?;
    let scaled_top = top.f_mul_scalar(s)?;
    let log_a = scaled_top.f_logsumexp([-1], false)?;
    // Background = every key except the top-k: mask those positions to -inf.
    let background = logits.f_scatter_value(-1, &top_index, f64::NEG_INFINITY)?;
    let scaled_background = background.f_mul_scalar(s)?;
    let log_z_b = scaled_background.f_logsumexp([-1], false)?;
    let logit = log_a.f_sub(&log_z_b)?;
    // Tilted means; masked keys have weight exactly 0, so multiply by the unmasked logits.
    let top_weights = scaled_top.f_softmax(-1, Kind::Double)?;
    let background_weights = scaled_background.f_softmax(-1, Kind::Double)?;
    let finite_logits = logits.f_nan_to_num(0.0, 0.0, 0.0)?;
    let top_mean = top_weights
        .f_mul(&top)?
        .f_sum_dim_intlist(&[-1i64][..], false, Kind::Double)?;
    let background_mean = background_weights
        .f_mul(&finite_logits)?
        .f_sum_dim_intlist(&[-1i64][..], false, Kind::Double)?;
    Ok(TopKMassBatch {
        mass: logit.f_sigmoid()?,
        gap: top_mean.f_sub(&background_mean)?,
        logit,
    })
}
