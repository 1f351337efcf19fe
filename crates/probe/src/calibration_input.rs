//! Probe records -> the per-head statistics that `sharpdraft_math::calibrate` fits beta from.

use crate::recorder::{BinRecord, CurveRecord};
use sharpdraft_math::{BinStats, HeadStats};
use std::collections::BTreeMap;

/// One [`HeadStats`] per (layer, head) for top-k size `k`, bins in increasing n, each with its mass
/// curve. Every bin weighs the same (a deployment spread evenly over ln n).
pub fn head_stats(bins: &[BinRecord], curves: &[CurveRecord], k: i64) -> Vec<HeadStats> {
    let mut curve_of: BTreeMap<(usize, usize, i32), Vec<(f64, f64)>> = BTreeMap::new();
    for c in curves.iter().filter(|c| c.k == k) {
        curve_of
            .entry((c.layer, c.head, c.bin))
            .or_default()
            .push((c.s, c.mass));
    }
    let mut heads: BTreeMap<(usize, usize), Vec<BinStats>> = BTreeMap::new();
    for b in bins.iter().filter(|b| b.k == k) {
        let mut curve = curve_of
            .remove(&(b.layer, b.head, b.bin))
            .unwrap_or_default();
        curve.sort_by(|x, y| x.0.total_cmp(&y.0));
        heads.entry((b.layer, b.head)).or_default().push(BinStats {
            n: b.n,
            weight: 1.0,
            mass: b.mass,
            mass_gap: b.mass_gap,
            top_mean: b.top_mean,
            background_mean: b.background_mean,
            background_var: b.background_var,
            rows: Vec::new(),
            curve,
        });
    }
    heads
        .into_iter()
        .map(|((layer, head), mut bins)| {
            bins.sort_by(|x, y| x.n.total_cmp(&y.n));
            HeadStats {
                layer,
                head,
                k: k as usize,
                bins,
            }
        })
        .collect()
}
