//! The grid of an experiment: one unit per workload x context x seed x repeat x (target alone, or
//! drafter x method). A unit runs every prompt of its workload, so a drafter adapting across requests
//! (OSD's protocol) sees them in order; it is what a run writes, resumes and shards.

use super::config::{Experiment, Setting};
use crate::error::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
pub struct Unit {
    pub workload: String,
    /// Long prompt: the requested context in tokens (0: the prompt alone); long generation: 0.
    pub context: usize,
    pub seed: u64,
    pub repeat: usize,
    /// `None` for a target-only method.
    pub drafter: Option<String>,
    pub method: String,
}

/// Which drafter name a target-only unit records.
pub const TARGET_ONLY: &str = "target";

impl Unit {
    /// A file name that identifies the unit (names hold no slash, validated).
    pub fn id(&self) -> String {
        format!(
            "{}.c{}.s{}.r{}.{}.{}",
            self.workload,
            self.context,
            self.seed,
            self.repeat,
            self.drafter.as_deref().unwrap_or(TARGET_ONLY),
            self.method
        )
    }

    pub fn drafter_name(&self) -> &str {
        self.drafter.as_deref().unwrap_or(TARGET_ONLY)
    }
}

/// Every unit of `experiment`, in run order: per workload, context, seed and repeat, the target-only
/// methods first (the speedups' denominators), then every drafter with every other method.
pub fn units(experiment: &Experiment) -> Vec<Unit> {
    let mut out = Vec::new();
    for workload in &experiment.workloads {
        let contexts = match workload.setting {
            Setting::LongPrompt => workload.contexts.clone(),
            Setting::LongGeneration => vec![0],
        };
        for &context in &contexts {
            for &seed in &experiment.seeds {
                for repeat in 0..experiment.repeats {
                    let unit = |drafter: Option<&str>, method: &str| Unit {
                        workload: workload.name.clone(),
                        context,
                        seed,
                        repeat,
                        drafter: drafter.map(str::to_string),
                        method: method.to_string(),
                    };
                    for method in experiment.methods.iter().filter(|m| m.target_only) {
                        out.push(unit(None, &method.name));
                    }
                    for drafter in &experiment.drafters {
                        for method in experiment.methods.iter().filter(|m| !m.target_only) {
                            out.push(unit(Some(&drafter.name), &method.name));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Shard `index` of `count` (0-based): every unit whose position in the grid is `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// `I/N` with 0 <= I < N.
    pub fn parse(text: &str) -> Result<Self> {
        let (i, n) = text
            .split_once('/')
            .with_context(|| format!("--shard {text:?}: expected I/N, e.g. 0/4"))?;
        let parse = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .with_context(|| format!("--shard {text:?}: {s:?} is not a whole number"))
        };
        let shard = Self {
            index: parse(i)?,
            count: parse(n)?,
        };
        ensure!(
            shard.count >= 1 && shard.index < shard.count,
            "--shard {text:?}: I must lie in 0..N (0-based) and N be at least 1"
        );
        Ok(shard)
    }

    /// SLURM's job array (`SLURM_ARRAY_TASK_ID`, `_MIN`, `_COUNT`), when this process is one of its
    /// tasks.
    pub fn from_slurm() -> Result<Option<Self>> {
        let var = |name: &str| std::env::var(name).ok();
        let (Some(id), Some(count)) = (var("SLURM_ARRAY_TASK_ID"), var("SLURM_ARRAY_TASK_COUNT"))
        else {
            return Ok(None);
        };
        let min = var("SLURM_ARRAY_TASK_MIN").unwrap_or_else(|| "0".into());
        let number = |name: &str, s: &str| {
            s.parse::<usize>()
                .ok()
                .with_context(|| format!("{name}={s:?} is not a whole number"))
        };
        let (id, count, min) = (
            number("SLURM_ARRAY_TASK_ID", &id)?,
            number("SLURM_ARRAY_TASK_COUNT", &count)?,
            number("SLURM_ARRAY_TASK_MIN", &min)?,
        );
        if id < min || id - min >= count {
            bail!("SLURM_ARRAY_TASK_ID {id} lies outside MIN {min} + COUNT {count}");
        }
        Ok(Some(Self {
            index: id - min,
            count,
        }))
    }

    pub fn holds(&self, position: usize) -> bool {
        position % self.count == self.index
    }
}
