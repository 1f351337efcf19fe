//! Uncertainty of the summary's figures: a point estimate with a 95% percentile-bootstrap interval over
//! the prompts of a table cell, and a paired test over the same prompts.
//!
//! The prompt is the unit of evidence. Under greedy decoding the repeats and seeds of one prompt emit
//! the same tokens, so they measure timing, not the method: the caller first combines them (tau pooled
//! over them, times by their median) into one sample per prompt, and the bootstrap resamples those
//! (a cluster bootstrap). Speed-ups and tokens/s take the median of the resampled prompts; tau takes
//! their pooled ratio (tokens over target passes). The resampling is seeded, so a report rebuilt from
//! the same units prints the same intervals. With one sample there is no interval (NaN).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Resamples per interval.
pub const RESAMPLES: usize = 2000;
/// The bootstrap's seed: intervals are a function of the data alone.
const SEED: u64 = 0x5eed_0f_1e7e;

/// A point estimate with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub estimate: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub const UNKNOWN: Interval = Interval {
        estimate: f64::NAN,
        lo: f64::NAN,
        hi: f64::NAN,
    };

    /// Whether both intervals are known and share a point: the difference between the two estimates is
    /// not resolved by these samples.
    pub fn overlaps(&self, other: &Interval) -> bool {
        self.known() && other.known() && self.lo <= other.hi && other.lo <= self.hi
    }

    pub fn known(&self) -> bool {
        self.lo.is_finite() && self.hi.is_finite()
    }
}

