//! `sharpdraft merge OUT SHARD_DIR...`: the shards of one experiment (`run --shard I/N`) joined into one
//! run folder, with the tables and report of the whole grid.

use super::publish::{publish, Published};
use super::run_folder::{recorded_experiment, EXPERIMENT_RECORD, RUN_KIND, UNITS};
use super::runner::grid_finished;
use crate::error::{bail, ensure, Context, Result};
use sharpdraft_report::grid::units;
use sharpdraft_report::records::UnitRecord;
use sharpdraft_store::folder_lock::FolderLock;
use sharpdraft_store::output_folder::{self, Claim, Marker};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct MergeOutcome {
    pub dir: PathBuf,
    pub units: usize,
    /// Every unit of the grid is present.
    pub finished: bool,
    /// The summary of every unit, in the experiment's order, and the run's timing noise.
    pub published: Published,
}

pub fn merge(out: &Path, shards: &[PathBuf]) -> Result<MergeOutcome> {
    ensure!(!shards.is_empty(), "merge: name at least one shard folder");
    // One folder named twice (as OUT and a shard, or as two shards) would lock against itself.
    let mut named: Vec<(PathBuf, &Path)> = Vec::new();
    for dir in std::iter::once(out).chain(shards.iter().map(PathBuf::as_path)) {
        let physical = output_folder::absolute(dir)?;
        if let Some((_, first)) = named.iter().find(|(seen, _)| *seen == physical) {
            bail!(
                "merge: {} and {} are the same folder: name each shard once, and as OUT a new folder or an earlier merge",
                first.display(),
                dir.display()
            );
        }
        named.push((physical, dir));
    }
    // No run may write a shard, or another merge the output, while this one reads and writes them.
    let _locks = std::iter::once(out)
        .chain(shards.iter().map(PathBuf::as_path))
        .map(|dir| FolderLock::acquire(dir, "merge"))
        .collect::<Result<Vec<_>, _>>()?;
    let outline = recorded_experiment(&shards[0])?.outline();
    let hash = outline.hash();
    for shard in &shards[1..] {
        let other = recorded_experiment(shard)?;
        let other = other.hash();
        ensure!(
            other == hash,
            "{} is a run of another experiment than {} (config hash {other} against {hash})",
            shard.display(),
            shards[0].display()
        );
    }
    // Every shard's units are read and checked before the output is touched.
    let mut incoming = Vec::new();
    for shard in shards {
        incoming.extend(UnitRecord::read_belonging(&shard.join(UNITS), &outline)?);
    }
    let inputs: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
    match output_folder::claim(out, RUN_KIND, &inputs)? {
        Claim::Fresh => {}
        Claim::Own(_) => {
            ensure!(
                recorded_experiment(out)?.hash() == hash,
                "{} holds a run of another experiment: name a new folder",
                out.display()
            );
        }
    }
    let units_dir = out.join(UNITS);
    let mut records = UnitRecord::read_belonging(&units_dir, &outline)?;
    std::fs::create_dir_all(&units_dir)
        .with_context(|| format!("creating {}", units_dir.display()))?;
    for name in [EXPERIMENT_RECORD, "experiment.yaml"] {
        let from = shards[0].join(name);
        if from.is_file() && !out.join(name).is_file() {
            std::fs::copy(&from, out.join(name))
                .with_context(|| format!("copying {}", from.display()))?;
        }
    }
    let about = format!("{} ({hash})", outline.header.name);
    Marker::new(RUN_KIND, false, about.clone()).write(out)?;
    for record in incoming {
        if records.iter().any(|r| r.unit == record.unit) {
            eprintln!(
                "unit {} is in more than one shard (or merged already): keeping the first",
                record.unit.id()
            );
            continue;
        }
        record.write(&units_dir)?;
        records.push(record);
    }
    let finished = grid_finished(&units(&outline), &records);
    let published = publish(out, &outline, &records)?;
    Marker::new(RUN_KIND, finished, about).write(out)?;
    Ok(MergeOutcome {
        dir: out.to_path_buf(),
        units: records.len(),
        finished,
        published,
    })
}
