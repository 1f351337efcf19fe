//! Softmax mass on the value-ranked top-k keys of one attention row (derivations/top-k-mass-scaling.md §1).
//!
//! For logits `l_j` (the exact softmax inputs, `q.k_j / sqrt(d_h)`) and a query scale `s`:
//! `M_k(s) = A / (A + Z_B)` with `A = sum_R exp(s l)`, `Z_B = sum_B exp(s l)`, `R` the k largest logits,
//! `B` the rest. `G = logit M_k = ln A - ln Z_B`, and (identity I1) `dG/ds = <l>_{R,s} - <l>_{B,s}`,
//! `d2G/ds2 = Var_{R,s}(l) - Var_{B,s}(l)`, the softmax-weighted moments within each set.

use crate::error::{ensure, ensure_finite, Result};
use crate::roots::brent_root;

/// Top-k mass of one row at one scale, with the derivatives that identity (I1) gives for free.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopKMass {
    /// `M_k`, in (0, 1).
    pub mass: f64,
    /// `G = ln(M / (1 - M))`, computed as `ln A - ln Z_B` so it stays exact when `M` rounds to 0 or 1.
    pub logit: f64,
    /// `dG/ds = <l>_{R,s} - <l>_{B,s}`; non-negative by Lemma 1.
    pub dlogit_ds: f64,
    /// `d2G/ds2 = Var_{R,s}(l) - Var_{B,s}(l)`.
    pub d2logit_ds2: f64,
    /// `<l>_{R,s}`: softmax-weighted mean logit inside the top-k.
    pub top_mean: f64,
    /// `<l>_{B,s}`: softmax-weighted mean logit of the background.
    pub background_mean: f64,
}

/// Softmax-weighted log-partition, mean and variance of a set of logits at scale `s`, each logit
/// carrying a multiplicity (1 for raw rows, a bin count for histograms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TiltedMoments {
    pub log_partition: f64,
    pub mean: f64,
    pub variance: f64,
}

pub(crate) fn tilted_moments(
    values: impl Iterator<Item = (f64, f64)> + Clone,
    s: f64,
) -> TiltedMoments {
    // Shift by the largest scaled logit so every exponent is <= 0 (no overflow at any s).
    let shift = values
        .clone()
        .filter(|&(_, m)| m > 0.0)
        .map(|(l, _)| s * l)
        .fold(f64::NEG_INFINITY, f64::max);
    let (mut z, mut first, mut second) = (0.0, 0.0, 0.0);
    for (l, m) in values {
        if m <= 0.0 {
            continue;
        }
        let w = m * (s * l - shift).exp();
        z += w;
        first += w * l;
        second += w * l * l;
    }
    let mean = first / z;
    TiltedMoments {
        log_partition: shift + z.ln(),
        mean,
        variance: (second / z - mean * mean).max(0.0),
    }
}

/// Checks a logit row: at least `k + 1` entries, all finite, `k >= 1`.
fn validate_row(logits: &[f64], k: usize) -> Result<()> {
    ensure(k >= 1, "k", k as f64, "the top set needs at least one key")?;
    ensure(
        logits.len() > k,
        "n",
        logits.len() as f64,
        &format!("a row needs more keys than k = {k}"),
    )?;
    if let Some(bad) = logits.iter().find(|l| !l.is_finite()) {
        ensure_finite("logit", *bad)?;
    }
    Ok(())
}

/// The row split into its k largest logits and the rest, both as plain vectors.
pub fn split_top_k(logits: &[f64], k: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    validate_row(logits, k)?;
    let mut sorted = logits.to_vec();
    // Descending; total order is safe because the row was checked to be finite.
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let background = sorted.split_off(k);
    Ok((sorted, background))
}

/// `M_k(n, s)` and its derivatives for one row of `n = logits.len()` visible keys.
pub fn top_k_mass(logits: &[f64], k: usize, s: f64) -> Result<TopKMass> {
    ensure(
        s.is_finite() && s >= 0.0,
        "s",
        s,
        "a query scale must be finite and >= 0",
    )?;
    let (top, background) = split_top_k(logits, k)?;
    Ok(mass_of_split(&top, background.iter().map(|&l| (l, 1.0)), s))
}

/// Mass of an already split row; `background` pairs each logit with its multiplicity.
pub(crate) fn mass_of_split(
    top: &[f64],
    background: impl Iterator<Item = (f64, f64)> + Clone,
    s: f64,
) -> TopKMass {
    let r = tilted_moments(top.iter().map(|&l| (l, 1.0)), s);
    let b = tilted_moments(background, s);
    let logit = r.log_partition - b.log_partition;
    TopKMass {
        mass: expit(logit),
        logit,
        dlogit_ds: r.mean - b.mean,
        d2logit_ds2: r.variance - b.variance,
        top_mean: r.mean,
        background_mean: b.mean,
    }
}

/// Per-row exact correction: the unique `s >= 0` with `M_k(s) = target` (Lemma 1). The target must lie
/// in `(k/n, M_k(s -> inf))`; outside that range there is no root and the error says so.
pub fn scale_for_mass(logits: &[f64], k: usize, target: f64) -> Result<f64> {
    ensure(
        target > 0.0 && target < 1.0,
        "target mass",
        target,
        "must lie in (0, 1)",
    )?;
    let (top, background) = split_top_k(logits, k)?;
    let f =
        |s: f64| mass_of_split(&top, background.iter().map(|&l| (l, 1.0)), s).logit - logit(target);
    brent_root(
        "M_k(s) = target",
        f,
        0.0,
        upper_scale(&top, &background),
        1e-12,
    )
}

/// A scale large enough that the top-k hold all but a negligible share of the mass (or as close as the
/// gap allows): beyond `40 / (min_R - max_B)` the background is down by e^-40 per key.
fn upper_scale(top: &[f64], background: &[f64]) -> f64 {
    let gap = top.last().copied().unwrap_or(0.0) - background.first().copied().unwrap_or(0.0);
    if gap > 0.0 {
        (40.0 + (background.len() as f64).ln()) / gap
    } else {
        1e3
    }
}

/// `1 / (1 + e^-x)`, written so it never overflows.
pub fn expit(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `ln(p / (1 - p))`.
pub fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}
