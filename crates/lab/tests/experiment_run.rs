//! `sharpdraft run` through the lab API, end to end on the real SmolLM2 (when fetched): a grid into
//! parquet with paired timing and intervals, resuming (a killed unit at its next request), sharding and
//! merging, training a missing drafter first, long generation per context bin, the checks made before
//! the folder is claimed, and the refusals that keep one run folder to one experiment over one set of
//! inputs.

use sharpdraft_lab::experiment::merge::merge;
use sharpdraft_lab::experiment::publish::republish;
use sharpdraft_lab::experiment::{run, RunOptions, Shard};
use sharpdraft_report::partial_unit::PartialUnit;
use sharpdraft_report::records::{ArmRecord, Provenance, UnitRecord};
use sharpdraft_report::table::Table;
use sharpdraft_store::folder_lock::FolderLock;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn fetched() -> bool {
    let ok = sharpdraft_store::registry::resolve("smollm2-135m-instruct").is_ok();
    if !ok {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
    }
    ok
}

/// Prompts and a filler text in `dir`, and an experiment over them: the target alone and SmolLM2
/// drafting for itself (vanilla, chains of 3), on `workloads` (YAML list items).
fn experiment(dir: &Path, methods: &str, workloads: &str) -> PathBuf {
    std::fs::write(
        dir.join("prompts.jsonl"),
        "{\"q\": \"Name three fruits.\"}\n{\"q\": \"What is 2 + 3?\"}\n{\"q\": \"Say hello.\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("filler.txt"),
        "It was the best of times, it was the worst of times, it was the age of wisdom. "
            .repeat(40),
    )
    .unwrap();
    let path = dir.join("experiment.yaml");
    std::fs::write(
        &path,
        format!(
            "name: test\ntarget: smollm2-135m-instruct\ndrafters:\n  - {{name: self, spec: {{method: vanilla, checkpoint: smollm2-135m-instruct, draft_len: 3}}}}\n\
             methods:\n{methods}workloads:\n{workloads}"
        ),
    )
    .unwrap();
    path
}

const TWO_METHODS: &str = "  - {name: ar, target_only: true}\n  - {name: unmodified}\n";
const SHORT_PROMPTS: &str = "  - {name: short, setting: long_prompt, prompts: {jsonl: {path: prompts.jsonl, field: q}}, count: 2, max_new_tokens: 8, contexts: [0]}\n";

fn options(out: &Path) -> RunOptions {
    RunOptions {
        out: Some(out.to_path_buf()),
        ..Default::default()
    }
}

/// (drafter, method, context, prompt, generated, cycles, accepted) of every results row, as a set.
fn outcomes(dir: &Path) -> BTreeSet<(String, String, i64, i64, i64, i64, i64)> {
    let t = Table::read_parquet(&dir.join("results.parquet")).unwrap();
    (0..t.rows())
        .map(|r| {
            (
                t.strs("drafter").unwrap()[r].clone(),
                t.strs("method").unwrap()[r].clone(),
                t.i64s("context").unwrap()[r],
                t.i64s("prompt").unwrap()[r],
                t.i64s("generated").unwrap()[r],
                t.i64s("cycles").unwrap()[r],
                t.i64s("accepted").unwrap()[r],
            )
        })
        .collect()
}

