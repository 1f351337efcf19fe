//! The lab's error type: callers can tell a missing file from a bad key from a bad value, and the
//! message is one line from what the run was doing down to the cause.

use sharpdraft_lab::train::TrainConfig;
use sharpdraft_lab::LabError;
use sharpdraft_probe::run::ProbeConfig;
use sharpdraft_probe::ProbeError;

#[test]
fn a_missing_config_is_an_io_error_whose_context_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    let err = TrainConfig::load(&path).unwrap_err();
    assert!(matches!(err.root(), LabError::Io(e) if e.kind() == std::io::ErrorKind::NotFound));
    assert_eq!(err.contexts(), vec![format!("reading {}", path.display())]);
    assert!(err
        .to_string()
        .starts_with(&format!("reading {}: ", path.display())));
}

#[test]
fn an_unknown_key_is_a_yaml_error_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.yaml");
    std::fs::write(&path, "target: t\nrows_per_bn: 3\n").unwrap();
    let err = ProbeConfig::load(&path).unwrap_err();
    assert!(matches!(err.root(), ProbeError::Yaml(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("rows_per_bn"), "{message}");
}

#[test]
fn the_cause_is_printed_once_when_a_reporter_walks_the_source_chain() {
    let dir = tempfile::tempdir().unwrap();
    let err = TrainConfig::load(&dir.path().join("absent.yaml")).unwrap_err();
    let cause = err.root().to_string();
    // anyhow's `{:#}` (what the CLI prints) joins the chain; the cause must not appear twice.
    let reported = format!("{:#}", anyhow::Error::from(err));
    assert_eq!(reported.matches(&cause).count(), 1, "{reported}");
}
