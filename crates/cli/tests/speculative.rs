//! `sharpdraft generate` with a drafter and `sharpdraft tau`, end to end on the real SmolLM2 (when fetched).
use serde_json::Value;
use std::process::Command;

fn sharpdraft(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

fn run(args: &[&str]) -> Value {
    let out = sharpdraft(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A JSONL file of `{"prompt": ...}` records in `dir`.
fn prompt_file(dir: &std::path::Path, prompts: &[&str]) -> std::path::PathBuf {
    let path = dir.join("q.jsonl");
    let lines: Vec<String> = prompts
        .iter()
        .map(|p| serde_json::json!({ "prompt": p }).to_string() + "\n")
        .collect();
    std::fs::write(&path, lines.concat()).unwrap();
    path
}

fn fetched() -> bool {
    let ok = sharpdraft_store::registry::resolve("smollm2-135m-instruct").is_ok();
    if !ok {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
    }
    ok
}

const BASE: [&str; 8] = [
    "generate",
    "--target",
    "smollm2-135m-instruct",
    "--prompt",
    "Name three fruits.",
    "--max-new-tokens",
    "20",
    "--json",
];

#[test]
fn vanilla_speculation_reports_tau_cycles_and_the_speedup_against_ar() {
    if !fetched() {
        return;
    }
    let mut args = BASE.to_vec();
    args.extend([
        "--drafter",
        "smollm2-135m-instruct",
        "--method",
        "vanilla",
        "--draft-len",
        "3",
        "--compare-ar",
        "--rounds",
        "2",
    ]);
    let v = run(&args);
    assert_eq!(v["identical_to_ar"], true);
    // Two alternated rounds, the speed-up their median, inside their range.
    let paired = &v["paired"];
    assert_eq!(paired["rounds"].as_array().unwrap().len(), 2, "{paired}");
    let (median, low, high) = (
        paired["median"].as_f64().unwrap(),
        paired["low"].as_f64().unwrap(),
        paired["high"].as_f64().unwrap(),
    );
    assert!(low <= median && median <= high, "{paired}");
    assert_eq!(v["speedup_vs_ar"].as_f64().unwrap(), median);
    let process = |key: &str| v["process"][key].as_u64().unwrap();
    let target_bytes = 500_000_000;
    assert!(
        process("load_peak_rss_bytes") <= process("peak_rss_bytes"),
        "{}",
        v["process"]
    );
    assert!(
        process("rss_bytes") > target_bytes,
        "the model is resident while it runs"
    );
    assert!(
        v["tau"].as_f64().unwrap() > 3.0,
        "a model drafting for itself is accepted: {}",
        v["tau"]
    );
    let cycles = v["cycles"].as_array().unwrap();
    assert!(!cycles.is_empty());
    for key in [
        "context",
        "drafted",
        "accepted",
        "accepted_per_position",
        "bonus",
        "draft_seconds",
        "verify_seconds",
    ] {
        assert!(cycles[0].get(key).is_some(), "cycle record lacks {key}");
    }
    assert!(v["speedup_vs_ar"].as_f64().unwrap() > 0.0);
}

#[test]
fn one_token_runs_no_cycle_and_generate_reports_no_tau_rather_than_zero() {
    if !fetched() {
        return;
    }
    let args = [
        "generate",
        "--target",
        "smollm2-135m-instruct",
        "--prompt",
        "Name three fruits.",
        "--max-new-tokens",
        "1",
        "--drafter",
        "smollm2-135m-instruct",
        "--draft-len",
        "3",
    ];
    let v = run(&[&args[..], &["--json"]].concat());
    assert!(v["tau"].is_null(), "no cycle, no tau: {}", v["tau"]);
    assert_eq!(v["cycles"].as_array().map(Vec::len), Some(0));
    let out = sharpdraft(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("nothing drafted, no tau") && !stderr.contains("tau 0.00"),
        "{stderr}"
    );
}

#[test]
fn generate_runs_the_literature_constants_llama4_and_yarn_losslessly() {
    if !fetched() {
        return;
    }
    // A training length of 4 tokens: both rules scale every query of a 20-token answer.
    for mode in ["llama4", "yarn"] {
        let mut args = BASE.to_vec();
        args.extend([
            "--drafter",
            "smollm2-135m-instruct",
            "--method",
            "vanilla",
            "--draft-len",
            "3",
            "--scaling",
            mode,
            "--n0",
            "4",
            "--compare-ar",
            "--rounds",
            "1",
        ]);
        let v = run(&args);
        assert_eq!(v["identical_to_ar"], true, "{mode}: {v}");
        assert!(v["tau"].as_f64().unwrap() >= 1.0, "{mode}: {v}");
    }
}

#[test]
fn eagle3_trees_from_a_published_layout_checkpoint_run_from_the_cli() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = sharpdraft_model::CausalLm::load(
        &sharpdraft_store::registry::resolve("smollm2-135m-instruct").unwrap(),
        tch::Device::Cpu,
        tch::Kind::Float,
    )
    .unwrap();
    sharpdraft_draft::eagle3::write_random_head(dir.path(), &target.net, &Default::default())
        .unwrap();
    let head = dir.path().to_str().unwrap();
    let mut args = BASE.to_vec();
    args.extend([
        "--drafter",
        head,
        "--method",
        "eagle3",
        "--tree-depth",
        "3",
        "--tree-topk",
        "4",
        "--tree-tokens",
        "12",
        "--compare-ar",
        "--rounds",
        "1",
    ]);
    let v = run(&args);
    assert_eq!(v["identical_to_ar"], true);
    assert!(v["cycles"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["drafted"].as_u64().unwrap() <= 12));
}

#[test]
fn a_drafter_without_a_target_match_is_a_clear_error() {
    if !fetched() {
        return;
    }
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/qwen2");
    let mut args = BASE.to_vec();
    args.extend([
        "--drafter",
        fixture.to_str().unwrap(),
        "--method",
        "vanilla",
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(&args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("vocab_size 64 differs from the target's 49152"),
        "{stderr}"
    );
}

#[test]
fn tau_reports_acceptance_per_prompt_and_context_with_a_long_text_before_the_question() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("q.jsonl");
    std::fs::write(
        &prompts,
        "{\"turns\": [\"Name a colour.\", \"And another?\"]}\n{\"turns\": [\"Name a fruit.\"]}\n",
    )
    .unwrap();
    let filler = dir.path().join("filler.txt");
    std::fs::write(
        &filler,
        "The quick brown fox jumps over the lazy dog. ".repeat(100),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "tau",
            "--target",
            "smollm2-135m-instruct",
            "--drafter",
            "smollm2-135m-instruct",
            "--method",
            "vanilla",
        ];
        args.extend_from_slice(&[
            "--prompts",
            prompts.to_str().unwrap(),
            "--field",
            "turns",
            "--skip",
            "1",
            "--count",
            "1",
            "--max-new-tokens",
            "8",
        ]);
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(&args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "--contexts",
        "0,300",
        "--filler",
        filler.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["prompt"], 1, "--skip 1 takes the second line");
    let long = rows[1]["context"].as_i64().unwrap();
    assert!(
        (290..=310).contains(&long),
        "context {long} for a requested 300"
    );
    // The target drafting for itself is always accepted: K = 4 drafts + 1 bonus per pass.
    for summary in report["summary"].as_array().unwrap() {
        assert!(summary["tau"].as_f64().unwrap() > 3.0, "{summary}");
    }
    let out = run(&["--contexts", "300"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("need --filler"));
}

#[test]
fn tau_compares_scaling_modes_on_the_same_prompts_and_beta_zero_matches_off() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompt_file(dir.path(), &["Name three colours."]);
    let filler = dir.path().join("filler.txt");
    std::fs::write(
        &filler,
        "A long and winding road leads to the sea. ".repeat(60),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "tau",
            "--target",
            "smollm2-135m-instruct",
            "--drafter",
            "smollm2-135m-instruct",
            "--method",
            "vanilla",
        ];
        args.extend_from_slice(&[
            "--prompts",
            prompts.to_str().unwrap(),
            "--count",
            "1",
            "--max-new-tokens",
            "12",
            "--contexts",
            "200",
        ]);
        args.extend_from_slice(&["--filler", filler.to_str().unwrap(), "--json"]);
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(&args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "--scaling",
        "off,fixed,logn,llama4,yarn",
        "--beta",
        "0",
        "--n0",
        "32",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = report["summary"].as_array().unwrap();
    let modes: Vec<&str> = summary
        .iter()
        .map(|s| s["scaling"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["off", "fixed", "logn", "llama4", "yarn"]);
    assert_eq!(
        summary[0]["tau"], summary[1]["tau"],
        "fixed with beta = 0 is the unmodified drafter"
    );
    // logn at n0 = 32 over a 200-token context scales the drafter's queries by ~1.5: its drafts, no
    // longer the target's own, are not all accepted.
    assert!(
        summary[2]["tau"].as_f64().unwrap() < summary[0]["tau"].as_f64().unwrap(),
        "{summary:?}"
    );
    // YaRN with n0 = 32 scales them by (1 + 0.1 ln(200 / 32))^2, about 1.4: the same happens.
    assert!(
        summary[4]["tau"].as_f64().unwrap() < summary[0]["tau"].as_f64().unwrap(),
        "{summary:?}"
    );

    let out = run(&["--scaling", "exact"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a schedule"), "{err}");
    let out = run(&["--scaling", "fixed", "--beta", "0.2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no training length"), "{err}");
}

#[test]
fn bench_scaling_compares_identical_drafts_with_and_without_the_scaling_path() {
    if !fetched() {
        return;
    }
    let rows = run(&[
        "bench",
        "scaling",
        "--drafter",
        "smollm2-135m-instruct",
        "--method",
        "vanilla",
        "--contexts",
        "64",
        "--new-tokens",
        "8",
        "--repeats",
        "1",
        "--json",
    ]);
    let row = &rows[0];
    assert_eq!(row["context"], 64);
    assert_eq!(row["identical"], true, "beta = 0 keeps every draft: {row}");
    assert_eq!(row["off_cache_bytes"], row["scaled_cache_bytes"]);
    let ratio = row["ratio"].as_f64().unwrap();
    assert!(ratio.is_finite() && ratio > 0.0, "{row}");
}

#[test]
fn generate_adapts_a_drafter_online_and_reports_its_updates_and_memory() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let drafter = dir.path().join("dflash");
    let init = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args([
            "init",
            "dflash",
            "--target",
            "smollm2-135m-instruct",
            "--mask-token",
            "2",
        ])
        .arg("--out")
        .arg(&drafter)
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let mut args = BASE.to_vec();
    args.extend([
        "--drafter",
        drafter.to_str().unwrap(),
        "--method",
        "dflash",
        "--compare-ar",
        "--rounds",
        "1",
        "--adapt",
        "lora",
        "--adapt-every",
        "2",
        "--lora-rank",
        "4",
        "--lora-on",
        "attention,fc",
    ]);
    let v = run(&args);
    assert_eq!(v["identical_to_ar"], true);
    let adaptation = &v["adaptation"];
    assert_eq!(adaptation["mode"], "lora");
    assert!(adaptation["updates"].as_u64().unwrap() >= 1, "{adaptation}");
    assert!(adaptation["adapter_bytes"].as_u64().unwrap() > 0);
    let memory = &v["memory"];
    assert!(
        memory["adaptation_bytes"].as_u64().unwrap()
            > adaptation["adapter_bytes"].as_u64().unwrap()
    );
    assert!(memory["drafter_weight_bytes"].as_u64().unwrap() > 0);
    assert!(memory["peak_rss_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn tau_adapting_every_request_keeps_one_drafter_over_the_prompts() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompt_file(
        dir.path(),
        &[
            "Describe the sea in three sentences.",
            "Describe a forest in three sentences.",
            "Describe a city in three sentences.",
        ],
    );
    let v = run(&[
        "tau",
        "--target",
        "smollm2-135m-instruct",
        "--drafter",
        "smollm2-135m-instruct",
        "--method",
        "vanilla",
        "--prompts",
        prompts.to_str().unwrap(),
        "--count",
        "3",
        "--max-new-tokens",
        "12",
        "--adapt",
        "full",
        "--adapt-unit",
        "requests",
        "--adapt-every",
        "1",
        "--adapt-lr",
        "1e-5",
        "--json",
    ]);
    // Requests 2 and 3 start with an update on the one before.
    let summary = &v["summary"][0];
    assert_eq!(summary["updates"], 2, "{summary}");
    assert!(summary["adaptation_bytes"].as_u64().unwrap() > 0);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows[0]["update_seconds"], 0.0);
    assert!(rows[1]["update_seconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_load_maps_the_weights_in_place_and_holds_no_more_than_a_copy() {
    if !fetched() {
        return;
    }
    let rows = run(&[
        "bench",
        "load",
        "--target",
        "smollm2-135m-instruct",
        "--repeats",
        "1",
        "--json",
    ]);
    let (copy, in_place) = (&rows[0], &rows[1]);
    assert_eq!(
        (copy["loading"].as_str(), in_place["loading"].as_str()),
        (Some("copy"), Some("in-place"))
    );
    assert_eq!(copy["mapped_bytes"], 0);
    assert_eq!(
        in_place["mapped_bytes"], in_place["weight_bytes"],
        "{in_place}"
    );
    let bytes = |row: &Value, key: &str| row[key].as_u64().unwrap();
    assert!(bytes(in_place, "load_peak_bytes") < bytes(copy, "load_peak_bytes"));
    // After the passes both hold about the weights once (mapped pages against copies); which is a few
    // MB higher varies run to run, so the bound allows 5%. Loading both ways at once would be 2x.
    let (mapped_peak, copied_peak) = (bytes(in_place, "peak_bytes"), bytes(copy, "peak_bytes"));
    assert!(
        mapped_peak as f64 <= 1.05 * copied_peak as f64,
        "peak after the passes: in place {mapped_peak} bytes, copy {copied_peak} bytes"
    );
}

/// `sharpdraft bench rows` once per row count in `rows` (comma-separated) over `context` keys, with
/// `more` flags.
fn bench_rows(rows: &str, context: &str, more: &[&str]) -> Value {
    let mut args = vec![
        "bench",
        "rows",
        "--target",
        "smollm2-135m-instruct",
        "--rows",
        rows,
        "--context",
        context,
        "--repeats",
        "1",
        "--json",
    ];
    args.extend(more);
    run(&args)
}

#[test]
fn bench_rows_times_a_pass_per_row_count_next_to_its_bounds() {
    if !fetched() {
        return;
    }
    let report = bench_rows("1,5", "32", &[]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["relative_to_one_row"], 1.0);
    for row in rows {
        for key in [
            "pass_ms",
            "memory_bound_ms",
            "compute_bound_ms",
            "head_linear_ms",
        ] {
            let ms = row[key].as_f64().unwrap();
            assert!(ms.is_finite() && ms > 0.0, "{key}: {row}");
        }
    }
    assert!(report["bandwidth_gb_s"].as_f64().unwrap() > 0.0);
    assert!(rows[0]["split_ms"].is_null(), "split only when asked");
}

#[test]
fn bench_rows_with_split_gives_each_pass_its_linear_maps_attention_and_the_rest() {
    if !fetched() {
        return;
    }
    let report = bench_rows("1,4", "32", &["--split"]);
    for row in report["rows"].as_array().unwrap() {
        let split = row["split_ms"].as_object().expect("a split");
        for step in [
            "linear maps",
            "attention",
            "layers' rest",
            "LM head",
            "cache writes",
            "other",
        ] {
            let ms = split.get(step).and_then(Value::as_f64);
            assert!(
                ms.is_some_and(|ms| ms.is_finite() && ms >= 0.0),
                "{step}: {row}"
            );
        }
        assert!(split["linear maps"].as_f64().unwrap() > 0.0, "{row}");
    }
}

#[test]
fn bench_draft_time_splits_the_cycle_into_layers_linear_maps_and_attention_and_times_the_drafters_prefill_apart(
) {
    if !fetched() {
        return;
    }
    // A self-drafting vanilla chain of 2: each cycle drafts with 2 one-row passes, and its prefill
    // runs the drafter once over the whole prompt.
    let args: Vec<&str> = "bench draft-time --target smollm2-135m-instruct \
        --drafter smollm2-135m-instruct --method vanilla --draft-len 2 \
        --contexts 16,400 --new-tokens 9 --repeats 2 --json"
        .split_whitespace()
        .collect();
    let report = run(&args);
    let contexts = report["contexts"].as_array().unwrap();
    let prefill = |i: usize| contexts[i]["prefill_ms_per_request"].as_f64().unwrap();
    assert!(prefill(0) > 0.0 && prefill(1) > prefill(0), "{report}");
    for context in contexts {
        let steps = context["steps"].as_array().unwrap();
        let summed: f64 = steps
            .iter()
            .map(|s| s["ms_per_cycle"].as_f64().unwrap())
            .sum();
        let whole = context["drafter_ms_per_cycle"].as_f64().unwrap();
        assert!((summed - whole).abs() <= 1e-6 * whole.max(1.0), "{context}");
        // The cycle's passes alone: the prefill's pass would add a call the cycles never make.
        let layer = steps
            .iter()
            .find(|s| s["step"] == "layer 0")
            .expect("a layer step");
        let calls = layer["calls_per_cycle"].as_f64().unwrap();
        assert!(
            (calls - calls.round()).abs() < 1e-9,
            "layer 0 ran {calls} times a cycle: {context}"
        );
        // A layer's weights are read by its linear maps, which stand apart with their bound.
        let bound = |name: &str| {
            (steps.iter().find(|s| s["step"] == name))
                .map(|s| s["memory_bound_ms_per_cycle"].as_f64().unwrap())
        };
        assert_eq!(bound("layer 0"), Some(0.0), "{context}");
        assert!(bound("linear maps").is_some_and(|ms| ms > 0.0), "{context}");
        assert!(bound("attention").is_some(), "{context}");
    }
}

#[test]
fn bench_draft_time_times_a_drafter_in_f32_and_bf16_in_turn_and_pairs_their_cycles_by_repeat() {
    if !fetched() {
        return;
    }
    let args: Vec<&str> = "bench draft-time --target smollm2-135m-instruct \
        --drafter smollm2-135m-instruct --method vanilla --draft-len 2 \
        --contexts 16 --new-tokens 9 --repeats 3 --drafter-dtypes f32,bf16 --json"
        .split_whitespace()
        .collect();
    let report = run(&args);
    let contexts = report["contexts"].as_array().unwrap();
    let dtypes: Vec<&str> = contexts
        .iter()
        .map(|c| c["drafter_dtype"].as_str().unwrap())
        .collect();
    assert_eq!(dtypes, ["f32", "bf16"], "{report}");
    // The same maps read in bf16: half the bytes a call, so half the memory bound a call (one
    // bandwidth per run).
    let bound_per_call = |context: &Value| {
        let maps = (context["steps"].as_array().unwrap().iter())
            .find(|s| s["step"] == "linear maps")
            .unwrap();
        maps["memory_bound_ms_per_cycle"].as_f64().unwrap()
            / maps["calls_per_cycle"].as_f64().unwrap()
    };
    let halved = bound_per_call(&contexts[1]) / bound_per_call(&contexts[0]);
    assert!(
        (halved - 0.5).abs() < 0.01,
        "bf16 over f32 bytes a call: {halved}"
    );
    let paired = report["paired"].as_array().unwrap();
    assert_eq!(paired.len(), 1, "{report}");
    assert_eq!(paired[0]["baseline"], "f32");
    assert_eq!(paired[0]["dtype"], "bf16");
    let ratios = paired[0]["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2, "the timed repeats, the warm-up left out");
    assert!(ratios
        .iter()
        .all(|r| r.as_f64().is_some_and(|r| r.is_finite() && r > 0.0)));
    // A dtype list and a single dtype are one choice, not two.
    let both = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args([
            "bench",
            "draft-time",
            "--drafter",
            "smollm2-135m-instruct",
            "--method",
            "vanilla",
        ])
        .args(["--drafter-dtypes", "f32,bf16", "--drafter-dtype", "bf16"])
        .output()
        .unwrap();
    assert!(!both.status.success());
    let error = String::from_utf8_lossy(&both.stderr);
    assert!(error.contains("--drafter-dtype"), "{error}");
}

#[test]
fn bench_speculative_pools_speculation_against_ar_over_prompts_greedy_and_sampled() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompt_file(dir.path(), &["Name three fruits.", "Count to five."]);
    // The target drafting for itself: every draft is accepted, greedy and at temperature 1 alike.
    let report = run(&[
        "bench",
        "speculative",
        "--target",
        "smollm2-135m-instruct",
        "--drafter",
        "smollm2-135m-instruct",
        "--method",
        "vanilla",
        "--draft-len",
        "3",
        "--prompts",
        prompts.to_str().unwrap(),
        "--count",
        "2",
        "--max-new-tokens",
        "12",
        "--temperatures",
        "0,1",
        "--rounds",
        "2",
        "--json",
    ]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        2 * 2 * 2 * 2,
        "AR and speculative per prompt, temperature and round"
    );
    // The order rotates: AR first in round 0, speculation first in round 1, for every request.
    let firsts: Vec<(&serde_json::Value, &serde_json::Value)> = rows
        .chunks(2)
        .map(|pair| (&pair[0]["round"], &pair[0]["decoding"]))
        .collect();
    for (round, decoding) in firsts {
        let want = if round == 0 { "ar" } else { "off" };
        assert_eq!(decoding, want, "round {round}");
    }
    let summary = report["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 2, "{summary:?}");
    for s in summary {
        assert_eq!(s["prompts"], 2);
        assert!(s["tau"].as_f64().unwrap() >= 3.0, "{s}");
        let ratio = s["speedup_vs_ar"].as_f64().unwrap();
        assert!(ratio.is_finite() && ratio > 0.0, "{s}");
        let rounds: Vec<f64> = s["round_speedups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(
            rounds[1] <= rounds[0] && rounds[0] <= rounds[2],
            "median within its range: {s}"
        );
    }
    assert_eq!(summary[0]["temperature"], 0.0);
    assert_eq!(summary[0]["identical_to_ar"], 2);
    assert!(summary[1]["identical_to_ar"].is_null());
}

#[test]
fn bench_speculative_refuses_hf_comparison_for_drafters_hf_cannot_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args([
            "bench",
            "speculative",
            "--target",
            "smollm2-135m-instruct",
            "--drafter",
            "smollm2-135m-pard",
            "--method",
            "pard",
            "--prompts",
            "prompts.jsonl",
            "--hf-python",
            "python3",
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--kind vanilla"), "{err}");
}

/// A stand-in for a Python with the xllamacpp wheel: it answers `llama_decode.py`'s rows for one
/// prompt (40 tokens in 2 s alone, in 1 s drafting, half its drafts accepted), whatever it is asked.
fn fake_llama_python(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("fake-python");
    std::fs::write(
        &path,
        r#"#!/bin/sh
case "$*" in
  *--draft*) echo '[{"context": 9, "prefill_tokens_per_s": 50.0, "decode_tokens_per_s": 40.0, "tokens": 40, "seconds": 1.0, "text": "same", "draft_n": 60, "draft_n_accepted": 30}]' ;;
  *) echo '[{"context": 9, "prefill_tokens_per_s": 50.0, "decode_tokens_per_s": 20.0, "tokens": 40, "seconds": 2.0, "text": "same", "draft_n": 0, "draft_n_accepted": 0}]' ;;
esac
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn bench_speculative_sets_llama_cpps_ar_and_drafting_beside_the_workbench_on_the_same_prompts() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompt_file(dir.path(), &["Name three fruits."]);
    let python = fake_llama_python(dir.path());
    let report = run(&[
        "bench",
        "speculative",
        "--target",
        "smollm2-135m-instruct",
        "--drafter",
        "smollm2-135m-instruct",
        "--kind",
        "vanilla",
        "--draft-len",
        "3",
        "--prompts",
        prompts.to_str().unwrap(),
        "--count",
        "1",
        "--max-new-tokens",
        "12",
        "--rounds",
        "1",
        "--llama-python",
        python.to_str().unwrap(),
        "--json",
    ]);
    let rows = report["rows"].as_array().unwrap();
    let llama: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["engine"] == "llama.cpp").collect();
    assert_eq!(llama.len(), 2, "llama.cpp alone and drafting: {rows:?}");
    assert_eq!(llama[1]["identical_to_ar"], true);
    let summary = report["summary"].as_array().unwrap();
    let ours = summary.iter().find(|s| s["engine"] == "workbench").unwrap();
    let ours_rate = ours["tokens_per_s"].as_f64().unwrap();
    let vs_llama = ours["vs_llama_ar"].as_f64().unwrap();
    assert!(
        (vs_llama - ours_rate / 20.0).abs() < 1e-9 * ours_rate,
        "ours over llama.cpp's 40 tokens in 2 s: {ours}"
    );
    let theirs = summary.iter().find(|s| s["engine"] == "llama.cpp").unwrap();
    assert_eq!(theirs["decoding"], "draft");
    assert!(
        (theirs["speedup_vs_ar"].as_f64().unwrap() - 2.0).abs() < 1e-9,
        "{theirs}"
    );
}

#[test]
fn bench_speculative_refuses_llama_comparison_without_a_greedy_request_or_a_small_lm_drafter() {
    let refusal = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "speculative",
            "--target",
            "smollm2-135m-instruct",
            "--llama-python",
            "python3",
        ];
        args.extend_from_slice(extra);
        let out = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
            .args(&args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = refusal(&[
        "--drafter",
        "smollm2-135m-pard",
        "--kind",
        "pard",
        "--prompts",
        "prompts.jsonl",
    ]);
    assert!(
        err.contains("--llama-python") && err.contains("--kind vanilla"),
        "{err}"
    );
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompt_file(dir.path(), &["Name three fruits."]);
    let err = refusal(&[
        "--drafter",
        "smollm2-135m-instruct",
        "--kind",
        "vanilla",
        "--prompts",
        prompts.to_str().unwrap(),
        "--count",
        "1",
        "--max-new-tokens",
        "4",
        "--rounds",
        "1",
        "--temperatures",
        "1",
    ]);
    assert!(err.contains("--temperatures needs a 0"), "{err}");
}

/// The command line allocates through mimalloc, libtorch's tensors included: glibc's malloc searched
/// a fragmented heap for a fifth of a decoding cycle (crates/cli/src/allocator.rs).
#[cfg(feature = "mimalloc")]
#[test]
fn libtorch_tensors_in_the_command_line_come_from_mimalloc() {
    if !fetched() {
        return;
    }
    let report = bench_rows("1", "16", &[]);
    let allocator = &report["allocator"];
    assert!(
        allocator["name"].as_str().unwrap().starts_with("mimalloc "),
        "{allocator}"
    );
    assert_eq!(allocator["libtorch_tensors"], true, "{allocator}");
}
