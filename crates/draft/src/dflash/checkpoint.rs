//! A randomly initialised DFlash drafter in the published layout (what `init dflash` and training
//! start from).

use super::config::{checkpoint_error, MAX_BLOCK_SIZE};
use super::default_target_layers;
use crate::drafter::{DraftError, Result};
use crate::random_init::{random_norm, random_weight, write_config, write_f32_safetensors};
use sharpdraft_model::Transformer;
use std::path::Path;
use tch::Tensor;

/// Shape options of [`write_random_dflash`].
pub struct RandomDFlashOptions {
    pub layers: usize,
    pub block_size: i64,
    /// Make the last layer a sliding-window layer of this many keys.
    pub sliding_window: Option<i64>,
    pub mask_token: i64,
    pub seed: i64,
}

impl RandomDFlashOptions {
    /// Options that write a drafter its own loader accepts and whose weights fit in memory: 1 to the
    /// target's layer count, a block of 2..=MAX_BLOCK_SIZE, a mask token inside the vocabulary.
    pub fn validate(&self, target: &sharpdraft_model::ModelConfig) -> Result<()> {
        let invalid = |option: &str, value: String, reason: String| DraftError::InvalidOption {
            option: option.into(),
            value,
            reason,
        };
        if self.layers == 0 || self.layers > target.num_layers {
            return Err(invalid(
                "--layers",
                self.layers.to_string(),
                format!(
                    "must lie in 1..={} (a DFlash drafter is at most as deep as its {}-layer target)",
                    target.num_layers, target.num_layers
                ),
            ));
        }
        if !(2..=MAX_BLOCK_SIZE).contains(&self.block_size) {
            return Err(invalid(
                "--block-size",
                self.block_size.to_string(),
                format!("must lie in 2..={MAX_BLOCK_SIZE} (the anchor and at least one mask)"),
            ));
        }
        if self.mask_token < 0 || self.mask_token >= target.vocab_size {
            return Err(invalid(
                "--mask-token",
                self.mask_token.to_string(),
                format!(
                    "must be a token id of the target's vocabulary, 0..{}",
                    target.vocab_size
                ),
            ));
        }
        if self.sliding_window == Some(0) {
            return Err(invalid(
                "sliding_window",
                "0".into(),
                "must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Writes a randomly initialised DFlash drafter for `target` in the published layout (config.json with
/// `dflash_config`, model.safetensors with `fc`, `hidden_norm`, `layers.N.*`, `norm`). It drafts badly but
/// exercises every code path; tests and smoke runs use it, and training starts from it.
pub fn write_random_dflash(
    dir: &Path,
    target: &Transformer,
    options: &RandomDFlashOptions,
) -> Result<()> {
    let c = &target.config;
    options.validate(c)?;
    let (h, heads, kv_heads, head_dim, inter) = (
        c.hidden_size,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        2 * c.hidden_size,
    );
    let ids = default_target_layers(c.num_layers, options.layers)
        .into_iter()
        .map(|i| i.min(c.num_layers - 1))
        .collect::<Vec<_>>();
    let mut layer_types = vec!["full_attention"; options.layers];
    if options.sliding_window.is_some() {
        layer_types[options.layers - 1] = "sliding_attention";
    }
    let config = serde_json::json!({
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "block_size": options.block_size, "num_target_layers": c.num_layers, "num_hidden_layers": options.layers,
        "hidden_size": h, "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "max_position_embeddings": 4096,
        "attention_bias": false, "tie_word_embeddings": false, "vocab_size": c.vocab_size,
        "layer_types": layer_types, "sliding_window": options.sliding_window, "dtype": "float32",
        "dflash_config": {"mask_token_id": options.mask_token, "target_layer_ids": ids},
    });
    write_config(dir, &config).map_err(|e| checkpoint_error(dir, e))?;
    tch::manual_seed(options.seed);
    let (random, norm) = (random_weight, random_norm);
    let mut tensors: Vec<(String, Tensor)> = vec![
        ("fc.weight".into(), random(&[h, ids.len() as i64 * h], 0.1)),
        ("hidden_norm.weight".into(), norm(h)),
        ("norm.weight".into(), norm(h)),
    ];
    for i in 0..options.layers {
        let p = format!("layers.{i}");
        tensors.extend([
            (format!("{p}.input_layernorm.weight"), norm(h)),
            (format!("{p}.post_attention_layernorm.weight"), norm(h)),
            (
                format!("{p}.self_attn.q_proj.weight"),
                random(&[heads * head_dim, h], 0.1),
            ),
            (
                format!("{p}.self_attn.k_proj.weight"),
                random(&[kv_heads * head_dim, h], 0.1),
            ),
            (
                format!("{p}.self_attn.v_proj.weight"),
                random(&[kv_heads * head_dim, h], 0.1),
            ),
            (
                format!("{p}.self_attn.o_proj.weight"),
                random(&[h, heads * head_dim], 0.1),
            ),
            (format!("{p}.self_attn.q_norm.weight"), norm(head_dim)),
            (format!("{p}.self_attn.k_norm.weight"), norm(head_dim)),
            (
                format!("{p}.mlp.gate_proj.weight"),
                random(&[inter, h], 0.1),
            ),
            (format!("{p}.mlp.up_proj.weight"), random(&[inter, h], 0.1)),
            (
                format!("{p}.mlp.down_proj.weight"),
                random(&[h, inter], 0.1),
            ),
        ]);
    }
    write_f32_safetensors(&dir.join("model.safetensors"), &tensors, &[])
        .map_err(|e| checkpoint_error(dir, e))
}
