//! Estimating beta from measured attention statistics (derivations/top-k-mass-scaling.md §5).
//!
//! Input: per head, statistics of an unscaled drafter (s = 1) in bins of visible-key count n.
//! * (i) Gaussian plug-in at n0: `n0 / ((n0 - k)(<l>_{R,p} - mu_hat - sigma_hat^2))`; variant (i') from the mass.
//! * (ii) model-free local slope: `-a_hat / g_hat`, `a_hat` the slope of `logit M_k` in `ln n` over bins
//!   `n <= n0`, `g_hat = E[M(1-M) gap] / (M (1-M))` at n0.
//! * (iii) exact + least squares: per bin `n_b > n0` solve `mean M_k(n_b, s_b) = M_k(n0, 1)` over the
//!   recorded rows (unique by Lemma 1), then `beta = sum w x (s - 1) / sum w x^2`, `x = ln(n_b / n0)`.
//!
//! Guards: beta = 0 where the plug-in `D_hat <= 0` ((i), (i')) or where no dilution/gap is measured ((ii));
//! every beta is clipped to `[0, beta_max]`.
//!
//! Reference of (iii): by default the head's own mass at n0 (the drafter was right at its training
//! length). With [`MassReference::Target`] the mass it is held at falls from n0 as the target's own mass
//! falls (pooled over the target's heads): a drafter that imitates a target which dilutes too is not
//! sharpened past it, and where it already sits at or above that mass its bin keeps s = 1.

use crate::error::{ensure, MathError, Result};
use crate::mass::{logit, mass_of_split, split_top_k, TopKMass};
use crate::roots::first_crossing;
use serde::{Deserialize, Serialize};

/// One query row reduced to what re-evaluating its top-k mass at any scale needs: the exact top-k
/// logits and the background as (logit, multiplicity) pairs (raw logits, or histogram bin centres).
#[derive(Debug, Clone, PartialEq)]
pub struct RowLogits {
    pub top: Vec<f64>,
    pub background: Vec<(f64, f64)>,
}

impl RowLogits {
    /// From a raw row of `n` logits.
    pub fn from_logits(logits: &[f64], k: usize) -> Result<Self> {
        let (top, background) = split_top_k(logits, k)?;
        Ok(Self {
            top,
            background: background.into_iter().map(|l| (l, 1.0)).collect(),
        })
    }

    /// From a raw row, with the background kept as a histogram of `bins` equal-width bins (counts at bin
    /// centres). The mass at scale s is then exact up to a relative error of about `(s w)^2 / 24` per key,
    /// `w` the bin width: what a streaming probe can store for long rows without keeping all n logits.
    pub fn summarize(logits: &[f64], k: usize, bins: usize) -> Result<Self> {
        ensure(
            bins >= 1,
            "bins",
            bins as f64,
            "a histogram needs at least one bin",
        )?;
        let (top, background) = split_top_k(logits, k)?;
        // split_top_k sorts descending: the background's range is its first and last entry.
        let (hi, lo) = (background[0], background[background.len() - 1]);
        let width = (hi - lo) / bins as f64;
        if width <= 0.0 {
            return Ok(Self {
                top,
                background: vec![(hi, background.len() as f64)],
            });
        }
        let mut counts = vec![0.0; bins];
        for l in &background {
            counts[(((l - lo) / width) as usize).min(bins - 1)] += 1.0;
        }
        let background = counts
            .into_iter()
            .enumerate()
            .filter(|(_, c)| *c > 0.0)
            .map(|(i, c)| (lo + (i as f64 + 0.5) * width, c))
            .collect();
        Ok(Self { top, background })
    }

    /// Top-k mass of this row at scale s.
    pub fn mass(&self, s: f64) -> TopKMass {
        mass_of_split(&self.top, self.background.iter().copied(), s)
    }

    /// Plain (untilted) mean and variance of the background logits: `mu_hat`, `sigma_hat^2`.
    pub fn background_moments(&self) -> (f64, f64) {
        let count: f64 = self.background.iter().map(|b| b.1).sum();
        let mean = self.background.iter().map(|(l, m)| l * m).sum::<f64>() / count;
        let var = self
            .background
            .iter()
            .map(|(l, m)| m * (l - mean).powi(2))
            .sum::<f64>()
            / count;
        (mean, var)
    }
}

