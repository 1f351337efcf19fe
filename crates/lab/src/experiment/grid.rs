//! The grid of an experiment. A unit is one workload x context x seed x repeat; it runs every prompt of
//! its workload with every arm of the grid (the target alone, and every drafter x method), the arms of
//! each prompt back to back in an order that rotates from prompt to prompt and from repeat to repeat.
//! A speed-up is then a ratio of two times taken seconds apart, not a grid apart, and a load that
//! comes and goes falls on every arm alike. A unit is what a run writes, resumes and shards; an arm
//! that adapts across requests (OSD's protocol) keeps its drafter through the unit's prompts, in order.

use super::config::{Experiment, Setting};
use crate::error::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// One workload x context x seed x repeat: the requests every arm decodes, interleaved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
pub struct Unit {
    pub workload: String,
    /// Long prompt: the requested context in tokens (0: the prompt alone); long generation: 0.
    pub context: usize,
    pub seed: u64,
    pub repeat: usize,
}

/// One way of decoding: the target alone (a target-only method) or a drafter with a method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
pub struct Arm {
    /// `None` for a target-only method.
    pub drafter: Option<String>,
    pub method: String,
}

/// Which drafter name a target-only arm records.
pub const TARGET_ONLY: &str = "target";

impl Unit {
    /// A file name that identifies the unit (names are checked to be file-name safe).
    pub fn id(&self) -> String {
        format!(
            "{}.c{}.s{}.r{}",
            self.workload, self.context, self.seed, self.repeat
        )
    }
}

impl Arm {
    pub fn drafter_name(&self) -> &str {
        self.drafter.as_deref().unwrap_or(TARGET_ONLY)
    }

    pub fn label(&self) -> String {
        format!("{} / {}", self.drafter_name(), self.method)
    }
}

/// Every arm of `experiment`: the target-only methods first (the speed-ups' denominators, the first
/// of them the baseline), then every drafter with every other method it runs, in the order written.
pub fn arms(experiment: &Experiment) -> Vec<Arm> {
    let target_only = experiment
        .methods
        .iter()
        .filter(|m| m.target_only)
        .map(|m| Arm {
            drafter: None,
            method: m.name.clone(),
        });
    let drafting = experiment.drafting_pairs().map(|(d, m)| Arm {
        drafter: Some(d.name.clone()),
        method: m.name.clone(),
    });
    target_only.chain(drafting).collect()
}

/// The order in which `arms` arms decode request `request` (its position in the unit) of repeat
/// `repeat`: the arm list rotated by `request + repeat`, so every arm takes every slot in turn and no
/// arm always follows another's warm caches or precedes a load that builds up.
pub fn rotation(arms: usize, request: usize, repeat: usize) -> Vec<usize> {
    if arms == 0 {
        return Vec::new();
    }
    let start = (request % arms + repeat % arms) % arms;
    (0..arms).map(|slot| (start + slot) % arms).collect()
}

/// The most units one grid may hold; a larger grid is refused before anything is built.
pub const MAX_UNITS: u128 = 1_000_000;

/// How many units `experiment`'s grid holds, counted without building it (refused above
/// [`MAX_UNITS`]).
pub fn unit_count(experiment: &Experiment) -> Result<usize> {
    let contexts: u128 = experiment
        .workloads
        .iter()
        .map(|w| match w.setting {
            Setting::LongPrompt => w.contexts.len() as u128,
            Setting::LongGeneration => 1,
        })
        .sum();
    let count = contexts * experiment.seeds.len() as u128 * experiment.repeats as u128;
    ensure!(
        count <= MAX_UNITS,
        "{}: the grid holds {count} units (workload contexts x seeds x repeats), more than {MAX_UNITS}: run fewer seeds or repeats",
        sharpdraft_store::paths::shown(&experiment.file)
    );
    Ok(count as usize)
}

/// Every unit of `experiment`, in run order: per workload, context, seed and repeat.
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
                    out.push(Unit {
                        workload: workload.name.clone(),
                        context,
                        seed,
                        repeat,
                    });
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

#[cfg(test)]
mod tests {
    use super::rotation;

    #[test]
    fn every_arm_takes_every_slot_once_over_as_many_requests() {
        for arms in 1..6 {
            for slot in 0..arms {
                let mut seen: Vec<usize> = (0..arms).map(|r| rotation(arms, r, 0)[slot]).collect();
                seen.sort();
                assert_eq!(
                    seen,
                    (0..arms).collect::<Vec<_>>(),
                    "{arms} arms, slot {slot}"
                );
            }
        }
    }

    #[test]
    fn a_repeat_starts_its_rotation_one_arm_later() {
        assert_eq!(rotation(3, 0, 0), vec![0, 1, 2]);
        assert_eq!(rotation(3, 0, 1), vec![1, 2, 0]);
        assert_eq!(rotation(3, 2, 2), vec![1, 2, 0]);
        assert!(rotation(0, 5, 5).is_empty());
    }
}
