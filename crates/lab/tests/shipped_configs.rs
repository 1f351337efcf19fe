//! Every YAML file the repository ships under `configs/` and `experiments/` loads with the loader that
//! reads it, unchanged: a renamed key or option keeps its old spelling as an alias, or this fails naming
//! the file.

use sharpdraft_data::datasets::{expand_includes, Source};
use sharpdraft_lab::experiment::config::{parse_yaml, DrafterEntry, Workload};
use sharpdraft_lab::experiment::Experiment;
use sharpdraft_lab::train::TrainConfig;
use sharpdraft_math::schedule::ScaleSchedule;
use sharpdraft_probe::calibrate::CalibrateConfig;
use sharpdraft_probe::run::ProbeConfig;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.yaml` under `folder`, sorted, at any depth.
fn yaml_files(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Loads `file` with the loader its place in the tree says reads it; the error names the file.
fn load(file: &Path) -> Result<(), String> {
    let root = repository();
    let relative = file.strip_prefix(&root).unwrap();
    let parts: Vec<&str> = relative.iter().map(|p| p.to_str().unwrap()).collect();
    let text = || std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", relative.display()));
    let shown = |e: &dyn std::fmt::Display| format!("{}: {e:#}", relative.display());
    match parts.as_slice() {
        ["experiments", _] => Experiment::load(file).map(drop).map_err(|e| shown(&e)),
        ["configs", "train", _] | ["configs", "drafters", _, "train_config.yaml"] => {
            TrainConfig::load(file).map(drop).map_err(|e| shown(&e))
        }
        ["configs", "drafters", _, "schedule.yaml"] => {
            ScaleSchedule::load(file).map(drop).map_err(|e| shown(&e))
        }
        ["configs", "drafters", _] => parse_yaml::<DrafterEntry>(&text()?, file)
            .map(drop)
            .map_err(|e| shown(&e)),
        ["configs", "workloads", _] => parse_yaml::<Workload>(&text()?, file)
            .map(drop)
            .map_err(|e| shown(&e)),
        ["configs", "probe", _] => ProbeConfig::load(file).map(drop).map_err(|e| shown(&e)),
        ["configs", "calibrate", _] => CalibrateConfig::load(file).map(drop).map_err(|e| shown(&e)),
        // Data lists are read through a training config's `include:`; one beside them includes each.
        ["configs", "data", name] => expand_includes(&[Source::Include(PathBuf::from(name))], file)
            .map(drop)
            .map_err(|e| shown(&e)),
        _ => Err(format!(
            "{}: no loader is known for this place in the tree (add it here)",
            relative.display()
        )),
    }
}

#[test]
fn every_shipped_config_and_experiment_loads_with_its_own_loader() {
    let root = repository();
    let mut files = yaml_files(&root.join("configs"));
    files.extend(yaml_files(&root.join("experiments")));
    let failures: Vec<String> = files.iter().filter_map(|f| load(f).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} files do not load:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(files.len() >= 80, "only {} YAML files found", files.len());
}
