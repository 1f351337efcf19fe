//! Output folders: a command writes only what it can prove is its own, never the current folder or one
//! holding its input, replaces a result whole or not at all, and refuses unfinished runs.

use sharpdraft_store::output_folder::{
    absolute, claim, ensure_finished, is_unfinished, Claim, Marker, Staging, MARKER,
};
use std::path::Path;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_missing_or_empty_folder_is_fresh() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        claim(&dir.path().join("new"), "import", &[]).unwrap(),
        Claim::Fresh
    ));
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    assert!(matches!(
        claim(&dir.path().join("empty"), "import", &[]).unwrap(),
        Claim::Fresh
    ));
}

#[test]
fn a_folder_of_someone_elses_files_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mine");
    write(&out.join("notes.txt"), "precious");
    let error = claim(&out, "import", &[]).unwrap_err().to_string();
    assert!(error.contains("mine"), "{error}");
    assert!(error.contains("not written by sharpdraft"), "{error}");
    assert!(error.contains("notes.txt"), "{error}");
    assert_eq!(read(&out.join("notes.txt")), "precious");
}

#[test]
fn another_commands_output_is_refused_with_that_commands_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    write(&out.join("config.json"), "{}");
    Marker::new("fetch", true, "smollm2").write(&out).unwrap();
    let error = claim(&out, "train", &[]).unwrap_err().to_string();
    assert!(error.contains("sharpdraft fetch"), "{error}");
    assert!(matches!(claim(&out, "fetch", &[]).unwrap(), Claim::Own(_)));
}

#[test]
fn the_current_folder_and_every_folder_above_it_are_refused() {
    for out in [".", "..", "../.."] {
        let error = claim(Path::new(out), "import", &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("current folder"), "{out}: {error}");
    }
    let cwd = std::env::current_dir().unwrap();
    let error = claim(&cwd, "import", &[]).unwrap_err().to_string();
    assert!(error.contains("current folder"), "{error}");
}

#[test]
fn a_folder_that_holds_an_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("models/model.gguf");
    write(&input, "GGUF");
    for out in [dir.path().join("models"), dir.path().to_path_buf()] {
        let error = claim(&out, "import", &[&input]).unwrap_err().to_string();
        assert!(error.contains("model.gguf"), "{error}");
    }
    assert_eq!(read(&input), "GGUF");
}

#[test]
fn a_dotdot_after_a_link_names_the_folder_the_os_goes_to() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("models/model/weights")).unwrap();
    std::os::unix::fs::symlink(root.join("models/model/weights"), root.join("link")).unwrap();
    // The OS reads link/.. as the folder above the link's target, not the folder holding the link.
    let written = root.join("link/../new");
    assert_eq!(absolute(&written).unwrap(), root.join("models/model/new"));
    std::fs::create_dir(&written).unwrap();
    assert!(root.join("models/model/new").is_dir());
    assert_eq!(
        absolute(&root.join("link/../..")).unwrap(),
        root.join("models")
    );
}

#[test]
fn a_path_through_a_link_and_dotdot_is_printed_as_the_folder_the_os_writes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("models/model/weights")).unwrap();
    std::os::unix::fs::symlink(root.join("models/model/weights"), root.join("link")).unwrap();
    // Read lexically, link/../run would print as <root>/run: a folder nothing was written to.
    let printed = sharpdraft_store::paths::shown(&root.join("link/../run"));
    assert_eq!(printed, root.join("models/model/run").display().to_string());
}

#[test]
fn an_output_reached_through_a_link_and_dotdot_inside_a_model_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let model = root.join("models/model");
    write(&model.join("weights/model.safetensors"), "weights");
    Marker::new("import", true, "a fetched model")
        .write(&model)
        .unwrap();
    std::os::unix::fs::symlink(model.join("weights"), root.join("link")).unwrap();
    // link/../run is a folder inside the model's (where the OS would create it), not beside the link.
    let error = claim(&root.join("link/../run"), "run", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("the output of `sharpdraft import`"),
        "{error}"
    );
    assert!(!model.join("run").exists());
}

