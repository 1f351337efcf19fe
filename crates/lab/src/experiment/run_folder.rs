//! A run folder's layout and its record of the experiment: the workbench's marker (kind `run`),
//! `experiment.json` (the resolved experiment and its content hash), `experiment.yaml` (as written),
//! `units/` (one file per finished unit), the tables and the report.

use super::config::Experiment;
use crate::error::{bail, ensure, Context, Result};
use sharpdraft_store::atomic_write::write_whole;
use sharpdraft_store::output_folder::Marker;
use std::path::Path;

/// The marker kind of run folders.
pub const RUN_KIND: &str = "run";
/// The experiment as resolved, with the hash the folder belongs to.
pub const EXPERIMENT_RECORD: &str = "experiment.json";
pub const UNITS: &str = "units";

/// Writes `experiment.json` and a copy of the experiment file into `dir`.
pub fn write_record(dir: &Path, experiment: &Experiment) -> Result<()> {
    let mut record = serde_json::json!({
        "config_hash": experiment.hash(),
        "yaml_hash": experiment.yaml_hash,
        "experiment": experiment,
    });
    record[RECORD_DIGEST] = record_digest(&record).into();
    write_whole(
        &dir.join(EXPERIMENT_RECORD),
        serde_json::to_string_pretty(&record)?,
    )?;
    let copy = dir.join("experiment.yaml");
    std::fs::copy(&experiment.header.file, &copy).with_context(|| {
        format!(
            "copying {} to {}",
            sharpdraft_store::paths::shown(&experiment.header.file),
            copy.display()
        )
    })?;
    Ok(())
}

/// The key of `experiment.json` holding the sha256 of the rest of its content, as the run wrote it.
const RECORD_DIGEST: &str = "record_sha256";

/// The sha256 of an experiment record's content (`record` without [`RECORD_DIGEST`]), as compact JSON.
fn record_digest(record: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(record.to_string().as_bytes()))
}

/// The experiment recorded in run folder `dir`, its content hash restored.
pub fn recorded_experiment(dir: &Path) -> Result<Experiment> {
    match Marker::read(dir)? {
        Some(marker) if marker.kind == RUN_KIND => {}
        _ => bail!("{}: not a sharpdraft run folder", dir.display()),
    }
    experiment_record(&dir.join(EXPERIMENT_RECORD))
}

/// The experiment an `experiment.json` at `path` records, its content hash restored.
pub fn experiment_record(path: &Path) -> Result<Experiment> {
    let path = path.to_path_buf();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut record: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: unreadable", path.display()))?;
    let hash = |key: &str| {
        record[key]
            .as_str()
            .map(str::to_string)
            .with_context(|| {
                format!(
                    "{}: no {key} (written by an older sharpdraft: rerun the experiment into a new folder)",
                    path.display()
                )
            })
    };
    let (config_hash, yaml_hash) = (hash("config_hash")?, hash("yaml_hash")?);
    // Records from before the digest was kept have none to check.
    if let Some(sealed) = record.get(RECORD_DIGEST).cloned() {
        let mut content = record.clone();
        if let Some(map) = content.as_object_mut() {
            map.remove(RECORD_DIGEST);
        }
        ensure!(
            sealed.as_str() == Some(record_digest(&content).as_str()),
            "{}: edited since the run wrote it (its content no longer has the {RECORD_DIGEST} the run sealed it with): the tables and report beside it are of the experiment as it was run; rerun, or restore the file",
            path.display()
        );
    }
    let mut experiment: Experiment = serde_json::from_value(record["experiment"].take())
        .with_context(|| format!("{}: not an experiment record", path.display()))?;
    experiment.config_hash = config_hash;
    experiment.yaml_hash = yaml_hash;
    Ok(experiment)
}
