//! `config.json` of an EAGLE-3 head, as published, and the default capture layers.

use serde::Deserialize;
use sharpdraft_model::config::RopeScaling;

/// `config.json` of an EAGLE-3 head (`LlamaForCausalLMEagle3`), field names verbatim.
#[derive(Debug, Clone, Deserialize)]
pub struct Eagle3Config {
    pub hidden_size: i64,
    pub intermediate_size: i64,
    #[serde(default = "one")]
    pub num_hidden_layers: usize,
    pub num_attention_heads: i64,
    #[serde(default)]
    pub num_key_value_heads: Option<i64>,
    #[serde(default)]
    pub head_dim: Option<i64>,
    pub rms_norm_eps: f64,
    /// Llama's flag: biases on q/k/v/o (heads warm-started from a Qwen2 target, whose q/k/v carry them).
    #[serde(default)]
    pub attention_bias: bool,
    /// Absent in the published Llama-3.1 head: the draft then uses 10000, not the target's base.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: i64,
    pub vocab_size: i64,
    #[serde(default)]
    pub draft_vocab_size: Option<i64>,
    #[serde(default)]
    pub target_hidden_size: Option<i64>,
    /// EAGLE 3.1: an RMSNorm per captured target feature before fc.
    #[serde(default)]
    pub fc_norm: bool,
    /// EAGLE 3.1: feed `norm(h)` instead of `h` to the next draft step.
    #[serde(default)]
    pub norm_output: bool,
    /// vLLM flag: the residual is `hidden_norm(g)` instead of `g`.
    #[serde(default)]
    pub norm_before_residual: bool,
    #[serde(default)]
    pub eagle_config: Option<EagleExtras>,
    /// SharpDraft's record of the drafter's training length n0 (absent in published heads).
    #[serde(default)]
    pub training_length: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EagleExtras {
    #[serde(default)]
    pub eagle_aux_hidden_state_layer_ids: Option<Vec<usize>>,
}

fn one() -> usize {
    1
}

/// EAGLE-3's default capture layers for an `layers`-layer target: the inputs of layers 2, L/2 and L-3
/// (low, middle and high features); `[0, L/2, L]` for targets too shallow for that.
pub fn default_capture_layers(layers: usize) -> Vec<usize> {
    if layers >= 4 {
        vec![2, layers / 2, layers - 3]
    } else {
        vec![0, layers / 2, layers]
    }
}
