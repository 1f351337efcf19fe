//! Length bins of the visible-key count n, geometric around the drafter's training length n0: bin j holds
//! `n0 2^(j - 1/2) <= n < n0 2^(j + 1/2)`, for j from `lowest` to `highest` (e.g. -2 ..= 6 spans
//! 0.25 n0 ... 64 n0).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthBins {
    pub n0: f64,
    pub lowest: i32,
    pub highest: i32,
}

impl LengthBins {
    /// The bin of a row that sees `n` keys, if it is in range.
    pub fn bin_of(&self, n: f64) -> Option<i32> {
        let j = (n / self.n0).log2().round() as i32;
        (self.lowest..=self.highest).contains(&j).then_some(j)
    }

    /// The centre `n0 2^j` of bin j.
    pub fn centre(&self, bin: i32) -> f64 {
        self.n0 * 2f64.powi(bin)
    }

    /// `[lo, hi)` of bin j.
    pub fn range(&self, bin: i32) -> (f64, f64) {
        let centre = self.centre(bin);
        (centre / 2f64.sqrt(), centre * 2f64.sqrt())
    }

    /// Up to `per_bin` key counts per bin, evenly spaced inside it, each at least `min_n` and at most
    /// `max_n`, increasing and distinct.
    pub fn sample_counts(&self, per_bin: usize, min_n: i64, max_n: i64) -> Vec<i64> {
        let mut counts = Vec::new();
        for bin in self.lowest..=self.highest {
            let (lo, hi) = self.range(bin);
            let (lo, hi) = (
                lo.ceil().max(min_n as f64),
                (hi.ceil() - 1.0).min(max_n as f64),
            );
            if lo > hi {
                continue;
            }
            for i in 0..per_bin {
                // Centres of per_bin equal slices of [lo, hi].
                let n = (lo + (hi - lo) * (i as f64 + 0.5) / per_bin as f64).round() as i64;
                if counts.last().is_none_or(|&last| n > last) {
                    counts.push(n);
                }
            }
        }
        counts
    }
}