#[test]
fn a_unit_of_two_arms_runs_end_to_end_into_parquet_and_a_report_with_paired_speedups() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = experiment(dir.path(), TWO_METHODS, SHORT_PROMPTS);
    let out = dir.path().join("run");
    let outcome = run(&path, &options(&out)).unwrap();
    assert_eq!(
        (outcome.ran, outcome.skipped, outcome.finished),
        (1, 0, true)
    );

    let results = Table::read_parquet(&out.join("results.parquet")).unwrap();
    assert_eq!(results.rows(), 4, "2 arms x 2 prompts");
    // The arms of a request run back to back, and the order rotates: prompt 0 target first, prompt 1
    // the drafter first.
    let (slots, prompts) = (
        results.i64s("slot").unwrap(),
        results.i64s("prompt").unwrap(),
    );
    let methods = results.strs("method").unwrap();
    let slot_of = |method: &str, prompt: i64| {
        (0..results.rows())
            .find(|&r| methods[r] == method && prompts[r] == prompt)
            .map(|r| slots[r])
            .unwrap()
    };
    assert_eq!((slot_of("ar", 0), slot_of("unmodified", 0)), (0, 1));
    assert_eq!((slot_of("ar", 1), slot_of("unmodified", 1)), (1, 0));
    for column in ["decode_speedup", "unit_other_cpu_share", "decode_seconds"] {
        assert!(
            results.f64s(column).unwrap().iter().all(|v| v.is_finite()),
            "{column}"
        );
    }
    let methods = results.strs("method").unwrap();
    let taus = results.f64s("tau").unwrap();
    let speedups = results.f64s("speedup").unwrap();
    for r in 0..results.rows() {
        assert!(speedups[r].is_finite() && speedups[r] > 0.0, "row {r}");
        if methods[r] == "unmodified" {
            assert!(
                taus[r] > 2.0,
                "a model drafting for itself is accepted: {}",
                taus[r]
            );
        } else {
            assert_eq!(taus[r], 1.0);
        }
    }
    let matches = results.i64s("matches_target").unwrap();
    assert!(
        matches.iter().all(|&m| m == 1),
        "greedy speculation reproduces the target's output: {matches:?}"
    );
    // The same, checkable from the raw rows alone: each output's digest is the target's.
    let (outputs, targets) = (
        results.strs("output_digest").unwrap(),
        results.strs("target_output_digest").unwrap(),
    );
    for r in 0..results.rows() {
        assert_eq!(outputs[r].len(), 64, "row {r}");
        assert_eq!(outputs[r], targets[r], "row {r}");
    }
    // Each drafting arm's provenance names the weights and the dtype it ran, the target's (the
    // experiment names none: `auto`, resolved for this machine); the target alone's none.
    let target_dir = sharpdraft_store::registry::resolve("smollm2-135m-instruct").unwrap();
    let resolved = sharpdraft_model::fastest_dtype(&target_dir, tch::Device::Cpu).0;
    let (digests, dtypes) = (
        results.strs("drafter_digest").unwrap(),
        results.strs("drafter_dtype").unwrap(),
    );
    for r in 0..results.rows() {
        let drafting = methods[r] == "unmodified";
        assert_eq!(digests[r].len() == 64, drafting, "row {r}: {}", digests[r]);
        assert_eq!(
            dtypes[r] == resolved.name(),
            drafting,
            "row {r}: {}",
            dtypes[r]
        );
    }
    assert!(results
        .strs("kernel")
        .unwrap()
        .iter()
        .all(|k| !k.is_empty()));
    assert!(results
        .strs("config_hash")
        .unwrap()
        .iter()
        .all(|h| h.len() == 64));
    assert!(results
        .strs("machine")
        .unwrap()
        .iter()
        .all(|m| m.contains("cores")));

    let cycles = Table::read_parquet(&out.join("cycles.parquet")).unwrap();
    let drafting_cycles: i64 = (0..results.rows())
        .map(|r| results.i64s("cycles").unwrap()[r])
        .sum();
    assert_eq!(cycles.rows() as i64, drafting_cycles);

    let summary = Table::read_parquet(&out.join("summary.parquet")).unwrap();
    assert_eq!(
        summary.rows(),
        2,
        "one row per drafter x method x workload x context"
    );
    let (median, lo, hi) = (
        summary.f64s("speedup").unwrap(),
        summary.f64s("speedup_lo").unwrap(),
        summary.f64s("speedup_hi").unwrap(),
    );
    for r in 0..summary.rows() {
        assert!(
            lo[r] <= median[r] && median[r] <= hi[r],
            "row {r}: {lo:?} {median:?} {hi:?}"
        );
    }
    // Where a cycle goes: the drafter's row holds the medians of its cycles' drafting and verifying
    // milliseconds, beside the target alone's milliseconds per token on the same requests.
    let drafter_row = (0..summary.rows())
        .find(|&r| summary.strs("method").unwrap()[r] == "unmodified")
        .unwrap();
    let cycle_median = |column: &str| {
        let ms: Vec<f64> = cycles
            .f64s(column)
            .unwrap()
            .iter()
            .map(|s| 1e3 * s)
            .collect();
        sharpdraft_report::intervals::median(&ms)
    };
    for (summary_column, cycle_column) in [
        ("draft_ms", "draft_seconds"),
        ("verify_ms", "verify_seconds"),
    ] {
        let got = summary.f64s(summary_column).unwrap()[drafter_row];
        assert!(
            (got - cycle_median(cycle_column)).abs() < 1e-9,
            "{summary_column}: {got} against the cycles' median {}",
            cycle_median(cycle_column)
        );
    }
    // The first cycle's drafting (a prompt's catch-up) stands apart: the median over the 2 requests.
    let first_draft_ms: Vec<f64> = (0..cycles.rows())
        .filter(|&r| cycles.i64s("cycle").unwrap()[r] == 0)
        .map(|r| 1e3 * cycles.f64s("draft_seconds").unwrap()[r])
        .collect();
    assert_eq!(first_draft_ms.len(), 2);
    let got = summary.f64s("first_draft_ms").unwrap()[drafter_row];
    assert!(
        (got - (first_draft_ms[0] + first_draft_ms[1]) / 2.0).abs() < 1e-9,
        "first_draft_ms: {got} against the first cycles' {first_draft_ms:?}"
    );
    let decode_ms: Vec<f64> = (0..results.rows())
        .filter(|&r| results.strs("method").unwrap()[r] == "ar")
        .map(|r| {
            1e3 * results.f64s("decode_seconds").unwrap()[r]
                / results.i64s("generated").unwrap()[r] as f64
        })
        .collect();
    let target_ms = summary.f64s("target_ms_per_token").unwrap()[drafter_row];
    assert!(
        (target_ms - (decode_ms[0] + decode_ms[1]) / 2.0).abs() < 1e-9,
        "the target alone's ms per token, median over its 2 requests: {target_ms} against {decode_ms:?}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let cycle_costs = report
        .split("## Where a cycle goes")
        .nth(1)
        .unwrap_or_else(|| panic!("no cycle costs in {report}"));
    assert!(
        cycle_costs.contains("| short | 0 | self | unmodified | "),
        "{report}"
    );
    assert!(
        report.contains("### short, drafter self") && report.contains("| 0 | unmodified | 2 (2) |"),
        "{report}"
    );
    assert!(report.contains("(reference)"), "{report}");
    assert!(report.contains("| yes |"), "{report}");
    assert!(out.join("speedup.png").is_file());
}

