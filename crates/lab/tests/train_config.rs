//! Bad training configs are clear errors before any compute is spent.
use sharpdraft_lab::datasets::{jsonl_field, token_stream, Source};
use sharpdraft_lab::train::TrainConfig;
use sharpdraft_model::CausalLm;
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

fn tiny_target() -> CausalLm {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()
}

fn parse(yaml: &str) -> anyhow::Result<TrainConfig> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.yaml");
    std::fs::write(&path, yaml).unwrap();
    TrainConfig::load(&path)
}

const GOOD: &str = "target: t\nmethod: eagle3\nout: o\nn0: 64\nwindows: 4\nsteps: 10\ndata:\n  - text_file: corpus.txt\neagle3: {draft_vocab: 32}\n";

#[test]
fn a_good_config_parses_with_one_key_maps_for_sources() {
    let config = parse(GOOD).unwrap();
    assert_eq!(config.data, vec![Source::TextFile("corpus.txt".into())]);
    assert_eq!(
        config.eagle3.unwrap().ttt_steps,
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
        check(GOOD.replace("eagle3: {draft_vocab: 32}\n", "")).contains("needs an `eagle3:` block")
    );
    assert!(
        check(GOOD.to_string()).contains("at least 4 layers"),
        "the tiny target has 2 layers"
    );
    let pard = GOOD.replace("method: eagle3", "method: pard").replace(
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
    let err = check(format!("{pard}eagle3: {{draft_vocab: 32}}\n"));
    assert!(
        err.contains("the `eagle3:` block does not belong to method pard"),
        "{err}"
    );
    let dflash = GOOD.replace("method: eagle3", "method: dflash").replace(
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
    let err = format!(
        "{:#}",
        parse(&dflash).unwrap().validate(&qwen2).unwrap_err()
    );
    assert!(err.contains("the target has q/k/v biases"), "{err}");
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
fn the_shipped_training_configs_parse_with_their_schedules_and_warm_start() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs/train");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let config = TrainConfig::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
            assert!(config.warmup_steps < config.steps, "{}", path.display());
            if let Some(eagle3) = &config.eagle3 {
                assert!(eagle3.warm_start, "{}", path.display());
            }
            seen += 1;
        }
    }
    assert!(seen >= 3, "only {seen} configs under {}", dir.display());
}

#[test]
fn an_eagle_head_warm_starts_from_the_target_unless_told_not_to() {
    assert!(parse(GOOD).unwrap().eagle3.unwrap().warm_start);
    let cold =
        parse(&GOOD.replace("draft_vocab: 32", "draft_vocab: 32, warm_start: false")).unwrap();
    assert!(!cold.eagle3.unwrap().warm_start);
}
