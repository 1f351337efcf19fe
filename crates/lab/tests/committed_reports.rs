//! The reports committed under `experiments/results/` with their raw rows rebuild byte for byte from
//! those rows: a change anywhere in tables, intervals or the report that would alter a published figure
//! or sentence fails here, naming the file. Every run report there keeps its raw rows, or lives in
//! `experiments/results/archive/` with a line in its README saying why its rows are gone.

use std::path::{Path, PathBuf};

fn results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/results")
}

/// The folders directly inside `folder`, sorted.
fn subfolders(folder: &Path) -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    folders
}

/// A folder `sharpdraft report` wrote from a run (a benchmark record of `scripts/record.sh` holds only
/// its `report.md`).
fn is_run_report(folder: &Path) -> bool {
    folder.join("experiment.json").is_file() || folder.join("summary.parquet").is_file()
}

#[test]
fn every_run_report_outside_the_archive_keeps_its_raw_rows() {
    let results = results();
    let mut run_reports = 0;
    let mut without_rows = Vec::new();
    for folder in subfolders(&results) {
        if folder.file_name().is_some_and(|n| n == "archive") || !is_run_report(&folder) {
            continue;
        }
        run_reports += 1;
        let missing: Vec<&str> = ["results.parquet", "cycles.parquet"]
            .into_iter()
            .filter(|file| !folder.join(file).is_file())
            .collect();
        if !missing.is_empty() {
            without_rows.push(format!(
                "{}: no {}",
                folder.display(),
                missing.join(", no ")
            ));
        }
    }
    assert!(
        without_rows.is_empty(),
        "run reports without their raw rows (commit them from the run folder with `sharpdraft report \
         RUN --out experiments/results/NAME`, or `git mv` the folder into experiments/results/archive/ \
         and give it its line in archive/README.md):\n{}",
        without_rows.join("\n")
    );
    assert!(
        run_reports >= 2,
        "only {run_reports} run reports under {}",
        results.display()
    );
}

#[test]
fn every_archived_run_report_has_its_line_in_the_archive_readme() {
    let archive = results().join("archive");
    if !archive.is_dir() {
        return; // nothing archived
    }
    let readme_path = archive.join("README.md");
    let readme = std::fs::read_to_string(&readme_path)
        .unwrap_or_else(|e| panic!("{}: {e}", readme_path.display()));
    let mut problems = Vec::new();
    for folder in subfolders(&archive) {
        let name = folder.file_name().unwrap().to_string_lossy();
        let start = format!("- `{name}/`: ");
        match readme.lines().find(|line| line.starts_with(&start)) {
            None => problems.push(format!(
                "{}: no line \"{start}...\" in {}",
                folder.display(),
                readme_path.display()
            )),
            Some(line) if !(line.contains("raw rows") && line.contains("no longer cited")) => {
                problems.push(format!(
                    "{}: its line does not say why its raw rows are gone and that its figures are \
                     no longer cited: {line}",
                    folder.display()
                ))
            }
            Some(_) => {}
        }
    }
    for line in readme.lines() {
        let Some(name) = line
            .strip_prefix("- `")
            .and_then(|rest| rest.split_once("/`: "))
            .map(|(name, _)| name)
        else {
            continue;
        };
        if !archive.join(name).is_dir() {
            problems.push(format!(
                "{} has a line for {name}/, which is not in {}",
                readme_path.display(),
                archive.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_committed_report_with_its_raw_rows_rebuilds_byte_for_byte() {
    let results = results();
    let scratch = tempfile::tempdir().unwrap();
    let mut rebuilt_reports = 0;
    // The folders directly inside results/ alone: archive/ has no experiment.json of its own, and the
    // reports inside it have no raw rows to rebuild from.
    let mut folders: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    folders.sort();
    for committed in folders {
        if !committed.join("experiment.json").is_file()
            || !committed.join("results.parquet").is_file()
        {
            continue;
        }
        let name = committed.file_name().unwrap().to_owned();
        let rebuilt = scratch.path().join(&name);
        sharpdraft_lab::experiment::publish::report_into(&committed, &rebuilt)
            .unwrap_or_else(|e| panic!("{}: {e:#}", committed.display()));
        // The charts' pixels depend on the font found at run time; the figures and words do not.
        for file in [
            "report.md",
            "summary.parquet",
            "acceptance.parquet",
            "results.parquet",
        ] {
            let (before, after) = (committed.join(file), rebuilt.join(file));
            if !before.is_file() {
                continue;
            }
            assert!(
                std::fs::read(&before).unwrap() == std::fs::read(&after).unwrap(),
                "{} no longer rebuilds byte for byte (rebuilt: {})",
                before.display(),
                after.display()
            );
        }
        rebuilt_reports += 1;
    }
    assert!(
        rebuilt_reports >= 2,
        "only {rebuilt_reports} committed reports with raw rows under {}",
        results.display()
    );
}
