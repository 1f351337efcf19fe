//! Experiment YAML: strict keys with file, key and line in every error, blocks from files, the grid and
//! its shards. No model is needed.

use sharpdraft_lab::experiment::config::MethodEntry;
use sharpdraft_lab::experiment::{Experiment, Shard};
use sharpdraft_report::grid::{arms, units};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const VALID: &str = "name: t
target: smollm2-135m-instruct
drafters:
  - {name: d, spec: {method: dflash, checkpoint: some-dflash}}
methods:
  - {name: ar, target_only: true}
  - {name: unmodified}
  - {name: lora, adapt: {mode: lora, every: 4}}
workloads:
  - name: w
    setting: long_prompt
    prompts: {jsonl: {path: p.jsonl, field: q}}
    count: 2
    max_new_tokens: 8
    contexts: [0, 512]
    filler: {path: f.txt}
";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn error(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "exp.yaml", text);
    format!("{:#}", Experiment::load(&path).unwrap_err())
}

#[test]
fn a_valid_experiment_expands_to_units_of_every_arm_with_the_target_alone_first() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = Experiment::load(&write(dir.path(), "exp.yaml", VALID)).unwrap();
    let grid = units(&experiment.outline());
    let ids: Vec<String> = grid.iter().map(|u| u.id()).collect();
    assert_eq!(ids, ["w.c0.s0.r0", "w.c512.s0.r0"]);
    let labels: Vec<String> = arms(&experiment.outline())
        .iter()
        .map(|a| a.label())
        .collect();
    assert_eq!(labels, ["target / ar", "d / unmodified", "d / lora"]);
    // Relative paths resolve against the experiment's folder.
    let prompts = serde_json::to_string(&experiment.workloads[0].prompts).unwrap();
    assert!(
        prompts.contains(&dir.path().join("p.jsonl").display().to_string()),
        "{prompts}"
    );
}

#[test]
fn a_drafter_that_names_its_methods_runs_only_those_and_needs_no_schedule_for_the_others() {
    let dir = tempfile::tempdir().unwrap();
    // Drafter e names no schedule: the fixed-scaling method would be refused for it, had it to run it.
    let text = VALID
        .replace(
            "  - {name: d, spec: {method: dflash, checkpoint: some-dflash}}",
            "  - {name: d, spec: {method: dflash, checkpoint: some-dflash}, schedule: d-schedule}\n  - {name: e, spec: {method: vanilla, checkpoint: some-llm}, methods: [lora, unmodified]}",
        )
        .replace(
            "  - {name: unmodified}",
            "  - {name: unmodified}\n  - {name: fixed, scaling: {mode: fixed}}",
        );
    let experiment = Experiment::load(&write(dir.path(), "exp.yaml", &text)).unwrap();
    let labels: Vec<String> = arms(&experiment.outline())
        .iter()
        .map(|a| a.label())
        .collect();
    assert_eq!(
        labels,
        [
            "target / ar",
            "d / unmodified",
            "d / fixed",
            "d / lora",
            "e / unmodified",
            "e / lora"
        ]
    );
}

#[test]
fn a_drafter_may_name_only_drafting_methods_of_the_experiment() {
    let drafter = "  - {name: d, spec: {method: dflash, checkpoint: some-dflash}}";
    for (methods, expected) in [
        (
            "[lora, window]",
            "methods names \"window\", which is not a drafting method",
        ),
        (
            "[ar]",
            "methods names \"ar\", which is not a drafting method",
        ),
        ("[]", "drafter \"d\": methods is empty"),
        (
            "[lora, lora]",
            "drafter \"d\": methods lists \"lora\" twice",
        ),
    ] {
        let edited = format!(
            "  - {{name: d, spec: {{method: dflash, checkpoint: some-dflash}}, methods: {methods}}}"
        );
        let err = error(&VALID.replace(drafter, &edited));
        assert!(err.contains(expected), "{methods}: {err}");
        assert!(err.contains("exp.yaml"), "{err}");
    }
}

#[test]
fn shards_cover_the_grid_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = Experiment::load(&write(dir.path(), "exp.yaml", VALID)).unwrap();
    let grid = units(&experiment.outline());
    for count in 1..=4 {
        let mut seen = Vec::new();
        for index in 0..count {
            let shard = Shard { index, count };
            seen.extend((0..grid.len()).filter(|&i| shard.holds(i)));
        }
        seen.sort();
        assert_eq!(seen, (0..grid.len()).collect::<Vec<_>>(), "{count} shards");
    }
    assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
    for bad in ["4/4", "1", "a/2", "0/0"] {
        let err = format!("{:#}", Shard::parse(bad).unwrap_err());
        assert!(err.contains(bad), "{err}");
    }
}

