//! Helpers shared by the model tests: the committed HF fixtures and small forward-pass wrappers.
#![allow(dead_code)]

use sharpdraft_model::{AttentionMask, CausalLm, ForwardInput, KvCache, LogitRows, Transformer};
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};

pub const FAMILIES: [&str; 3] = ["llama", "qwen2", "qwen3"];

pub fn fixture(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(family)
}

pub fn load(family: &str) -> CausalLm {
    CausalLm::load(&fixture(family), Device::Cpu, Kind::Float).unwrap()
}

pub struct Expected {
    pub ids: Vec<i64>,
    pub logits: Tensor,
}

pub fn expected(family: &str) -> Expected {
    let text = std::fs::read_to_string(fixture(family).join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids: Vec<i64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    let logits: Vec<f32> = v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let shape: Vec<i64> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    Expected {
        ids,
        logits: Tensor::from_slice(&logits).view(shape.as_slice()),
    }
}

/// Causal forward of `ids` at positions `cache.len()..`, logits `[T, vocab]`.
pub fn forward(net: &Transformer, ids: &[i64], cache: &mut KvCache) -> Tensor {
    forward_masked(net, ids, cache, &AttentionMask::Causal, None)
}

pub fn forward_masked(
    net: &Transformer,
    ids: &[i64],
    cache: &mut KvCache,
    mask: &AttentionMask,
    positions: Option<&[i64]>,
) -> Tensor {
    let start = cache.len();
    let ids_t = Tensor::from_slice(ids);
    let positions = match positions {
        Some(p) => Tensor::from_slice(p),
        None => Tensor::arange_start(start, start + ids.len() as i64, (Kind::Int64, Device::Cpu)),
    };
    let input = ForwardInput {
        mask,
        logits: LogitRows::All,
        ..ForwardInput::causal(&ids_t, &positions)
    };
    net.forward(input, cache).unwrap().logits.unwrap()
}

pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}
