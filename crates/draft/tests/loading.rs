//! Drafter checkpoints that do not match the published layout, or drafters that do not fit the target,
//! are clear errors naming the tensor, key or value.
use safetensors::SafeTensors;
use sharpdraft_draft::eagle3::{write_random_head, RandomHeadOptions};
use sharpdraft_draft::{Eagle3Drafter, TreeShape, VanillaDrafter};
use sharpdraft_model::{CausalLm, Sampling};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

fn fixture(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../model/tests/fixtures")
        .join(family)
}

fn load(dir: &Path) -> CausalLm {
    CausalLm::load(dir, Device::Cpu, Kind::Float).unwrap()
}

fn eagle_error(dir: &Path, target: &CausalLm) -> String {
    Eagle3Drafter::load(
        dir,
        &target.net,
        TreeShape::chain(3),
        Sampling::greedy(),
        64,
    )
    .err()
    .expect("load should fail")
    .to_string()
}

/// Rewrites the head's safetensors through `edit`.
fn edit_head(
    dir: &Path,
    edit: impl FnOnce(&mut HashMap<String, (safetensors::Dtype, Vec<usize>, Vec<u8>)>),
) {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: HashMap<_, _> = file
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec())))
        .collect();
    edit(&mut tensors);
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, (d, s, b))| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

#[test]
fn a_published_layout_head_loads_under_either_block_prefix() {
    let target = load(&fixture("llama"));
    let dir = tempfile::tempdir().unwrap();
    for layers0_prefix in [false, true] {
        write_random_head(
            dir.path(),
            &target.net,
            &RandomHeadOptions {
                layers0_prefix,
                ..Default::default()
            },
        )
        .unwrap();
        let head = Eagle3Drafter::load(
            dir.path(),
            &target.net,
            TreeShape::chain(2),
            Sampling::greedy(),
            64,
        )
        .unwrap();
        assert_eq!(
            head.training_length(),
            2048,
            "max_position_embeddings stands in for an unrecorded n0"
        );
    }
}

#[test]
fn a_missing_or_misshaped_tensor_is_named() {
    let target = load(&fixture("llama"));
    let dir = tempfile::tempdir().unwrap();
    write_random_head(dir.path(), &target.net, &RandomHeadOptions::default()).unwrap();
    edit_head(dir.path(), |t| {
        t.remove("midlayer.mlp.up_proj.weight");
        let fc = t.get_mut("fc.weight").unwrap();
        fc.1 = vec![32, 64];
        fc.2.truncate(32 * 64 * 4);
    });
    let err = eagle_error(dir.path(), &target);
    assert!(
        err.contains("missing tensor midlayer.mlp.up_proj.weight [64, 32]"),
        "{err}"
    );
    assert!(
        err.contains("tensor fc.weight: shape [32, 64] in the file, [32, 96] expected"),
        "{err}"
    );
}

#[test]
fn a_reduced_vocabulary_without_d2t_is_an_error() {
    let target = load(&fixture("llama"));
    let dir = tempfile::tempdir().unwrap();
    write_random_head(dir.path(), &target.net, &RandomHeadOptions::default()).unwrap();
    edit_head(dir.path(), |t| {
        t.remove("d2t");
    });
    let err = eagle_error(dir.path(), &target);
    assert!(err.contains("missing tensor d2t [48]"), "{err}");
}

#[test]
fn a_head_for_another_target_is_refused_before_loading_weights() {
    let llama = load(&fixture("llama"));
    let qwen3 = load(&fixture("qwen3"));
    let dir = tempfile::tempdir().unwrap();
    write_random_head(dir.path(), &llama.net, &RandomHeadOptions::default()).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    config["num_hidden_layers"] = 2.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    assert!(eagle_error(dir.path(), &llama).contains("num_hidden_layers = 2"));
    config["num_hidden_layers"] = 1.into();
    config["hidden_size"] = 48.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let err = eagle_error(dir.path(), &qwen3);
    assert!(
        err.contains("does not fit the target") && err.contains("48"),
        "{err}"
    );
    config["hidden_size"] = "wide".into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let err = eagle_error(dir.path(), &llama);
    assert!(
        err.contains("hidden_size") && err.contains("invalid type"),
        "{err}"
    );
}

#[test]
fn a_vanilla_drafter_with_another_vocabulary_is_refused() {
    let target = load(&fixture("llama"));
    // A copy of the qwen2 fixture whose vocabulary has 16 more rows.
    let dir = tempfile::tempdir().unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("qwen2").join("config.json")).unwrap(),
    )
    .unwrap();
    config["vocab_size"] = 80.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        fixture("qwen2").join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    edit_head(dir.path(), |t| {
        for name in ["model.embed_tokens.weight", "lm_head.weight"] {
            let (_, shape, data) = t.get_mut(name).unwrap();
            data.extend(vec![0u8; 16 * shape[1] * 4]);
            shape[0] = 80;
        }
    });
    let err = VanillaDrafter::new(load(dir.path()), &target, 4, 64, Sampling::greedy())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("drafter vocab_size 80 differs from the target's 64"),
        "{err}"
    );
}

#[test]
fn a_pard_config_without_a_mask_token_is_an_error() {
    let target = load(&fixture("llama"));
    let err = sharpdraft_draft::PardDrafter::new(load(&fixture("qwen2")), &target, 4, 64)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("no pard_token"),
        "{err}"
    );
}

#[test]
fn dflash_checkpoints_are_checked_by_key_and_tensor() {
    use sharpdraft_draft::dflash::{write_random_dflash, RandomDFlashOptions};
    let target = load(&fixture("qwen3"));
    let dir = tempfile::tempdir().unwrap();
    let options = RandomDFlashOptions {
        layers: 2,
        block_size: 4,
        sliding_window: Some(8),
        mask_token: 63,
        seed: 0,
    };
    write_random_dflash(dir.path(), &target.net, &options).unwrap();
    let drafter = sharpdraft_draft::DFlashDrafter::load(dir.path(), &target.net, 64).unwrap();
    assert_eq!(drafter.block_size(), 4);
    let error = || {
        sharpdraft_draft::DFlashDrafter::load(dir.path(), &target.net, 64)
            .err()
            .unwrap()
            .to_string()
    };
    edit_head(dir.path(), |t| {
        t.remove("layers.1.self_attn.k_norm.weight");
    });
    assert!(
        error().contains("missing tensor layers.1.self_attn.k_norm.weight [16]"),
        "{}",
        error()
    );
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    config["dflash_config"] = serde_json::json!({"target_layer_ids": [0, 1]});
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    assert!(
        error().contains("dflash_config.mask_token_id is missing"),
        "{}",
        error()
    );
    config["dflash_config"] = serde_json::json!({"mask_token_id": 63, "target_layer_ids": [0, 9]});
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    assert!(
        error().contains("target_layer_ids [0, 9] do not fit a 2-layer target"),
        "{}",
        error()
    );
}

#[test]
fn dflash_capture_layers_default_to_the_published_spacing() {
    // Qwen3-8B (36 layers) with a 5-layer drafter captures [1, 9, 17, 25, 33] (docs/drafters.md §4.1).
    assert_eq!(
        sharpdraft_draft::dflash::default_target_layers(36, 5),
        vec![1, 9, 17, 25, 33]
    );
    assert_eq!(
        sharpdraft_draft::dflash::default_target_layers(30, 1),
        vec![15]
    );
}