#[test]
fn an_unknown_key_is_named_with_its_file_path_and_line() {
    let err = error(&VALID.replace("{name: unmodified}", "{name: unmodified, windw: 4}"));
    assert!(err.contains("exp.yaml"), "{err}");
    assert!(err.contains("methods[1]"), "{err}");
    assert!(err.contains("windw") && err.contains("line 7"), "{err}");
    // A method written as a block: the key's own line, not the method's first.
    let err = error(&VALID.replace(
        "{name: unmodified}",
        "name: unmodified\n    scaling: {mode: logn}\n    windw: 4",
    ));
    assert!(
        err.contains("methods[1].windw") && err.contains("line 9"),
        "{err}"
    );
    assert!(
        err.contains("`window`") && err.contains("`beta_sweep`"),
        "the error lists the drafting options and the method's own keys: {err}"
    );
}

#[test]
fn method_beside_kind_is_named_as_the_old_spelling_of_kind() {
    let err = error(&VALID.replace(
        "spec: {method: dflash, checkpoint: some-dflash}",
        "spec: {kind: dflash, method: dflash, checkpoint: some-dflash}",
    ));
    assert!(
        err.contains("`method` is the old spelling of `kind`"),
        "{err}"
    );
}

#[test]
fn a_wrong_value_deep_in_a_block_is_named_with_its_key_path() {
    let err = error(&VALID.replace("mode: lora", "mode: lorra"));
    assert!(err.contains("methods[2].adapt.mode"), "{err}");
    assert!(err.contains("line 8"), "{err}");
}

#[test]
fn a_method_sets_any_drafting_option_over_the_drafters_own_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID
        .replace(
            "spec: {method: dflash, checkpoint: some-dflash}",
            "spec: {method: vanilla, checkpoint: some-lm, stop_below: 0.4, window: 64}",
        )
        .replace(
            "{name: unmodified}",
            "{name: unmodified}\n  - {name: long-chains, draft_len: 8}",
        );
    let experiment = Experiment::load(&write(dir.path(), "exp.yaml", &text)).unwrap();
    let drafter = &experiment.drafters[0];
    let method = |name: &str| experiment.methods.iter().find(|m| m.name == name).unwrap();
    let plain = experiment.spec(drafter, method("unmodified")).unwrap();
    assert_eq!(
        plain, drafter.spec,
        "a method that sets nothing runs the drafter as specified"
    );
    let long = experiment.spec(drafter, method("long-chains")).unwrap();
    assert_eq!(long.draft_len, 8);
    assert_eq!(
        (long.stop_below, long.window, &long.checkpoint),
        (Some(0.4), Some(64), &drafter.spec.checkpoint),
        "what the method does not set stays the drafter's"
    );
    let lora = experiment.spec(drafter, method("lora")).unwrap();
    assert_eq!(lora.adapt.as_ref().map(|a| a.every), Some(4));
    assert_eq!(lora.draft_len, drafter.spec.draft_len);
}

#[test]
fn a_run_folders_record_of_its_methods_reads_back_as_written_and_as_older_versions_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = Experiment::load(&write(dir.path(), "exp.yaml", VALID)).unwrap();
    let record = serde_json::to_string(&experiment.methods).unwrap();
    let read: Vec<MethodEntry> = serde_json::from_str(&record).unwrap();
    assert_eq!(read, experiment.methods);
    // `experiment.json` as written before a method's options were a drafter specification's patch.
    let older = r#"{"name": "lora", "target_only": false, "scaling": null, "window": null,
        "retrieval": null, "adapt": {"mode": "lora", "every": 4}}"#;
    let read: MethodEntry = serde_json::from_str(older).unwrap();
    assert_eq!(&read, &experiment.methods[2]);
    // The header's fields stand in place in the record, as they did before they were one struct.
    let record = serde_json::to_value(&experiment).unwrap();
    for key in [
        "file",
        "name",
        "target",
        "device",
        "dtype",
        "temperature",
        "seeds",
        "repeats",
    ] {
        assert!(record.get(key).is_some(), "{key} in {record}");
    }
    let read: Experiment = serde_json::from_value(record).unwrap();
    assert_eq!(
        (&read.header, &read.methods, &read.workloads),
        (
            &experiment.header,
            &experiment.methods,
            &experiment.workloads
        )
    );
}

