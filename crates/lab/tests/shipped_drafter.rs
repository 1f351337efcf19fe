//! The drafter the repository ships (the quickstart's, in bf16): its files are the ones pinned in the
//! registry, and on the quickstart's first cell (n0, the same two held-out MT-Bench prompts behind the
//! same Shakespeare) its tau lies inside the interval the committed quickstart report gives the drafter
//! it was converted from.

use sharpdraft_lab::experiment::{run, RunOptions};
use sharpdraft_report::table::Table;
use sharpdraft_store::registry::{repository_root, SHIPPED_MODELS};

#[test]
fn every_shipped_file_has_its_pinned_sha256() {
    assert!(!SHIPPED_MODELS.is_empty());
    for model in SHIPPED_MODELS {
        model
            .verify_source()
            .unwrap_or_else(|e| panic!("{}: {e}", model.name));
    }
}

#[test]
fn the_shipped_drafter_reproduces_the_quickstart_reports_tau_at_n0() {
    if sharpdraft_store::registry::resolve("smollm2-135m-instruct").is_err() {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
        return;
    }
    let root = repository_root();
    let shipped = &SHIPPED_MODELS[0];
    let dir = tempfile::tempdir().unwrap();
    // The quickstart's long-prompt workload at its first context alone; tau is counted, not timed, so
    // no decode waits for a quiet machine.
    let workload = std::fs::read_to_string(root.join("configs/workloads/mtbench-long-prompt.yaml"))
        .unwrap()
        .replace("contexts: [256, 1024, 4096]", "contexts: [256]");
    assert!(workload.contains("contexts: [256]\n"), "{workload}");
    std::fs::write(dir.path().join("workload.yaml"), workload).unwrap();
    let path = dir.path().join("experiment.yaml");
    std::fs::write(
        &path,
        format!(
            "name: shipped\ntarget: smollm2-135m-instruct\ntemperature: 0\ntiming: {{retries: 0}}\n\
             drafters:\n  - {{name: dflash-v4k-long, spec: {{method: dflash, checkpoint: {}}}}}\n\
             methods:\n  - {{name: ar, target_only: true}}\n  - {{name: unmodified}}\n\
             workloads:\n  - workload.yaml\n",
            shipped.source().display()
        ),
    )
    .unwrap();
    let out = dir.path().join("run");
    let outcome = run(
        &path,
        &RunOptions {
            out: Some(out.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(outcome.finished);
    let row = |t: &Table| {
        (0..t.rows())
            .find(|&r| {
                t.strs("method").unwrap()[r] == "unmodified"
                    && t.i64s("context").unwrap()[r] == 256
                    && t.strs("bin").unwrap()[r] == "all"
            })
            .expect("the unmodified drafter at 256")
    };
    let now = Table::read_parquet(&out.join("summary.parquet")).unwrap();
    let committed =
        Table::read_parquet(&root.join("experiments/results/quickstart-avx2/summary.parquet"))
            .unwrap();
    let tau = now.f64s("tau").unwrap()[row(&now)];
    let (lo, hi) = (
        committed.f64s("tau_lo").unwrap()[row(&committed)],
        committed.f64s("tau_hi").unwrap()[row(&committed)],
    );
    eprintln!("the shipped drafter's tau at n0: {tau} (the committed report's [{lo}, {hi}])");
    assert!(
        lo <= tau && tau <= hi,
        "tau {tau} of the shipped drafter outside the committed report's [{lo}, {hi}]"
    );
    assert_eq!(now.i64s("matches_target").unwrap()[row(&now)], 1);
}
