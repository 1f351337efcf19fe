//! `sharpdraft derive` end to end: the JSON contract, the table, and bad arguments.
use serde_json::Value;
use std::process::{Command, Output};

fn sharpdraft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(args)
        .output()
        .expect("run sharpdraft")
}

fn derive_json(args: &[&str]) -> Value {
    let mut all = vec!["derive", "--json"];
    all.extend_from_slice(args);
    let out = sharpdraft(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn close(v: &Value, expected: f64, tol: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"));
    assert!(
        (got - expected).abs() <= tol,
        "got {got}, expected {expected}"
    );
}

#[test]
fn derive_json_reports_the_a1_case_at_64_n0() {
    let v = derive_json(&[
        "--k", "4", "--delta", "4", "--sigma", "1", "--n0", "2048", "--n", "131072",
    ]);
    close(&v["s_exact"], 3.17636, 5e-6);
    close(&v["D"], 3.0, 1e-12);
    close(&v["n_max"], 89.84 * 2048.0, 0.005 * 2048.0);
    close(&v["beta_tangent"], 0.333986, 1e-6);
    // The secant is exact at the range end, so it restores the mass there.
    close(&v["mass_ratio"]["secant"], 1.0, 1e-9);
    close(&v["mass_ratio"]["exact"], 1.0, 1e-9);
    close(&v["mass_ratio"]["uncorrected"], 0.0166, 5e-5);
    let beta = |key: &str| v[key].as_f64().unwrap();
    assert!(beta("beta_tangent") < beta("beta_ls") && beta("beta_ls") < beta("beta_secant"));
    assert!(beta("beta_minimax") > beta("beta_tangent"));
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for key in [
        "s_exact",
        "n_max",
        "D",
        "beta_tangent",
        "beta_secant",
        "beta_minimax",
        "beta_ls",
        "mass_ratio",
    ] {
        assert!(keys.contains(&key), "missing {key}");
    }
}

#[test]
fn derive_json_marks_unbounded_and_missing_corrections() {
    let noiseless = derive_json(&[
        "--k", "4", "--delta", "4", "--sigma", "0", "--n0", "2048", "--n", "8192",
    ]);
    assert_eq!(noiseless["n_max"], "inf");
    let beyond = derive_json(&[
        "--k", "4", "--delta", "3", "--sigma", "1", "--n0", "2048", "--n", "131072",
    ]);
    assert!(
        beyond["s_exact"].is_null()
            && beyond["beta_secant"].is_null()
            && beyond["mass_ratio"]["exact"].is_null()
    );
    assert!(beyond["n_max"].is_number());
    let blunt = derive_json(&[
        "--k", "4", "--delta", "1", "--sigma", "1", "--n0", "2048", "--n", "8192",
    ]);
    assert!(blunt["n_max"].is_null() && blunt["s_exact"].is_null());
    assert_eq!(blunt["beta_tangent"], 0.0);
}

#[test]
fn the_range_end_sets_the_fit_range_independently_of_n() {
    let at_4 = derive_json(&[
        "--k",
        "8",
        "--delta",
        "7",
        "--sigma",
        "1",
        "--n0",
        "2048",
        "--n",
        "8192",
        "--range-end",
        "131072",
    ]);
    let at_64 = derive_json(&[
        "--k", "8", "--delta", "7", "--sigma", "1", "--n0", "2048", "--n", "131072",
    ]);
    assert_eq!(at_4["beta_secant"], at_64["beta_secant"]);
}

#[test]
fn derive_prints_a_readable_table_without_json() {
    let out = sharpdraft(&[
        "derive", "--k", "4", "--delta", "4", "--sigma", "1", "--n0", "2048", "--n", "131072",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "exact correction s*(n)     3.17636",
        "minimax",
        "least squares",
        "89.84 n0",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn bad_arguments_are_clap_errors_with_exit_code_2() {
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "derive", "--k", "4", "--delta", "4", "--sigma", "1", "--n0", "4", "--n", "100",
            ],
            "invalid n0 = 4",
        ),
        (
            &[
                "derive", "--k", "4", "--delta", "4", "--sigma", "-1", "--n0", "2048", "--n", "100",
            ],
            "invalid sigma = -1",
        ),
        (
            &[
                "derive", "--k", "4", "--delta", "4", "--sigma", "1", "--n0", "2048", "--n", "3",
            ],
            "invalid n = 3",
        ),
        (
            &[
                "derive", "--k", "0", "--delta", "4", "--sigma", "1", "--n0", "2048", "--n", "100",
            ],
            "--k",
        ),
        (
            &[
                "derive", "--delta", "4", "--sigma", "1", "--n0", "2048", "--n", "100",
            ],
            "--k",
        ),
    ];
    for (args, needle) in cases {
        let out = sharpdraft(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
