//! The drafter specification: one YAML (or command-line) description of a drafter and how it drafts,
//! strict about keys and about options its method does not have.

use sharpdraft_decode::drafter_spec::DrafterSpec;
use sharpdraft_decode::scaling::ScalingMode;
use sharpdraft_draft::DrafterKind;
use sharpdraft_draft::TreeShape;

#[test]
fn a_drafter_specification_reads_from_yaml_with_defaults_for_what_it_leaves_out() {
    let spec: DrafterSpec = serde_norway::from_str(
        "method: eagle3\ncheckpoint: smollm2-135m-eagle3\ntree: {depth: 4, top_k: 6, total_tokens: 24}\nscaling: {mode: logn}\n",
    )
    .unwrap();
    assert_eq!(spec.kind, DrafterKind::Eagle3);
    assert_eq!(
        spec.tree,
        Some(TreeShape {
            depth: 4,
            top_k: 6,
            total_tokens: 24
        })
    );
    assert_eq!(spec.scaling.mode, ScalingMode::Logn);
    assert_eq!(spec.draft_len, 4, "chains default to 4");
    spec.validate().unwrap();
    let round_trip: DrafterSpec =
        serde_norway::from_str(&serde_norway::to_string(&spec).unwrap()).unwrap();
    assert_eq!(round_trip, spec);
}

