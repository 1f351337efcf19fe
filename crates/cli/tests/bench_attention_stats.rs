//! `sharpdraft bench attention-stats`: the probe's statistics by libtorch and by the CUDA kernel, side by
//! side; on a CPU libtorch alone, saying why.
use serde_json::Value;
use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(["bench", "attention-stats"])
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

#[test]
fn on_a_cpu_it_times_libtorch_at_every_context_and_says_why_the_kernel_is_not_timed() {
    let out = bench(&[
        "--device",
        "cpu",
        "--keys",
        "64,256",
        "--rows",
        "8",
        "--repeats",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let measurements = report["measurements"].as_array().unwrap();
    let keys: Vec<i64> = measurements
        .iter()
        .map(|m| m["keys"].as_i64().unwrap())
        .collect();
    assert_eq!(keys, [64, 256]);
    for m in measurements {
        assert!(m["libtorch_ms"].as_f64().unwrap() > 0.0, "{m}");
        assert!(
            m["kernel_ms"].is_null() && m["max_mass_difference"].is_null(),
            "{m}"
        );
    }
    assert!(
        report["kernel_unavailable"]
            .as_str()
            .unwrap()
            .contains("CUDA"),
        "{report}"
    );
    assert_eq!(report["scales"], 41, "1 to 3 in steps of 0.05");
}

#[test]
fn heads_that_do_not_group_over_the_kv_heads_are_named() {
    let out = bench(&[
        "--device",
        "cpu",
        "--heads",
        "9",
        "--kv-heads",
        "2",
        "--keys",
        "64",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--heads 9") && err.contains("--kv-heads 2"),
        "{err}"
    );
}
