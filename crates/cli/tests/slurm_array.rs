//! `scripts/slurm/run-array.sbatch` run as SLURM runs it: one process per array task with SLURM's
//! variables set, the tasks in any order, one task killed and submitted again alone (an array of one,
//! as `sbatch --array=1` makes it), then the merge job; the merged run holds the same requests, tokens
//! and tau as one machine's run of the whole grid.

use sharpdraft_report::table::Table;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn fetched() -> bool {
    let ok = sharpdraft_store::registry::resolve("smollm2-135m-instruct").is_ok();
    if !ok {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
    }
    ok
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm/run-array.sbatch")
}

/// An array task as SLURM starts it: task `id` of the submitted array `first..=last`.
#[derive(Clone, Copy)]
struct Task {
    id: usize,
    first: usize,
    last: usize,
}

impl Task {
    /// Task `id` of the array `0..count` submitted at first.
    fn of(id: usize, count: usize) -> Self {
        Self {
            id,
            first: 0,
            last: count - 1,
        }
    }

    /// Task `id` submitted again alone (`sbatch --array=ID`): an array of one.
    fn alone(id: usize) -> Self {
        Self {
            id,
            first: id,
            last: id,
        }
    }
}

/// The script as SLURM starts an array task (`task`) or the merge job (`task` None), in `dir`, the
/// folder it was submitted from.
fn job(dir: &Path, task: Option<Task>, args: &[&str]) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(script())
        .args(args)
        .current_dir(dir)
        .env("SHARPDRAFT", env!("CARGO_BIN_EXE_sharpdraft"))
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_CPUS_PER_TASK", "2")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("SLURM_ARRAY_TASK_MIN")
        .env_remove("SLURM_ARRAY_TASK_MAX")
        .env_remove("SLURM_ARRAY_TASK_COUNT");
    if let Some(task) = task {
        command
            .env("SLURM_ARRAY_JOB_ID", "4242")
            .env("SLURM_ARRAY_TASK_ID", task.id.to_string())
            .env("SLURM_ARRAY_TASK_MIN", task.first.to_string())
            .env("SLURM_ARRAY_TASK_MAX", task.last.to_string())
            .env(
                "SLURM_ARRAY_TASK_COUNT",
                (task.last - task.first + 1).to_string(),
            );
    }
    command
}

