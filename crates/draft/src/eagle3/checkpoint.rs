//! A randomly initialised (or warm-started) EAGLE-3 head written in the published layout.

use super::head::checkpoint_error;
use super::*;
use crate::draft_vocabulary::DraftVocabulary;
use crate::drafter::Result;
use crate::random_init::{random_norm, random_weight, write_config, write_f32_safetensors};
use sharpdraft_model::Transformer;
use std::path::Path;
use tch::{Kind, Tensor};

/// Shape options of [`write_random_head`].
pub struct RandomHeadOptions {
    /// EAGLE 3.1 flags.
    pub eagle31: bool,
    /// Name the block `layers.0.` instead of `midlayer.`.
    pub layers0_prefix: bool,
    /// Reduced draft vocabulary (target ids 0..vocab with every 4th id dropped) or the full one.
    pub reduced_vocab: bool,
    /// An explicit draft vocabulary (sorted target ids), overriding `reduced_vocab` (training picks the
    /// most frequent tokens).
    pub used_tokens: Option<Vec<i64>>,
    /// Target layers whose inputs are captured; default (2, L/2, L - 3), or (0, L/2, L) for targets of
    /// fewer than 4 layers.
    pub aux_layers: Option<Vec<usize>>,
    /// Width of the head's MLP; default 2H.
    pub intermediate_size: Option<i64>,
    /// q/k/v/o biases (`attention_bias`), started at zero: for a warm start from a target with biases.
    pub attention_bias: bool,
    /// Tensors that replace the random ones of the same name (a warm start); shapes must match.
    pub initial: Vec<(String, Tensor)>,
    pub seed: i64,
}

impl Default for RandomHeadOptions {
    fn default() -> Self {
        Self {
            eagle31: false,
            layers0_prefix: false,
            reduced_vocab: true,
            used_tokens: None,
            aux_layers: None,
            intermediate_size: None,
            attention_bias: false,
            initial: Vec::new(),
            seed: 0,
        }
    }
}

/// Writes a randomly initialised EAGLE-3 head for `target` in the published checkpoint layout
/// (config.json + model.safetensors with `fc`, `midlayer.*`, `norm`, `lm_head`, `d2t`, `t2d`). It drafts
/// badly but exercises every code path; tests and smoke runs use it, and `train` starts from it.
pub fn write_random_head(
    dir: &Path,
    target: &Transformer,
    options: &RandomHeadOptions,
) -> Result<()> {
    let c = &target.config;
    let (h, vocab) = (c.hidden_size, c.vocab_size);
    let (heads, kv_heads, head_dim) = (c.num_heads, c.num_kv_heads, c.head_dim);
    let inter = options.intermediate_size.unwrap_or(2 * c.hidden_size);
    let mut used: Vec<i64> = match &options.used_tokens {
        Some(used) => used.clone(),
        None if options.reduced_vocab => (0..vocab).filter(|i| i % 4 != 3).collect(),
        None => (0..vocab).collect(),
    };
    used.sort_unstable();
    used.dedup();
    let draft_vocab = used.len() as i64;
    let layers = c.num_layers;
    let aux = options
        .aux_layers
        .clone()
        .unwrap_or_else(|| default_capture_layers(layers));
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": 1,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        // The target's RoPE base: a head warm-started from the target's last layer keeps its attention.
        "rope_theta": c.rope_theta, "attention_bias": options.attention_bias,
        "tie_word_embeddings": false, "torch_dtype": "float32",
        "vocab_size": vocab, "draft_vocab_size": draft_vocab,
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
        "fc_norm": options.eagle31, "norm_output": options.eagle31,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux},
    });
    write_config(dir, &config).map_err(|e| checkpoint_error(dir, e))?;
    tch::manual_seed(options.seed);
    let block = if options.layers0_prefix {
        "layers.0"
    } else {
        "midlayer"
    };
    let mut tensors = random_head_tensors(c, options, block, inter, draft_vocab);
    take_initial_tensors(&mut tensors, options, dir)?;
    let extra = if options.reduced_vocab || options.used_tokens.is_some() {
        DraftVocabulary::of_target_ids(&used).tensors(vocab)
    } else {
        Vec::new()
    };
    write_f32_safetensors(&dir.join("model.safetensors"), &tensors, &extra)
        .map_err(|e| checkpoint_error(dir, e))
}

