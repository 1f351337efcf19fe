//! A unit's finished requests while the unit is still running. A unit runs every arm on each of its
//! requests before the next request, so a request is the smallest piece whose speed-ups stay paired.
//! After each one the rows so far go to `units/partial/<unit>.json`, written whole through a rename:
//! a run killed inside a unit of hours (a long generation on 2 cores, twenty arms) resumes at its
//! next request, not at its first. The file is the run's own; it goes once the unit's record is
//! written. Units whose arms carry what they learned from request to request (OSD's protocol) do not
//! keep one: their drafter's state cannot be written down and taken up again.

use crate::error::{bail, ensure, Context, Result};
use crate::grid::{arms, Unit};
use crate::machine_state::MachineState;
use crate::outline::Outline;
use crate::records::{ArmRecord, Provenance};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The folder, under a run's `units/`, of the partial records.
pub const PARTIAL: &str = "partial";

/// What a partial record that is not this run's asks of the user.
const MOVE_OUT: &str =
    "move it out of the folder, and `run --resume` runs the unit from its first request";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialUnit {
    pub unit: Unit,
    /// The first piece's provenance; pieces run later join their revision and machine to it.
    pub provenance: Provenance,
    /// Every arm of the grid, in the experiment's order, with the requests it has finished: the same
    /// number for every arm, the unit's first requests in order.
    pub arms: Vec<ArmRecord>,
    /// What else the machine did over the pieces so far.
    pub machine: MachineState,
    /// Wall time of the pieces so far.
    pub seconds: f64,
}

impl PartialUnit {
    pub fn path(units_dir: &Path, unit: &Unit) -> PathBuf {
        units_dir.join(PARTIAL).join(format!("{}.json", unit.id()))
    }

    /// Requests finished by every arm.
    pub fn requests_done(&self) -> usize {
        self.arms.first().map_or(0, |a| a.requests.len())
    }

    /// Writes the record through a temporary file and a rename.
    pub fn write(&self, units_dir: &Path) -> Result<()> {
        let path = Self::path(units_dir, &self.unit);
        let folder = units_dir.join(PARTIAL);
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        Ok(sharpdraft_store::atomic_write::write_whole(
            &path,
            serde_json::to_string(self)?,
        )?)
    }

    /// The partial record of `unit` under `units_dir`, when a killed run left one; one that is not
    /// this run's (another config hash or arms, another unit, requests out of order) is an error
    /// naming the file rather than rows pooled with this run's. `prompts` are the unit's requests'
    /// prompt indices, in order.
    pub fn read_belonging(
        units_dir: &Path,
        unit: &Unit,
        outline: &Outline,
        prompts: &[usize],
    ) -> Result<Option<Self>> {
        let Some(partial) = Self::read_own(units_dir, unit, outline)? else {
            return Ok(None);
        };
        let path = Self::path(units_dir, unit);
        let done = partial.requests_done();
        for arm in &partial.arms {
            let theirs: Vec<usize> = arm.requests.iter().map(|r| r.prompt).collect();
            ensure!(
                done <= prompts.len() && theirs == prompts[..done],
                "{}: arm {} holds prompts {theirs:?}, not the unit's first {done} ({:?}): {MOVE_OUT}",
                path.display(),
                arm.arm.label(),
                &prompts[..done.min(prompts.len())]
            );
        }
        Ok(Some(partial))
    }

    /// The partial records of `outline`'s units that are not among `finished`, in the grid's
    /// order, for the report. A file there that is not this run's partial record (another config
    /// hash or arms, unreadable) is passed over with a warning naming it: the report shows this run's
    /// requests alone, and a file a user left in the folder does not stop it. The requests' prompts
    /// are not checked against the workload's here (that needs its prompts built); `run --resume`
    /// checks them before taking a record up.
    pub fn read_unfinished(units_dir: &Path, outline: &Outline, finished: &[&Unit]) -> Vec<Self> {
        crate::grid::units(outline)
            .iter()
            .filter(|unit| !finished.contains(unit))
            .filter_map(|unit| match Self::read_own(units_dir, unit, outline) {
                Ok(partial) => partial,
                Err(e) => {
                    eprintln!("warning: left out of the report: {e:#}");
                    None
                }
            })
            .collect()
    }

