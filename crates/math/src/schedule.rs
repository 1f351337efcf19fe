//! The deployable schedule `s(n) = 1 + beta max(0, ln(n / n0))`: one beta for the whole drafter, one per
//! layer, or one per (layer, query head). It costs one multiply per query row and no memory.
//!
//! YAML form (what `sharpdraft calibrate` writes and every run reads):
//! ```yaml
//! n0: 256
//! beta: 0.21                  # global
//! # beta: [0.2, 0.25]         # per layer
//! # beta: [[0.2, 0.3], [0.1, 0.2]]   # per layer, per query head
//! exact:                      # optional: the per-length-bin exact corrections of a calibration
//!   n: [512, 1024]            # bin lengths, all > n0, increasing
//!   s: [[[1.1, 1.2], [1.0, 1.1]], [[1.2, 1.3], [1.1, 1.2]]]   # [layer][head][bin]
//! ```
//!
//! `exact` mode interpolates `s` linearly in `ln n` through `(n0, 1)` and the bins, and extrapolates the
//! last segment beyond the last bin (never below 1).

use crate::error::{MathError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Beta {
    Global(f64),
    PerLayer(Vec<f64>),
    PerHead(Vec<Vec<f64>>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleSchedule {
    /// The drafter's training length: no scaling at or below it.
    pub n0: f64,
    pub beta: Beta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<ExactScales>,
    /// What the calibration read, so a run can keep its test prompts apart from it (written by
    /// `sharpdraft calibrate`; absent in schedules written by hand or before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated_on: Option<DataFingerprint>,
}

/// Hashes of the data a schedule was calibrated on (or a drafter trained on): each prompt text read,
/// every `shingle` consecutive tokens of the token streams read, taken every `stride` tokens, and
/// every `word_gram` consecutive words of the text read with spelling, case and punctuation
/// normalised away, taken every `word_stride` words. A test request that holds any of those prompts,
/// `shingle` tokens in a row that hash alike, or `word_gram` normalised words in a row that hash alike
/// was in that data: the tokens catch a copy, the words the same text in another spelling or
/// tokenizer (a play in modern and First Folio spelling). Hashes are the first 16 hex digits of a
/// sha256; `sharpdraft_data::fingerprint` makes and checks them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DataFingerprint {
    pub shingle: usize,
    pub stride: usize,
    #[serde(default)]
    pub prompts: Vec<String>,
    #[serde(default)]
    pub windows: Vec<String>,
    /// 0 and empty in a fingerprint written before words were recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub word_gram: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub word_stride: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Exact corrections `s_b` solved per (layer, head) at bin lengths `n_b > n0` (estimator (iii)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactScales {
    pub n: Vec<f64>,
    /// `[layer][head][bin]`.
    pub s: Vec<Vec<Vec<f64>>>,
}

impl ScaleSchedule {
    pub fn global(n0: f64, beta: f64) -> Result<Self> {
        let schedule = Self {
            n0,
            beta: Beta::Global(beta),
            exact: None,
            calibrated_on: None,
        };
        schedule.validate()?;
        Ok(schedule)
    }

    /// Checks n0 > 0 and that every beta is finite and >= 0, naming the first bad entry.
    pub fn validate(&self) -> Result<()> {
        if !(self.n0.is_finite() && self.n0 > 0.0) {
            return Err(MathError::Schedule(format!(
                "n0 = {} must be a finite length > 0",
                self.n0
            )));
        }
        // beta sharpens attention past n0; a negative beta would flatten it further, the opposite of
        // the correction (calibration clips to [0, beta_max] for the same reason).
        let bad = |where_: String, v: f64| {
            MathError::Schedule(format!("beta{where_} = {v} must be a finite number >= 0"))
        };
        let ok = |b: &f64| b.is_finite() && *b >= 0.0;
        match &self.beta {
            Beta::Global(b) if !ok(b) => Err(bad(String::new(), *b)),
            Beta::PerLayer(layers) => match layers.iter().position(|b| !ok(b)) {
                Some(i) => Err(bad(format!("[{i}]"), layers[i])),
                None => Ok(()),
            },
            Beta::PerHead(layers) => {
                for (i, heads) in layers.iter().enumerate() {
                    if let Some(j) = heads.iter().position(|b| !ok(b)) {
                        return Err(bad(format!("[{i}][{j}]"), heads[j]));
                    }
                }
                Ok(())
            }
            Beta::Global(_) => Ok(()),
        }?;
        if let Some(exact) = &self.exact {
            let increasing = exact.n.windows(2).all(|w| w[0] < w[1]);
            if exact.n.is_empty() || !increasing || exact.n[0] <= self.n0 {
                return Err(MathError::Schedule(format!(
                    "exact.n = {:?} must be increasing lengths above n0 = {}",
                    exact.n, self.n0
                )));
            }
            for (i, heads) in exact.s.iter().enumerate() {
                for (j, bins) in heads.iter().enumerate() {
                    if bins.len() != exact.n.len() {
                        return Err(MathError::Schedule(format!(
                            "exact.s[{i}][{j}] has {} bins, exact.n has {}",
                            bins.len(),
                            exact.n.len()
                        )));
                    }
                    if let Some(b) = bins.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
                        return Err(MathError::Schedule(format!(
                            "exact.s[{i}][{j}][{b}] = {} is not a positive scale",
                            bins[b]
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that the schedule fits a drafter with `layers` layers of `heads` query heads.
    pub fn check_shape(&self, layers: usize, heads: usize) -> Result<()> {
        let fail = |msg: String| Err(MathError::Schedule(msg));
        match &self.beta {
            Beta::Global(_) => Ok(()),
            Beta::PerLayer(b) if b.len() != layers => fail(format!(
                "per-layer beta has {} entries, the drafter has {layers} layers",
                b.len()
            )),
            Beta::PerHead(b) if b.len() != layers => fail(format!(
                "per-head beta has {} layers, the drafter has {layers}",
                b.len()
            )),
            Beta::PerHead(b) => match b.iter().position(|h| h.len() != heads) {
                Some(i) => fail(format!(
                    "per-head beta[{i}] has {} heads, the drafter has {heads}",
                    b[i].len()
                )),
                None => Ok(()),
            },
            Beta::PerLayer(_) => Ok(()),
        }?;
        if let Some(exact) = &self.exact {
            if exact.s.len() != layers {
                return fail(format!(
                    "exact.s has {} layers, the drafter has {layers}",
                    exact.s.len()
                ));
            }
            if let Some(i) = exact.s.iter().position(|h| h.len() != heads) {
                return fail(format!(
                    "exact.s[{i}] has {} heads, the drafter has {heads}",
                    exact.s[i].len()
                ));
            }
        }
        Ok(())
    }

    /// The exact correction for one (layer, head) at length n, or `None` when the schedule has no `exact`
    /// table; exactly 1 for `n <= n0`.
    pub fn exact_scale(&self, n: f64, layer: usize, head: usize) -> Option<f64> {
        let exact = self.exact.as_ref()?;
        if n <= self.n0 {
            return Some(1.0);
        }
        // Called per query row and head: walk the segments without allocating. The segment holding
        // ln n, or the last one beyond the last bin.
        let x = n.ln();
        let bins = &exact.s[layer][head];
        let (mut x0, mut s0) = (self.n0.ln(), 1.0);
        for (i, (&nb, &sb)) in exact.n.iter().zip(bins).enumerate() {
            let x1 = nb.ln();
            if x <= x1 || i + 1 == bins.len() {
                return Some((s0 + (sb - s0) * (x - x0) / (x1 - x0)).max(1.0));
            }
            (x0, s0) = (x1, sb);
        }
        unreachable!("validate() keeps at least one bin")
    }

    /// beta for one (layer, head); the shape must have been checked with [`Self::check_shape`].
    pub fn beta(&self, layer: usize, head: usize) -> f64 {
        match &self.beta {
            Beta::Global(b) => *b,
            Beta::PerLayer(b) => b[layer],
            Beta::PerHead(b) => b[layer][head],
        }
    }

    /// The mean beta over every entry (a global beta itself; per layer or per head, their mean): one
    /// number that places a schedule beside constant slopes.
    pub fn mean_beta(&self) -> f64 {
        let all: Vec<f64> = match &self.beta {
            Beta::Global(b) => vec![*b],
            Beta::PerLayer(b) => b.clone(),
            Beta::PerHead(b) => b.iter().flatten().copied().collect(),
        };
        all.iter().sum::<f64>() / all.len().max(1) as f64
    }

    /// `s(n)` for one (layer, head); exactly 1 for `n <= n0`.
    pub fn scale(&self, n: f64, layer: usize, head: usize) -> f64 {
        scale_at(self.beta(layer, head), n, self.n0)
    }

    pub fn from_yaml_str(text: &str) -> Result<Self> {
        let schedule: Self =
            serde_norway::from_str(text).map_err(|e| MathError::Schedule(e.to_string()))?;
        schedule.validate()?;
        Ok(schedule)
    }

    pub fn to_yaml_string(&self) -> Result<String> {
        serde_norway::to_string(self).map_err(|e| MathError::Schedule(e.to_string()))
    }

    /// Reads and validates a schedule file; errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| MathError::Schedule(format!("{}: {e}", path.display())))?;
        Self::from_yaml_str(&text)
            .map_err(|e| MathError::Schedule(format!("{}: {e}", path.display())))
    }

    /// Writes atomically (temporary file in the same folder, then rename), so a crash never leaves a
    /// half-written schedule behind.
    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| MathError::Schedule(format!("{}: {e}", path.display()));
        let tmp = path.with_extension("yaml.tmp");
        std::fs::write(&tmp, self.to_yaml_string()?).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

/// `1 + beta max(0, ln(n / n0))`.
pub fn scale_at(beta: f64, n: f64, n0: f64) -> f64 {
    1.0 + beta * (n / n0).ln().max(0.0)
}

/// Qwen's `logn` rule, `max(1, ln n / ln n0)`: the slope `1 / ln n0` special case (derivations/top-k-mass-scaling.md §2).
pub fn logn_scale(n: f64, n0: f64) -> f64 {
    (n.ln() / n0.ln()).max(1.0)
}

/// Llama 4's attention temperature tuning: a query at position `pos` (0-based) is scaled by
/// `1 + attn_scale ln(floor((pos + 1) / floor_scale) + 1)`, with `attn_scale` 0.1 and `floor_scale`
/// 8192 in Llama 4's own configs. Here `n` counts the keys the query sees (`pos + 1` for a causal
/// query), so the factor is `1 + attn_scale ln(floor(n / floor_scale) + 1)`: exactly 1 below
/// `floor_scale` keys, then a step at every multiple of it (about `1 + attn_scale ln(n / floor_scale)`
/// far past it).
pub fn llama4_scale(n: f64, floor_scale: f64, attn_scale: f64) -> f64 {
    1.0 + attn_scale * ((n / floor_scale).floor().max(0.0) + 1.0).ln()
}

/// Llama 4's constants: the attention scale and the floor scale of its configs.
pub const LLAMA4_ATTN_SCALE: f64 = 0.1;
pub const LLAMA4_FLOOR_SCALE: f64 = 8192.0;

/// YaRN's softmax scale as a query factor: YaRN multiplies both queries and keys by
/// `0.1 ln(s) + 1` for a length ratio `s`, so the logits by `(1 + 0.1 ln s)^2`. Applied per query with
/// `s = n / n0`, and no scale at or below n0. Near n0 it grows as `1 + 0.2 ln(n / n0)`.
pub fn yarn_scale(n: f64, n0: f64) -> f64 {
    let m = 1.0 + 0.1 * (n / n0).ln().max(0.0);
    m * m
}
