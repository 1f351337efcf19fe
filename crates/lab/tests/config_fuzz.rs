//! Every YAML a user writes (training, probe and calibration configs, schedules), mutated at random:
//! loading gives the config or a clear error naming the file, never a panic. The shipped configs are
//! the seeds, so the mutations stay near what users actually write.

use proptest::prelude::*;
use sharpdraft_data::datasets::Source;
use sharpdraft_lab::train::TrainConfig;
use sharpdraft_math::ScaleSchedule;
use sharpdraft_probe::calibrate::CalibrateConfig;
use sharpdraft_probe::run::ProbeConfig;
use std::path::{Path, PathBuf};

fn configs(folder: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs")
        .join(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no configs in {}", dir.display());
    files
}

const SCHEDULE: &str = "n0: 256\nbeta: [[0.2, 0.3], [0.1, 0.0]]\nexact:\n  n: [512, 1024]\n  s: [[[1.1, 1.2], [1.0, 1.1]], [[1.05, 1.1], [1.0, 1.0]]]\n";

/// Text edits of the kinds a hand-edited YAML suffers: a character replaced, a line dropped or doubled,
/// a value swapped for a boundary value, an indentation change, a cut.
#[derive(Debug, Clone)]
enum Edit {
    Char(usize, char),
    DropLine(usize),
    DoubleLine(usize),
    Value(usize, &'static str),
    Indent(usize),
    Cut(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let index = any::<prop::sample::Index>();
    let values = prop::sample::select(vec![
        "-1",
        "0",
        "1e308",
        "-1e308",
        ".nan",
        ".inf",
        "18446744073709551616",
        "~",
        "[]",
        "{}",
        "\"\"",
        "[1, [2, [3]]]",
        "yes",
        "*anchor",
        "!!binary aGk=",
        "0x7fffffffffffffff",
    ]);
    let chars = prop::sample::select(vec![
        ':', '-', ' ', '\t', '[', '{', '"', '\'', '#', '&', '*', '!', '|', '>', '\n', 'x', '9',
    ]);
    prop_oneof![
        (index.clone(), chars).prop_map(|(i, c)| Edit::Char(i.index(usize::MAX), c)),
        index
            .clone()
            .prop_map(|i| Edit::DropLine(i.index(usize::MAX))),
        index
            .clone()
            .prop_map(|i| Edit::DoubleLine(i.index(usize::MAX))),
        (index.clone(), values).prop_map(|(i, v)| Edit::Value(i.index(usize::MAX), v)),
        index
            .clone()
            .prop_map(|i| Edit::Indent(i.index(usize::MAX))),
        index.prop_map(|i| Edit::Cut(i.index(usize::MAX))),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return text.to_string();
    }
    let n = lines.len();
    match edit {
        Edit::Char(i, c) => {
            let mut chars: Vec<char> = text.chars().collect();
            let at = i % chars.len().max(1);
            if !chars.is_empty() {
                chars[at] = *c;
            }
            return chars.into_iter().collect();
        }
        Edit::DropLine(i) => {
            lines.remove(i % n);
        }
        Edit::DoubleLine(i) => {
            let line = lines[i % n].clone();
            lines.insert(i % n, line);
        }
        Edit::Value(i, value) => {
            let line = &mut lines[i % n];
            if let Some(colon) = line.find(": ") {
                line.truncate(colon + 2);
                line.push_str(value);
            } else {
                line.push_str(value);
            }
        }
        Edit::Indent(i) => {
            let line = &mut lines[i % n];
            line.insert_str(0, "  ");
        }
        Edit::Cut(i) => {
            let chars: Vec<char> = text.chars().collect();
            return chars[..i % (chars.len() + 1)].iter().collect();
        }
    }
    lines.join("\n")
}

fn mutated(seed: &str, edits: &[Edit]) -> String {
    edits
        .iter()
        .fold(seed.to_string(), |text, e| apply(&text, e))
}

/// Loads `text` as a config file of `name` with `load`; an error must name the file.
fn load_cleanly<T, E: std::fmt::Display>(
    name: &str,
    text: &str,
    load: impl Fn(&Path) -> Result<T, E>,
) -> Result<(), TestCaseError> {
    // Laid out as in configs/: the config one folder down, the shipped data files in ../data, so that
    // `include:` entries resolve and the mutations reach the rest of the config.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    for data in configs("data") {
        std::fs::copy(
            &data,
            dir.path().join("data").join(data.file_name().unwrap()),
        )
        .unwrap();
    }
    let path = dir.path().join("config").join(name);
    std::fs::write(&path, text).unwrap();
    if let Err(e) = load(&path) {
        let message = format!("{e:#}");
        prop_assert!(
            message.contains(name),
            "error without the file name: {}",
            message
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn a_mutated_training_config_loads_or_names_the_file(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let seeds = configs("train");
        let seed = std::fs::read_to_string(which.get(&seeds)).unwrap();
        load_cleanly("train.yaml", &mutated(&seed, &edits), TrainConfig::load)?;
    }

    #[test]
    fn a_mutated_probe_config_loads_or_names_the_file(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let seeds = configs("probe");
        let seed = std::fs::read_to_string(which.get(&seeds)).unwrap();
        load_cleanly("probe.yaml", &mutated(&seed, &edits), ProbeConfig::load)?;
    }

    #[test]
    fn a_mutated_calibration_config_loads_or_names_the_file(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let seeds = configs("calibrate");
        let seed = std::fs::read_to_string(which.get(&seeds)).unwrap();
        load_cleanly("calibrate.yaml", &mutated(&seed, &edits), CalibrateConfig::load)?;
    }

    #[test]
    fn a_mutated_shared_data_file_loads_or_names_a_file(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        // A training config and the data file it includes, the data file mutated.
        let trains = configs("train");
        let train_path = which.get(&trains);
        let train = std::fs::read_to_string(train_path).unwrap();
        let included = train
            .lines()
            .find_map(|l| l.trim().strip_prefix("- include: ../data/"))
            .expect("every shipped training config includes a data file")
            .to_string();
        let seed = std::fs::read_to_string(train_path.parent().unwrap().join("../data").join(&included)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        std::fs::write(dir.path().join("data").join(&included), mutated(&seed, &edits)).unwrap();
        let config = dir.path().join("config/train.yaml");
        std::fs::write(&config, train).unwrap();
        if let Err(e) = TrainConfig::load(&config) {
            let message = format!("{e:#}");
            prop_assert!(message.contains("train.yaml") || message.contains(&included), "{}", message);
        }
    }

    #[test]
    fn a_mutated_experiment_loads_or_names_a_file(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        // Laid out as in the project: experiments/ beside a copy of configs/.
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let seeds: Vec<PathBuf> = std::fs::read_dir(root.join("experiments"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        let mut seeds = seeds;
        seeds.sort();
        let seed = std::fs::read_to_string(which.get(&seeds)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for folder in ["drafters", "workloads"] {
            std::fs::create_dir_all(dir.path().join("configs").join(folder)).unwrap();
            for file in configs(folder) {
                std::fs::copy(&file, dir.path().join("configs").join(folder).join(file.file_name().unwrap())).unwrap();
            }
        }
        std::fs::create_dir_all(dir.path().join("experiments")).unwrap();
        let path = dir.path().join("experiments/experiment.yaml");
        std::fs::write(&path, mutated(&seed, &edits)).unwrap();
        if let Err(e) = sharpdraft_lab::experiment::Experiment::load(&path) {
            let message = format!("{e:#}");
            prop_assert!(message.contains("experiment.yaml") || message.contains("configs/"), "{}", message);
        }
    }

    #[test]
    fn a_mutated_schedule_loads_or_names_the_file(edits in prop::collection::vec(edit(), 1..4)) {
        load_cleanly("schedule.yaml", &mutated(SCHEDULE, &edits), ScaleSchedule::load)?;
    }
}

#[test]
fn every_shipped_config_loads_and_reads_nothing_outside_the_project() {
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    // Local files a config reads must be in a user's clone: inside the project (PyPI members are not
    // local files).
    let check = |config: &Path, sources: &[Source]| {
        for source in sources {
            let local = match source {
                Source::TextFile(path) => Some(path),
                Source::Jsonl {
                    path, pypi: None, ..
                }
                | Source::TargetContinuations {
                    path, pypi: None, ..
                } => Some(path),
                _ => None,
            };
            if let Some(path) = local {
                let resolved = config.parent().unwrap().join(path);
                let inside = resolved
                    .canonicalize()
                    .is_ok_and(|p| p.starts_with(&project));
                assert!(
                    inside,
                    "{} reads {}, outside the project",
                    config.display(),
                    resolved.display()
                );
            }
        }
    };
    for path in configs("train") {
        check(&path, &TrainConfig::load(&path).unwrap().data);
    }
    for path in configs("probe") {
        check(&path, &ProbeConfig::load(&path).unwrap().text);
    }
    for path in configs("calibrate") {
        CalibrateConfig::load(&path).unwrap();
    }
}

#[test]
fn a_negative_or_infinite_beta_in_a_schedule_is_refused_with_its_place() {
    for (text, place) in [
        ("n0: 256\nbeta: -0.1\n", "beta = -0.1"),
        ("n0: 256\nbeta: [0.2, .inf]\n", "beta[1] = inf"),
        ("n0: 256\nbeta: [[0.2], [-1.0]]\n", "beta[1][0] = -1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schedule.yaml");
        std::fs::write(&path, text).unwrap();
        let err = ScaleSchedule::load(&path).unwrap_err().to_string();
        assert!(err.contains(place) && err.contains(">= 0"), "{err}");
    }
}
