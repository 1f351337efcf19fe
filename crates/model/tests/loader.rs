//! Strict loading: bad checkpoints and configs are errors that name every tensor or field at fault.
mod common;

use common::{expected, fixture, forward, load, max_abs_diff};
use safetensors::SafeTensors;
use sharpdraft_model::{CausalLm, HfConfig, WeightLoading};
use std::collections::HashMap;
use std::path::Path;
use tch::{Device, Kind};

/// Copies the qwen2 fixture into a temp folder, letting `edit` rewrite its tensors.
fn edited_checkpoint(
    edit: impl FnOnce(&mut HashMap<String, (Vec<usize>, Vec<u8>)>),
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("qwen2");
    std::fs::copy(source.join("config.json"), dir.path().join("config.json")).unwrap();
    let bytes = std::fs::read(source.join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: HashMap<String, (Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, (view.shape().to_vec(), view.data().to_vec())))
        .collect();
    edit(&mut tensors);
    write_safetensors(&dir.path().join("model.safetensors"), &tensors);
    dir
}

fn write_safetensors(path: &Path, tensors: &HashMap<String, (Vec<usize>, Vec<u8>)>) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, (shape, data))| {
            (
                name.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn load_error(dir: &Path) -> String {
    CausalLm::load(dir, Device::Cpu, Kind::Float)
        .err()
        .expect("loading should fail")
        .to_string()
}

#[test]
fn missing_misshaped_and_unexpected_tensors_are_listed_together() {
    let dir = edited_checkpoint(|t| {
        t.remove("model.layers.1.mlp.up_proj.weight");
        let bias = t.get_mut("model.layers.0.self_attn.q_proj.bias").unwrap();
        bias.0 = vec![8, 4];
        t.insert(
            "model.layers.0.self_attn.extra.weight".into(),
            (vec![2], vec![0; 8]),
        );
    });
    let err = load_error(dir.path());
    assert!(err.contains("3 problem(s)"), "{err}");
    assert!(
        err.contains("missing tensor model.layers.1.mlp.up_proj.weight [48, 32]"),
        "{err}"
    );
    assert!(
        err.contains(
            "tensor model.layers.0.self_attn.q_proj.bias: shape [8, 4] in the file, [32] expected"
        ),
        "{err}"
    );
    assert!(
        err.contains("unexpected tensor model.layers.0.self_attn.extra.weight [2]"),
        "{err}"
    );
}

#[test]
fn a_sharded_checkpoint_loads_like_a_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("qwen2");
    std::fs::copy(source.join("config.json"), dir.path().join("config.json")).unwrap();
    let bytes = std::fs::read(source.join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let (mut first, mut second) = (HashMap::new(), HashMap::new());
    let mut weight_map = serde_json::Map::new();
    for (name, view) in file.tensors() {
        let shard = if name.contains("layers.1") {
            "model-00002-of-00002.safetensors"
        } else {
            "model-00001-of-00002.safetensors"
        };
        let target = if shard.contains("00002-of") {
            &mut second
        } else {
            &mut first
        };
        target.insert(name.clone(), (view.shape().to_vec(), view.data().to_vec()));
        weight_map.insert(name, serde_json::json!(shard));
    }
    write_safetensors(&dir.path().join("model-00001-of-00002.safetensors"), &first);
    write_safetensors(
        &dir.path().join("model-00002-of-00002.safetensors"),
        &second,
    );
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let sharded = CausalLm::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    let want = expected("qwen2");
    let got = forward(&sharded.net, &want.ids, &mut sharded.net.new_cache(32));
    assert!(max_abs_diff(&got, &want.logits) < 1e-4);
}

#[test]
fn a_config_field_of_the_wrong_type_is_named() {
    let text = std::fs::read_to_string(fixture("llama").join("config.json")).unwrap();
    let bad = text.replace("\"hidden_size\": 32", "\"hidden_size\": \"thirty-two\"");
    assert_ne!(bad, text);
    let err = HfConfig::from_json(&bad).unwrap_err().to_string();
    assert!(
        err.contains("hidden_size") && err.contains("invalid type"),
        "{err}"
    );
    let unsupported = text.replace("\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"");
    let err = HfConfig::from_json(&unsupported)
        .unwrap()
        .resolve()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model_type") && err.contains("\"gpt2\" is not supported"),
        "{err}"
    );
}

#[test]
fn a_folder_without_weights_or_with_a_corrupt_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("llama").join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    assert!(load_error(dir.path())
        .contains("neither model.safetensors nor model.safetensors.index.json"));
    std::fs::write(
        dir.path().join("model.safetensors"),
        b"not a safetensors file",
    )
    .unwrap();
    assert!(load_error(dir.path()).contains("not a safetensors file"));
}