/// Statistics of one head in one length bin, averaged over the rows recorded there (all at s = 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BinStats {
    /// Representative visible-key count of the bin.
    pub n: f64,
    /// Share of decoding steps at this length (the `w_b` of estimator (iii)).
    pub weight: f64,
    /// Mean top-k mass `M_k`.
    pub mass: f64,
    /// Mean of `M (1 - M) (<l>_{R,p} - <l>_{B,p})`.
    pub mass_gap: f64,
    /// Mean of `<l>_{R,p}`, the attention-weighted top-k logit.
    pub top_mean: f64,
    /// Mean of the plain background mean `mu_hat`.
    pub background_mean: f64,
    /// Mean of the plain background variance `sigma_hat^2`.
    pub background_var: f64,
    /// Rows kept for estimator (iii); may be empty for bins that only feed (i) and (ii).
    #[serde(skip)]
    pub rows: Vec<RowLogits>,
    /// Without rows, estimator (iii) reads the mean mass at scale s from this curve of `(s, mean M_k)`
    /// points, increasing in s (what the probe records on an s grid); interpolated linearly in logit.
    #[serde(skip)]
    pub curve: Vec<(f64, f64)>,
}

impl BinStats {
    /// Aggregates rows of one bin; keeps them for estimator (iii).
    pub fn from_rows(n: f64, weight: f64, rows: Vec<RowLogits>) -> Result<Self> {
        ensure(
            !rows.is_empty(),
            "rows",
            0.0,
            &format!("bin n = {n} has no rows"),
        )?;
        let count = rows.len() as f64;
        let (mut mass, mut mass_gap, mut top_mean, mut bg_mean, mut bg_var) =
            (0.0, 0.0, 0.0, 0.0, 0.0);
        for row in &rows {
            let m = row.mass(1.0);
            let (mu, var) = row.background_moments();
            mass += m.mass;
            mass_gap += m.mass * (1.0 - m.mass) * m.dlogit_ds;
            top_mean += m.top_mean;
            bg_mean += mu;
            bg_var += var;
        }
        Ok(Self {
            n,
            weight,
            mass: mass / count,
            mass_gap: mass_gap / count,
            top_mean: top_mean / count,
            background_mean: bg_mean / count,
            background_var: bg_var / count,
            rows,
            curve: Vec::new(),
        })
    }

    /// Mean top-k mass of the recorded rows at scale s (the quantity estimator (iii) matches); from the
    /// recorded curve when no rows are kept, clamped to its ends outside its s range.
    pub fn mean_mass(&self, s: f64) -> f64 {
        if !self.rows.is_empty() {
            return self.rows.iter().map(|r| r.mass(s).mass).sum::<f64>() / self.rows.len() as f64;
        }
        let curve = &self.curve;
        match curve.iter().position(|p| p.0 >= s) {
            None => curve.last().map_or(f64::NAN, |p| p.1),
            Some(0) => curve[0].1,
            Some(i) => {
                let ((s0, m0), (s1, m1)) = (curve[i - 1], curve[i]);
                let t = (s - s0) / (s1 - s0);
                crate::mass::expit(bounded_logit(m0) + t * (bounded_logit(m1) - bounded_logit(m0)))
            }
        }
    }

    /// Whether estimator (iii) can evaluate this bin at other scales.
    pub fn has_mass_at_scale(&self) -> bool {
        !self.rows.is_empty() || self.curve.len() >= 2
    }
}

/// All bins of one attention head.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadStats {
    pub layer: usize,
    pub head: usize,
    pub k: usize,
    pub bins: Vec<BinStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// (i) Gaussian plug-in at n0.
    GaussianPlugIn,
    /// (i') plug-in through the measured mass.
    MassPlugIn,
    /// (ii) model-free local slope.
    LocalSlope,
    /// (iii) per-bin exact root + weighted least squares.
    ExactLeastSquares,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationOptions {
    pub n0: f64,
    pub estimator: Estimator,
    /// Upper clip of every beta.
    pub beta_max: f64,
    /// What estimator (iii) holds each long bin's mass at.
    pub reference: MassReference,
}

