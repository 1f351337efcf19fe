//! `sharpdraft train` end to end on the real default target (when fetched; `make test` fetches it): a
//! short PARD run writes a loadable drafter, its loss curve as parquet and PNG, resumes, and refuses to
//! mix two configs in one folder.
use sharpdraft_draft::PardDrafter;
use sharpdraft_lab::train;
use sharpdraft_model::{CausalLm, ScaledQueries};
use sharpdraft_report::table::Table;
use sharpdraft_store::registry;
use tch::{Device, Kind};

const CONFIG: &str = "target: smollm2-135m-instruct
method: {pard: {layers: 1, mask_token: 16, copies: 3}}
out: OUT
n0: 32
windows: 2
steps: 4
checkpoint_every: 2
data:
  - text_file: corpus.txt
";

#[test]
fn a_short_training_run_writes_a_drafter_and_its_loss_curve_and_resumes() {
    let Ok(target_dir) = registry::resolve("smollm2-135m-instruct") else {
        sharpdraft_testing::skip(
            "smollm2-135m-instruct is not fetched (run `sharpdraft fetch smollm2-135m-instruct`)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("drafter");
    std::fs::write(
        dir.path().join("corpus.txt"),
        "It was the best of times, it was the worst of times, it was the age of wisdom. ".repeat(8),
    )
    .unwrap();
    let config = dir.path().join("train.yaml");
    std::fs::write(&config, CONFIG.replace("OUT", out.to_str().unwrap())).unwrap();
    assert_eq!(train::run(&config).unwrap(), out);

    let curve = Table::read_parquet(&out.join("loss.parquet")).unwrap();
    assert_eq!(curve.i64s("step").unwrap(), &[1, 2, 3, 4]);
    assert!(curve
        .f64s("loss")
        .unwrap()
        .iter()
        .all(|l| l.is_finite() && *l > 0.0));
    assert!(std::fs::read(out.join("loss.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    let target = CausalLm::load(&target_dir, Device::Cpu, Kind::Float).unwrap();
    let drafter = PardDrafter::new(
        CausalLm::load(&out, Device::Cpu, Kind::Float).unwrap(),
        &target,
        4,
        64,
    )
    .unwrap();
    assert_eq!(
        (drafter.mask_token(), drafter.training_length()),
        (16, Some(32))
    );

    // More steps continue the run; the first four are kept.
    std::fs::write(
        &config,
        CONFIG
            .replace("OUT", out.to_str().unwrap())
            .replace("steps: 4", "steps: 6"),
    )
    .unwrap();
    train::run(&config).unwrap();
    let resumed = Table::read_parquet(&out.join("loss.parquet")).unwrap();
    assert_eq!(
        resumed.f64s("loss").unwrap()[..4],
        curve.f64s("loss").unwrap()[..]
    );
    assert_eq!(resumed.rows(), 6);

    // The same config over a changed text is another run: refused, the text named.
    let corpus = dir.path().join("corpus.txt");
    let text = std::fs::read_to_string(&corpus).unwrap();
    std::fs::write(&corpus, text.replace("wisdom", "foolishness")).unwrap();
    std::fs::write(
        &config,
        CONFIG
            .replace("OUT", out.to_str().unwrap())
            .replace("steps: 4", "steps: 8"),
    )
    .unwrap();
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(err.contains("another training text"), "{err}");
    assert_eq!(
        Table::read_parquet(&out.join("loss.parquet"))
            .unwrap()
            .rows(),
        6
    );
    std::fs::write(&corpus, text).unwrap();

    // A record of the text edited into multibyte characters: refused by name, not a panic.
    let record = out.join("training_text.sha256");
    let kept = std::fs::read_to_string(&record).unwrap();
    std::fs::write(&record, "ééééééééééééé\n").unwrap();
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(
        err.contains("another training text") && err.contains("éééééé"),
        "{err}"
    );
    std::fs::write(&record, &kept).unwrap();

    // The record deleted: nothing shows the earlier steps learned from this text, so none are resumed.
    std::fs::remove_file(&record).unwrap();
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(err.contains("without training_text.sha256"), "{err}");
    std::fs::write(&record, &kept).unwrap();

    // Another config in the same folder is refused before any compute.
    std::fs::write(
        &config,
        CONFIG
            .replace("OUT", out.to_str().unwrap())
            .replace("layers: 1", "layers: 2"),
    )
    .unwrap();
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(err.contains("holds a run of another config"), "{err}");
}

/// A short EAGLE run starting from `init` (one window, one step), as a config file in `dir`.
fn eagle_config_from(
    dir: &std::path::Path,
    init: &std::path::Path,
    extra: &str,
) -> std::path::PathBuf {
    std::fs::write(
        dir.join("corpus.txt"),
        "It was the best of times, it was the worst of times, it was the age of wisdom. ".repeat(8),
    )
    .unwrap();
    let config = dir.join("train.yaml");
    std::fs::write(
        &config,
        format!(
            "target: smollm2-135m-instruct\nmethod: {{eagle3: {{draft_vocab: 512, ttt_steps: 2{extra}}}}}\nout: {}\ninit: {}\nn0: 32\nwindows: 1\nsteps: 1\n\
             data:\n  - text_file: corpus.txt\n",
            dir.join("drafter").display(),
            init.display()
        ),
    )
    .unwrap();
    config
}

/// SmolLM2 and a random EAGLE-3 head for it in `dir/head` that captures target layers 1, 5 and 20
/// (not the default 2, 15, 27), with a draft vocabulary of the first 512 ids; `None` (and a printed
/// reason) when SmolLM2 is not fetched.
fn target_and_head_on_layers_1_5_20(
    dir: &std::path::Path,
) -> Option<(CausalLm, std::path::PathBuf)> {
    use sharpdraft_draft::eagle3::{write_random_head, RandomHeadOptions};
    let Ok(target_dir) = registry::resolve("smollm2-135m-instruct") else {
        sharpdraft_testing::skip(
            "smollm2-135m-instruct is not fetched (run `sharpdraft fetch smollm2-135m-instruct`)",
        );
        return None;
    };
    let target = CausalLm::load(&target_dir, Device::Cpu, Kind::Float).unwrap();
    let head = dir.join("head");
    let options = RandomHeadOptions {
        aux_layers: Some(vec![1, 5, 20]),
        used_tokens: Some((0..512).collect()),
        ..Default::default()
    };
    write_random_head(&head, &target.net, &options).unwrap();
    Some((target, head))
}

#[test]
fn a_head_with_its_own_capture_layers_trains_on_exactly_those_layers() {
    use sharpdraft_draft::eagle3::train::Eagle3Objective;
    use sharpdraft_draft::training::{extract_windows, Objective};
    use sharpdraft_model::Tap;
    let dir = tempfile::tempdir().unwrap();
    let Some((target, head)) = target_and_head_on_layers_1_5_20(dir.path()) else {
        return;
    };
    let config = eagle_config_from(dir.path(), &head, "");
    let out = train::run(&config).unwrap();
    let recorded = Table::read_parquet(&out.join("loss.parquet"))
        .unwrap()
        .f64s("loss")
        .unwrap()[0];

    // The first step's loss, recomputed by hand on features from given layers of the same window.
    let stream = sharpdraft_data::datasets::token_stream(
        &train::TrainConfig::load(&config).unwrap().data,
        dir.path(),
        &target,
    )
    .unwrap();
    let train::DrafterKindOptions::Eagle3(options) =
        train::TrainConfig::load(&config).unwrap().kind
    else {
        panic!("an EAGLE-3 config")
    };
    let objective = Eagle3Objective::load(&head, &target.net, &options).unwrap();
    let loss_at = |layers: [usize; 3]| {
        let taps: Vec<Tap> = layers.into_iter().map(Tap::LayerInput).collect();
        let windows = extract_windows(&target.net, &taps, &stream, 32, 1, 32).unwrap();
        objective.loss(&windows[0], 1).unwrap().double_value(&[])
    };
    let own = loss_at([1, 5, 20]);
    let default = loss_at([2, 15, 27]);
    assert!(
        (recorded - own).abs() < 1e-4,
        "trained on {recorded}, its own layers give {own}"
    );
    assert!(
        (recorded - default).abs() > 1e-3,
        "the default layers give {default} too"
    );
}

#[test]
fn a_config_whose_capture_layers_disagree_with_its_init_checkpoint_names_both_lists() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_, head)) = target_and_head_on_layers_1_5_20(dir.path()) else {
        return;
    };
    let config = eagle_config_from(dir.path(), &head, ", capture_layers: [2, 15, 27]");
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(
        err.contains("eagle3.capture_layers [2, 15, 27]") && err.contains("[1, 5, 20]"),
        "{err}"
    );
}

#[test]
fn a_second_training_into_one_folder_is_refused_while_the_first_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("drafter");
    let target =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    std::fs::write(dir.path().join("corpus.txt"), "a b c d ".repeat(64)).unwrap();
    let config = dir.path().join("train.yaml");
    std::fs::write(
        &config,
        CONFIG
            .replace("smollm2-135m-instruct", target.to_str().unwrap())
            .replace("OUT", out.to_str().unwrap()),
    )
    .unwrap();
    // The lock a training (or run) in another process holds on the folder.
    let _first = sharpdraft_store::folder_lock::FolderLock::acquire(&out, "train").unwrap();
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(
        err.contains("in use by another sharpdraft command"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
}