#[test]
fn reduced_precision_loads_and_stays_close_to_f32() {
    let want = expected("qwen3");
    for kind in [Kind::BFloat16, Kind::Half] {
        let model = CausalLm::load(&fixture("qwen3"), Device::Cpu, kind).unwrap();
        let got = forward(&model.net, &want.ids, &mut model.net.new_cache(32));
        let diff = max_abs_diff(&got, &want.logits);
        assert!(diff < 0.1, "{kind:?}: max |logit - HF f32| = {diff}");
    }
    let f32_model = load("qwen3");
    assert_eq!(f32_model.net.kind(), Kind::Float);
}

/// Rewrites a safetensors header in place (padded to its old size), leaving the data bytes as they are.
fn rewrite_header(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let bytes = std::fs::read(path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    edit(&mut header);
    let mut text = header.to_string();
    assert!(text.len() <= header_len, "the edited header fits");
    while text.len() < header_len {
        text.push(' ');
    }
    let mut out = (header_len as u64).to_le_bytes().to_vec();
    out.extend(text.as_bytes());
    out.extend(&bytes[8 + header_len..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn an_integer_dtype_where_a_weight_belongs_is_an_error_not_a_conversion() {
    let name = "model.layers.0.mlp.up_proj.weight";
    // I32 has F32's width: the same bytes, read as integers, would change every value.
    // I64 is twice as wide: the same bytes hold half the rows.
    for (dtype, rows_divisor) in [("I32", 1), ("I64", 2)] {
        let dir = edited_checkpoint(|_| {});
        rewrite_header(&dir.path().join("model.safetensors"), |header| {
            let rows = header[name]["shape"][0].as_u64().unwrap();
            header[name]["dtype"] = serde_json::json!(dtype);
            header[name]["shape"][0] = serde_json::json!(rows / rows_divisor);
        });
        let err = load_error(dir.path());
        assert!(
            err.contains(name) && err.contains(dtype) && err.contains("floating-point"),
            "{dtype}: {err}"
        );
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, .. ProptestConfig::default() })]

        /// Random bytes written over a checkpoint's header (where lengths, dtypes, shapes and offsets
        /// live) or its data: loading succeeds or fails with an error naming the file, never panics.
        #[test]
        fn a_mutated_safetensors_file_loads_or_fails_cleanly(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..6),
            cut in prop::option::of(any::<prop::sample::Index>()),
        ) {
            let dir = edited_checkpoint(|_| {});
            let file = dir.path().join("model.safetensors");
            let mut bytes = std::fs::read(&file).unwrap();
            let header_len = (u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize + 8).min(bytes.len());
            for (at, value, in_header) in &edits {
                let i = if *in_header { at.index(header_len) } else { at.index(bytes.len()) };
                bytes[i] = *value;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len()));
            }
            std::fs::write(&file, &bytes).unwrap();
            if let Err(e) = CausalLm::load(dir.path(), Device::Cpu, Kind::Float) {
                let text = e.to_string();
                prop_assert!(text.contains("model.safetensors") || text.contains("tensor "), "{}", text);
            }
        }
    }
}

