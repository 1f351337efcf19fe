//! The reports committed under `experiments/results/` with their raw rows rebuild byte for byte from
//! those rows: a change anywhere in tables, intervals or the report that would alter a published figure
//! or sentence fails here, naming the file.

use std::path::Path;

#[test]
fn every_committed_report_with_its_raw_rows_rebuilds_byte_for_byte() {
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/results");
    let scratch = tempfile::tempdir().unwrap();
    let mut rebuilt_reports = 0;
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