#[test]
fn a_method_may_not_change_what_the_drafter_is() {
    for key in ["kind: pard", "method: pard", "checkpoint: other"] {
        let err = error(&VALID.replace(
            "{name: unmodified}",
            &format!("{{name: unmodified, {key}}}"),
        ));
        let field = key.split(':').next().unwrap();
        assert!(
            err.contains("methods[1]") && err.contains(field) && err.contains("line 7"),
            "{key}: {err}"
        );
    }
}

#[test]
fn a_method_without_a_name_is_refused_naming_the_key() {
    let err = error(&VALID.replace("{name: unmodified}", "{window: 4}"));
    assert!(err.contains("methods[1]") && err.contains("name"), "{err}");
}

#[test]
fn a_chain_length_a_drafter_would_ignore_is_refused_naming_the_drafter_and_the_method() {
    // DFlash drafts its block size - 1 whatever the chain length: even the default, set by a method,
    // is refused rather than read and ignored.
    for length in ["8", "4"] {
        let err = error(&VALID.replace(
            "{name: unmodified}",
            &format!("{{name: unmodified}}\n  - {{name: chains, draft_len: {length}}}"),
        ));
        assert!(
            err.contains("drafter \"d\" with method \"chains\"")
                && err.contains("draft_len")
                && err.contains("DFlash"),
            "draft_len {length}: {err}"
        );
    }
    let err = error(&VALID.replace(
        "spec: {method: dflash, checkpoint: some-dflash}",
        "spec: {method: dflash, checkpoint: some-dflash, draft_len: 8}",
    ));
    assert!(err.contains("draft_len (--draft-len) 8") && err.contains("DFlash"), "{err}");
}

#[test]
fn a_sweeps_betas_are_one_method_each_named_in_a_few_characters() {
    let sweep = |betas: &str| {
        VALID.replace(
            "{name: unmodified}",
            &format!("{{name: unmodified}}\n  - {{name: sweep, beta_sweep: [{betas}]}}"),
        )
    };
    let err = error(&sweep("0, -0.0"));
    assert!(
        err.contains("method \"sweep\"") && err.contains("beta 0 twice"),
        "-0.0 is the slope 0, not a second method: {err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let experiment =
        Experiment::load(&write(dir.path(), "exp.yaml", &sweep("-0.0, 0.3, 1e-300"))).unwrap();
    let names: Vec<&str> = experiment
        .methods
        .iter()
        .map(|m| m.name.as_str())
        .filter(|n| n.starts_with("sweep"))
        .collect();
    assert_eq!(names, ["sweep-0", "sweep-0.3", "sweep-1e-300"]);
}

#[test]
fn a_target_only_method_takes_no_drafting_option() {
    let err = error(&VALID.replace(
        "{name: ar, target_only: true}",
        "{name: ar, target_only: true, draft_len: 2}",
    ));
    assert!(
        err.contains("\"ar\"") && err.contains("target_only"),
        "{err}"
    );
}

#[test]
fn a_block_read_from_a_file_reports_errors_in_that_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "configs/drafters/d.yaml",
        "name: d\nspec: {method: dflash, checkpoint: x}\ntrian: ../train/x.yaml\n",
    );
    let path = write(
        dir.path(),
        "experiments/exp.yaml",
        &VALID.replace(
            "  - {name: d, spec: {method: dflash, checkpoint: some-dflash}}",
            "  - ../configs/drafters/d.yaml",
        ),
    );
    let err = format!("{:#}", Experiment::load(&path).unwrap_err());
    assert!(
        err.contains("d.yaml") && err.contains("trian") && err.contains("line 3"),
        "{err}"
    );
    let missing = VALID.replace(
        "  - {name: d, spec: {method: dflash, checkpoint: some-dflash}}",
        "  - ../configs/drafters/missing.yaml",
    );
    let err = format!(
        "{:#}",
        Experiment::load(&write(dir.path(), "experiments/m.yaml", &missing)).unwrap_err()
    );
    assert!(
        err.contains("m.yaml") && err.contains("missing.yaml"),
        "{err}"
    );
}

