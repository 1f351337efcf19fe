//! Uncertainty of the summary's figures: a point estimate with a 95% percentile-bootstrap interval over
//! the requests of a table cell (every prompt x seed x repeat is one sample, resampled with
//! replacement). Speed-ups and tokens/s take the median; tau takes its pooled ratio (tokens over target
//! passes) of the resampled requests. The resampling is seeded, so a report rebuilt from the same units
//! prints the same intervals. With one sample there is no interval (NaN).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_middle_pair_averaged() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn a_percentile_is_the_nearest_ranked_sorted_value() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!((percentile(&sorted, 0.0), percentile(&sorted, 0.5)), (1.0, 3.0));
        assert_eq!((percentile(&sorted, 0.9), percentile(&sorted, 1.0)), (5.0, 5.0));
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_interval_holds_the_estimate_and_narrows_with_more_samples() {
        let noisy = |n: usize| -> Vec<f64> {
            (0..n).map(|i| 1.0 + 0.2 * (((i * 7919) % 101) as f64 / 100.0 - 0.5)).collect()
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
        let a = Interval { estimate: 1.0, lo: 0.9, hi: 1.1 };
        let b = Interval { estimate: 1.3, lo: 1.2, hi: 1.4 };
        let c = Interval { estimate: 1.15, lo: 1.1, hi: 1.2 };
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&c) && c.overlaps(&b));
    }

    #[test]
    fn a_pooled_ratio_weights_requests_by_their_cycles() {
        let i = ratio_interval(&[(30.0, 10.0), (1.0, 1.0)]);
        assert!((i.estimate - 31.0 / 11.0).abs() < 1e-12);
        assert!(i.lo >= 1.0 && i.hi <= 3.0, "{i:?}");
    }
}