/// The mass estimator (iii) solves for at a long bin.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum MassReference {
    /// The head's own mass at n0.
    #[default]
    Drafter,
    /// The head's mass at n0, moved by the target's own fall in `logit M_k` from n0 to n.
    Target(TargetDilution),
}

/// How the target's top-k mass falls with the number of visible keys: `(ln n, mean logit M_k)` over the
/// target's heads, per length bin, increasing in n.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetDilution {
    points: Vec<(f64, f64)>,
}

impl TargetDilution {
    /// From a target's per-head statistics (its probe): each bin's `logit M_k` averaged over the heads;
    /// bins of the same rank across heads are one length (their n averaged in log).
    pub fn from_heads(heads: &[HeadStats]) -> Result<Self> {
        ensure(!heads.is_empty(), "target heads", 0.0, "nothing to pool")?;
        let bins = heads.iter().map(|h| h.bins.len()).min().unwrap_or(0);
        ensure(
            bins >= 2,
            "target bins",
            bins as f64,
            "the target's dilution needs at least two length bins",
        )?;
        let mut points: Vec<(f64, f64)> = (0..bins)
            .map(|b| {
                let count = heads.len() as f64;
                let ln_n = heads.iter().map(|h| h.bins[b].n.ln()).sum::<f64>() / count;
                let mass = heads.iter().map(|h| logit(h.bins[b].mass)).sum::<f64>() / count;
                (ln_n, mass)
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(Self { points })
    }

    /// From `(n, mean M_k)` points directly (tests, other tools).
    pub fn from_points(points: &[(f64, f64)]) -> Result<Self> {
        ensure(
            points.len() >= 2,
            "target bins",
            points.len() as f64,
            "needs at least two",
        )?;
        let mut points: Vec<(f64, f64)> = points.iter().map(|&(n, m)| (n.ln(), logit(m))).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(Self { points })
    }

    /// `logit M_T` at n, linear in ln n between the target's bins; outside them, an error naming n.
    fn logit_mass(&self, n: f64) -> Result<f64> {
        let x = n.ln();
        let (first, last) = (self.points[0], self.points[self.points.len() - 1]);
        // A bin's representative n may sit a little outside the target's; within the reference
        // tolerance the end value stands.
        if x <= first.0 {
            ensure(
                first.0 - x <= REFERENCE_TOLERANCE.ln(),
                "n",
                n,
                &format!(
                    "lies below the target probe's shortest bin ({:.0})",
                    first.0.exp()
                ),
            )?;
            return Ok(first.1);
        }
        if x >= last.0 {
            ensure(
                x - last.0 <= REFERENCE_TOLERANCE.ln(),
                "n",
                n,
                &format!(
                    "lies beyond the target probe's longest bin ({:.0})",
                    last.0.exp()
                ),
            )?;
            return Ok(last.1);
        }
        let i = self
            .points
            .iter()
            .position(|p| p.0 >= x)
            .expect("inside the range");
        let ((x0, y0), (x1, y1)) = (self.points[i - 1], self.points[i]);
        Ok(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    }

    /// `logit M_T(n) - logit M_T(n0)`: how far the target's own mass has fallen (negative when it dilutes).
    pub fn shift(&self, n0: f64, n: f64) -> Result<f64> {
        Ok(self.logit_mass(n)? - self.logit_mass(n0)?)
    }
}

/// Why a head's beta was changed from its raw estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guard {
    /// Plug-in `D_hat <= 0`: the Gaussian model does not support sharpening for this head.
    NotSharpening,
    /// No dilution or no positive gap measured below n0.
    NoDilution,
    /// Raw beta outside `[0, beta_max]`.
    Clipped,
    /// Against the target reference, every long bin already sits at or above the target-referenced mass:
    /// sharpening would move the drafter away from the target.
    FollowsTarget,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeadBeta {
    pub layer: usize,
    pub head: usize,
    pub beta: f64,
    /// The estimate before guards (NaN where the guard fired before it could be formed).
    pub raw: f64,
    pub guard: Option<Guard>,
    /// Estimator (iii) only: `(n_b, s_b)` per long bin; `None` where the target mass is out of reach.
    pub bin_scales: Vec<(f64, Option<f64>)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub estimator: Estimator,
    /// One beta for every head. For (iii) the pooled least-squares slope over all heads and bins; for the
    /// local estimators the mean of the guarded per-head values.
    pub pooled: f64,
    pub heads: Vec<HeadBeta>,
}

/// Bins whose n lies within this factor of n0 count as "at n0".
const REFERENCE_TOLERANCE: f64 = 1.5;

fn reference_bin<'a>(head: &'a HeadStats, n0: f64) -> Result<&'a BinStats> {
    head.bins
        .iter()
        .min_by(|a, b| (a.n / n0).ln().abs().total_cmp(&(b.n / n0).ln().abs()))
        .filter(|b| (b.n / n0).ln().abs() <= REFERENCE_TOLERANCE.ln())
        .ok_or_else(|| {
            MathError::Calibration(format!(
                "layer {} head {}: no length bin within a factor {REFERENCE_TOLERANCE} of n0 = {n0}",
                head.layer, head.head
            ))
        })
}

fn guarded(raw: f64, beta_max: f64, guard: Option<Guard>) -> (f64, Option<Guard>) {
    if guard.is_some() {
        return (0.0, guard);
    }
    if raw.is_nan() {
        return (0.0, Some(Guard::NotSharpening));
    }
    let clipped = raw.clamp(0.0, beta_max);
    (clipped, (clipped != raw).then_some(Guard::Clipped))
}

/// Calibrates beta for every head with one estimator.
pub fn calibrate(heads: &[HeadStats], config: &CalibrationOptions) -> Result<Calibration> {
    ensure(
        config.n0.is_finite() && config.n0 > 1.0,
        "n0",
        config.n0,
        "must be a finite length > 1",
    )?;
    ensure(
        config.beta_max >= 0.0,
        "beta_max",
        config.beta_max,
        "must be >= 0",
    )?;
    ensure(!heads.is_empty(), "heads", 0.0, "nothing to calibrate")?;
    let mut results = Vec::with_capacity(heads.len());
    let (mut pooled_num, mut pooled_den) = (0.0, 0.0);
    for head in heads {
        let reference = reference_bin(head, config.n0)?;
        let k = head.k as f64;
        ensure(
            config.n0 > k,
            "n0",
            config.n0,
            &format!("must exceed k = {k}"),
        )?;
        let mut bin_scales = Vec::new();
        let (raw, guard) = match config.estimator {
            Estimator::GaussianPlugIn => {
                let d = reference.top_mean - reference.background_mean - reference.background_var;
                plug_in(config.n0, k, d)
            }
            Estimator::MassPlugIn => {
                let d = logit(reference.mass) + ((config.n0 - k) / k).ln()
                    - reference.background_var / 2.0;
                plug_in(config.n0, k, d)
            }
            Estimator::LocalSlope => local_slope(head, reference, config.n0)?,
            Estimator::ExactLeastSquares => {
                let (num, den) = exact_least_squares(
                    head,
                    reference,
                    config.n0,
                    &config.reference,
                    &mut bin_scales,
                )?;
                pooled_num += num;
                pooled_den += den;
                let follows_target = matches!(config.reference, MassReference::Target(_))
                    && !bin_scales.is_empty()
                    && bin_scales.iter().all(|(_, s)| *s == Some(1.0));
                (
                    if den > 0.0 { num / den } else { f64::NAN },
                    if follows_target {
                        Some(Guard::FollowsTarget)
                    } else {
                        (den <= 0.0).then_some(Guard::NoDilution)
                    },
                )
            }
        };
        let (beta, guard) = guarded(raw, config.beta_max, guard);
        results.push(HeadBeta {
            layer: head.layer,
            head: head.head,
            beta,
            raw,
            guard,
            bin_scales,
        });
    }
    let pooled = match config.estimator {
        Estimator::ExactLeastSquares if pooled_den > 0.0 => {
            (pooled_num / pooled_den).clamp(0.0, config.beta_max)
        }
        Estimator::ExactLeastSquares => 0.0,
        _ => results.iter().map(|h| h.beta).sum::<f64>() / results.len() as f64,
    };
    Ok(Calibration {
        estimator: config.estimator,
        pooled,
        heads: results,
    })
}

fn plug_in(n0: f64, k: f64, d: f64) -> (f64, Option<Guard>) {
    if d.is_nan() || d <= 0.0 {
        (f64::NAN, Some(Guard::NotSharpening))
    } else {
        (n0 / ((n0 - k) * d), None)
    }
}

/// (ii): ordinary least squares of `logit M_k` on `ln n` over the bins at or below n0.
fn local_slope(head: &HeadStats, reference: &BinStats, n0: f64) -> Result<(f64, Option<Guard>)> {
    let short: Vec<(f64, f64)> = head
        .bins
        .iter()
        .filter(|b| b.n <= n0 * REFERENCE_TOLERANCE && b.n <= reference.n)
        .map(|b| (b.n.ln(), logit(b.mass)))
        .collect();
    if short.len() < 2 {
        return Err(MathError::Calibration(format!(
            "layer {} head {}: the local slope needs at least two bins at n <= n0 = {n0}, found {}",
            head.layer,
            head.head,
            short.len()
        )));
    }
    let count = short.len() as f64;
    let mean_x = short.iter().map(|p| p.0).sum::<f64>() / count;
    let mean_y = short.iter().map(|p| p.1).sum::<f64>() / count;
    let sxx: f64 = short.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = short.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let dilution_rate = sxy / sxx;
    let m = reference.mass;
    let gap = reference.mass_gap / (m * (1.0 - m));
    if !(dilution_rate < 0.0 && gap > 0.0) {
        return Ok((f64::NAN, Some(Guard::NoDilution)));
    }
    Ok((-dilution_rate / gap, None))
}

/// `logit p` kept finite for a mass that rounds to 0 or 1 in f64 (a head that attends one-hot: its top-k
/// mass is 1 to 16 digits), so root finding never meets an infinity: about +-36 at the ends.
fn bounded_logit(p: f64) -> f64 {
    logit(p.clamp(f64::EPSILON, 1.0 - f64::EPSILON))
}

/// (iii): returns this head's least-squares numerator and denominator and fills `(n_b, s_b)`.
fn exact_least_squares(
    head: &HeadStats,
    reference: &BinStats,
    n0: f64,
    mass_reference: &MassReference,
    bin_scales: &mut Vec<(f64, Option<f64>)>,
) -> Result<(f64, f64)> {
    let at_n0 = bounded_logit(if reference.has_mass_at_scale() {
        reference.mean_mass(1.0)
    } else {
        reference.mass
    });
    let (mut num, mut den) = (0.0, 0.0);
    for bin in head
        .bins
        .iter()
        .filter(|b| b.n > n0 * (1.0 + 1e-9) && !std::ptr::eq(*b, reference))
    {
        if !bin.has_mass_at_scale() {
            return Err(MathError::Calibration(format!(
                "layer {} head {}: bin n = {} has no recorded rows or mass curve for the exact estimator",
                head.layer, head.head, bin.n
            )));
        }
        let wanted = match mass_reference {
            MassReference::Drafter => at_n0,
            MassReference::Target(dilution) => at_n0 + dilution.shift(n0, bin.n)?,
        };
        // Mean mass is increasing in s (Lemma 1), so the first crossing is the unique root; a bin already
        // at or above the wanted mass keeps s = 1.
        let f = |s: f64| bounded_logit(bin.mean_mass(s)) - wanted;
        let hi = if bin.rows.is_empty() {
            bin.curve.last().map_or(1.0, |p| p.0)
        } else {
            64.0
        };
        let root = if hi > 1.0 {
            first_crossing("mean M_k(n_b, s) = M_k(n0, 1)", f, 1.0, hi, |_| false)?
        } else {
            None
        };
        bin_scales.push((bin.n, root));
        if let Some(s) = root {
            let x = (bin.n / n0).ln();
            num += bin.weight * x * (s - 1.0);
            den += bin.weight * x * x;
        }
    }
    Ok((num, den))
}