/// The median of `values` (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// `statistic` of all `n` samples, with the 2.5th and 97.5th percentiles of `statistic` over
/// [`RESAMPLES`] resamples (indices drawn with replacement).
pub fn bootstrap(n: usize, statistic: impl Fn(&[usize]) -> f64) -> Interval {
    if n == 0 {
        return Interval::UNKNOWN;
    }
    let all: Vec<usize> = (0..n).collect();
    let estimate = statistic(&all);
    if n < 2 {
        return Interval {
            estimate,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let mut rng = StdRng::seed_from_u64(SEED ^ n as u64);
    let mut indices = vec![0; n];
    let mut draws: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            for i in indices.iter_mut() {
                *i = rng.random_range(0..n);
            }
            statistic(&indices)
        })
        .filter(|v| v.is_finite())
        .collect();
    if draws.is_empty() {
        return Interval {
            estimate,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    draws.sort_by(f64::total_cmp);
    Interval {
        estimate,
        lo: percentile(&draws, 0.025),
        hi: percentile(&draws, 0.975),
    }
}

/// The `q` quantile (0 to 1) of `sorted` by nearest rank; NaN when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// The median of `values` (non-finite ones left out) with its bootstrap interval.
pub fn median_interval(values: &[f64]) -> Interval {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    bootstrap(finite.len(), |idx| {
        median(&idx.iter().map(|&i| finite[i]).collect::<Vec<_>>())
    })
}

/// A paired ratio over prompts (one ratio a prompt, a method's rate over another's on the same
/// requests): its median with the bootstrap interval, how many prompts put the first method ahead
/// (ratio above 1), and the two-sided Wilcoxon signed-rank p of the log ratios.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedRatio {
    pub ratio: Interval,
    pub ahead: usize,
    /// NaN when no ratio differs from 1.
    pub p: f64,
    /// `p` adjusted with the rest of the report's family of tests ([`crate::multiplicity`]); NaN
    /// outside a family, or until it is adjusted.
    pub p_adjusted: f64,
}

/// [`PairedRatio`] of `ratios`; non-finite ones are left out, and ratios of 0 from the test.
pub fn paired_ratio(ratios: &[f64]) -> PairedRatio {
    let finite: Vec<f64> = ratios.iter().copied().filter(|r| r.is_finite()).collect();
    let logs: Vec<f64> = finite
        .iter()
        .filter(|r| **r > 0.0)
        .map(|r| r.ln())
        .collect();
    PairedRatio {
        ratio: median_interval(&finite),
        ahead: finite.iter().filter(|&&r| r > 1.0).count(),
        p: wilcoxon_signed_rank(&logs),
        p_adjusted: f64::NAN,
    }
}

/// Two arms' pooled rates on the same prompts, compared: per prompt each arm's (numerator,
/// denominator) (tau: tokens emitted, target passes), as `(first, second)`. The ratio is the first
/// arm's pooled rate over the second's (`sum num / sum den` of each, over the same prompts), with its
/// bootstrap interval over prompts (both arms resampled together); `ahead` counts the prompts whose
/// own rate is higher in the first arm, and `p` is the signed-rank test of the per-prompt log ratios.
/// Unlike the median of per-prompt ratios, the pooled ratio does not pin to 1 when many prompts tie.
pub fn paired_pooled_ratio(pairs: &[((f64, f64), (f64, f64))]) -> PairedRatio {
    let usable: Vec<_> = pairs
        .iter()
        .copied()
        .filter(|((_, d1), (_, d2))| *d1 > 0.0 && *d2 > 0.0)
        .collect();
    let per_prompt: Vec<f64> = usable
        .iter()
        .map(|((n1, d1), (n2, d2))| (n1 / d1) / (n2 / d2))
        .collect();
    let logs: Vec<f64> = per_prompt
        .iter()
        .filter(|r| r.is_finite() && **r > 0.0)
        .map(|r| r.ln())
        .collect();
    PairedRatio {
        ratio: bootstrap(usable.len(), |idx| {
            let (mut n1, mut d1, mut n2, mut d2) = (0.0, 0.0, 0.0, 0.0);
            for &i in idx {
                let ((a, b), (c, d)) = usable[i];
                (n1, d1, n2, d2) = (n1 + a, d1 + b, n2 + c, d2 + d);
            }
            if n2 > 0.0 {
                (n1 / d1) / (n2 / d2)
            } else {
                f64::NAN
            }
        }),
        ahead: per_prompt.iter().filter(|&&r| r > 1.0).count(),
        p: wilcoxon_signed_rank(&logs),
        p_adjusted: f64::NAN,
    }
}

/// `sum(numerators) / sum(denominators)` over the samples, with its bootstrap interval (tau: tokens
/// over target passes, each request one sample).
pub fn ratio_interval(pairs: &[(f64, f64)]) -> Interval {
    bootstrap(pairs.len(), |idx| {
        let (num, den) = idx
            .iter()
            .fold((0.0, 0.0), |(n, d), &i| (n + pairs[i].0, d + pairs[i].1));
        if den > 0.0 {
            num / den
        } else {
            f64::NAN
        }
    })
}

/// The two-sided p-value of the Wilcoxon signed-rank test that `differences` (one per prompt, e.g. the
/// log of a paired ratio) are centred on 0; NaN when none differs from 0. Zeros are dropped (Wilcoxon's
/// rule) and tied magnitudes share their mean rank. Up to [`EXACT_UP_TO`] differences the null
/// distribution is counted exactly (every sign assignment, ties included); beyond, a normal
/// approximation with the tie correction and a continuity correction.
pub fn wilcoxon_signed_rank(differences: &[f64]) -> f64 {
    let mut nonzero: Vec<f64> = differences
        .iter()
        .copied()
        .filter(|d| d.is_finite() && *d != 0.0)
        .collect();
    let n = nonzero.len();
    if n == 0 {
        return f64::NAN;
    }
    nonzero.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
    // Doubled ranks: a tie of ranks i..j gets i + j (twice its mean rank), always a whole number.
    let mut doubled = vec![0usize; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && nonzero[j + 1].abs() == nonzero[i].abs() {
            j += 1;
        }
        for rank in &mut doubled[i..=j] {
            *rank = (i + 1) + (j + 1);
        }
        i = j + 1;
    }
    let positive: usize = (0..n)
        .filter(|&k| nonzero[k] > 0.0)
        .map(|k| doubled[k])
        .sum();
    let total: usize = doubled.iter().sum();
    if n <= EXACT_UP_TO {
        // counts[s]: sign assignments whose positive doubled ranks sum to s.
        let mut counts = vec![0f64; total + 1];
        counts[0] = 1.0;
        for &rank in &doubled {
            for s in (rank..=total).rev() {
                counts[s] += counts[s - rank];
            }
        }
        let all: f64 = counts.iter().sum();
        let at_most: f64 = counts[..=positive].iter().sum();
        let at_least: f64 = counts[positive..].iter().sum();
        return (2.0 * at_most.min(at_least) / all).min(1.0);
    }
    let (w, nf) = (positive as f64 / 2.0, n as f64);
    let mean = nf * (nf + 1.0) / 4.0;
    // The tie correction: sum over tie groups of (t^3 - t) / 48.
    let mut ties = 0.0;
    let mut k = 0;
    while k < n {
        let t = doubled[k..]
            .iter()
            .take_while(|&&r| r == doubled[k])
            .count();
        ties += ((t * t * t - t) as f64) / 48.0;
        k += t;
    }
    let sd = (nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - ties).sqrt();
    if sd <= 0.0 {
        return 1.0;
    }
    let z = ((w - mean).abs() - 0.5).max(0.0) / sd;
    let normal = statrs::distribution::Normal::standard();
    (2.0 * (1.0 - statrs::distribution::ContinuousCDF::cdf(&normal, z))).min(1.0)
}

/// Up to this many differences [`wilcoxon_signed_rank`] counts the null distribution exactly.
pub const EXACT_UP_TO: usize = 60;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_prompts_both_faster_give_a_wilcoxon_p_of_one_half() {
        // 4 sign assignments, one with both positive, one with both negative: p = 2 x 1/4.
        assert!((wilcoxon_signed_rank(&[0.1, 0.2]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn ten_prompts_all_faster_reach_the_exact_two_sided_p() {
        let d: Vec<f64> = (1..=10).map(|i| 0.01 * i as f64).collect();
        assert!((wilcoxon_signed_rank(&d) - 2.0 / 1024.0).abs() < 1e-12);
    }

    #[test]
    fn the_wilcoxon_p_matches_scipy_on_a_mixed_sample() {
        // scipy.stats.wilcoxon([1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30],
        //     [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.13, 1.29]) -> p = 0.0390625 (exact):
        // two of nine differences negative, of ranks 2 and 3, so W- = 5 and 2 x 10 / 512.
        let x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30];
        let y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.13, 1.29];
        let d: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
        assert!((wilcoxon_signed_rank(&d) - 0.0390625).abs() < 1e-9);
    }

    #[test]
    fn balanced_differences_are_not_significant_and_zeros_give_no_p() {
        assert_eq!(wilcoxon_signed_rank(&[0.1, -0.1, 0.2, -0.2]), 1.0);
        assert!(wilcoxon_signed_rank(&[0.0, 0.0]).is_nan());
    }

    #[test]
    fn the_normal_approximation_takes_over_smoothly_past_the_exact_counts() {
        // 61 differences, 45 positive: the approximation lands near the exact count's magnitude.
        let d: Vec<f64> = (1..=61)
            .map(|i| if i % 4 == 0 { -(i as f64) } else { i as f64 })
            .collect();
        let approximate = wilcoxon_signed_rank(&d);
        let exact = wilcoxon_signed_rank(&d[..60]);
        assert!(approximate > 0.0 && approximate < 0.01, "{approximate}");
        assert!(
            (approximate.ln() - exact.ln()).abs() < 1.0,
            "{approximate} {exact}"
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_the_middle_pair_averaged() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn a_percentile_is_the_nearest_ranked_sorted_value() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(
            (percentile(&sorted, 0.0), percentile(&sorted, 0.5)),
            (1.0, 3.0)
        );
        assert_eq!(
            (percentile(&sorted, 0.9), percentile(&sorted, 1.0)),
            (5.0, 5.0)
        );
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_interval_holds_the_estimate_and_narrows_with_more_samples() {
        let noisy = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| 1.0 + 0.2 * (((i * 7919) % 101) as f64 / 100.0 - 0.5))
                .collect()
        };
        let few = median_interval(&noisy(8));
        let many = median_interval(&noisy(200));
        for i in [few, many] {
            assert!(i.lo <= i.estimate && i.estimate <= i.hi, "{i:?}");
        }
        assert!(many.hi - many.lo < few.hi - few.lo, "{few:?} {many:?}");
    }

    #[test]
    fn intervals_are_the_same_every_time_they_are_computed() {
        let values = [1.1, 0.9, 1.3, 1.0, 0.95];
        assert_eq!(median_interval(&values), median_interval(&values));
    }

    #[test]
    fn one_sample_has_an_estimate_and_no_interval() {
        let i = median_interval(&[2.0]);
        assert_eq!(i.estimate, 2.0);
        assert!(!i.known());
        assert!(!i.overlaps(&i));
    }

    #[test]
    fn disjoint_intervals_do_not_overlap_and_touching_ones_do() {
        let a = Interval {
            estimate: 1.0,
            lo: 0.9,
            hi: 1.1,
        };
        let b = Interval {
            estimate: 1.3,
            lo: 1.2,
            hi: 1.4,
        };
        let c = Interval {
            estimate: 1.15,
            lo: 1.1,
            hi: 1.2,
        };
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&c) && c.overlaps(&b));
    }

    #[test]
    fn a_tied_tau_pair_gives_the_pooled_ratio_not_a_median_pinned_to_one() {
        // 17 prompts tie exactly (the same tokens accepted), 13 accept a little more in the first arm:
        // the median of per-prompt ratios is 1, the pooled ratio is not.
        let mut pairs = vec![((30.0, 20.0), (30.0, 20.0)); 17];
        pairs.extend(vec![((33.0, 20.0), (30.0, 20.0)); 13]);
        let per_prompt: Vec<f64> = pairs
            .iter()
            .map(|((a, b), (c, d))| (a / b) / (c / d))
            .collect();
        assert_eq!(median(&per_prompt), 1.0);
        let pooled = paired_pooled_ratio(&pairs);
        let expected = (30.0 * 17.0 + 33.0 * 13.0) / (30.0 * 30.0);
        assert!(
            (pooled.ratio.estimate - expected).abs() < 1e-12,
            "{pooled:?}"
        );
        assert!(pooled.ratio.lo > 1.0, "{pooled:?}");
        assert_eq!(pooled.ahead, 13);
        assert!(pooled.p < 0.001, "{pooled:?}");
    }

    #[test]
    fn a_pooled_ratio_weights_requests_by_their_cycles() {
        let i = ratio_interval(&[(30.0, 10.0), (1.0, 1.0)]);
        assert!((i.estimate - 31.0 / 11.0).abs() < 1e-12);
        assert!(i.lo >= 1.0 && i.hi <= 3.0, "{i:?}");
    }
}
