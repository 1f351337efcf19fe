//! docs/layout.md lists every source file of every crate, one line each, under its crate's heading,
//! and names no file that is gone: the file tree a newcomer reads stays the tree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under a crate's `src/`, `tests/` and `benches/`, as `(crate, path in the crate)`.
fn source_files() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let crates = workspace().join("crates");
    for krate in std::fs::read_dir(&crates).unwrap() {
        let krate = krate.unwrap().path();
        let name = krate.file_name().unwrap().to_string_lossy().into_owned();
        for folder in ["src", "tests", "benches"] {
            let mut pending = vec![krate.join(folder)];
            while let Some(dir) = pending.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        pending.push(path);
                    } else if path.extension().is_some_and(|e| e == "rs") {
                        let inside = path.strip_prefix(&krate).unwrap();
                        out.insert((name.clone(), inside.to_string_lossy().into_owned()));
                    }
                }
            }
        }
    }
    out
}

/// The files docs/layout.md's "Every source file" section lists, as `(crate, path in the crate)`.
fn listed_files() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(workspace().join("docs/layout.md")).unwrap();
    let section = &text[text
        .find("## Every source file")
        .expect("docs/layout.md has its section \"Every source file\"")..];
    let mut out = BTreeSet::new();
    let mut krate = None;
    for line in section.lines() {
        if let Some(heading) = line.strip_prefix("### `crates/") {
            krate = Some(heading.trim_end_matches('`').to_string());
        } else if let Some(item) = line.strip_prefix("- `") {
            let path = &item[..item
                .find('`')
                .expect("a listed file ends its name with a backtick")];
            let krate = krate
                .clone()
                .expect("a listed file comes under its crate's heading");
            out.insert((krate, path.to_string()));
        }
    }
    out
}

#[test]
fn the_layout_lists_every_source_file_and_no_file_that_is_gone() {
    let (files, listed) = (source_files(), listed_files());
    let unlisted: Vec<_> = files.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&files).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "docs/layout.md, section \"Every source file\": add a line for each of {unlisted:?}, remove the lines of {gone:?}"
    );
}
