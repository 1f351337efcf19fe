//! The deployable schedule `s(n) = 1 + beta max(0, ln(n / n0))`: one beta for the whole drafter, one per
//! layer, or one per (layer, query head). It costs one multiply per query row and no memory.
//!
//! YAML form (what `sharpdraft calibrate` writes and every run reads):
//! ```yaml
//! n0: 256
//! beta: 0.21                  # global
//! # beta: [0.2, 0.25]         # per layer
//! # beta: [[0.2, 0.3], [0.1, 0.2]]   # per layer, per query head
//! ```

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
}

impl ScaleSchedule {
    pub fn global(n0: f64, beta: f64) -> Result<Self> {
        let schedule = Self {
            n0,
            beta: Beta::Global(beta),
        };
        schedule.validate()?;
        Ok(schedule)
    }

    /// Checks n0 > 0 and that every beta is finite, naming the first bad entry.
    pub fn validate(&self) -> Result<()> {
        if !(self.n0.is_finite() && self.n0 > 0.0) {
            return Err(MathError::Schedule(format!(
                "n0 = {} must be a finite length > 0",
                self.n0
            )));
        }
        let bad = |where_: String, v: f64| {
            MathError::Schedule(format!("beta{where_} = {v} is not finite"))
        };
        match &self.beta {
            Beta::Global(b) if !b.is_finite() => Err(bad(String::new(), *b)),
            Beta::PerLayer(layers) => match layers.iter().position(|b| !b.is_finite()) {
                Some(i) => Err(bad(format!("[{i}]"), layers[i])),
                None => Ok(()),
            },
            Beta::PerHead(layers) => {
                for (i, heads) in layers.iter().enumerate() {
                    if let Some(j) = heads.iter().position(|b| !b.is_finite()) {
                        return Err(bad(format!("[{i}][{j}]"), heads[j]));
                    }
                }
                Ok(())
            }
            Beta::Global(_) => Ok(()),
        }
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
        }
    }

    /// beta for one (layer, head); the shape must have been checked with [`Self::check_shape`].
    pub fn beta(&self, layer: usize, head: usize) -> f64 {
        match &self.beta {
            Beta::Global(b) => *b,
            Beta::PerLayer(b) => b[layer],
            Beta::PerHead(b) => b[layer][head],
        }
    }

    /// `s(n)` for one (layer, head); exactly 1 for `n <= n0`.
    pub fn scale(&self, n: f64, layer: usize, head: usize) -> f64 {
        scale_at(self.beta(layer, head), n, self.n0)
    }

    pub fn from_yaml_str(text: &str) -> Result<Self> {
        let schedule: Self =
            serde_yaml::from_str(text).map_err(|e| MathError::Schedule(e.to_string()))?;
        schedule.validate()?;
        Ok(schedule)
    }

    pub fn to_yaml_string(&self) -> Result<String> {
        serde_yaml::to_string(self).map_err(|e| MathError::Schedule(e.to_string()))
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

/// Qwen's `logn` rule, `max(1, ln n / ln n0)`: the slope `1 / ln n0` special case (derivation.md §2.4).
pub fn logn_scale(n: f64, n0: f64) -> f64 {
    (n.ln() / n0.ln()).max(1.0)
}
