//! Tiny models for the engine tests: the HF fixtures of sharpdraft-model as targets and vanilla drafters,
//! and random EAGLE-3 heads written in the published checkpoint layout.
#![allow(dead_code)]

use sharpdraft_decode::{speculative_generate, SpecConfig, SpecReport};
use sharpdraft_draft::{Drafter, Eagle3Drafter, TreeShape, VanillaDrafter};
use sharpdraft_model::generate::generate;
use sharpdraft_model::{CausalLm, Sampler, Sampling};
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

pub fn fixture(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures").join(family)
}

pub fn load(family: &str) -> CausalLm {
    CausalLm::load(&fixture(family), Device::Cpu, Kind::Float).unwrap()
}

pub const PROMPT: [i64; 9] = [5, 17, 42, 3, 3, 60, 21, 9, 33];

pub struct EagleOptions {
    /// EAGLE 3.1 flags.
    pub eagle31: bool,
    /// Name the block `layers.0.` instead of `midlayer.`.
    pub layers0_prefix: bool,
    /// Reduced draft vocabulary (target ids 0..vocab with every 4th id dropped) or the full one.
    pub reduced_vocab: bool,
    pub seed: i64,
}

impl Default for EagleOptions {
    fn default() -> Self {
        Self { eagle31: false, layers0_prefix: false, reduced_vocab: true, seed: 0 }
    }
}

/// Writes a random EAGLE-3 head for `target` (hidden H, heads from the target) in the published layout.
pub fn write_eagle3(dir: &Path, target: &CausalLm, options: &EagleOptions) {
    let c = &target.net.config;
    let (h, vocab) = (c.hidden_size, c.vocab_size);
    let (heads, kv_heads, head_dim, inter) = (c.num_heads, c.num_kv_heads, c.head_dim, 2 * c.hidden_size);
    let used: Vec<i64> = if options.reduced_vocab { (0..vocab).filter(|i| i % 4 != 3).collect() } else { (0..vocab).collect() };
    let draft_vocab = used.len() as i64;
    let layers = c.num_layers;
    let aux = [0.min(layers), layers / 2, layers];
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": 1,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": false, "torch_dtype": "float32",
        "vocab_size": vocab, "draft_vocab_size": draft_vocab,
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
        "fc_norm": options.eagle31, "norm_output": options.eagle31,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux},
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    tch::manual_seed(options.seed);
    let block = if options.layers0_prefix { "layers.0" } else { "midlayer" };
    let random = |shape: &[i64], scale: f64| Tensor::randn(shape, (Kind::Float, Device::Cpu)) * scale;
    let norm = |n: i64| Tensor::ones([n], (Kind::Float, Device::Cpu)) + Tensor::randn([n], (Kind::Float, Device::Cpu)) * 0.1;
    let mut tensors: Vec<(String, Tensor)> = vec![
        ("fc.weight".into(), random(&[h, 3 * h], 0.1)),
        (format!("{block}.hidden_norm.weight"), norm(h)),
        (format!("{block}.input_layernorm.weight"), norm(h)),
        (format!("{block}.post_attention_layernorm.weight"), norm(h)),
        (format!("{block}.self_attn.q_proj.weight"), random(&[heads * head_dim, 2 * h], 0.1)),
        (format!("{block}.self_attn.k_proj.weight"), random(&[kv_heads * head_dim, 2 * h], 0.1)),
        (format!("{block}.self_attn.v_proj.weight"), random(&[kv_heads * head_dim, 2 * h], 0.1)),
        (format!("{block}.self_attn.o_proj.weight"), random(&[h, heads * head_dim], 0.1)),
        (format!("{block}.mlp.gate_proj.weight"), random(&[inter, h], 0.1)),
        (format!("{block}.mlp.up_proj.weight"), random(&[inter, h], 0.1)),
        (format!("{block}.mlp.down_proj.weight"), random(&[h, inter], 0.1)),
        ("norm.weight".into(), norm(h)),
        ("lm_head.weight".into(), random(&[draft_vocab, h], 0.3)),
    ];
    if options.eagle31 {
        for i in 0..3 {
            tensors.push((format!("fc_norm.{i}.weight"), norm(h)));
        }
    }
    let d2t: Vec<i64> = used.iter().enumerate().map(|(i, &t)| t - i as i64).collect();
    let t2d: Vec<bool> = (0..vocab).map(|t| used.contains(&t)).collect();
    let mut buffers: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| {
            let data: Vec<f32> = Vec::try_from(t.flatten(0, -1)).unwrap();
            (name.clone(), safetensors::Dtype::F32, t.size().iter().map(|&d| d as usize).collect(), data.iter().flat_map(|v| v.to_le_bytes()).collect())
        })
        .collect();
    if options.reduced_vocab {
        buffers.push(("d2t".into(), safetensors::Dtype::I64, vec![d2t.len()], d2t.iter().flat_map(|v| v.to_le_bytes()).collect()));
        buffers.push(("t2d".into(), safetensors::Dtype::BOOL, vec![t2d.len()], t2d.iter().map(|&b| b as u8).collect()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = buffers
        .iter()
        .map(|(name, dtype, shape, data)| (name.clone(), safetensors::tensor::TensorView::new(*dtype, shape.clone(), data).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

pub fn eagle3(dir: &Path, target: &CausalLm, shape: TreeShape, sampling: Sampling) -> Eagle3Drafter {
    Eagle3Drafter::load(dir, &target.net, shape, sampling, 512).unwrap()
}

pub fn vanilla(drafter_family: &str, target: &CausalLm, draft_len: usize, sampling: Sampling) -> VanillaDrafter {
    VanillaDrafter::new(load(drafter_family), target, draft_len, 512, sampling).unwrap()
}

pub fn spec(target: &CausalLm, drafter: &mut dyn Drafter, prompt: &[i64], new_tokens: usize, sampling: Sampling) -> SpecReport {
    let config = SpecConfig { max_new_tokens: new_tokens, sampling, stop_tokens: vec![], max_proposal: 64 };
    speculative_generate(&target.net, drafter, prompt, &config).unwrap()
}

pub fn greedy_ar(target: &CausalLm, prompt: &[i64], new_tokens: usize) -> Vec<i64> {
    generate(&target.net, prompt, new_tokens, &mut Sampler::new(Sampling::greedy()), &[]).unwrap().ids
}
