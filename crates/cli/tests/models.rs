//! `sharpdraft fetch`, `import gguf`, `generate` and `logits` end to end. Commands on the real SmolLM2
//! run when it is fetched (`make test` fetches it) and skip with a message otherwise.
use serde_json::Value;
use std::process::{Command, Output};

fn sharpdraft(args: &[&str], home: Option<&std::path::Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sharpdraft"));
    command.args(args).env("RUST_BACKTRACE", "0");
    if let Some(home) = home {
        command.env("SHARPDRAFT_HOME", home);
    }
    command.output().expect("run sharpdraft")
}

fn smollm2_fetched() -> bool {
    let fetched = sharpdraft_store::registry::resolve("smollm2-135m-instruct").is_ok();
    if !fetched {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
    }
    fetched
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn generate_json_reports_ids_text_and_speed() {
    if !smollm2_fetched() {
        return;
    }
    let args = [
        "generate",
        "--target",
        "smollm2-135m-instruct",
        "--prompt",
        "Name a colour.",
        "--max-new-tokens",
        "12",
        "--json",
    ];
    let first = json(&sharpdraft(&args, None));
    let ids = first["ids"].as_array().unwrap();
    assert!(!ids.is_empty() && ids.len() <= 12);
    assert!(
        first["prompt_ids"].as_array().unwrap().len() > 10,
        "the chat template wraps the prompt"
    );
    assert!(first["text"].as_str().unwrap().len() > 1);
    assert!(first["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        json(&sharpdraft(&args, None))["ids"],
        first["ids"],
        "greedy is deterministic"
    );
    let mut sampled = args.to_vec();
    sampled.extend(["--temperature", "0.9", "--seed", "7"]);
    let a = json(&sharpdraft(&sampled, None));
    assert_eq!(
        json(&sharpdraft(&sampled, None))["ids"],
        a["ids"],
        "a seed reproduces a sample"
    );
}

#[test]
fn logits_json_lists_the_top_tokens_of_a_raw_prompt() {
    if !smollm2_fetched() {
        return;
    }
    let out = json(&sharpdraft(
        &[
            "logits",
            "--model",
            "smollm2-135m-instruct",
            "--prompt",
            "The capital of France is",
            "--top",
            "5",
            "--json",
        ],
        None,
    ));
    let top_ids = out["top_ids"].as_array().unwrap();
    let top_logits: Vec<f64> = out["top_logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(top_ids.len(), 5);
    assert!(top_logits.windows(2).all(|w| w[0] >= w[1]));
    assert_eq!(top_ids[0], 7042, "\" Paris\"");
    assert_eq!(
        out["prompt_ids"].as_array().unwrap().len(),
        5,
        "raw prompt, no template, no BOS"
    );
}

#[test]
fn an_unknown_or_unfetched_model_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let out = sharpdraft(
        &[
            "logits",
            "--model",
            "smollm2-135m-instruct",
            "--prompt",
            "x",
        ],
        Some(home.path()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("run `sharpdraft fetch smollm2-135m-instruct`"),
        "{stderr}"
    );
    let out = sharpdraft(
        &["generate", "--target", "no-such-model", "--prompt", "x"],
        Some(home.path()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("known model (smollm2-135m-instruct"),
        "{stderr}"
    );
    let out = sharpdraft(&["fetch", "--list"], Some(home.path()));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("smollm2-135m-instruct        not fetched")
    );
}

#[test]
fn importing_a_file_that_is_not_gguf_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.gguf");
    std::fs::write(&file, b"nope").unwrap();
    let out = sharpdraft(
        &[
            "import",
            "gguf",
            file.to_str().unwrap(),
            dir.path().join("out").to_str().unwrap(),
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid GGUF file"));
}

#[test]
fn the_shipped_drafter_installs_from_the_repository_once_and_a_drafter_trained_here_is_kept() {
    let home = tempfile::tempdir().unwrap();
    let name = "smollm2-135m-dflash-v4k-long";
    let first = sharpdraft(&["fetch", name], Some(home.path()));
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    assert!(stderr.contains("installing"), "{stderr}");
    let model = home.path().join("models").join(name);
    let shipped = sharpdraft_store::registry::shipped(name).unwrap();
    for (file, sha) in shipped.files {
        assert_eq!(
            &sharpdraft_store::output_folder::sha256_of(&model.join(file)).unwrap(),
            sha,
            "{file}"
        );
    }
    let schedule = home
        .path()
        .join("calibrations/smollm2-dflash-v4k-long/schedule.yaml");
    assert!(schedule.is_file(), "the calibrated schedule comes with it");

    let again = sharpdraft(&["fetch", name], Some(home.path()));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        again.status.success() && !stderr.contains("installing"),
        "{stderr}"
    );

    // The schedule deleted from the folder fetch wrote, a note of the user's beside it: restored, the
    // note kept.
    let calibration = schedule.parent().unwrap().to_path_buf();
    std::fs::remove_file(&schedule).unwrap();
    std::fs::write(calibration.join("notes.txt"), "my notes").unwrap();
    let restored = sharpdraft(&["fetch", name], Some(home.path()));
    let stderr = String::from_utf8_lossy(&restored.stderr);
    assert!(
        restored.status.success() && stderr.contains("restored"),
        "{stderr}"
    );
    assert!(schedule.is_file());
    assert_eq!(
        std::fs::read_to_string(calibration.join("notes.txt")).unwrap(),
        "my notes"
    );
    // A folder of that name fetch did not write (a `calibrate` output whose schedule was moved away):
    // refused by name, and nothing in it touched.
    std::fs::remove_file(calibration.join(sharpdraft_store::output_folder::MARKER)).unwrap();
    std::fs::remove_file(&schedule).unwrap();
    let refused = sharpdraft(&["fetch", name], Some(home.path()));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("smollm2-dflash-v4k-long") && stderr.contains("not written by fetch"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(calibration.join("notes.txt")).unwrap(),
        "my notes"
    );
    assert!(!schedule.exists());
    std::fs::remove_file(calibration.join("notes.txt")).unwrap();
    std::fs::remove_dir(&calibration).unwrap();
    assert!(sharpdraft(&["fetch", name], Some(home.path()))
        .status
        .success());
    assert!(schedule.is_file(), "an empty place gets the schedule again");

    // A drafter trained here under the same name is the user's: fetch keeps it and says so.
    let marker = model.join(sharpdraft_store::output_folder::MARKER);
    let text = std::fs::read_to_string(&marker)
        .unwrap()
        .replace("\"kind\": \"fetch\"", "\"kind\": \"train\"");
    assert!(text.contains("\"kind\": \"train\""), "{text}");
    std::fs::write(&marker, text).unwrap();
    std::fs::write(model.join("notes.txt"), "mine").unwrap();
    let kept = sharpdraft(&["fetch", name], Some(home.path()));
    let stderr = String::from_utf8_lossy(&kept.stderr);
    assert!(
        kept.status.success() && stderr.contains("trained here"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(model.join("notes.txt")).unwrap(),
        "mine"
    );
}

/// `folder`'s lock under `home`, held as another command holds it (`holder`: the line it writes).
fn hold_folder(home: &std::path::Path, folder: &std::path::Path, holder: &str) -> std::fs::File {
    let lock = sharpdraft_store::folder_lock::lock_path_under(home, folder).unwrap();
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&lock)
        .unwrap();
    file.lock().unwrap();
    std::io::Write::write_all(&mut file, holder.as_bytes()).unwrap();
    file
}

#[test]
fn fetch_into_a_folder_another_command_holds_is_refused_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let name = "smollm2-135m-dflash-v4k-long";
    let folder = home.join("models").join(name);
    std::fs::create_dir_all(&folder).unwrap();
    // A `train` of the shipped name holds its folder (the lock train takes) and has written into it.
    std::fs::write(folder.join("model.safetensors"), "step 100").unwrap();
    let _training = hold_folder(&home, &folder, "`sharpdraft train`, process 1 since Unix time 0");
    let out = sharpdraft(&["fetch", name], Some(&home));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("in use by another sharpdraft command")
            && stderr.contains("`sharpdraft train`")
            && stderr.contains(name),
        "{stderr}"
    );
    let models: Vec<_> = std::fs::read_dir(home.join("models")).unwrap().collect();
    assert_eq!(models.len(), 1, "nothing set aside or installed beside it");
    assert_eq!(
        std::fs::read_to_string(folder.join("model.safetensors")).unwrap(),
        "step 100"
    );
    assert!(!home.join("calibrations").join("smollm2-dflash-v4k-long").exists());
}

#[test]
fn a_second_fetch_of_one_model_waits_for_the_first_and_finds_its_import() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let name = "smollm2-135m-dflash-v4k-long";
    let folder = home.join("models").join(name);
    // Another fetch of the same model holds the folder, as its lock's line says.
    let first = hold_folder(&home, &folder, "`sharpdraft fetch`, process 1 since Unix time 0");
    let second = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(["fetch", name])
        .env("RUST_BACKTRACE", "0")
        .env("SHARPDRAFT_HOME", &home)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(!folder.exists(), "nothing installed while the first fetch holds the folder");
    first.set_len(0).unwrap();
    first.unlock().unwrap();
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("waiting for it to end"), "{stderr}");
    assert!(folder.join("model.safetensors").is_file(), "{stderr}");
}