#[test]
fn each_method_is_compared_with_the_unmodified_drafter_request_by_request() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Two more drafting methods that do the same work as the first.
    let methods =
        "  - {name: ar, target_only: true}\n  - {name: unmodified}\n  - {name: again}\n  - {name: third}\n";
    let path = experiment(dir.path(), methods, SHORT_PROMPTS);
    let out = dir.path().join("run");
    run(&path, &options(&out)).unwrap();

    let results = Table::read_parquet(&out.join("results.parquet")).unwrap();
    let (method, prompt) = (
        results.strs("method").unwrap(),
        results.i64s("prompt").unwrap(),
    );
    let row_of = |m: &str, p: i64| {
        (0..results.rows())
            .find(|&r| method[r] == m && prompt[r] == p)
            .unwrap()
    };
    let (tokens_per_s, vs, decode_vs) = (
        results.f64s("tokens_per_s").unwrap(),
        results.f64s("vs_reference").unwrap(),
        results.f64s("decode_vs_reference").unwrap(),
    );
    let mut ratios = Vec::new();
    for p in 0..2 {
        let (again, reference) = (row_of("again", p), row_of("unmodified", p));
        let ratio = tokens_per_s[again] / tokens_per_s[reference];
        assert!(
            (vs[again] - ratio).abs() < 1e-12,
            "prompt {p}: {} against {ratio}",
            vs[again]
        );
        assert!(decode_vs[again].is_finite() && decode_vs[again] > 0.0);
        assert_eq!((vs[reference], decode_vs[reference]), (1.0, 1.0));
        assert!(
            vs[row_of("ar", p)].is_nan(),
            "the target alone has no reference"
        );
        ratios.push(ratio);
    }

    let summary = Table::read_parquet(&out.join("summary.parquet")).unwrap();
    let again = (0..summary.rows())
        .find(|&r| summary.strs("method").unwrap()[r] == "again")
        .unwrap();
    let (estimate, lo, hi) = (
        summary.f64s("vs_reference").unwrap()[again],
        summary.f64s("vs_reference_lo").unwrap()[again],
        summary.f64s("vs_reference_hi").unwrap()[again],
    );
    assert!(
        (estimate - (ratios[0] + ratios[1]) / 2.0).abs() < 1e-12,
        "the median of the per-request ratios {ratios:?}: {estimate}"
    );
    assert!(lo <= estimate && estimate <= hi, "{lo} {estimate} {hi}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("| vs unmodified, paired | decode vs unmodified |"),
        "{report}"
    );
    // Three arms of one drafter on two requests: 3 x 2 ratios of their verifying times a request, and
    // each ratio's inverse is among them, so the spread holds 1.
    let noise = report
        .split("**Timing noise.**")
        .nth(1)
        .unwrap_or_else(|| panic!("no timing noise in {report}"));
    assert!(noise.contains("of 12 ratios"), "{noise}");
    let between: Vec<f64> = noise
        .split("lies between ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next())
        .map(|range| range.split(" and ").map(|v| v.parse().unwrap()).collect())
        .unwrap_or_default();
    assert!(
        between.len() == 2 && between[0] <= 1.0 && 1.0 <= between[1],
        "{between:?} in {noise}"
    );
    let again_line = report
        .lines()
        .find(|l| l.contains("| self | again |"))
        .unwrap_or_else(|| panic!("no line of the second method in {report}"));
    // Two prompts decide nothing, whatever the interval: the verdict waits for 10.
    let faster = ratios.iter().filter(|&&r| r > 1.0).count();
    assert_eq!(
        summary.i64s("vs_reference_faster").unwrap()[again],
        faster as i64
    );
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let p = sharpdraft_report::intervals::wilcoxon_signed_rank(&logs);
    assert_eq!(
        summary.f64s("vs_reference_p").unwrap()[again].to_bits(),
        p.to_bits()
    );
    assert!(
        again_line.contains(&format!(
            "{estimate:.2} [{lo:.2}, {hi:.2}] n < 10 ({faster}/2 faster, p {p:.3}) |"
        )),
        "{again_line}"
    );
}

