//! How a run walks its experiment's grid (the units and arms: `sharpdraft_report::grid`). A unit runs
//! every prompt of its workload with every arm of the grid, the arms of each prompt back to back in an
//! order that rotates from prompt to prompt and from repeat to repeat.
//! A speed-up is then a ratio of two times taken seconds apart, not a grid apart, and a load that
//! comes and goes falls on every arm alike. A unit is what a run writes, resumes and shards; an arm
//! that adapts across requests (OSD's protocol) keeps its drafter through the unit's prompts, in order.
//! A process may take one shard of the units.

use crate::error::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

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

    /// Refuses to run as a SLURM array task without `--shard`: a task's shard cannot be read from the
    /// array's variables, since a task submitted again alone (`sbatch --array=3`) sees an array of one
    /// (`SLURM_ARRAY_TASK_MIN` 3, `_COUNT` 1) and would run the whole grid. The shard count is the
    /// grid's, given when the array is submitted (`scripts/slurm/run-array.sbatch EXPERIMENT N` passes
    /// `--shard $SLURM_ARRAY_TASK_ID/N`).
    pub fn refuse_unnamed_array_task() -> Result<()> {
        if let Ok(task) = std::env::var("SLURM_ARRAY_TASK_ID") {
            bail!(
                "SLURM_ARRAY_TASK_ID is {task:?} but no --shard was given: an array task's shard is not read from the array's bounds, which a task submitted again alone changes; pass --shard {task}/N with N the grid's shard count (scripts/slurm/run-array.sbatch EXPERIMENT N does)"
            );
        }
        Ok(())
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