/// The f32 tensors of a random head in block `block` (`midlayer` or `layers.0`), in checkpoint order:
/// `fc`, the layer's norms, attention (with zero biases when asked) and MLP, the final norm, the draft
/// LM head `[draft_vocab, H]`, and EAGLE 3.1's feature norms.
fn random_head_tensors(
    c: &sharpdraft_model::ModelConfig,
    options: &RandomHeadOptions,
    block: &str,
    inter: i64,
    draft_vocab: i64,
) -> Vec<(String, Tensor)> {
    let h = c.hidden_size;
    let (heads, kv_heads, head_dim) = (c.num_heads, c.num_kv_heads, c.head_dim);
    let (random, norm) = (random_weight, random_norm);
    let mut tensors: Vec<(String, Tensor)> = vec![
        ("fc.weight".into(), random(&[h, 3 * h], 0.1)),
        (format!("{block}.hidden_norm.weight"), norm(h)),
        (format!("{block}.input_layernorm.weight"), norm(h)),
        (format!("{block}.post_attention_layernorm.weight"), norm(h)),
        (
            format!("{block}.self_attn.q_proj.weight"),
            random(&[heads * head_dim, 2 * h], 0.1),
        ),
        (
            format!("{block}.self_attn.k_proj.weight"),
            random(&[kv_heads * head_dim, 2 * h], 0.1),
        ),
        (
            format!("{block}.self_attn.v_proj.weight"),
            random(&[kv_heads * head_dim, 2 * h], 0.1),
        ),
        (
            format!("{block}.self_attn.o_proj.weight"),
            random(&[h, heads * head_dim], 0.1),
        ),
        (
            format!("{block}.mlp.gate_proj.weight"),
            random(&[inter, h], 0.1),
        ),
        (
            format!("{block}.mlp.up_proj.weight"),
            random(&[inter, h], 0.1),
        ),
        (
            format!("{block}.mlp.down_proj.weight"),
            random(&[h, inter], 0.1),
        ),
        ("norm.weight".into(), norm(h)),
        ("lm_head.weight".into(), random(&[draft_vocab, h], 0.3)),
    ];
    if options.eagle31 {
        for i in 0..3 {
            tensors.push((format!("fc_norm.{i}.weight"), norm(h)));
        }
    }
    if options.attention_bias {
        let zeros = |n: i64| Tensor::zeros([n], (Kind::Float, tch::Device::Cpu));
        for (name, width) in [
            ("q_proj", heads * head_dim),
            ("k_proj", kv_heads * head_dim),
            ("v_proj", kv_heads * head_dim),
            ("o_proj", h),
        ] {
            tensors.push((format!("{block}.self_attn.{name}.bias"), zeros(width)));
        }
    }
    tensors
}

/// Replaces the random tensors `options.initial` names (a warm start) with the given values, checking
/// each name and shape.
fn take_initial_tensors(
    tensors: &mut [(String, Tensor)],
    options: &RandomHeadOptions,
    dir: &Path,
) -> Result<()> {
    for (name, initial) in &options.initial {
        let slot = tensors
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| checkpoint_error(dir, format!("no head tensor {name} to initialise")))?;
        if slot.1.size() != initial.size() {
            return Err(checkpoint_error(
                dir,
                format!(
                    "{name}: initial shape {:?}, the head needs {:?}",
                    initial.size(),
                    slot.1.size()
                ),
            ));
        }
        slot.1 = initial.to_kind(Kind::Float).to_device(tch::Device::Cpu);
    }
    Ok(())
}