#[test]
fn a_finished_run_is_refused_without_resume_and_resume_reruns_only_what_is_missing() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = experiment(dir.path(), TWO_METHODS, TWO_CONTEXTS);
    let out = dir.path().join("run");
    run(&path, &options(&out)).unwrap();
    let units = out.join("units");
    let kept = units.join("short.c0.s0.r0.json");
    let kept_bytes = std::fs::read(&kept).unwrap();
    // As a run killed mid-unit leaves it: one unit missing and a half-written temporary file.
    std::fs::remove_file(units.join("short.c96.s0.r0.json")).unwrap();
    std::fs::write(units.join("short.c96.s0.r0.json.tmp"), "{\"unit\": {").unwrap();

    let again = format!("{:#}", run(&path, &options(&out)).unwrap_err());
    assert!(again.contains("--resume"), "{again}");
    let outcome = run(
        &path,
        &RunOptions {
            resume: true,
            ..options(&out)
        },
    )
    .unwrap();
    assert_eq!(
        (outcome.ran, outcome.skipped, outcome.finished),
        (1, 1, true)
    );
    assert_eq!(
        std::fs::read(&kept).unwrap(),
        kept_bytes,
        "a finished unit is kept as it was"
    );
    let results = Table::read_parquet(&out.join("results.parquet")).unwrap();
    assert_eq!(results.rows(), 4, "no duplicates");
    assert_eq!(outcomes(&out).len(), 4);
}

#[test]
fn a_unit_killed_after_its_first_request_resumes_at_its_second_and_keeps_the_first_as_measured() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = experiment(dir.path(), TWO_METHODS, SHORT_PROMPTS);
    let out = dir.path().join("run");
    run(&path, &options(&out)).unwrap();
    let units = out.join("units");
    let unit_file = units.join("short.c0.s0.r0.json");
    let whole = UnitRecord::read(&unit_file).unwrap();
    assert!(
        !units.join("partial").join("short.c0.s0.r0.json").exists(),
        "a finished unit leaves no partial record"
    );

    // As a run killed during the unit's second request leaves it: the first request of every arm in
    // the partial record, no unit file.
    let first_only = PartialUnit {
        unit: whole.unit.clone(),
        provenance: Provenance {
            git_revision: "an-earlier-revision".into(),
            ..whole.provenance.clone()
        },
        arms: whole
            .arms
            .iter()
            .map(|a| ArmRecord {
                requests: a.requests[..1].to_vec(),
                ..a.clone()
            })
            .collect(),
        machine: whole.machine.clone(),
        seconds: 1000.0,
    };
    first_only.write(&units).unwrap();
    std::fs::remove_file(&unit_file).unwrap();

    // Until it resumes, the report shows the stopped unit's finished request arm by arm, apart from
    // every median.
    republish(&out).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let section = report
        .split("## Requests of unfinished units")
        .nth(1)
        .unwrap_or_else(|| panic!("no section of unfinished requests: {report}"));
    let request_rows = section
        .lines()
        .filter(|l| l.starts_with("| short.c0.s0.r0 | "))
        .count();
    assert_eq!(request_rows, whole.arms.len(), "{section}");
    assert!(
        section.contains("| target | ar | ") && section.contains("| yes |"),
        "{section}"
    );

    let resume = RunOptions {
        resume: true,
        ..options(&out)
    };
    let outcome = run(&path, &resume).unwrap();
    assert_eq!((outcome.ran, outcome.finished), (1, true));
    let resumed = UnitRecord::read(&unit_file).unwrap();
    for (arm, before) in resumed.arms.iter().zip(&whole.arms) {
        assert_eq!(arm.requests.len(), 2, "{}", arm.arm.label());
        // The first request is the partial record's, to the nanosecond: it was not decoded again.
        assert_eq!(arm.requests[0], before.requests[0], "{}", arm.arm.label());
        // The second was decoded in this piece, to the same output.
        assert_eq!(arm.requests[1].output_ids, before.requests[1].output_ids);
        assert_eq!(
            arm.requests[1].slot, before.requests[1].slot,
            "the rotation holds"
        );
    }
    assert!(
        resumed.seconds > 1000.0,
        "the pieces' times add: {}",
        resumed.seconds
    );
    assert!(
        resumed
            .provenance
            .git_revision
            .starts_with("an-earlier-revision, then "),
        "a unit run in pieces names both revisions: {}",
        resumed.provenance.git_revision
    );
    assert!(!PartialUnit::path(&units, &whole.unit).exists());

    // One left by a run killed between writing the unit's file and removing it goes on resuming, so
    // it cannot be taken up over a later rerun of the unit.
    first_only.write(&units).unwrap();
    let outcome = run(&path, &resume).unwrap();
    assert_eq!((outcome.ran, outcome.skipped), (0, 1));
    assert!(!PartialUnit::path(&units, &whole.unit).exists());

    // A partial record of other inputs is refused, naming its file, not pooled.
    let foreign = PartialUnit {
        provenance: Provenance {
            config_hash: "0123".into(),
            ..first_only.provenance.clone()
        },
        ..first_only
    };
    foreign.write(&units).unwrap();
    std::fs::remove_file(&unit_file).unwrap();
    let refused = format!("{:#}", run(&path, &resume).unwrap_err());
    assert!(
        refused.contains("partial/short.c0.s0.r0.json") && refused.contains("move it out"),
        "{refused}"
    );
    // The report leaves it out, and is written all the same.
    republish(&out).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        !report.contains("## Requests of unfinished units"),
        "{report}"
    );
    assert!(
        PartialUnit::path(&units, &whole.unit).exists(),
        "and left where it is"
    );
}