    /// The partial record of `unit` under `units_dir` where one is there, checked to be this run's:
    /// its config hash, unit and arms, and as many requests in every arm.
    fn read_own(units_dir: &Path, unit: &Unit, outline: &Outline) -> Result<Option<Self>> {
        let path = Self::path(units_dir, unit);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let p = path.display();
        let partial: Self = serde_json::from_str(&text).with_context(|| {
            format!("{p}: not a partial unit of this version of sharpdraft run: {MOVE_OUT}")
        })?;
        if partial.provenance.config_hash != outline.hash() {
            bail!(
                "{p}: belongs to config hash {}, not this run's {}: {MOVE_OUT}",
                partial.provenance.config_hash,
                outline.hash()
            );
        }
        ensure!(
            partial.unit == *unit,
            "{p}: holds unit {}, not {}: {MOVE_OUT}",
            partial.unit.id(),
            unit.id()
        );
        let recorded: Vec<_> = partial.arms.iter().map(|a| &a.arm).collect();
        ensure!(
            recorded == arms(outline).iter().collect::<Vec<_>>(),
            "{p}: its arms are not this experiment's: {MOVE_OUT}"
        );
        let done = partial.requests_done();
        for arm in &partial.arms {
            ensure!(
                arm.requests.len() == done,
                "{p}: arm {} holds {} requests where the first arm holds {done}: {MOVE_OUT}",
                arm.arm.label(),
                arm.requests.len()
            );
        }
        Ok(Some(partial))
    }

    /// Removes the partial record of `unit`, whose whole record is written, where it is this run's
    /// own (it reads as a partial record of `unit` under `config_hash`); anything else at that path
    /// is left as it is. A run killed between writing a unit's file and this leaves one, removed when
    /// the run resumes, so it can never be taken up over the unit's later rerun.
    pub fn remove_own(units_dir: &Path, unit: &Unit, config_hash: &str) -> Result<()> {
        let path = Self::path(units_dir, unit);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(());
        };
        let own = serde_json::from_str::<Self>(&text)
            .is_ok_and(|p| p.unit == *unit && p.provenance.config_hash == config_hash);
        if !own {
            return Ok(());
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", path.display()))
            }
            _ => Ok(()),
        }
    }
}

/// `earlier`'s provenance with a later piece's revision, machine and version joined on where they
/// differ ("A, then B"), so a unit run in pieces says it.
pub fn joined(earlier: &Provenance, later: &Provenance) -> Provenance {
    let join = |a: &str, b: &str| {
        if a == b || a.ends_with(&format!(", then {b}")) {
            a.to_string()
        } else {
            format!("{a}, then {b}")
        }
    };
    Provenance {
        git_revision: join(&earlier.git_revision, &later.git_revision),
        machine: join(&earlier.machine, &later.machine),
        sharpdraft_version: join(&earlier.sharpdraft_version, &later.sharpdraft_version),
        ..earlier.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(revision: &str, machine: &str) -> Provenance {
        Provenance {
            config_hash: "h".into(),
            git_revision: revision.into(),
            machine: machine.into(),
            device: "cpu".into(),
            dtype: "f32".into(),
            sharpdraft_version: "0".into(),
            started_unix: 7,
            kernel: String::new(),
            threads: 0,
        }
    }

    #[test]
    fn pieces_on_another_revision_are_named_once_and_the_start_is_the_first_pieces() {
        let first = provenance("abc", "host");
        let second = joined(&first, &provenance("def", "host"));
        assert_eq!(second.git_revision, "abc, then def");
        assert_eq!(second.machine, "host");
        assert_eq!(second.started_unix, 7);
        let third = joined(&second, &provenance("def", "other"));
        assert_eq!(third.git_revision, "abc, then def");
        assert_eq!(third.machine, "host, then other");
    }
}