fn refused(output: Output) -> String {
    assert!(!output.status.success(), "ran where it should be refused");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn succeeded(output: Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
}

/// (drafter, method, context, seed, prompt, generated, cycles, accepted) of every results row.
fn outcomes(run: &Path) -> BTreeSet<(String, String, i64, i64, i64, i64, i64, i64)> {
    let t = Table::read_parquet(&run.join("results.parquet")).unwrap();
    let s = |c: &str| t.strs(c).unwrap().to_vec();
    let i = |c: &str| t.i64s(c).unwrap().to_vec();
    let (drafter, method) = (s("drafter"), s("method"));
    let (context, seed, prompt) = (i("context"), i("seed"), i("prompt"));
    let (generated, cycles, accepted) = (i("generated"), i("cycles"), i("accepted"));
    (0..t.rows())
        .map(|r| {
            (
                drafter[r].clone(),
                method[r].clone(),
                context[r],
                seed[r],
                prompt[r],
                generated[r],
                cycles[r],
                accepted[r],
            )
        })
        .collect()
}

/// (drafter, method, context, prompts, tau) of every summary row.
fn taus(run: &Path) -> Vec<(String, String, i64, i64, String)> {
    let t = Table::read_parquet(&run.join("summary.parquet")).unwrap();
    (0..t.rows())
        .map(|r| {
            (
                t.strs("drafter").unwrap()[r].clone(),
                t.strs("method").unwrap()[r].clone(),
                t.i64s("context").unwrap()[r],
                t.i64s("prompts").unwrap()[r],
                format!("{:.12}", t.f64s("tau").unwrap()[r]),
            )
        })
        .collect()
}

const PROMPTS: &str = "{\"q\": \"Name three fruits.\"}\n{\"q\": \"What is 2 + 3?\"}\n";

/// Three units (one a seed), each of two prompts: a shard per task.
const GRID: &str = "name: grid\ntarget: smollm2-135m-instruct\n\
     drafters:\n  - {name: self, spec: {method: vanilla, checkpoint: smollm2-135m-instruct, draft_len: 3}}\n\
     methods:\n  - {name: ar, target_only: true}\n  - {name: unmodified}\n\
     workloads:\n  - {name: w, setting: long_prompt, prompts: {jsonl: {path: prompts.jsonl, field: q}}, count: 2, max_new_tokens: 16, contexts: [0]}\n\
     seeds: [0, 1, 2]\n\
     timing: {retries: 0}\n";

#[test]
fn the_array_tasks_in_any_order_with_one_killed_and_resubmitted_alone_merge_to_the_single_machine_run(
) {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prompts.jsonl"), PROMPTS).unwrap();
    std::fs::write(dir.path().join("grid.yaml"), GRID).unwrap();
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    let single = dir.path().join("single");
    succeeded(
        Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(["run", "grid.yaml", "--out"])
            .arg(&single)
            .current_dir(dir.path())
            .output()
            .unwrap(),
    );

    // SLURM starts tasks in no set order: the last first.
    succeeded(
        job(dir.path(), Some(Task::of(2, 3)), &["grid.yaml", "3"])
            .output()
            .unwrap(),
    );
    // Task 1 is killed (preempted, say) once its run has claimed its folder, then submitted again alone.
    let shard = dir.path().join("runs/grid.shard-1-of-3");
    let mut killed = job(dir.path(), Some(Task::of(1, 3)), &["grid.yaml", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !shard.join("experiment.json").exists() && killed.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "task 1 never started its run"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.kill().ok();
    killed.wait().unwrap();
    succeeded(
        job(dir.path(), Some(Task::of(0, 3)), &["grid.yaml", "3"])
            .output()
            .unwrap(),
    );
    succeeded(
        job(dir.path(), Some(Task::alone(1)), &["grid.yaml", "3"])
            .output()
            .unwrap(),
    );
    // The merge job, once every task has ended.
    let merged = succeeded(
        job(dir.path(), None, &["--merge", "grid.yaml", "3"])
            .output()
            .unwrap(),
    );
    assert!(merged.contains("the whole grid"), "{merged}");
    let whole = dir.path().join("runs/grid");
    assert_eq!(outcomes(&whole), outcomes(&single));
    assert_eq!(
        outcomes(&whole).len(),
        2 * 3 * 2,
        "2 arms x 3 seeds x 2 prompts, once each"
    );
    assert_eq!(taus(&whole), taus(&single));
    assert!(whole.join("report.md").is_file());
}

#[test]
fn the_merge_job_names_a_shard_whose_task_never_ran() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("grid.yaml"), "name: grid\n").unwrap();
    std::fs::create_dir_all(dir.path().join("runs/grid.shard-0-of-2")).unwrap();
    let out = job(dir.path(), None, &["--merge", "grid.yaml", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("runs/grid.shard-1-of-2 is missing"),
        "{stderr}"
    );
    let outside = job(dir.path(), None, &["grid.yaml", "2"]).output().unwrap();
    assert!(!outside.status.success());
    assert!(
        String::from_utf8_lossy(&outside.stderr).contains("not an array task"),
        "{}",
        String::from_utf8_lossy(&outside.stderr)
    );
}

#[test]
fn a_task_is_refused_a_shard_count_it_cannot_run_and_a_quoted_name_finds_its_shards() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("grid.yaml"), "name: \"grid\"\n").unwrap();
    for (task, count, says) in [
        (Task::of(0, 8), "08", "without a leading zero"),
        (Task::of(0, 8), "0", "from 1"),
        (Task::of(0, 8), "eight", "whole number"),
        (Task::alone(9), "8", "array task 9 is outside the grid's 8 shards"),
    ] {
        let stderr = refused(job(dir.path(), Some(task), &["grid.yaml", count]).output().unwrap());
        assert!(stderr.contains(says), "N {count:?}: {stderr}");
    }
    let stderr = refused(job(dir.path(), Some(Task::of(0, 2)), &["grid.yaml"]).output().unwrap());
    assert!(stderr.contains("usage"), "no N: {stderr}");
    // The merge job reads a quoted name as run wrote its folders' names.
    let stderr = refused(job(dir.path(), None, &["--merge", "grid.yaml", "2"]).output().unwrap());
    assert!(stderr.contains("runs/grid.shard-0-of-2 is missing"), "{stderr}");
}

#[test]
fn run_inside_an_array_task_without_a_shard_is_refused_naming_the_shard_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("grid.yaml"), GRID).unwrap();
    std::fs::write(dir.path().join("prompts.jsonl"), PROMPTS).unwrap();
    // sbatch --array=3 of an 8-shard grid: an array of one, whose bounds say nothing of the 8.
    let task = Task::alone(3);
    let stderr = refused(
        Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(["run", "grid.yaml"])
            .current_dir(dir.path())
            .env("SLURM_ARRAY_TASK_ID", task.id.to_string())
            .env("SLURM_ARRAY_TASK_MIN", task.first.to_string())
            .env("SLURM_ARRAY_TASK_COUNT", "1")
            .output()
            .unwrap(),
    );
    assert!(stderr.contains("--shard 3/N"), "{stderr}");
    assert!(
        !dir.path().join("runs").exists(),
        "nothing is written before the refusal"
    );
}