#[test]
fn a_dropped_staging_folder_leaves_the_output_as_it_was_and_removes_itself() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe");
    write(&out.join("stats.parquet"), "old");
    Marker::new("probe", true, "").write(&out).unwrap();
    {
        let staging = Staging::new(&out).unwrap();
        write(&staging.path().join("stats.parquet"), "new, half written");
    }
    assert_eq!(read(&out.join("stats.parquet")), "old");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["probe"], "nothing is left beside the output");
}

#[test]
fn a_commit_replaces_the_commands_own_output_whole() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe");
    write(&out.join("stats.parquet"), "old");
    write(&out.join("old_only.txt"), "old");
    let mut old = Marker::new("probe", true, "");
    old.record_files(&out).unwrap();
    old.write(&out).unwrap();
    let staging = Staging::new(&out).unwrap();
    write(&staging.path().join("stats.parquet"), "new");
    write(&staging.path().join("probe.json"), "{}");
    let mut marker = Marker::new("probe", true, "");
    staging.commit(&mut marker, true).unwrap();
    assert_eq!(read(&out.join("stats.parquet")), "new");
    assert!(
        !out.join("old_only.txt").exists(),
        "no file of the old result survives"
    );
    let marker = Marker::read(&out).unwrap().unwrap();
    assert_eq!(
        marker.files.keys().collect::<Vec<_>>(),
        ["probe.json", "stats.parquet"]
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn verification_names_every_file_changed_added_or_removed_since_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let staging = Staging::new(&out).unwrap();
    write(&staging.path().join("config.json"), "{\"a\": 1}");
    write(&staging.path().join("model.safetensors"), "weights");
    let mut marker = Marker::new("fetch", true, "");
    staging.commit(&mut marker, true).unwrap();
    let mut marker = Marker::read(&out).unwrap().unwrap();
    assert!(marker.verify(&out, true).unwrap().is_empty());
    // Same size, different bytes: caught by the hash.
    write(&out.join("config.json"), "{\"a\": 2}");
    write(&out.join("extra.bin"), "x");
    std::fs::remove_file(out.join("model.safetensors")).unwrap();
    let differences = marker.verify(&out, false).unwrap().join("; ");
    assert!(
        differences.contains("config.json was modified"),
        "{differences}"
    );
    assert!(
        differences.contains("model.safetensors is missing"),
        "{differences}"
    );
    assert!(differences.contains("extra.bin was added"), "{differences}");
}

#[test]
fn an_unfinished_run_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("drafter");
    write(&out.join("config.json"), "{}");
    Marker::new("train", false, "training run of t.yaml")
        .write(&out)
        .unwrap();
    let error = ensure_finished(&out).unwrap_err().to_string();
    assert!(error.contains("unfinished"), "{error}");
    assert!(error.contains("--allow-unfinished"), "{error}");
    assert!(is_unfinished(&out), "told apart from a missing drafter");
    Marker::new("train", true, "").write(&out).unwrap();
    ensure_finished(&out).unwrap();
    assert!(!is_unfinished(&out));
    // Folders without a marker (published checkpoints) load as before.
    std::fs::remove_file(out.join(MARKER)).unwrap();
    ensure_finished(&out).unwrap();
    assert!(!is_unfinished(&out) && !is_unfinished(&dir.path().join("absent")));
}

#[test]
fn a_corrupt_marker_is_an_error_naming_it_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("out").join(MARKER), "{ not json");
    let error = claim(&dir.path().join("out"), "probe", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains(MARKER), "{error}");
}

#[test]
fn a_file_the_user_added_to_an_output_stops_its_replacement_and_survives() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let staging = Staging::new(&out).unwrap();
    write(&staging.path().join("config.json"), "{}");
    staging
        .commit(&mut Marker::new("init", true, ""), true)
        .unwrap();
    write(&out.join("notes/eval.txt"), "precious");

    let error = claim(&out, "init", &[]).unwrap_err().to_string();
    assert!(
        error.contains("notes/eval.txt") && error.contains("move them out"),
        "{error}"
    );
    // Added while a command that had claimed the folder was running: the commit refuses too.
    let staging = Staging::new(&out).unwrap();
    write(&staging.path().join("config.json"), "{\"new\": 1}");
    let error = staging
        .commit(&mut Marker::new("init", true, ""), true)
        .unwrap_err()
        .to_string();
    assert!(error.contains("notes/eval.txt"), "{error}");
    assert_eq!(read(&out.join("notes/eval.txt")), "precious");
    assert_eq!(
        read(&out.join("config.json")),
        "{}",
        "the old result stays whole"
    );
}