#[test]
fn grid_errors_name_the_workload_method_or_drafter() {
    for (edit, expected) in [
        (("count: 2", "count: 0"), "workload \"w\": count 0"),
        (
            (
                "contexts: [0, 512]\n    filler: {path: f.txt}",
                "contexts: [0, 512]",
            ),
            "filler",
        ),
        (
            (
                "{name: ar, target_only: true}",
                "{name: ar, target_only: true, window: 8}",
            ),
            "method \"ar\" is target_only",
        ),
        (
            ("{name: unmodified}", "{name: lora}"),
            "two methods are named \"lora\"",
        ),
        (
            ("{name: unmodified}", "{name: unmodified, window: 0}"),
            "drafter \"d\" with method \"unmodified\"",
        ),
        (
            (
                "{name: unmodified}",
                "{name: unmodified, scaling: {mode: fixed}}",
            ),
            "names none",
        ),
        (
            ("setting: long_prompt", "setting: long_generation"),
            "starts from the prompt alone",
        ),
        (
            ("contexts: [0, 512]", "contexts: [512, 512]"),
            "lists 512 twice",
        ),
        (
            ("name: t\n", "name: t\nseeds: [3, 3]\n"),
            "seeds lists 3 twice",
        ),
        (
            ("name: t\n", "name: t\nseeds: [9223372036854775808]\n"),
            "seed 9223372036854775808 is above",
        ),
        (("name: w\n", "name: \"w x\"\n"), "workload name \"w x\""),
        (("name: t\n", "name: ../t\n"), "experiment name \"../t\""),
        (
            (
                "{name: unmodified}",
                "{name: unmodified, scaling: {mode: fixed, beta: .nan}}",
            ),
            "scaling.beta = NaN",
        ),
        (
            (
                "{name: unmodified}",
                "{name: unmodified, scaling: {mode: fixed, beta: -1}}",
            ),
            "scaling.beta = -1",
        ),
        (
            (
                "{name: unmodified}",
                "{name: unmodified, scaling: {mode: logn, n0: 0}}",
            ),
            "scaling.n0 = 0",
        ),
        (
            ("count: 2", "count: 2\n    skip: 18446744073709551615"),
            "prompt indices must stay below",
        ),
        (
            // Refused on loading, whatever the source (a diary builds prompt 10^12 as fast as its first).
            ("count: 2", "count: 2\n    skip: 1000000000000"),
            ": skip 1000000000000 with count 2: prompt indices must stay below 4294967296",
        ),
    ] {
        let err = error(&VALID.replace(edit.0, edit.1));
        assert!(err.contains(expected), "{edit:?}: {err}");
        assert!(err.contains("exp.yaml"), "{err}");
    }
}

#[test]
fn every_shipped_experiment_loads() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let experiment = Experiment::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
            assert!(!units(&experiment.outline()).is_empty());
            assert!(!arms(&experiment.outline()).is_empty());
            names.insert(experiment.header.name);
        }
    }
    assert!(names.contains("quickstart"), "{names:?}");
}

#[test]
fn the_config_hash_follows_the_content_not_the_checkout_path() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let block = "name: d\nspec: {method: dflash, checkpoint: x}\n";
    let text = VALID.replace(
        "  - {name: d, spec: {method: dflash, checkpoint: some-dflash}}",
        "  - ../configs/drafters/d.yaml",
    );
    for dir in [a.path(), b.path()] {
        write(dir, "configs/drafters/d.yaml", block);
        write(dir, "experiments/exp.yaml", &text);
    }
    let load = |dir: &Path| {
        Experiment::load(&dir.join("experiments/exp.yaml"))
            .unwrap()
            .hash()
            .to_string()
    };
    assert_eq!(
        load(a.path()),
        load(b.path()),
        "the same experiment in another folder"
    );
    write(
        b.path(),
        "configs/drafters/d.yaml",
        &block.replace("x}", "y}"),
    );
    assert_ne!(load(a.path()), load(b.path()), "a block file edited");
}

/// An experiment with a placeholder for every numeric key a user can write, and a valid value for
/// each.
const NUMERIC: &str = "name: t
target: smollm2-135m-instruct
temperature: {temperature}
seeds: [{seed}]
repeats: {repeats}
bins_n0: [{bin}]
timing: {retries: {retries}, max_wait_seconds: {max_wait_seconds}}
drafters:
  - {name: d, spec: {method: vanilla, checkpoint: c, draft_len: {draft_len}, stop_below: {stop_below}}}