const TWO_CONTEXTS: &str = "  - {name: short, setting: long_prompt, prompts: {jsonl: {path: prompts.jsonl, field: q}}, count: 1, max_new_tokens: 6, contexts: [0, 96], filler: {path: filler.txt}}\n";

#[test]
fn shards_merge_to_the_unsharded_result() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = experiment(dir.path(), TWO_METHODS, TWO_CONTEXTS);
    let whole = dir.path().join("whole");
    run(&path, &options(&whole)).unwrap();
    let mut shards = Vec::new();
    for index in 0..2 {
        let out = dir.path().join(format!("shard{index}"));
        let outcome = run(
            &path,
            &RunOptions {
                shard: Some(Shard { index, count: 2 }),
                ..options(&out)
            },
        )
        .unwrap();
        assert_eq!(outcome.ran, 1, "2 units over 2 shards");
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        let other = ["short.c96.s0.r0", "short.c0.s0.r0"][index];
        assert!(
            report.contains("1 of its 2 units") && report.contains(&format!("Not here: `{other}`")),
            "a shard's report says which units it lacks: {report}"
        );
        shards.push(out);
    }
    let merged = dir.path().join("merged");
    let outcome = merge(&merged, &shards).unwrap();
    assert_eq!((outcome.units, outcome.finished), (2, true));
    let report = std::fs::read_to_string(merged.join("report.md")).unwrap();
    assert!(!report.contains("A part of the grid"), "{report}");
    assert_eq!(outcomes(&merged), outcomes(&whole));
    let contexts: BTreeSet<i64> = outcomes(&merged).iter().map(|o| o.2).collect();
    assert_eq!(contexts, BTreeSet::from([0, 96]));
    // The long prompt is as long as asked.
    let record = UnitRecord::read(&merged.join("units/short.c96.s0.r0.json")).unwrap();
    let tokens = record.arms[1].requests[0].prompt_tokens;
    assert!((90..=100).contains(&tokens), "{tokens}");
}

#[test]
fn a_long_generation_reports_tau_per_context_bin_along_the_output() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workloads = "  - {name: diary, setting: long_generation, prompts: {diary: {seed: 3, weeks: 4}}, count: 1, max_new_tokens: 40, ignore_eos: true}\n";
    let path = experiment(dir.path(), "  - {name: unmodified}\n", workloads);
    let out = dir.path().join("run");
    run(&path, &options(&out)).unwrap();
    let record = UnitRecord::read(&out.join("units/diary.c0.s0.r0.json")).unwrap();
    let request = &record.arms[0].requests[0];
    assert_eq!(
        request.generated, 40,
        "end-of-sequence ignored: every request reaches its length"
    );
    let contexts: Vec<i64> = request.cycles.iter().map(|c| c.context).collect();
    assert!(
        contexts.windows(2).all(|w| w[0] < w[1]),
        "the context grows: {contexts:?}"
    );
    assert_eq!(
        contexts[0] as usize,
        request.prompt_tokens + 1,
        "the first cycle drafts after prefill's token"
    );
    let cycles = Table::read_parquet(&out.join("cycles.parquet")).unwrap();
    assert_eq!(cycles.rows(), request.cycles.len());
}