/// Logits of the first 4 prompt ids from a fresh cache.
fn logits_of(model: &CausalLm) -> tch::Tensor {
    let mut cache = model.net.new_cache(8);
    forward(&model.net, &[5, 17, 42, 3], &mut cache)
}

#[test]
fn an_in_place_load_maps_the_file_computes_what_a_copy_computes_and_never_writes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let source = fixture("qwen2");
    for name in ["config.json", "model.safetensors"] {
        std::fs::copy(source.join(name), dir.path().join(name)).unwrap();
    }
    let file_before = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let copied =
        CausalLm::load_as(dir.path(), Device::Cpu, Kind::Float, WeightLoading::Copy).unwrap();
    let mapped = CausalLm::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    assert_eq!(copied.mapped_weight_bytes(), 0);
    let weight_bytes: usize = mapped
        .vars
        .variables()
        .values()
        .map(|t| t.numel() * 4)
        .sum();
    assert_eq!(
        mapped.mapped_weight_bytes(),
        weight_bytes,
        "every f32 weight in place"
    );
    assert!(logits_of(&mapped).equal(&logits_of(&copied)));
    // A write through a variable (training, merged LoRA) stays in this process.
    for (_, mut t) in mapped.vars.variables() {
        tch::no_grad(|| {
            let _ = t.g_add_scalar_(1.0);
        });
    }
    assert!(!logits_of(&mapped).equal(&logits_of(&copied)));
    assert_eq!(
        std::fs::read(dir.path().join("model.safetensors")).unwrap(),
        file_before
    );
    drop(mapped);
    let again = CausalLm::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    assert!(logits_of(&again).equal(&logits_of(&copied)));
}

#[test]
fn a_load_in_another_dtype_copies_every_weight() {
    let model = CausalLm::load(&fixture("qwen2"), Device::Cpu, Kind::BFloat16).unwrap();
    assert_eq!(model.mapped_weight_bytes(), 0);
    assert!(model
        .vars
        .variables()
        .values()
        .all(|t| t.kind() == Kind::BFloat16));
}

#[test]
fn a_config_with_values_no_model_has_is_refused_at_load_naming_the_key() {
    let text = std::fs::read_to_string(fixture("llama").join("config.json")).unwrap();
    let resolve_error = |from: &str, to: &str| {
        let edited = text.replace(from, to);
        assert_ne!(edited, text, "{from}");
        HfConfig::from_json(&edited)
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string()
    };
    for (from, to, named) in [
        ("\"rope_theta\": 10000.0", "\"rope_theta\": 0", "rope_theta"),
        (
            "\"rope_theta\": 10000.0",
            "\"rope_theta\": -5.0",
            "rope_theta",
        ),
        (
            "\"rms_norm_eps\": 1e-05",
            "\"rms_norm_eps\": -1",
            "rms_norm_eps",
        ),
        (
            "\"rms_norm_eps\": 1e-05",
            "\"rms_norm_eps\": 0.0",
            "rms_norm_eps",
        ),
        (
            "\"hidden_act\": \"silu\"",
            "\"hidden_act\": \"relu\"",
            "\"relu\" is not implemented",
        ),
        (
            "\"max_position_embeddings\": 128",
            "\"max_position_embeddings\": 1000000000000",
            "max_position_embeddings: 1000000000000 is above 16777216",
        ),
        (
            "\"vocab_size\": 64",
            "\"vocab_size\": 100000000",
            "vocab_size",
        ),
        (
            "\"num_hidden_layers\": 2",
            "\"num_hidden_layers\": 100000",
            "num_hidden_layers",
        ),
    ] {
        let err = resolve_error(from, to);
        assert!(err.contains(named), "{to}: {err}");
    }
    // HF's other name for SiLU loads.
    let swish = text.replace("\"hidden_act\": \"silu\"", "\"hidden_act\": \"swish\"");
    HfConfig::from_json(&swish).unwrap().resolve().unwrap();
}
