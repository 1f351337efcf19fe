//! The grid of an experiment: its units (workload x context x seed x repeat, what a run writes,
//! resumes and shards) and its arms (the target alone, and every drafter x method), each unit running
//! every prompt of its workload with every arm. The order the arms take within a unit is the runner's
//! (lab's `grid::rotation`).

use crate::error::{ensure, Result};
use crate::outline::{Outline, Setting};
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

/// Every arm of `outline`: the target-only methods first (the speed-ups' denominators, the first
/// of them the baseline), then every drafter with every other method it runs, in the order written.
pub fn arms(outline: &Outline) -> Vec<Arm> {
    let target_only = outline
        .methods
        .iter()
        .filter(|m| m.target_only)
        .map(|m| Arm {
            drafter: None,
            method: m.name.clone(),
        });
    let drafting = outline.drafting.iter().map(|(drafter, method)| Arm {
        drafter: Some(drafter.clone()),
        method: method.clone(),
    });
    target_only.chain(drafting).collect()
}

/// The most units one grid may hold; a larger grid is refused before anything is built.
pub const MAX_UNITS: u128 = 1_000_000;

/// How many units `outline`'s grid holds, counted without building it (refused above
/// [`MAX_UNITS`]).
pub fn unit_count(outline: &Outline) -> Result<usize> {
    let contexts: u128 = outline
        .workloads
        .iter()
        .map(|w| match w.setting {
            Setting::LongPrompt => w.contexts.len() as u128,
            Setting::LongGeneration => 1,
        })
        .sum();
    let count = contexts * outline.header.seeds.len() as u128 * outline.header.repeats as u128;
    ensure!(
        count <= MAX_UNITS,
        "{}: the grid holds {count} units (workload contexts x seeds x repeats), more than {MAX_UNITS}: run fewer seeds or repeats",
        sharpdraft_store::paths::shown(&outline.header.file)
    );
    Ok(count as usize)
}

/// Every unit of `outline`, in run order: per workload, context, seed and repeat.
pub fn units(outline: &Outline) -> Vec<Unit> {
    let mut out = Vec::new();
    for workload in &outline.workloads {
        let contexts = match workload.setting {
            Setting::LongPrompt => workload.contexts.clone(),
            Setting::LongGeneration => vec![0],
        };
        for &context in &contexts {
            for &seed in &outline.header.seeds {
                for repeat in 0..outline.header.repeats {
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
