//! The probe's attention observer: for the sampled query rows of every observed pass, it reduces the
//! rows' logits to the statistics of derivations/top-k-mass-scaling.md §5 and accumulates them per (layer, head, length bin).
//! Rows are taken a few at a time (`[H, rows, L]`), so memory grows with L, never with L^2.

use crate::attention_stats_kernel::AttentionStatsKernel;
use crate::length_bins::LengthBins;
use crate::row_statistics::{row_statistics, RowStatistics};
use serde::{Deserialize, Serialize};
use sharpdraft_model::{AttentionObserver, AttentionView};
use std::collections::{BTreeMap, BTreeSet};
use tch::Device;

/// Rows of one logits tile: bounds the probe's working set to `ROWS_PER_TILE x H x L` values.
pub const ROWS_PER_TILE: i64 = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSettings {
    pub bins: LengthBins,
    /// The k of `M_k` (each must stay below the smallest probed n).
    pub ks: Vec<i64>,
    /// Scales at which `M_k` is re-evaluated for estimator (iii), increasing, starting at 1.
    pub scales: Vec<f64>,
}

/// Which query rows of a pass to record, by absolute row index (`past + row`).
pub enum RowFilter {
    Positions(BTreeSet<i64>),
    All,
}

/// Means over the recorded rows of one (layer, head, bin, k).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BinRecord {
    pub layer: usize,
    pub head: usize,
    pub bin: i32,
    pub k: i64,
    /// Mean visible-key count of the rows.
    pub n: f64,
    pub rows: usize,
    pub mass: f64,
    pub background_mean: f64,
    pub background_var: f64,
    /// `<l>_{R,p}`.
    pub top_mean: f64,
    /// `<l>_{B,p}`.
    pub weighted_background_mean: f64,
    /// `<l>_{R,p} - <l>_{B,p}`.
    pub gap: f64,
    /// `M (1 - M) gap`.
    pub mass_gap: f64,
    pub entropy: f64,
    pub lse: f64,
    pub sink_share: f64,
}

/// Mean `M_k` of one (layer, head, bin, k) at scale s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveRecord {
    pub layer: usize,
    pub head: usize,
    pub bin: i32,
    pub k: i64,
    pub s: f64,
    pub mass: f64,
}

#[derive(Default, Clone)]
struct Sums {
    rows: usize,
    n: f64,
    entropy: f64,
    lse: f64,
    sink: f64,
    /// Per k: mass, background mean, background var, top mean, weighted background mean, gap, mass gap.
    per_k: Vec<[f64; 7]>,
    /// Per k, per scale.
    curve: Vec<Vec<f64>>,
}

pub struct ProbeRecorder {
    settings: ProbeSettings,
    filter: RowFilter,
    layers: Option<BTreeSet<usize>>,
    sums: BTreeMap<(usize, usize, i32), Sums>,
    /// The CUDA kernel, loaded on the first CUDA pass (or why it could not be).
    kernel: Option<std::result::Result<AttentionStatsKernel, String>>,
    /// Which paths have computed statistics so far: (the kernel, libtorch).
    used: (bool, bool),
}

impl ProbeRecorder {
    /// Records `filter`'s rows of the given layers (all when `None`).
    pub fn new(
        settings: ProbeSettings,
        filter: RowFilter,
        layers: Option<BTreeSet<usize>>,
    ) -> Self {
        Self {
            settings,
            filter,
            layers,
            sums: BTreeMap::new(),
            kernel: None,
            used: (false, false),
        }
    }

    pub fn set_filter(&mut self, filter: RowFilter) {
        self.filter = filter;
    }

    /// Rows recorded so far (summed over layers and heads).
    pub fn rows_recorded(&self) -> usize {
        self.sums.values().map(|s| s.rows).sum()
    }

    /// The libtorch path: one tile of consecutive rows, its logits `[H, rows, L]` held at once.
    fn record_tile(&mut self, layer: usize, view: &AttentionView<'_>, rows: std::ops::Range<i64>) {
        let keys = view.keys.size()[1];
        let logits = view.logits(rows.clone(), 0..keys);
        let stats = row_statistics(&logits, &self.settings.ks, &self.settings.scales);
        self.used.1 = true;
        self.accumulate(layer, view.queries.size()[0] as usize, &stats);
    }

    /// The CUDA kernel for every selected row at once, streamed over the keys. Falls back to libtorch
    /// (saying why, once) where the kernel cannot be loaded.
    fn record_with_kernel(&mut self, layer: usize, view: &AttentionView<'_>, rows: &[i64]) -> bool {
        let Device::Cuda(ordinal) = view.queries.device() else {
            return false;
        };
        let kernel = self.kernel.get_or_insert_with(|| {
            AttentionStatsKernel::new(ordinal).map_err(|e| {
                eprintln!("probe: the CUDA statistics kernel is unavailable ({e}); using libtorch");
                e.to_string()
            })
        });
        let Ok(kernel) = kernel else {
            return false;
        };
        let stats = kernel.row_statistics(view, rows, &self.settings.ks, &self.settings.scales);
        match stats {
            Ok(stats) => {
                self.used.0 = true;
                self.accumulate(layer, view.queries.size()[0] as usize, &stats);
                true
            }
            Err(e) => {
                eprintln!("probe: the CUDA statistics kernel failed ({e}); using libtorch");
                self.kernel = Some(Err(e.to_string()));
                false
            }
        }
    }

