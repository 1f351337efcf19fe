//! Bad training configs are clear errors before any compute is spent.
use sharpdraft_data::datasets::{jsonl_field, token_stream, Source, MAX_JSONL_LINE_BYTES};
use sharpdraft_draft::eagle3::train::Eagle3Options;
use sharpdraft_lab::train::{DrafterKindOptions, TrainConfig};
use sharpdraft_model::CausalLm;
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

fn tiny_target() -> CausalLm {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()
}

fn parse(yaml: &str) -> sharpdraft_lab::Result<TrainConfig> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.yaml");
    std::fs::write(&path, yaml).unwrap();
    TrainConfig::load(&path)
}

const GOOD: &str = "target: t\nmethod: {eagle3: {draft_vocab: 32}}\nout: o\nn0: 64\nwindows: 4\nsteps: 10\ndata:\n  - text_file: corpus.txt\n";

/// The eagle3 options of a parsed config.
fn eagle3(config: TrainConfig) -> Eagle3Options {
    match config.kind {
        DrafterKindOptions::Eagle3(e) => e,
        other => panic!("not eagle3: {other:?}"),
    }
}

#[test]
fn a_good_config_parses_with_one_key_maps_for_sources() {
    let config = parse(GOOD).unwrap();
    assert_eq!(config.data, vec![Source::TextFile("corpus.txt".into())]);
    assert_eq!(
        eagle3(config).ttt_steps,
        5,
        "defaults fill what is not given"
    );
}

#[test]
fn unknown_keys_are_named() {
    let err = format!(
        "{:#}",
        parse(&GOOD.replace("windows: 4", "windows: 4\nwindow: 3")).unwrap_err()
    );
    assert!(err.contains("unknown field `window`"), "{err}");
    let err = format!(
        "{:#}",
        parse(&GOOD.replace("draft_vocab: 32", "draft_vocab: 32, lr: 1")).unwrap_err()
    );
    assert!(err.contains("unknown field `lr`"), "{err}");
    let err = format!(
        "{:#}",
        parse(&GOOD.replace("text_file", "txt_file")).unwrap_err()
    );
    assert!(err.contains("txt_file"), "{err}");
}

#[test]
fn configs_that_do_not_fit_the_target_fail_validation() {
    let target = tiny_target();
    let check =
        |yaml: String| format!("{:#}", parse(&yaml).unwrap().validate(&target).unwrap_err());
    assert!(check(GOOD.replace("n0: 64", "n0: 4096")).contains("n0 = 4096 must lie in 8..=128"));
    assert!(check(GOOD.replace("draft_vocab: 32", "draft_vocab: 100"))
        .contains("eagle3.draft_vocab = 100 must lie in 2..=64"));
    assert!(
        check(GOOD.to_string()).contains("at least 4 layers"),
        "the tiny target has 2 layers"
    );
    let pard = GOOD.replace(
        "eagle3: {draft_vocab: 32}",
        "pard: {layers: 1, mask_token: 63}",
    );
    assert!(parse(&pard).unwrap().validate(&target).is_ok());
    assert!(
        check(pard.replace("layers: 1", "layers: 3")).contains("pard.layers = 3 must lie in 1..=2")
    );
    assert!(
        check(pard.replace("layers: 1", "layers: 2, from_layers: [1, 0]"))
            .contains("pard.from_layers [1, 0] must name 2 increasing layers")
    );
    assert!(check(pard.replace("mask_token: 63", "mask_token: 64"))
        .contains("pard.mask_token = 64 lies outside the target's vocabulary of 64"));
    // Options of another method cannot be written: they are unknown keys of this method's block.
    let err = format!(
        "{:#}",
        parse(&pard.replace("mask_token: 63", "mask_token: 63, draft_vocab: 32")).unwrap_err()
    );
    assert!(err.contains("unknown field `draft_vocab`"), "{err}");
    let dflash = GOOD.replace(
        "eagle3: {draft_vocab: 32}",
        "dflash: {layers: 1, block_size: 4, mask_token: 63}",
    );
    assert!(parse(&dflash).unwrap().validate(&target).is_ok());
    assert!(check(dflash.replace("block_size: 4", "block_size: 64"))
        .contains("dflash.block_size = 64 must lie in 2..n0"));
    let qwen2 = CausalLm::load(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/qwen2"),
        Device::Cpu,
        Kind::Float,
    )
    .unwrap();
    // A Qwen2 target's q/k/v biases come along into DFlash's layout (crates/lab/tests/training.rs).
    assert!(parse(&dflash).unwrap().validate(&qwen2).is_ok());
    assert!(
        check(dflash.replace("mask_token: 63", "mask_token: 63, target_layer_ids: [0, 5]"))
            .contains("dflash.target_layer_ids [0, 5] do not fit a 2-layer target")
    );
}

#[test]
fn missing_data_is_named_by_file_line_and_field() {
    let target = tiny_target();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.jsonl"),
        "{\"prompt\": \"a b\"}\n{\"other\": 1}\n",
    )
    .unwrap();
    let jsonl = Source::Jsonl {
        path: "p.jsonl".into(),
        field: "prompt".into(),
        pypi: None,
        max_tokens: None,
    };
    let err = format!(
        "{:#}",
        token_stream(&[jsonl], dir.path(), &target).err().unwrap()
    );
    assert!(
        err.contains("p.jsonl:2: no string (or list of strings) field \"prompt\""),
        "{err}"
    );
    let err = format!(
        "{:#}",
        token_stream(
            &[Source::TextFile("absent.txt".into())],
            Path::new("/nonexistent"),
            &target
        )
        .err()
        .unwrap()
    );
    assert!(err.contains("/nonexistent/absent.txt"), "{err}");
}

