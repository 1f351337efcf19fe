//! `sharpdraft merge OUT SHARD_DIR...`: the shards of one experiment (`run --shard I/N`) joined into one
//! run folder, with the tables and report of the whole grid.

use super::config::Experiment;
use super::grid::units;
use super::records::UnitRecord;
use super::runner::{EXPERIMENT_RECORD, RUN_KIND, UNITS};
use super::{report, tables};
use crate::error::{bail, ensure, Context, Result};
use sharpdraft_model::output_folder::{self, Claim, Marker};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct MergeOutcome {
    pub dir: PathBuf,
    pub units: usize,
    /// Every unit of the grid is present.
    pub finished: bool,
}

/// The resolved experiment and its hash recorded in run folder `dir`.
pub fn recorded_experiment(dir: &Path) -> Result<(Experiment, String)> {
    match Marker::read(dir)? {
        Some(marker) if marker.kind == RUN_KIND => {}
        _ => bail!("{}: not a sharpdraft run folder", dir.display()),
    }
    let path = dir.join(EXPERIMENT_RECORD);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut record: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: unreadable", path.display()))?;
    let hash = record["config_hash"]
        .as_str()
        .with_context(|| format!("{}: no config_hash", path.display()))?
        .to_string();
    let experiment: Experiment = serde_json::from_value(record["experiment"].take())
        .with_context(|| format!("{}: not an experiment record", path.display()))?;
    Ok((experiment, hash))
}

pub fn merge(out: &Path, shards: &[PathBuf]) -> Result<MergeOutcome> {
    ensure!(!shards.is_empty(), "merge: name at least one shard folder");
    let (experiment, hash) = recorded_experiment(&shards[0])?;
    for shard in &shards[1..] {
        let (_, other) = recorded_experiment(shard)?;
        ensure!(
            other == hash,
            "{} is a run of another experiment than {} (config hash {other} against {hash})",
            shard.display(),
            shards[0].display()
        );
    }
    let inputs: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
    match output_folder::claim(out, RUN_KIND, &inputs)? {
        Claim::Fresh => {}
        Claim::Own(_) => {
            let (_, own) = recorded_experiment(out)?;
            ensure!(
                own == hash,
                "{} holds a run of another experiment: name a new folder",
                out.display()
            );
        }
    }
    let units_dir = out.join(UNITS);
    std::fs::create_dir_all(&units_dir)
        .with_context(|| format!("creating {}", units_dir.display()))?;
    for name in [EXPERIMENT_RECORD, "experiment.yaml"] {
        let from = shards[0].join(name);
        if from.is_file() && !out.join(name).is_file() {
            std::fs::copy(&from, out.join(name))
                .with_context(|| format!("copying {}", from.display()))?;
        }
    }
    let about = format!("{} ({hash})", experiment.name);
    Marker::new(RUN_KIND, false, about.clone()).write(out)?;
    for shard in shards {
        for record in UnitRecord::read_all(&shard.join(UNITS))? {
            let path = UnitRecord::path(&units_dir, &record.unit);
            if path.is_file() {
                eprintln!(
                    "unit {} is in more than one shard: keeping the first ({})",
                    record.unit.id(),
                    path.display()
                );
                continue;
            }
            record.write(&units_dir)?;
        }
    }
    let grid = units(&experiment);
    let finished = grid
        .iter()
        .all(|u| UnitRecord::path(&units_dir, u).is_file());
    tables::write_tables(out)?;
    report::write(out)?;
    Marker::new(RUN_KIND, finished, about).write(out)?;
    Ok(MergeOutcome {
        dir: out.to_path_buf(),
        units: UnitRecord::read_all(&units_dir)?.len(),
        finished,
    })
}