#[test]
fn a_missing_drafter_is_trained_from_its_config_before_the_grid_runs() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("corpus.txt"),
        "It was the best of times, it was the worst of times, it was the age of wisdom. ".repeat(8),
    )
    .unwrap();
    let drafter = dir.path().join("eagle");
    std::fs::write(
        dir.path().join("train.yaml"),
        format!(
            "target: smollm2-135m-instruct\nmethod: {{eagle3: {{draft_vocab: 512, ttt_steps: 2}}}}\nout: {}\nn0: 32\nwindows: 1\nsteps: 1\ndata:\n  - text_file: corpus.txt\n",
            drafter.display()
        ),
    )
    .unwrap();
    let path = experiment(dir.path(), "  - {name: unmodified}\n", SHORT_PROMPTS);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "  - {name: self, spec: {method: vanilla, checkpoint: smollm2-135m-instruct, draft_len: 3}}",
        &format!(
            "  - {{name: eagle, spec: {{method: eagle3, checkpoint: {}, draft_len: 2}}, train: train.yaml}}",
            drafter.display()
        ),
    );
    std::fs::write(&path, text).unwrap();
    assert!(!drafter.exists());
    let outcome = run(&path, &options(&dir.path().join("run"))).unwrap();
    assert_eq!(outcome.ran, 1);
    assert!(drafter.join("config.json").is_file(), "trained first");
    let record = UnitRecord::read(&dir.path().join("run/units/short.c0.s0.r0.json")).unwrap();
    let arm = &record.arms[0];
    assert_eq!(arm.n0, Some(32), "the trained drafter's n0 is recorded");
    assert!(arm.requests.iter().all(|r| r.generated == 8));
}

#[test]
fn a_request_beyond_the_targets_context_is_refused_before_anything_is_written() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workloads = "  - {name: short, setting: long_prompt, prompts: {jsonl: {path: prompts.jsonl, field: q}}, count: 1, max_new_tokens: 9000, contexts: [0]}\n";
    let path = experiment(dir.path(), TWO_METHODS, workloads);
    let out = dir.path().join("run");
    let err = format!("{:#}", run(&path, &options(&out)).unwrap_err());
    assert!(
        err.contains("workload \"short\"") && err.contains("max_new_tokens 9000"),
        "{err}"
    );
    assert!(
        !out.exists(),
        "nothing is written before the grid is checked"
    );
}

#[test]
fn a_missing_schedule_is_refused_before_the_folder_is_claimed() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let methods = "  - {name: ar, target_only: true}\n  - {name: scaled, scaling: {mode: fixed, schedule: no-such-calibration}}\n";
    let path = experiment(dir.path(), methods, SHORT_PROMPTS);
    let out = dir.path().join("run");
    let err = format!("{:#}", run(&path, &options(&out)).unwrap_err());
    assert!(
        err.contains("no-such-calibration") && err.contains("method \"scaled\""),
        "{err}"
    );
    assert!(!out.exists(), "the folder is not claimed by a broken run");
}

#[test]
fn a_folder_in_use_by_another_command_is_refused_naming_the_holder() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = experiment(dir.path(), TWO_METHODS, SHORT_PROMPTS);
    let out = dir.path().join("run");
    let holder = FolderLock::acquire(&out, "run").unwrap();
    let err = format!("{:#}", run(&path, &options(&out)).unwrap_err());
    assert!(
        err.contains("in use") && err.contains(&format!("process {}", std::process::id())),
        "{err}"
    );
    assert!(!out.exists());
    drop(holder);
    run(&path, &options(&out)).unwrap();
    let busy = FolderLock::acquire(&out, "report").unwrap();
    let err = format!(
        "{:#}",
        sharpdraft_lab::experiment::publish::republish(&out).unwrap_err()
    );
    assert!(err.contains("`sharpdraft report`"), "{err}");
    drop(busy);
}