methods:
  - {name: ar, target_only: true}
  - {name: s, scaling: {mode: fixed, beta: {beta}, n0: {n0}}}
  - {name: g, scaling: {mode: logn, n0: {logn_n0}}}
  - {name: win, window: {window}}
  - {name: l, adapt: {mode: lora, every: {every}, rank: {rank}, lr: {lr}, steps: {steps}, buffer: {buffer}, top_k: {top_k}, clip: {clip}, alpha: {alpha}}}
  - {name: r, retrieval: {chunk: {chunk}, top_chunks: {top_chunks}, recent: {recent}, every: {retrieval_every}}}
workloads:
  - {name: w, setting: long_prompt, prompts: {jsonl: {path: p.jsonl, field: q}}, skip: {skip}, count: {count}, max_new_tokens: {max_new_tokens}, contexts: [{context}], filler: {path: f.txt}, filler_offset: {filler_offset}}
  - {name: diary, setting: long_generation, prompts: {diary: {seed: {diary_seed}, weeks: {weeks}}}, count: 1, max_new_tokens: 8}
";

const VALID_VALUES: &[(&str, &str)] = &[
    ("temperature", "0"),
    ("seed", "0"),
    ("repeats", "1"),
    ("bin", "1"),
    ("retries", "3"),
    ("max_wait_seconds", "120"),
    ("draft_len", "3"),
    ("stop_below", "0.5"),
    ("beta", "0.2"),
    ("n0", "256"),
    ("logn_n0", "256"),
    ("window", "64"),
    ("every", "8"),
    ("rank", "4"),
    ("lr", "0.001"),
    ("steps", "1"),
    ("buffer", "16"),
    ("top_k", "8"),
    ("clip", "1.0"),
    ("alpha", "8"),
    ("chunk", "32"),
    ("top_chunks", "4"),
    ("recent", "64"),
    ("retrieval_every", "8"),
    ("skip", "0"),
    ("count", "2"),
    ("max_new_tokens", "8"),
    ("context", "512"),
    ("filler_offset", "0"),
    ("diary_seed", "3"),
    ("weeks", "4"),
];

/// The values at and around every bound a numeric key has: 0, 1, the 32- and 64-bit edges, the
/// largest unsigned value and beyond it, negatives, NaN and infinity.
const HOSTILE: &[&str] = &[
    "0",
    "1",
    "-1",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    ".nan",
    ".inf",
    "-.inf",
    "1e308",
];

#[test]
fn every_numeric_key_at_every_bound_loads_or_is_refused_by_name_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let fill = |key: &str, value: &str| {
        let mut text = NUMERIC.to_string();
        for (k, v) in VALID_VALUES {
            text = text.replace(&format!("{{{k}}}"), if *k == key { value } else { v });
        }
        text
    };
    let valid = write(dir.path(), "valid.yaml", &fill("", ""));
    let experiment = Experiment::load(&valid).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(units(&experiment.outline()).len(), 2);
    for (key, _) in VALID_VALUES {
        for value in HOSTILE {
            let path = write(dir.path(), "exp.yaml", &fill(key, value));
            let outcome = std::panic::catch_unwind(|| {
                let experiment = Experiment::load(&path).map_err(|e| e.to_string())?;
                let outline = experiment.outline();
                sharpdraft_report::grid::unit_count(&outline)
                    .map(|n| (n, units(&outline).len()))
                    .map_err(|e| e.to_string())
            });
            match outcome {
                Err(_) => panic!("{key}: {value} panicked"),
                Ok(Ok((count, built))) => assert_eq!(count, built, "{key}: {value}"),
                Ok(Err(text)) => assert!(text.contains("exp.yaml"), "{key}: {value}: {text}"),
            }
        }
    }
}