#[test]
fn a_json_array_of_records_reads_like_jsonl_and_names_the_item_missing_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("math.json");
    std::fs::write(
        &path,
        "[{\"question\": \"one\"}, {\"question\": \"two\", \"answer\": \"2\"}]",
    )
    .unwrap();
    assert_eq!(jsonl_field(&path, "question").unwrap(), ["one", "two"]);
    let err = format!("{:#}", jsonl_field(&path, "answer").err().unwrap());
    assert!(
        err.contains("math.json:1: no string (or list of strings) field \"answer\""),
        "{err}"
    );
}

#[test]
fn a_jsonl_line_past_the_limit_is_refused_with_its_line_number_as_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.jsonl");
    let huge = "x".repeat(MAX_JSONL_LINE_BYTES + 1);
    std::fs::write(
        &path,
        format!("{{\"q\": \"fine\"}}\n{{\"q\": \"{huge}\"}}\n"),
    )
    .unwrap();
    let err = format!("{:#}", jsonl_field(&path, "q").err().unwrap());
    assert!(
        err.contains("huge.jsonl:2: a line longer than 16 MiB"),
        "{err}"
    );
    // A line of exactly the limit, and a last line with no newline, still read.
    let at_limit = "y".repeat(MAX_JSONL_LINE_BYTES - "{\"q\": \"\"}\n".len());
    std::fs::write(
        &path,
        format!("{{\"q\": \"{at_limit}\"}}\n{{\"q\": \"end\"}}"),
    )
    .unwrap();
    let fields = jsonl_field(&path, "q").unwrap();
    assert_eq!(
        (fields[0].len(), fields[1].as_str()),
        (at_limit.len(), "end")
    );
}

#[test]
fn the_shipped_training_configs_parse_with_their_schedules_and_warm_start() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs/train");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let config = TrainConfig::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
            assert!(config.warmup_steps < config.steps, "{}", path.display());
            if let DrafterKindOptions::Eagle3(e) = &config.kind {
                assert!(e.warm_start, "{}", path.display());
            }
            seen += 1;
        }
    }
    assert!(seen >= 3, "only {seen} configs under {}", dir.display());
}

#[test]
fn an_eagle_head_warm_starts_from_the_target_unless_told_not_to() {
    assert!(eagle3(parse(GOOD).unwrap()).warm_start);
    let cold =
        parse(&GOOD.replace("draft_vocab: 32", "draft_vocab: 32, warm_start: false")).unwrap();
    assert!(!eagle3(cold).warm_start);
}

#[test]
fn the_drafter_kind_reads_the_same_under_its_old_key_method() {
    let new = parse(&GOOD.replace("method: {eagle3", "kind: {eagle3")).unwrap();
    assert_eq!(new, parse(GOOD).unwrap());
    assert_eq!(new.kind.kind(), sharpdraft_draft::DrafterKind::Eagle3);
}

#[test]
fn a_method_given_the_old_way_or_twice_is_an_error_naming_it() {
    let err = format!(
        "{:#}",
        parse(&GOOD.replace("method: {eagle3: {draft_vocab: 32}}", "method: eagle3")).unwrap_err()
    );
    assert!(err.contains("method"), "{err}");
    let err = format!(
        "{:#}",
        parse(&GOOD.replace(
            "{eagle3: {draft_vocab: 32}}",
            "{eagle3: {draft_vocab: 32}, pard: {layers: 1, mask_token: 3}}"
        ))
        .unwrap_err()
    );
    assert!(err.contains("method"), "{err}");
}

#[test]
fn an_included_data_file_expands_in_place_with_its_paths_resolved_from_its_own_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data/texts")).unwrap();
    std::fs::create_dir_all(dir.path().join("train")).unwrap();
    std::fs::write(
        dir.path().join("data/shared.yaml"),
        "- text_file: texts/a.txt\n- jsonl: {path: q.jsonl, field: turns, pypi: {package: p, version: '1', sha256: x}}\n",
    )
    .unwrap();
    let config = dir.path().join("train/t.yaml");
    std::fs::write(
        &config,
        GOOD.replace(
            "  - text_file: corpus.txt",
            "  - include: ../data/shared.yaml\n  - text_file: corpus.txt",
        ),
    )
    .unwrap();
    let loaded = TrainConfig::load(&config).unwrap();
    assert_eq!(
        loaded.data[0],
        Source::TextFile("../data/texts/a.txt".into())
    );
    match &loaded.data[1] {
        Source::Jsonl { path, .. } => assert_eq!(
            path,
            &PathBuf::from("q.jsonl"),
            "a path inside a PyPI package stays"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(loaded.data[2], Source::TextFile("corpus.txt".into()));
    // The record a run keeps holds the expanded sources, so editing the data file changes it.
    let record = serde_norway::to_string(&loaded).unwrap();
    assert!(
        record.contains("../data/texts/a.txt") && !record.contains("include"),
        "{record}"
    );
    std::fs::write(
        dir.path().join("data/shared.yaml"),
        "- text_file: texts/b.txt\n",
    )
    .unwrap();
    assert_ne!(TrainConfig::load(&config).unwrap(), loaded);
    // A missing or malformed data file names itself.
    std::fs::write(dir.path().join("data/shared.yaml"), "- txt: x\n").unwrap();
    let err = format!("{:#}", TrainConfig::load(&config).unwrap_err());
    assert!(err.contains("shared.yaml"), "{err}");
    std::fs::remove_file(dir.path().join("data/shared.yaml")).unwrap();
    let err = format!("{:#}", TrainConfig::load(&config).unwrap_err());
    assert!(err.contains("shared.yaml"), "{err}");
}
