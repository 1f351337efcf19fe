//! A DFlash checkpoint's config.json: its keys, the defaults DFlash's code fills in, and the checks
//! against the target that loading makes before declaring a variable.

use crate::drafter::{DraftError, Result};
use serde::Deserialize;
use sharpdraft_model::Transformer;
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
pub struct DFlashExtras {
    pub mask_token_id: Option<i64>,
    #[serde(default)]
    pub target_layer_ids: Option<Vec<usize>>,
    /// Newer checkpoints keep the block size here.
    #[serde(default)]
    pub block_size: Option<i64>,
    /// A causal block instead of a bidirectional one.
    #[serde(default)]
    pub causal: bool,
}

/// `config.json` of a DFlash drafter (`DFlashDraftModel`), field names verbatim.
#[derive(Debug, Clone, Deserialize)]
pub struct DFlashConfig {
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: usize,
    pub num_attention_heads: i64,
    #[serde(default)]
    pub num_key_value_heads: Option<i64>,
    #[serde(default)]
    pub head_dim: Option<i64>,
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    pub max_position_embeddings: i64,
    #[serde(default)]
    pub attention_bias: bool,
    pub vocab_size: i64,
    #[serde(default)]
    pub block_size: Option<i64>,
    #[serde(default)]
    pub num_target_layers: Option<usize>,
    /// `full_attention` or `sliding_attention` per layer.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub sliding_window: Option<i64>,
    pub dflash_config: DFlashExtras,
    /// SharpDraft's draft vocabulary size V (EAGLE-3's key): the drafter drafts over V tokens through
    /// the target's head rows of `d2t`; absent, over the whole vocabulary.
    #[serde(default)]
    pub draft_vocab_size: Option<i64>,
    /// SharpDraft's record of the drafter's training length n0.
    #[serde(default)]
    pub training_length: Option<i64>,
}

/// DFlash's default capture layers: the middle layer for one drafter layer, else evenly spaced from 1 to
/// L - 3 (`round(1 + i (L - 4) / (n - 1))`).
pub fn default_target_layers(target_layers: usize, draft_layers: usize) -> Vec<usize> {
    if draft_layers <= 1 {
        return vec![target_layers / 2];
    }
    let span = target_layers.saturating_sub(4) as f64;
    (0..draft_layers)
        .map(|i| (1.0 + i as f64 * span / (draft_layers - 1) as f64).round() as usize)
        .collect()
}

pub(super) fn checkpoint_error(path: &Path, reason: impl Into<String>) -> DraftError {
    DraftError::Checkpoint {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// A DFlash config.json read and checked against its target: everything [`super::DFlashDrafter::load`]
/// needs before declaring a variable.
pub(super) struct CheckedConfig {
    pub(super) config: DFlashConfig,
    /// config.json as read (saving keeps every key).
    pub(super) raw: serde_json::Value,
    pub(super) mask_token: i64,
    pub(super) block_size: i64,
    /// Target layers whose outputs the drafter reads.
    pub(super) target_layer_ids: Vec<usize>,
    /// Per drafter layer: `Some(window)` for a sliding-window layer.
    pub(super) windows: Vec<Option<i64>>,
}

impl CheckedConfig {
    /// Reads `dir/config.json` and checks it against `target`: mask token in the vocabulary, hidden and
    /// vocabulary sizes equal to the target's, block size, capture layers and layer types. Each error
    /// names the key.
    pub(super) fn read(dir: &Path, target: &Transformer) -> Result<Self> {
        crate::checkpoint_kind::expect_kind(dir, crate::DrafterKind::Dflash)?;
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .map_err(|e| checkpoint_error(&config_path, e.to_string()))?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let config: DFlashConfig = serde_path_to_error::deserialize(de)
            .map_err(|e| checkpoint_error(&config_path, format!("{}: {}", e.path(), e.inner())))?;
        let t = &target.config;
        let mask_token = config.dflash_config.mask_token_id.ok_or_else(|| {
            checkpoint_error(&config_path, "dflash_config.mask_token_id is missing")
        })?;
        if mask_token < 0 || mask_token >= t.vocab_size {
            return Err(checkpoint_error(
                &config_path,
                format!(
                    "dflash_config.mask_token_id {mask_token} outside the target vocabulary of {}",
                    t.vocab_size
                ),
            ));
        }
        if config.hidden_size != t.hidden_size {
            return Err(DraftError::Mismatch(format!("DFlash hidden_size {} must equal the target's {} (it shares embedding and LM head)", config.hidden_size, t.hidden_size)));
        }
        if config.vocab_size != t.vocab_size {
            return Err(DraftError::Mismatch(format!(
                "DFlash vocab_size {} differs from the target's {}",
                config.vocab_size, t.vocab_size
            )));
        }
        let block_size = config
            .dflash_config
            .block_size
            .or(config.block_size)
            .unwrap_or(16);
        if !(2..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(checkpoint_error(
                &config_path,
                format!("block_size {block_size} must lie in 2..={MAX_BLOCK_SIZE}"),
            ));
        }
        let n = config.num_hidden_layers;
        let ids = config
            .dflash_config
            .target_layer_ids
            .clone()
            .unwrap_or_else(|| default_target_layers(t.num_layers, n));
        if ids.is_empty() || ids.iter().any(|&i| i >= t.num_layers) {
            return Err(DraftError::Mismatch(format!(
                "DFlash target_layer_ids {ids:?} do not fit a {}-layer target",
                t.num_layers
            )));
        }
        let layer_types = config
            .layer_types
            .clone()
            .unwrap_or_else(|| vec!["full_attention".into(); n]);
        if layer_types.len() != n {
            return Err(checkpoint_error(
                &config_path,
                format!(
                    "layer_types has {} entries for {n} layers",
                    layer_types.len()
                ),
            ));
        }
        let windows = layer_types
            .iter()
            .enumerate()
            .map(|(i, kind)| match kind.as_str() {
                "full_attention" => Ok(None),
                "sliding_attention" => config.sliding_window.map(Some).ok_or_else(|| {
                    checkpoint_error(
                        &config_path,
                        "a sliding_attention layer needs sliding_window",
                    )
                }),
                other => Err(checkpoint_error(
                    &config_path,
                    format!("layer_types[{i}] = {other:?} (full_attention or sliding_attention)"),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        let raw = serde_json::from_str(&text)
            .map_err(|e| checkpoint_error(&config_path, e.to_string()))?;
        Ok(Self {
            config,
            raw,
            mask_token,
            block_size,
            target_layer_ids: ids,
            windows,
        })
    }
}

/// The largest block a DFlash drafter drafts in one pass (the target verifies it in one pass too).
pub const MAX_BLOCK_SIZE: i64 = 256;