#[test]
fn edited_inputs_or_foreign_unit_files_are_refused_instead_of_pooled() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = experiment(dir.path(), TWO_METHODS, TWO_CONTEXTS);
    let out = dir.path().join("run");
    run(
        &path,
        &RunOptions {
            shard: Some(Shard { index: 0, count: 2 }),
            ..options(&out)
        },
    )
    .unwrap();
    let recorded = |dir: &Path| {
        sharpdraft_lab::experiment::run_folder::recorded_experiment(dir)
            .unwrap()
            .hash()
            .to_string()
    };
    let first_hash = recorded(&out);

    // A prompt file edited between two parts of one run: the YAML is the same, the inputs are not.
    std::fs::write(
        dir.path().join("prompts.jsonl"),
        "{\"q\": \"Name four fruits.\"}\n{\"q\": \"What is 2 + 3?\"}\n",
    )
    .unwrap();
    let resumed = RunOptions {
        resume: true,
        shard: Some(Shard { index: 1, count: 2 }),
        ..options(&out)
    };
    let err = format!("{:#}", run(&path, &resumed).unwrap_err());
    assert!(err.contains("over other inputs"), "{err}");

    // The edited run in its own folder has another config hash; its unit file copied into the first
    // run is refused by name when the first run is reported or merged.
    let other = dir.path().join("other");
    run(&path, &options(&other)).unwrap();
    assert_ne!(recorded(&other), first_hash);
    let foreign = out.join("units/short.c96.s0.r0.json");
    std::fs::copy(other.join("units/short.c96.s0.r0.json"), &foreign).unwrap();
    let err = format!(
        "{:#}",
        sharpdraft_lab::experiment::publish::republish(&out).unwrap_err()
    );
    assert!(
        err.contains("short.c96.s0.r0.json") && err.contains("config hash"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        merge(&dir.path().join("merged"), &[out.clone()]).unwrap_err()
    );
    assert!(err.contains("short.c96.s0.r0.json"), "{err}");

    // A unit file under another unit's name is refused too.
    std::fs::remove_file(&foreign).unwrap();
    std::fs::copy(out.join("units/short.c0.s0.r0.json"), &foreign).unwrap();
    let err = format!(
        "{:#}",
        sharpdraft_lab::experiment::publish::republish(&out).unwrap_err()
    );
    assert!(err.contains("whose file is short.c0.s0.r0.json"), "{err}");
}

#[test]
fn the_literature_constants_and_a_beta_sweep_run_and_the_report_draws_tau_against_beta() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // SmolLM2 drafting for itself with a training length of 4 tokens: every rule scales its queries.
    let methods = "  - {name: ar, target_only: true}\n  - {name: unmodified}\n  - {name: sweep, scaling: {n0: 4}, beta_sweep: [0.1, 0.3, 0.6]}\n  - {name: llama4, scaling: {mode: llama4, n0: 4}}\n  - {name: yarn, scaling: {mode: yarn, n0: 4}}\n";
    let path = experiment(dir.path(), methods, SHORT_PROMPTS);
    let out = dir.path().join("run");
    run(&path, &options(&out)).unwrap();
    let summary = Table::read_parquet(&out.join("summary.parquet")).unwrap();
    let slope_of = |method: &str| {
        let r = (0..summary.rows())
            .find(|&r| summary.strs("method").unwrap()[r] == method)
            .unwrap_or_else(|| panic!("no row of {method}"));
        summary.f64s("scaling_slope").unwrap()[r]
    };
    assert_eq!(slope_of("unmodified"), 0.0);
    assert_eq!(
        (
            slope_of("sweep-0.1"),
            slope_of("sweep-0.3"),
            slope_of("sweep-0.6")
        ),
        (0.1, 0.3, 0.6),
        "one method per beta of the sweep"
    );
    assert_eq!((slope_of("llama4"), slope_of("yarn")), (0.1, 0.2));
    let results = Table::read_parquet(&out.join("results.parquet")).unwrap();
    assert!(
        results
            .i64s("matches_target")
            .unwrap()
            .iter()
            .all(|&m| m == 1),
        "every rule keeps verification lossless"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("## tau and decode speed-up against the scaling slope"),
        "{report}"
    );
    assert!(out.join("slope_sensitivity.png").is_file());
    assert!(out.join("slope_decode_speedup.png").is_file());
    // Acceptance by draft position (chains of 3) and context bin, as a table and a heat map.
    let acceptance = report
        .split("## Acceptance by draft position and context")
        .nth(1)
        .unwrap_or_else(|| panic!("no acceptance table in {report}"));
    assert!(
        acceptance.contains("| k = 1 | k = 2 | k = 3 |"),
        "{acceptance}"
    );
    assert!(out.join("acceptance_by_position.png").is_file());
    let rates = Table::read_parquet(&out.join("acceptance.parquet")).unwrap();
    let (position, reached, accepted) = (
        rates.i64s("position").unwrap(),
        rates.i64s("reached").unwrap(),
        rates.i64s("accepted").unwrap(),
    );
    assert!((0..rates.rows()).all(|r| (1..=3).contains(&position[r]) && accepted[r] <= reached[r]));
}

#[test]
fn a_test_prompt_in_a_schedules_calibration_data_is_refused_before_any_compute() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("calibrated.yaml");
    std::fs::write(
        &schedule,
        format!(
            "n0: 4\nbeta: 0.2\ncalibrated_on:\n  shingle: 32\n  stride: 16\n  prompts: ['{}']\n",
            sharpdraft_data::fingerprint::prompt_hash("What is 2 + 3?")
        ),
    )
    .unwrap();
    let methods = "  - {name: ar, target_only: true}\n  - {name: scaled, scaling: {mode: fixed, schedule: calibrated.yaml}}\n";
    let path = experiment(dir.path(), methods, SHORT_PROMPTS);
    let out = dir.path().join("run");
    let err = format!("{:#}", run(&path, &options(&out)).unwrap_err());
    assert!(
        err.contains("workload \"short\": prompt 1") && err.contains("calibrated.yaml"),
        "{err}"
    );
    assert!(!out.exists(), "refused before the folder is claimed");
}

