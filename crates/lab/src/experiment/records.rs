//! What one finished unit leaves: raw counters per request and per verification cycle, with the
//! provenance of the run. One JSON file per unit under `units/`, written whole through a rename: a run
//! killed at any moment leaves finished units intact and nothing half-written.

use super::config::{Experiment, Setting};
use super::grid::Unit;
use crate::error::{Context, Result};
use serde::{Deserialize, Serialize};
use sharpdraft_decode::CycleRecord;
use std::path::{Path, PathBuf};

/// Where a row came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The experiment's content hash ([`super::config::Experiment::content_hash`]).
    pub config_hash: String,
    /// `git rev-parse HEAD` of the experiment's checkout (`+dirty` with uncommitted changes), or
    /// "unknown" outside a git checkout.
    pub git_revision: String,
    /// Host name, CPU model and cores.
    pub machine: String,
    pub device: String,
    pub dtype: String,
    pub sharpdraft_version: String,
    /// Seconds since the Unix epoch when the unit started.
    pub started_unix: u64,
}

/// One request (prompt) of a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRow {
    /// The prompt's index in its source.
    pub prompt: usize,
    /// Tokens of the request when generation started.
    pub prompt_tokens: usize,
    pub generated: usize,
    pub prefill_seconds: f64,
    /// Wall time of the request, prefill and online updates included.
    pub total_seconds: f64,
    /// Seconds of this request spent in online updates (inside `total_seconds`).
    pub update_seconds: f64,
    pub updates: usize,
    pub drafter_weight_bytes: usize,
    pub drafter_cache_bytes: usize,
    pub target_cache_bytes: usize,
    /// Adapters, optimizer state, gradients and buffer of online adaptation.
    pub adaptation_bytes: usize,
    /// The process's peak resident memory since the unit started (VmHWM), bytes.
    pub peak_rss_bytes: u64,
    /// Empty for target-only decoding.
    pub cycles: Vec<CycleRecord>,
    /// The generated ids: under greedy decoding every method must give the target's own output.
    #[serde(default)]
    pub output_ids: Vec<i64>,
}

impl RequestRow {
    /// Tokens per target pass (bonus included); 1 for target-only decoding.
    pub fn tau(&self) -> f64 {
        if self.cycles.is_empty() {
            return 1.0;
        }
        let emitted: usize = self.cycles.iter().map(|c| c.accepted + c.bonus).sum();
        emitted as f64 / self.cycles.len() as f64
    }

    pub fn tokens_per_second(&self) -> f64 {
        self.generated as f64 / self.total_seconds.max(1e-9)
    }

    /// Share of the output's 4-grams that are distinct: near 1 for prose, far below for an output that
    /// loops (small models under greedy decoding), where tau measures the loop; NaN below 4 tokens.
    pub fn distinct_4grams(&self) -> f64 {
        let grams: Vec<&[i64]> = self.output_ids.windows(4).collect();
        if grams.is_empty() {
            return f64::NAN;
        }
        let distinct: std::collections::BTreeSet<&[i64]> = grams.iter().copied().collect();
        distinct.len() as f64 / grams.len() as f64
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    pub unit: Unit,
    pub setting: Setting,
    pub target: String,
    /// The drafter's training length n0 (none for target-only units or unrecorded).
    pub n0: Option<i64>,
    pub max_new_tokens: usize,
    pub provenance: Provenance,
    pub requests: Vec<RequestRow>,
    /// Wall time of the whole unit, drafter loading included.
    pub seconds: f64,
}

/// One request of a grid cell: (workload, context, seed, prompt).
pub type RequestKey = (String, usize, u64, usize);

impl UnitRecord {
    /// The key of this unit's request for `prompt`: the same for every method of the grid cell.
    pub fn request_key(&self, prompt: usize) -> RequestKey {
        (
            self.unit.workload.clone(),
            self.unit.context,
            self.unit.seed,
            prompt,
        )
    }

    pub fn path(units_dir: &Path, unit: &Unit) -> PathBuf {
        units_dir.join(format!("{}.json", unit.id()))
    }

    /// Writes the record through a temporary file and a rename.
    pub fn write(&self, units_dir: &Path) -> Result<PathBuf> {
        let path = Self::path(units_dir, &self.unit);
        crate::atomic_write::write_whole(&path, serde_json::to_string(self)?)?;
        Ok(path)
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not a finished unit of a sharpdraft run",
                path.display()
            )
        })
    }

    /// Every finished unit under `units_dir`, in name order (temporary files are ignored).
    pub fn read_all(units_dir: &Path) -> Result<Vec<Self>> {
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(units_dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", units_dir.display())),
        };
        paths.sort();
        paths.iter().map(|p| Self::read(p)).collect()
    }
}

/// The provenance fields that do not change during a run of `experiment`.
pub fn provenance(experiment: &Experiment) -> Provenance {
    Provenance {
        config_hash: experiment.hash().to_string(),
        git_revision: git_revision(experiment.file.parent().unwrap_or(Path::new("."))),
        machine: machine(),
        device: experiment.device.clone(),
        dtype: experiment.dtype.clone(),
        sharpdraft_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix: 0,
    }
}

fn git_revision(folder: &Path) -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(folder)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "HEAD"]) {
        Some(head) => match run(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => format!("{head}+dirty"),
            _ => head,
        },
        None => "unknown".into(),
    }
}

fn machine() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown".into()));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{host}; {cpu}; {cores} cores")
}