#[test]
fn a_drafter_or_schedule_changed_after_the_run_sealed_them_is_refused_naming_the_file() {
    use sharpdraft_lab::experiment::requests::SealedInputs;
    let dir = tempfile::tempdir().unwrap();
    let drafter = dir.path().join("drafter");
    write(&drafter, "model.safetensors", "weights, version one");
    write(&drafter, "config.json", "{}");
    let schedule = write(dir.path(), "schedule.yaml", "n0: 256\nbeta: 0.3\n");
    let yaml = VALID
        .replace(
            "checkpoint: some-dflash}",
            &format!(
                "checkpoint: {}}}, schedule: schedule.yaml",
                drafter.display()
            ),
        )
        .replace(
            "  - {name: lora, adapt: {mode: lora, every: 4}}\n",
            "  - {name: scaled, scaling: {mode: fixed}}\n",
        );
    let path = write(dir.path(), "exp.yaml", &yaml);
    let experiment = Experiment::load(&path).unwrap();
    let sealed = SealedInputs::seal(&experiment).unwrap();
    sealed.verify().unwrap();

    // The same size and modification time, other content: still seen.
    let weights = drafter.join("model.safetensors");
    let modified = std::fs::metadata(&weights).unwrap().modified().unwrap();
    std::fs::write(&weights, "weights, version two").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&weights)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let err = format!("{:#}", sealed.verify().unwrap_err());
    assert!(
        err.contains("model.safetensors") && err.contains("changed since the run started"),
        "{err}"
    );
    std::fs::write(&weights, "weights, version one").unwrap();
    sealed.verify().unwrap();

    std::fs::write(&schedule, "n0: 256\nbeta: 0.4\n").unwrap();
    let err = format!("{:#}", sealed.verify().unwrap_err());
    assert!(err.contains("schedule.yaml"), "{err}");
    std::fs::remove_file(&schedule).unwrap();
    let err = format!("{:#}", sealed.verify().unwrap_err());
    assert!(
        err.contains("schedule.yaml") && err.contains("gone or unreadable"),
        "{err}"
    );
}

#[test]
fn each_drafting_arm_is_bound_to_its_own_schedule_so_two_swapped_change_the_runs_digest() {
    use sharpdraft_lab::experiment::requests::{inputs_digest, SealedInputs};
    let dir = tempfile::tempdir().unwrap();
    let drafter = dir.path().join("drafter");
    write(&drafter, "model.safetensors", "weights");
    write(&drafter, "config.json", "{}");
    let target = dir.path().join("target");
    write(&target, "config.json", "{}");
    let first = write(dir.path(), "first.yaml", "n0: 256\nbeta: 0.3\n");
    let second = write(dir.path(), "second.yaml", "n0: 256\nbeta: 0.5\n");
    let yaml = VALID
        .replace(
            "checkpoint: some-dflash}",
            &format!("checkpoint: {}}}", drafter.display()),
        )
        .replace(
            "  - {name: lora, adapt: {mode: lora, every: 4}}\n",
            &format!(
                "  - {{name: a, scaling: {{mode: fixed, schedule: {}}}}}\n  - {{name: b, scaling: {{mode: fixed, schedule: {}}}}}\n",
                first.display(),
                second.display()
            ),
        );
    let path = write(dir.path(), "exp.yaml", &yaml);
    let digest = || {
        let experiment = Experiment::load(&path).unwrap();
        let sealed = SealedInputs::seal(&experiment).unwrap();
        inputs_digest(&experiment, &target, &Default::default(), &sealed).unwrap()
    };
    let before = digest();
    assert_eq!(digest(), before, "the same inputs, the same digest");
    // The two schedules' contents swapped: the same set of contents, each arm reading the other's.
    std::fs::write(&first, "n0: 256\nbeta: 0.5\n").unwrap();
    std::fs::write(&second, "n0: 256\nbeta: 0.3\n").unwrap();
    assert_ne!(digest(), before);
}

#[test]
fn units_measured_under_two_kernel_forms_or_thread_counts_are_not_pooled() {
    use sharpdraft_report::records::{ensure_one_timing_setting, Provenance};
    let unit = |kernel: &str, threads: usize| Provenance {
        config_hash: "h".into(),
        git_revision: "r".into(),
        machine: "m".into(),
        device: "cpu".into(),
        dtype: "f32".into(),
        sharpdraft_version: "0".into(),
        started_unix: 0,
        kernel: kernel.into(),
        threads,
    };
    let named = |units: &[Provenance]| -> Vec<(String, Provenance)> {
        units
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("unit {i}"), p.clone()))
            .collect()
    };
    let check = |units: &[Provenance]| {
        let units = named(units);
        ensure_one_timing_setting(units.iter().map(|(n, p)| (n.clone(), p)))
            .map_err(|e| e.to_string())
    };
    check(&[unit("avx2", 2), unit("avx2", 2)]).unwrap();
    // Units written before the setting was recorded pool with any.
    check(&[unit("", 0), unit("avx2", 2), unit("", 0)]).unwrap();
    let err = check(&[unit("avx2", 2), unit("libtorch", 2)]).unwrap_err();
    assert!(
        err.contains("unit 0")
            && err.contains("avx2")
            && err.contains("unit 1")
            && err.contains("libtorch"),
        "{err}"
    );
    let err = check(&[unit("avx2", 2), unit("avx2", 1)]).unwrap_err();
    assert!(
        err.contains("2 threads") && err.contains("1 threads"),
        "{err}"
    );
}