#[test]
fn a_results_folder_of_the_tables_alone_rebuilds_the_same_summary_anywhere() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let methods = "  - {name: ar, target_only: true}\n  - {name: unmodified}\n  - {name: again}\n";
    let path = experiment(dir.path(), methods, SHORT_PROMPTS);
    let out = dir.path().join("run");
    run(&path, &options(&out)).unwrap();
    // What experiments/results/ keeps: the record and the raw tables, moved far from the run.
    let published = dir.path().join("published");
    sharpdraft_lab::experiment::publish::report_into(&out, &published).unwrap();
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    for file in ["experiment.json", "results.parquet", "cycles.parquet"] {
        std::fs::copy(published.join(file), kept.join(file)).unwrap();
    }
    let rebuilt = dir.path().join("rebuilt");
    sharpdraft_lab::experiment::publish::report_into(&kept, &rebuilt).unwrap();
    // Compared as printed: NaN (no value, as for the target alone's tau interval) equals itself there.
    let printed =
        |dir: &Path, table: &str| format!("{:?}", Table::read_parquet(&dir.join(table)).unwrap());
    for table in ["summary.parquet", "acceptance.parquet", "results.parquet"] {
        assert_eq!(printed(&rebuilt, table), printed(&out, table), "{table}");
    }
    let report = std::fs::read_to_string(rebuilt.join("report.md")).unwrap();
    assert!(report.contains("## Headline"), "{report}");
    // A folder of someone else's files is never written.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("notes.txt"), "mine").unwrap();
    let err = sharpdraft_lab::experiment::publish::report_into(&kept, &theirs)
        .unwrap_err()
        .to_string();
    assert!(err.contains("notes.txt"), "{err}");
}

#[test]
fn one_prefill_a_request_gives_every_arm_the_outputs_of_its_own_prefill() {
    if !fetched() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let methods = "  - {name: ar, target_only: true}\n  - {name: unmodified}\n  - {name: scaled, scaling: {mode: yarn, n0: 4}}\n";
    let workloads = "  - {name: long, setting: long_prompt, prompts: {jsonl: {path: prompts.jsonl, field: q}}, filler: {path: filler.txt}, count: 2, max_new_tokens: 8, contexts: [0, 200]}\n";
    let path = experiment(dir.path(), methods, workloads);
    let shared = dir.path().join("shared");
    run(&path, &options(&shared)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}timing: {{shared_prefill: false}}\n")).unwrap();
    let own = dir.path().join("own");
    run(&path, &options(&own)).unwrap();
    assert_eq!(
        outcomes(&shared),
        outcomes(&own),
        "the same tokens and cycles in every arm"
    );
    let report = std::fs::read_to_string(shared.join("report.md")).unwrap();
    assert!(
        report.contains("The target's prefill of each request is made once"),
        "{report}"
    );
    // Each arm's prefill counts the shared one's seconds: the target alone's is that alone, and a
    // drafting arm's adds its drafter's own prefill.
    let results = Table::read_parquet(&shared.join("results.parquet")).unwrap();
    let (method, context, prompt, prefill) = (
        results.strs("method").unwrap(),
        results.i64s("context").unwrap(),
        results.i64s("prompt").unwrap(),
        results.f64s("prefill_seconds").unwrap(),
    );
    for r in 0..results.rows() {
        let alone = (0..results.rows())
            .find(|&a| method[a] == "ar" && context[a] == context[r] && prompt[a] == prompt[r])
            .unwrap();
        assert!(
            prefill[r] >= prefill[alone],
            "row {r}: {} < {}",
            prefill[r],
            prefill[alone]
        );
    }
}

#[test]
fn merge_names_a_folder_given_twice_instead_of_locking_against_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (shard, out) = (dir.path().join("shard"), dir.path().join("merged"));
    std::fs::create_dir(&shard).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&shard, &link).unwrap();
    for (out, shards) in [
        (&shard, vec![shard.clone()]),
        (&out, vec![shard.clone(), shard.clone()]),
        (&out, vec![shard.clone(), link.clone()]),
    ] {
        let err = format!("{:#}", merge(out, &shards).unwrap_err());
        assert!(err.contains("are the same folder"), "{err}");
        assert!(!err.contains("in use"), "{err}");
    }
    assert!(!out.exists(), "refused before anything was written");
}
