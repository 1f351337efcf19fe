//! Figures a reader sees have a committed source: in the README and docs/, every figure sits in a section
//! (a heading to the next) that cites a committed report (`experiments/results/<experiment>/report.md`),
//! and that report holds it. A figure typed by hand, or left behind when the report was rerun, fails here
//! with its file, section and value. Settings and commands go in code spans; names (EAGLE 3.1), arXiv
//! numbers, section numbers (§2.4) and sizes of downloads (1.4 GB) are not figures.

use std::path::PathBuf;

fn project() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents a user reads: the README and every page of docs/.
fn documents() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(project().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages.insert(0, project().join("README.md"));
    pages
}

/// (heading, text) of each section of a markdown page.
fn sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![(String::from("(top)"), String::new())];
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            out.push((
                line.trim_start_matches('#').trim().to_string(),
                String::new(),
            ));
        } else {
            let text = &mut out.last_mut().unwrap().1;
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// The committed reports a section links to, by experiment name.
fn cited_reports(section: &str) -> Vec<String> {
    let marker = "experiments/results/";
    let mut names = Vec::new();
    let mut rest = section;
    while let Some(at) = rest.find(marker) {
        rest = &rest[at + marker.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .collect::<String>()
            .trim_end_matches('.')
            .to_string();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The decimal figures of a text (`0.84`, `1.9`), skipping version numbers (`2.11.0`), commits and
/// code spans.
fn figures(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, chunk) in text.split('`').enumerate() {
        if i % 2 == 1 {
            continue; // inside a code span: a command or a path, not a figure
        }
        let bytes = chunk.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if bytes[at].is_ascii_digit()
                && (at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'.'))
            {
                let start = at;
                while at < bytes.len() && (bytes[at].is_ascii_digit() || bytes[at] == b'.') {
                    at += 1;
                }
                let word = chunk[start..at].trim_end_matches('.');
                let followed_by_letter =
                    at < bytes.len() && bytes[at].is_ascii_alphabetic() && bytes[at] != b'x';
                let before = &chunk[..start];
                let a_name = before.ends_with("EAGLE-") || before.ends_with("EAGLE ");
                let a_section_number = before.ends_with('§');
                let an_arxiv_number = word.split('.').map(str::len).collect::<Vec<_>>() == [4, 5];
                let after = chunk[at..].trim_start();
                let a_size = ["GB", "MB", "GiB", "MiB"]
                    .iter()
                    .any(|unit| after.starts_with(unit));
                if word.matches('.').count() == 1
                    && !followed_by_letter
                    && !a_name
                    && !a_section_number
                    && !an_arxiv_number
                    && !a_size
                {
                    out.push(word.to_string());
                }
            } else {
                at += 1;
            }
        }
    }
    out
}

#[test]
fn every_figure_in_the_readme_and_docs_is_in_a_committed_report_its_section_cites() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for page in documents() {
        let text = std::fs::read_to_string(&page).unwrap();
        let shown = page
            .strip_prefix(project())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (heading, section) in sections(&text) {
            let reports = cited_reports(&section);
            if reports.is_empty() {
                for figure in figures(&section) {
                    missing.push(format!(
                        "{shown} ({heading}): {figure}, and the section cites no committed report"
                    ));
                }
                continue;
            }
            let sources: Vec<String> = reports
                .iter()
                .map(|name| {
                    let path = project()
                        .join("experiments/results")
                        .join(name)
                        .join("report.md");
                    std::fs::read_to_string(&path).unwrap_or_else(|e| {
                        panic!(
                            "{} ({heading}) cites {}, which is not committed: {e}",
                            page.display(),
                            path.display()
                        )
                    })
                })
                .collect();
            for figure in figures(&section) {
                checked += 1;
                if !sources.iter().any(|report| report.contains(&figure)) {
                    missing.push(format!(
                        "{shown} ({heading}): {figure} is in none of {reports:?}"
                    ));
                }
            }
        }
    }
    assert!(checked > 0, "no section cites a committed report");
    assert!(
        missing.is_empty(),
        "figures without a committed source:\n{}",
        missing.join("\n")
    );
}

#[test]
fn figures_are_read_as_a_reader_reads_them() {
    assert_eq!(
        figures("tau 1.24 against 0.73 [0.69, 0.77], 1.9x apart; torch 2.11.0, `run --beta 0.5`, 12 rows"),
        ["1.24", "0.73", "0.69", "0.77", "1.9"]
    );
    assert_eq!(
        figures("the objective of docs/drafters.md §2.4 (EAGLE 3.1) reached tau 2.5"),
        ["2.5"],
        "a section number is not a figure"
    );
    assert_eq!(
        cited_reports("see [x](experiments/results/quickstart/report.md)"),
        ["quickstart"]
    );
    assert_eq!(
        cited_reports(
            "in experiments/results/rows-qwen2.5-1.5b/ and experiments/results/quickstart."
        ),
        ["rows-qwen2.5-1.5b", "quickstart"]
    );
    assert!(
        figures("EAGLE 3.1 and EAGLE-3.1 (arXiv 2503.01840), about 1.4 GB to download").is_empty(),
        "names, arXiv numbers and download sizes are not figures"
    );
}