#[test]
fn a_generated_workload_builds_only_the_prompts_it_runs_whatever_it_skips() {
    use sharpdraft_lab::experiment::prompts::{diary_prompt, PromptSource};
    let source = PromptSource::Diary { seed: 1, weeks: 2 };
    let skip = 1usize << 50;
    let prompts = source.load(skip, 2).unwrap();
    assert_eq!(
        prompts,
        [
            diary_prompt(1 + (1 << 50), 2),
            diary_prompt(2 + (1 << 50), 2)
        ]
    );
}

#[test]
fn a_filler_too_large_to_tokenize_is_refused_before_it_is_read() {
    use sharpdraft_lab::experiment::prompts::{filler_text, MAX_FILLER_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("books.txt");
    // Sparse: the size is there, the bytes are never written.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(MAX_FILLER_BYTES + 1)
        .unwrap();
    let err = format!("{:#}", filler_text(&big).unwrap_err());
    assert!(
        err.contains("books.txt") && err.contains(&MAX_FILLER_BYTES.to_string()),
        "{err}"
    );
    let folder = dir.path().join("library");
    std::fs::create_dir(&folder).unwrap();
    for name in ["a.txt", "b.txt"] {
        std::fs::File::create(folder.join(name))
            .unwrap()
            .set_len(MAX_FILLER_BYTES / 2 + 1)
            .unwrap();
    }
    let err = format!("{:#}", filler_text(&folder).unwrap_err());
    assert!(err.contains("library"), "{err}");
    std::fs::write(dir.path().join("small.txt"), "A short text.").unwrap();
    assert_eq!(
        filler_text(&dir.path().join("small.txt")).unwrap(),
        "A short text."
    );
}

#[test]
fn includes_that_fan_out_past_the_bound_are_refused_naming_the_file() {
    use sharpdraft_data::datasets::{expand_includes, Source, MAX_INCLUDED_SOURCES};
    let dir = tempfile::tempdir().unwrap();
    // Three levels of 30 includes each: 27,930 entries from four small files.
    write(dir.path(), "f3.yaml", "[]\n");
    for level in 0..3 {
        let next = format!("- include: f{}.yaml\n", level + 1);
        write(dir.path(), &format!("f{level}.yaml"), &next.repeat(30));
    }
    let config = dir.path().join("train.yaml");
    let err = format!(
        "{:#}",
        expand_includes(&[Source::Include("f0.yaml".into())], &config).unwrap_err()
    );
    assert!(
        err.contains(&MAX_INCLUDED_SOURCES.to_string()) && err.contains(".yaml"),
        "{err}"
    );
}

#[test]
fn a_temperature_past_the_bound_is_refused_naming_the_key() {
    let err = error(&format!("{VALID}temperature: 1000\n"));
    assert!(
        err.contains("temperature 1000 must lie in 0..=100"),
        "{err}"
    );
}

#[test]
fn an_experiment_record_edited_after_its_run_is_refused_by_its_own_digest() {
    use sharpdraft_lab::experiment::run_folder::{experiment_record, write_record};
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "exp.yaml", VALID);
    let experiment = Experiment::load(&file).unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    write_record(&run, &experiment).unwrap();
    let record = run.join("experiment.json");
    let read = experiment_record(&record).unwrap();
    assert_eq!(read.hash(), experiment.hash());
    // A method renamed by hand: its config hash still reads as the run's.
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains("\"unmodified\""));
    std::fs::write(&record, text.replace("\"unmodified\"", "\"calibrated\"")).unwrap();
    let err = format!("{:#}", experiment_record(&record).unwrap_err());
    assert!(
        err.contains("experiment.json") && err.contains("edited since the run wrote it"),
        "{err}"
    );
}
