//! `sharpdraft run` as a user runs it: killed mid-grid, resumed with every finished row intact.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fetched() -> bool {
    let ok = sharpdraft_store::registry::resolve("smollm2-135m-instruct").is_ok();
    if !ok {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
    }
    ok
}

fn finished_units(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("units"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_run_killed_mid_grid_resumes_with_every_finished_unit_intact_and_no_duplicates() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prompts.jsonl"),
        "{\"q\": \"Name three fruits.\"}\n{\"q\": \"What is 2 + 3?\"}\n",
    )
    .unwrap();
    let experiment = dir.path().join("experiment.yaml");
    std::fs::write(
        &experiment,
        "name: killed\ntarget: smollm2-135m-instruct\n\
         drafters:\n  - {name: self, spec: {method: vanilla, checkpoint: smollm2-135m-instruct, draft_len: 3}}\n\
         methods:\n  - {name: ar, target_only: true}\n  - {name: unmodified}\n\
         workloads:\n  - {name: w, setting: long_prompt, prompts: {jsonl: {path: prompts.jsonl, field: q}}, count: 2, max_new_tokens: 24, contexts: [0]}\n\
         seeds: [0, 1, 2]\n\
         timing: {retries: 0}\n",
    )
    .unwrap();
    // No decoding again for quiet (timing.retries 0): the kill is under test, and on a busy machine the
    // default policy holds each arm up to 3 x 120 s, past this test's 5 minutes for a first unit.
    let out = dir.path().join("run");
    let sharpdraft = env!("CARGO_BIN_EXE_sharpdraft");
    let mut child = Command::new(sharpdraft)
        .args([
            "run",
            experiment.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed (SIGKILL: no clean-up) as soon as the first unit is written.
    let started = Instant::now();
    while finished_units(&out).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no unit finished in 5 min"
        );
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().ok();
    child.wait().unwrap();
    let before = finished_units(&out);
    assert!(
        !before.is_empty() && before.len() < 3,
        "killed mid-grid: {before:?}"
    );
    let kept: Vec<Vec<u8>> = before
        .iter()
        .map(|n| std::fs::read(out.join("units").join(n)).unwrap())
        .collect();

    let resumed = Command::new(sharpdraft)
        .args([
            "run",
            experiment.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--resume",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{} of 3 units finished", before.len())),
        "{stderr}"
    );
    let after = finished_units(&out);
    assert_eq!(
        after.len(),
        3,
        "one unit per seed, both arms inside: {after:?}"
    );
    for (name, bytes) in before.iter().zip(&kept) {
        assert_eq!(
            &std::fs::read(out.join("units").join(name)).unwrap(),
            bytes,
            "{name} kept as it was"
        );
    }
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        stdout.contains("| 0 | unmodified | 2 (6) |"),
        "one headline row over 3 seeds x 2 prompts, the prompts its unit of evidence: {stdout}"
    );
    assert!(stdout.contains("report.md"), "{stdout}");
}

/// An experiment `name` in `dir` of the target alone on one prompt (4 tokens), with `extra` YAML after
/// its workloads.
fn target_alone_experiment(dir: &Path, name: &str, extra: &str) -> PathBuf {
    std::fs::write(dir.join("prompts.jsonl"), "{\"q\": \"Say hello.\"}\n").unwrap();
    let experiment = dir.join("experiment.yaml");
    std::fs::write(
        &experiment,
        format!(
            "name: {name}\ntarget: smollm2-135m-instruct\ndrafters: []\n\
             methods:\n  - {{name: ar, target_only: true}}\n\
             workloads:\n  - {{name: w, setting: long_prompt, prompts: {{jsonl: {{path: prompts.jsonl, field: q}}}}, count: 1, max_new_tokens: 4, contexts: [0]}}\n{extra}"
        ),
    )
    .unwrap();
    experiment
}

#[test]
fn a_file_size_limit_ends_a_run_with_an_error_naming_the_file_not_a_silent_signal() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let experiment = target_alone_experiment(dir.path(), "limited", "");
    let out = dir.path().join("run");
    // 1 KiB: the marker fits, the experiment's record does not.
    let script = format!(
        "ulimit -f 1; exec {} run {} --out {}",
        env!("CARGO_BIN_EXE_sharpdraft"),
        experiment.display(),
        out.display()
    );
    let output = Command::new("bash").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "an error, not SIGXFSZ: {stderr}"
    );
    assert!(
        stderr.contains("File too large") && stderr.contains("ulimit -f"),
        "{stderr}"
    );
}

#[test]
fn a_run_continued_under_another_thread_count_is_refused_not_pooled() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let experiment = target_alone_experiment(
        dir.path(),
        "settings",
        "seeds: [0, 1]\ntiming: {retries: 0}\n",
    );
    let out = dir.path().join("run");
    let run = |shard: &str, threads: &str, resume: bool| {
        let mut args = vec![
            "run",
            experiment.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--shard",
            shard,
        ];
        if resume {
            args.push("--resume");
        }
        Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(&args)
            .env("SHARPDRAFT_KERNEL", "libtorch")
            .env("OMP_NUM_THREADS", threads)
            .output()
            .unwrap()
    };
    let first = run("0/2", "1", false);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let before = finished_units(&out);
    assert_eq!(before.len(), 1);
    let second = run("1/2", "2", true);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 threads")
            && stderr.contains("2 threads")
            && stderr.contains("not pooled"),
        "{stderr}"
    );
    assert_eq!(
        finished_units(&out),
        before,
        "nothing measured under the second setting"
    );
}