#[test]
fn unknown_keys_and_unknown_methods_are_errors_that_name_them() {
    let err = serde_norway::from_str::<DrafterSpec>("method: dflash\ncheckpoint: x\nblock: 8\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("block"), "{err}");
    let err = serde_norway::from_str::<DrafterSpec>("method: medusa\ncheckpoint: x\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("medusa"), "{err}");
    assert!("medusa"
        .parse::<DrafterKind>()
        .unwrap_err()
        .contains("vanilla, eagle3, pard, dflash"));
    for method in DrafterKind::ALL {
        assert_eq!(method.name().parse::<DrafterKind>().unwrap(), method);
    }
}

#[test]
fn options_a_method_does_not_have_are_refused_before_any_model_loads() {
    let tree = Some(TreeShape {
        depth: 2,
        top_k: 2,
        total_tokens: 4,
    });
    let pard_tree = DrafterSpec {
        tree,
        ..DrafterSpec::new(DrafterKind::Pard, "x")
    };
    assert!(pard_tree
        .validate()
        .unwrap_err()
        .to_string()
        .contains("only EAGLE-3 drafts trees"));
    let flat = DrafterSpec {
        tree: Some(TreeShape {
            depth: 0,
            ..tree.unwrap()
        }),
        ..DrafterSpec::new(DrafterKind::Eagle3, "x")
    };
    assert!(flat
        .validate()
        .unwrap_err()
        .to_string()
        .contains("--tree-depth"));
    let long = DrafterSpec {
        draft_len: 0,
        ..DrafterSpec::new(DrafterKind::Vanilla, "x")
    };
    assert!(long
        .validate()
        .unwrap_err()
        .to_string()
        .contains("--draft-len"));
}

#[test]
fn only_vanilla_and_dflash_chains_end_early_and_only_below_a_probability_between_0_and_1() {
    let spec: DrafterSpec = serde_norway::from_str(
        "method: vanilla
checkpoint: x
draft_len: 8
stop_below: 0.4
",
    )
    .unwrap();
    assert_eq!(spec.stop_below, Some(0.4));
    spec.validate().unwrap();
    DrafterSpec {
        stop_below: Some(0.4),
        ..DrafterSpec::new(DrafterKind::Dflash, "x")
    }
    .validate()
    .unwrap();
    let pard = DrafterSpec {
        stop_below: Some(0.4),
        ..DrafterSpec::new(DrafterKind::Pard, "x")
    };
    let err = pard.validate().unwrap_err().to_string();
    assert!(
        err.contains("--draft-stop-below") && err.contains("pard") && err.contains("DFlash"),
        "{err}"
    );
    for threshold in [0.0, 1.0, 1.5, -0.1, f64::NAN] {
        let bad = DrafterSpec {
            stop_below: Some(threshold),
            ..DrafterSpec::new(DrafterKind::Vanilla, "x")
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(
            err.contains("strictly between 0 and 1"),
            "{threshold}: {err}"
        );
    }
}

#[test]
fn an_adapt_block_reads_with_osds_defaults_and_bad_values_name_their_key() {
    use sharpdraft_draft::adaptation::{AdaptMode, LearnFrom, LoraTarget, UpdateUnit};
    use sharpdraft_draft::training::Divergence;
    let spec: DrafterSpec = serde_norway::from_str(
        "method: dflash\ncheckpoint: x\nadapt: {mode: lora, rank: 16, lora_on: [attention, fc], loss: jsd}\n",
    )
    .unwrap();
    let adapt = spec.adapt.clone().unwrap();
    assert_eq!(adapt.mode, AdaptMode::Lora);
    assert_eq!((adapt.rank, adapt.lora_scale()), (16, 2.0));
    assert_eq!(adapt.lora_on, vec![LoraTarget::Attention, LoraTarget::Fc]);
    assert_eq!(adapt.loss, Divergence::Jsd);
    assert_eq!(
        (adapt.every, adapt.unit, adapt.lr),
        (8, UpdateUnit::Cycles, 1e-4)
    );
    assert_eq!(adapt.learn_from, LearnFrom::All);
    spec.validate().unwrap();
    let err = serde_norway::from_str::<DrafterSpec>(
        "method: pard\ncheckpoint: x\nadapt: {mode: full, rnak: 4}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("rnak"), "{err}");
    let zero_every: DrafterSpec =
        serde_norway::from_str("method: pard\ncheckpoint: x\nadapt: {mode: full, every: 0}\n")
            .unwrap();
    let err = zero_every.validate().unwrap_err().to_string();
    assert!(err.contains("adapt.every"), "{err}");
}

#[test]
fn a_lora_option_under_full_adaptation_is_refused_naming_it_not_ignored() {
    for (option, named) in [
        ("rank: 4", "adapt.rank = 4"),
        ("alpha: 16", "adapt.alpha = 16"),
        ("lora_on: [attention, mlp]", "adapt.lora_on = [attention, mlp]"),
        ("lora_form: unmerged", "adapt.lora_form = unmerged"),
    ] {
        let spec: DrafterSpec = serde_norway::from_str(&format!(
            "method: pard\ncheckpoint: x\nadapt: {{mode: full, {option}}}\n"
        ))
        .unwrap();
        let err = spec.validate().unwrap_err().to_string();
        assert!(err.contains(named) && err.contains("mode is full"), "{option}: {err}");
        let lora: DrafterSpec = serde_norway::from_str(&format!(
            "method: pard\ncheckpoint: x\nadapt: {{mode: lora, {option}}}\n"
        ))
        .unwrap();
        lora.validate().unwrap_or_else(|e| panic!("{option} under lora: {e}"));
    }
}

#[test]
fn a_sliding_window_reads_from_yaml_and_a_window_of_no_keys_is_refused() {
    let spec: DrafterSpec =
        serde_norway::from_str("method: vanilla\ncheckpoint: x\nwindow: 512\n").unwrap();
    assert_eq!(spec.window, Some(512));
    spec.validate().unwrap();
    let empty = DrafterSpec {
        window: Some(0),
        ..DrafterSpec::new(DrafterKind::Dflash, "x")
    };
    let err = empty.validate().unwrap_err().to_string();
    assert!(err.contains("--drafter-window"), "{err}");
}

#[test]
fn retrieval_reads_with_specextends_defaults_and_excludes_a_window() {
    let spec: DrafterSpec =
        serde_norway::from_str("method: eagle3\ncheckpoint: x\nretrieval: {recent: 128}\n")
            .unwrap();
    let retrieval = spec.retrieval.clone().unwrap();
    assert_eq!(
        (
            retrieval.chunk,
            retrieval.top_chunks,
            retrieval.recent,
            retrieval.every
        ),
        (32, 64, 128, 8)
    );
    spec.validate().unwrap();
    let both = DrafterSpec {
        window: Some(64),
        ..spec.clone()
    };
    assert!(both
        .validate()
        .unwrap_err()
        .to_string()
        .contains("give one"));
    let err = serde_norway::from_str::<DrafterSpec>(
        "method: eagle3\ncheckpoint: x\nretrieval: {chunks: 3}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("chunks"), "{err}");
}

#[test]
fn a_chain_length_is_refused_where_the_drafter_drafts_a_block_or_a_tree() {
    let dflash = DrafterSpec {
        draft_len: 8,
        ..DrafterSpec::new(DrafterKind::Dflash, "x")
    };
    let err = dflash.validate().unwrap_err().to_string();
    assert!(err.contains("(--draft-len) 8") && err.contains("block size"), "{err}");
    let tree: DrafterSpec = serde_norway::from_str(
        "kind: eagle3\ncheckpoint: x\ndraft_len: 6\ntree: {depth: 3}\n",
    )
    .unwrap();
    let err = tree.validate().unwrap_err().to_string();
    assert!(err.contains("(--draft-len) 6") && err.contains("tree"), "{err}");
    // Left out (the default), it is no option given; chains_of sets it only where it is read.
    DrafterSpec::new(DrafterKind::Dflash, "x").validate().unwrap();
    assert_eq!(
        DrafterSpec::new(DrafterKind::Dflash, "x").chains_of(2).draft_len,
        DrafterSpec::DEFAULT_DRAFT_LEN
    );
    assert_eq!(DrafterSpec::new(DrafterKind::Pard, "x").chains_of(2).draft_len, 2);
}