#[test]
fn retrain_without_a_training_config_that_makes_the_drafter_is_refused_before_anything_is_moved() {
    if !smollm2_fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join("models")).unwrap();
    let target = sharpdraft_store::registry::resolve("smollm2-135m-instruct").unwrap();
    std::os::unix::fs::symlink(&target, home.join("models/smollm2-135m-instruct")).unwrap();
    let name = "smollm2-135m-dflash-v4k-long";
    assert!(sharpdraft(&["fetch", name], Some(&home)).status.success());
    std::fs::write(dir.path().join("p.jsonl"), "{\"q\": \"Hi\"}\n").unwrap();
    let experiment = dir.path().join("e.yaml");
    std::fs::write(
        &experiment,
        format!(
            "name: rt\ntarget: smollm2-135m-instruct\n\
             drafters:\n  - {{name: d, spec: {{method: dflash, checkpoint: {name}}}, schedule: smollm2-dflash-v4k-long}}\n\
             methods:\n  - {{name: ar, target_only: true}}\n  - {{name: unmodified}}\n\
             workloads:\n  - {{name: w, setting: long_prompt, prompts: {{jsonl: {{path: p.jsonl, field: q}}}}, count: 1, max_new_tokens: 4, contexts: [0]}}\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let listing = || {
        let mut names: Vec<String> = ["models", "calibrations"]
            .iter()
            .flat_map(|folder| std::fs::read_dir(home.join(folder)).unwrap())
            .map(|e| e.unwrap().path().display().to_string())
            .collect();
        names.sort();
        names
    };
    let installed = listing();
    let retrain = || {
        sharpdraft(
            &[
                "run",
                experiment.to_str().unwrap(),
                "--retrain",
                "--out",
                out.to_str().unwrap(),
            ],
            Some(&home),
        )
    };
    let untouched = |stderr: &str| {
        assert_eq!(listing(), installed, "nothing is set aside before the refusal: {stderr}");
        assert!(sharpdraft(&["fetch", name, "--verify"], Some(&home)).status.success());
    };
    // No `train:` at all.
    let run = retrain();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "no train: config to retrain from: {stderr}");
    assert!(
        stderr.contains("--retrain trains") && stderr.contains("train:"),
        "{stderr}"
    );
    untouched(&stderr);
    // A `train:` config that writes another checkpoint (its data a local text: nothing downloaded).
    std::fs::write(dir.path().join("corpus.txt"), "A short text to train on. ".repeat(8)).unwrap();
    let train = dir.path().join("train.yaml");
    std::fs::write(
        &train,
        "target: smollm2-135m-instruct\n\
         method: {dflash: {layers: 1, block_size: 4, mask_token: 16, gamma: 2, anchors: 4}}\n\
         out: somewhere-else\nn0: 32\nwindows: 2\nsteps: 2\ndata:\n  - text_file: corpus.txt\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&experiment).unwrap().replace(
        "schedule: smollm2-dflash-v4k-long}",
        &format!("schedule: smollm2-dflash-v4k-long, train: {}}}", train.display()),
    );
    std::fs::write(&experiment, text).unwrap();
    let run = retrain();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(stderr.contains("not checkpoint"), "{stderr}");
    untouched(&stderr);
}

#[test]
fn the_demo_decodes_with_the_shipped_drafter_beside_the_target_and_says_the_output_is_the_targets()
{
    if !smollm2_fetched() {
        return;
    }
    // `make demo`'s command, on the shipped folder itself (no install) and a shorter answer.
    let shipped = sharpdraft_store::registry::shipped("smollm2-135m-dflash-v4k-long").unwrap();
    let out = sharpdraft(
        &[
            "generate",
            "--target",
            "smollm2-135m-instruct",
            "--drafter",
            shipped.source().to_str().unwrap(),
            "--method",
            "dflash",
            "--prompt",
            "What is 15% of 240? Show your steps.",
            "--max-new-tokens",
            "32",
            "--compare-ar",
            "--rounds",
            "1",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("dflash: tau "), "{stderr}");
    assert!(stderr.contains("autoregressive "), "{stderr}");
    assert!(
        stderr.contains("output identical to the target alone's, token for token: yes"),
        "{stderr}"
    );
}