    /// Which path computed the statistics: "cuda kernel", "libtorch", both (a kernel that failed part way),
    /// or "none yet".
    pub fn statistics_path(&self) -> &'static str {
        match self.used {
            (true, false) => "cuda kernel",
            (false, true) => "libtorch",
            (true, true) => "cuda kernel, then libtorch",
            (false, false) => "none yet",
        }
    }

    /// Adds the rows of `stats` (heads x rows, head-major) to their (layer, head, bin) sums.
    fn accumulate(&mut self, layer: usize, heads: usize, stats: &RowStatistics) {
        let count = stats.n.len();
        let max_k = *self.settings.ks.iter().max().unwrap_or(&1) as f64;
        for r in 0..count {
            let n = stats.n[r];
            let Some(bin) = self.settings.bins.bin_of(n).filter(|_| n > max_k) else {
                continue;
            };
            for head in 0..heads {
                let i = head * count + r;
                let entry = self.sums.entry((layer, head, bin)).or_insert_with(|| Sums {
                    per_k: vec![[0.0; 7]; stats.per_k.len()],
                    curve: vec![vec![0.0; self.settings.scales.len()]; stats.per_k.len()],
                    ..Default::default()
                });
                entry.rows += 1;
                entry.n += n;
                entry.entropy += stats.entropy[i];
                entry.lse += stats.lse[i];
                entry.sink += stats.sink_share[i];
                for (j, k) in stats.per_k.iter().enumerate() {
                    let (m, gap) = (k.mass[i], k.top_mean[i] - k.weighted_background_mean[i]);
                    let values = [
                        m,
                        k.background_mean[i],
                        k.background_var[i],
                        k.top_mean[i],
                        k.weighted_background_mean[i],
                        gap,
                        m * (1.0 - m) * gap,
                    ];
                    for (sum, v) in entry.per_k[j].iter_mut().zip(values) {
                        *sum += v;
                    }
                    for (sum, at_scale) in entry.curve[j].iter_mut().zip(&k.mass_at_scale) {
                        *sum += at_scale[i];
                    }
                }
            }
        }
    }

    /// Means per (layer, head, bin, k), and the mass curves per scale.
    pub fn records(&self) -> (Vec<BinRecord>, Vec<CurveRecord>) {
        let (mut bins, mut curves) = (Vec::new(), Vec::new());
        for (&(layer, head, bin), sums) in &self.sums {
            let count = sums.rows as f64;
            for (j, &k) in self.settings.ks.iter().enumerate() {
                let m = sums.per_k[j].map(|v| v / count);
                bins.push(BinRecord {
                    layer,
                    head,
                    bin,
                    k,
                    n: sums.n / count,
                    rows: sums.rows,
                    mass: m[0],
                    background_mean: m[1],
                    background_var: m[2],
                    top_mean: m[3],
                    weighted_background_mean: m[4],
                    gap: m[5],
                    mass_gap: m[6],
                    entropy: sums.entropy / count,
                    lse: sums.lse / count,
                    sink_share: sums.sink / count,
                });
                for (&s, total) in self.settings.scales.iter().zip(&sums.curve[j]) {
                    curves.push(CurveRecord {
                        layer,
                        head,
                        bin,
                        k,
                        s,
                        mass: total / count,
                    });
                }
            }
        }
        (bins, curves)
    }
}

impl AttentionObserver for ProbeRecorder {
    fn wants(&self, layer: usize) -> bool {
        self.layers.as_ref().is_none_or(|l| l.contains(&layer))
    }

    fn observe(&mut self, layer: usize, view: &AttentionView<'_>) {
        let _guard = tch::no_grad_guard();
        let rows = view.queries.size()[1];
        let selected: Vec<i64> = match &self.filter {
            RowFilter::All => (0..rows).collect(),
            RowFilter::Positions(set) => set
                .range(view.past..view.past + rows)
                .map(|p| p - view.past)
                .collect(),
        };
        if self.record_with_kernel(layer, view, &selected) {
            return;
        }
        // Consecutive selected rows share a tile.
        let mut start = 0;
        while start < selected.len() {
            let mut end = start + 1;
            while end < selected.len()
                && selected[end] == selected[end - 1] + 1
                && (end - start) < ROWS_PER_TILE as usize
            {
                end += 1;
            }
            self.record_tile(layer, view, selected[start]..selected[end - 1] + 1);
            start = end;
        }
    }
}