#[test]
fn an_output_whose_marker_records_no_files_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe");
    write(&out.join("report.md"), "the user's");
    Marker::new("probe", true, "").write(&out).unwrap();
    let staging = Staging::new(&out).unwrap();
    write(&staging.path().join("report.md"), "new");
    assert!(staging
        .commit(&mut Marker::new("probe", true, ""), true)
        .is_err());
    assert_eq!(read(&out.join("report.md")), "the user's");
}

#[test]
fn an_output_inside_another_commands_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("models/smollm2");
    write(&model.join("config.json"), "{}");
    Marker::new("fetch", true, "smollm2").write(&model).unwrap();
    for inside in ["drafter", "a/b/run"] {
        let error = claim(&model.join(inside), "train", &[])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("inside") && error.contains("sharpdraft fetch"),
            "{error}"
        );
    }
    assert!(matches!(
        claim(&dir.path().join("models/other"), "train", &[]).unwrap(),
        Claim::Fresh
    ));
}

#[test]
fn a_marker_copied_into_another_folder_or_written_by_hand_proves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    let staging = Staging::new(&real).unwrap();
    write(&staging.path().join("model.safetensors"), "weights");
    staging
        .commit(&mut Marker::new("init", true, ""), true)
        .unwrap();
    assert!(matches!(claim(&real, "init", &[]).unwrap(), Claim::Own(_)));

    // The user's folder with the real marker copied in, listing a file of the same name.
    let users = dir.path().join("users");
    write(&users.join("model.safetensors"), "the user's own weights");
    std::fs::copy(real.join(MARKER), users.join(MARKER)).unwrap();
    let error = claim(&users, "init", &[]).unwrap_err().to_string();
    assert!(error.contains("does not prove"), "{error}");

    // A hand-written marker: the right fields, an id the workbench never recorded.
    let forged = dir.path().join("forged");
    write(&forged.join("notes.txt"), "mine");
    let mut marker = Marker::read(&real).unwrap().unwrap();
    marker.proof.as_mut().unwrap().id = "0123456789abcdef0123456789abcdef".into();
    write(
        &forged.join(MARKER),
        &serde_json::to_string(&marker).unwrap(),
    );
    assert!(claim(&forged, "init", &[])
        .unwrap_err()
        .to_string()
        .contains("does not prove"));
    assert_eq!(read(&forged.join("notes.txt")), "mine");
    assert_eq!(
        read(&users.join("model.safetensors")),
        "the user's own weights"
    );

    // Renamed within its file system, an output stays its writer's.
    let moved = dir.path().join("moved");
    std::fs::rename(&real, &moved).unwrap();
    assert!(matches!(claim(&moved, "init", &[]).unwrap(), Claim::Own(_)));
}

#[test]
fn a_staging_folder_left_by_a_killed_process_is_removed_by_the_next_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    // pid 4194305 is above Linux's largest (2^22): no such process runs.
    let dead = dir.path().join(".model.staging-4194305-0");
    write(&dead.join("model.safetensors"), "partial");
    let alive = dir
        .path()
        .join(format!(".model.staging-{}-999", std::process::id()));
    write(&alive.join("x"), "this process's own");
    let aside = dir.path().join(".model.staging-4194305-1.replaced");
    write(&aside.join("config.json"), "an old output set aside");
    let staging = Staging::new(&out).unwrap();
    if Path::new("/proc/self").exists() {
        assert!(!dead.exists(), "a dead process's staging folder is removed");
    }
    assert!(
        alive.exists() && aside.exists(),
        "a live one and a set-aside output are kept"
    );
    drop(staging);
}