/// Runs `scripts/record.sh NAME -- COMMAND...` with its results folder at `results`.
fn record(results: &std::path::Path, name: &str, command: &[&str]) -> std::process::Output {
    std::process::Command::new("bash")
        .arg(project().join("scripts/record.sh"))
        .arg(name)
        .arg("--")
        .args(command)
        .env("SHARPDRAFT_RECORD_RESULTS", results)
        .output()
        .unwrap()
}

#[test]
fn a_recorded_benchmark_keeps_its_command_revision_machine_and_output_and_replaces_only_its_own_report(
) {
    let results = tempfile::tempdir().unwrap();
    let first = record(results.path(), "echo-check", &["echo", "tau 1.23, 2.5x"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let path = results.path().join("echo-check/report.md");
    let report = std::fs::read_to_string(&path).unwrap();
    assert!(
        report.starts_with("<!-- written by scripts/record.sh -->"),
        "{report}"
    );
    for part in [
        "- command: `echo tau 1.23, 2.5x`",
        "- revision: ",
        "- machine: ",
        "\ntau 1.23, 2.5x\n",
    ] {
        assert!(report.contains(part), "{part:?} missing from:\n{report}");
    }
    let second = record(results.path(), "echo-check", &["echo", "second run"]);
    assert!(second.status.success());
    let report = std::fs::read_to_string(&path).unwrap();
    assert!(
        report.contains("second run") && !report.contains("tau 1.23"),
        "{report}"
    );
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        ["report.md"],
        "no temporary file is left beside the report"
    );
}

#[test]
fn recording_through_a_link_from_another_folder_runs_and_records_in_the_repository() {
    let results = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("scripts/record.sh");
    std::fs::create_dir(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(project().join("scripts/record.sh"), &link).unwrap();
    let recorded = std::process::Command::new("bash")
        .arg(&link)
        .args(["through-a-link", "--", "pwd"])
        .current_dir(elsewhere.path())
        .env("SHARPDRAFT_RECORD_RESULTS", results.path())
        .output()
        .unwrap();
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let report = std::fs::read_to_string(results.path().join("through-a-link/report.md")).unwrap();
    let root = project().canonicalize().unwrap();
    assert!(
        report.contains(&format!("\n{}\n", root.display())),
        "the command ran in the repository's root, {}:\n{report}",
        root.display()
    );
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        1,
        "nothing is written beside the link"
    );
}

#[test]
fn recording_never_replaces_a_report_it_did_not_write_and_a_failed_command_leaves_nothing() {
    let results = tempfile::tempdir().unwrap();
    let mine = results.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("report.md"), "# my notes\n").unwrap();
    let refused = record(results.path(), "mine", &["echo", "x"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("was not written by this script"));
    assert_eq!(
        std::fs::read_to_string(mine.join("report.md")).unwrap(),
        "# my notes\n"
    );
    let failed = record(results.path(), "failed", &["false"]);
    assert!(!failed.status.success());
    assert!(
        !results.path().join("failed").exists(),
        "a failed command leaves no folder"
    );
    let escaping = record(results.path(), "../escape", &["echo", "x"]);
    assert_eq!(
        escaping.status.code(),
        Some(2),
        "a name that leaves the results folder is refused"
    );
    assert!(!results.path().parent().unwrap().join("escape").exists());
}

#[test]
fn recording_checks_its_name_and_folder_before_the_command_runs() {
    let results = tempfile::tempdir().unwrap();
    let ran = results.path().join("ran");
    let touch = ["touch", ran.to_str().unwrap()];
    std::fs::write(results.path().join("taken"), "a user's file").unwrap();
    let is_a_file = record(results.path(), "taken", &touch);
    assert_eq!(
        is_a_file.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&is_a_file.stderr)
    );
    assert!(String::from_utf8_lossy(&is_a_file.stderr).contains("not a folder"));
    let too_long = record(results.path(), &"n".repeat(201), &touch);
    assert_eq!(too_long.status.code(), Some(2));
    assert!(
        !ran.exists(),
        "the command never ran for a name that cannot be written"
    );
    assert_eq!(
        std::fs::read_to_string(results.path().join("taken")).unwrap(),
        "a user's file"
    );
}

#[test]
fn recording_into_a_folder_with_a_space_deletes_nothing_of_the_users() {
    let scratch = tempfile::tempdir().unwrap();
    // An unquoted path "<scratch>/my results/..." splits at the space into "<scratch>/my".
    std::fs::write(scratch.path().join("my"), "a user's file").unwrap();
    let results = scratch.path().join("my results");
    let recorded = record(&results, "spaced", &["echo", "ok"]);
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert!(results.join("spaced/report.md").is_file());
    assert_eq!(
        std::fs::read_to_string(scratch.path().join("my")).unwrap(),
        "a user's file"
    );
}

#[test]
fn a_finished_commands_output_is_kept_when_its_report_cannot_be_written() {
    let results = tempfile::tempdir().unwrap();
    let folder = results.path().join("vanishing");
    // The command finishes well but takes the folder its report was to go into with it.
    let script = format!("echo hours of output; rm -rf '{}'", folder.display());
    let recorded = record(results.path(), "vanishing", &["bash", "-c", &script]);
    assert!(!recorded.status.success());
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    let kept = stderr
        .lines()
        .find_map(|l| l.split("the command's output is kept in ").nth(1))
        .unwrap_or_else(|| panic!("no kept output named in: {stderr}"));
    assert_eq!(
        std::fs::read_to_string(kept.trim()).unwrap(),
        "hours of output\n"
    );
    std::fs::remove_file(kept.trim()).unwrap();
}
