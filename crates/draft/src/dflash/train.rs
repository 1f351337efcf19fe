//! DFlash training objective (docs/drafters.md §4.4): random anchors in each window; the block
//! `[anchor token, MASK x (B - 1)]` at positions `anchor + 0..B` sees the fused target context strictly
//! before its anchor and its own block (bidirectionally, as at inference), never other blocks. Block row
//! k >= 1 is scored against the target's distribution for token `anchor + k` (row `anchor + k - 1` of the
//! window), weighted `exp(-(k - 1) / gamma)`: early rows decide acceptance, so they weigh most.
//!
//! All anchors of a window go through the drafter in one pass: queries `[A B, H]` over keys
//! `[context T | blocks A B]` with a block-diagonal mask.

use crate::dflash::{default_target_layers, DFlashDrafter};
use crate::draft_vocabulary::DraftVocabulary;
use crate::drafter::Drafter;
use crate::drafter::{DraftError, Result};
use crate::eagle3::train::frequent_tokens;
use crate::random_init::{write_config, write_f32_safetensors, TargetWeights};
use crate::training::{step_rng, weighted_mean, Objective, TrainWindow};
use rand::seq::index::sample;
use serde::{Deserialize, Serialize};
use sharpdraft_model::attention::attend;
use sharpdraft_model::{visible_counts, CausalLm, Tap, Transformer};
use std::borrow::Borrow;
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// The `dflash:` block of a training config.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DFlashOptions {
    /// Drafter depth.
    pub layers: usize,
    /// Block size B: one root and B - 1 drafts per cycle.
    pub block_size: i64,
    /// The mask token id (an id of the target's vocabulary that text never uses).
    pub mask_token: i64,
    /// Loss decay over block rows (gamma; 7 for B = 16, 4 for B = 8 in the public recipes).
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// Anchors drawn per window.
    #[serde(default = "default_anchors")]
    pub anchors: usize,
    /// Target layers whose outputs are fused; default DFlash's evenly spaced layers.
    #[serde(default)]
    pub target_layer_ids: Option<Vec<usize>>,
    /// Draft over the V most frequent tokens of the training windows (their rows of the target's
    /// head only); 0, the default, over the whole vocabulary.
    #[serde(default)]
    pub draft_vocab: i64,
}

fn default_gamma() -> f64 {
    4.0
}
fn default_anchors() -> usize {
    32
}

impl DFlashOptions {
    /// The target layers whose outputs the drafter reads.
    pub fn target_layers(&self, target_layers: usize) -> Vec<usize> {
        self.target_layer_ids
            .clone()
            .unwrap_or_else(|| default_target_layers(target_layers, self.layers))
    }

    pub fn taps(&self, target_layers: usize) -> Vec<Tap> {
        self.target_layers(target_layers)
            .into_iter()
            .map(Tap::LayerOutput)
            .collect()
    }
}

/// Writes the starting drafter into `dir`, warm-started from the target: drafter layer i copies target
/// layer `L - layers + i` (the late layers, whose outputs the target's LM head reads), the final norm is
/// the target's, `fc` passes the deepest captured feature through (identity on its slice, zero
/// elsewhere), and q/k norms start at one (the target has none). A Qwen2 target's q/k/v biases come
/// along: the drafter is written with `attention_bias`, which in DFlash's (Qwen3's) layout also gives
/// o_proj a bias, started at zero.
pub fn init(
    dir: &Path,
    target: &CausalLm,
    windows: &[TrainWindow],
    options: &DFlashOptions,
) -> Result<()> {
    let c = &target.net.config;
    let ids = options.target_layers(c.num_layers);
    if options.draft_vocab < 0 || options.draft_vocab > c.vocab_size {
        return Err(DraftError::InvalidOption {
            option: "dflash.draft_vocab".into(),
            value: options.draft_vocab.to_string(),
            reason: format!(
                "must be 0 (the whole vocabulary) up to the target's {}",
                c.vocab_size
            ),
        });
    }
    // The draft vocabulary: the most frequent tokens of the windows (the target's answers).
    let vocabulary = (options.draft_vocab > 0 && options.draft_vocab < c.vocab_size).then(|| {
        DraftVocabulary::of_target_ids(&frequent_tokens(windows, c.vocab_size, options.draft_vocab))
    });
    let mut config = serde_json::json!({
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "block_size": options.block_size, "num_target_layers": c.num_layers, "num_hidden_layers": options.layers,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim, "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta, "max_position_embeddings": c.max_position_embeddings,
        "attention_bias": c.qkv_bias, "tie_word_embeddings": false, "vocab_size": c.vocab_size,
        "layer_types": vec!["full_attention"; options.layers], "dtype": "float32",
        "dflash_config": {"mask_token_id": options.mask_token, "target_layer_ids": ids, "block_size": options.block_size},
    });
    if let Some(vocabulary) = &vocabulary {
        config["draft_vocab_size"] = vocabulary.len().into();
    }
    write_config(dir, &config).map_err(|e| DraftError::Checkpoint {
        path: dir.display().to_string(),
        reason: e,
    })?;
    let weights = TargetWeights::of(target);
    let get = |name: &str| weights.get(name);
    let h = c.hidden_size;
    let ones = |n: i64| Tensor::ones([n], (Kind::Float, Device::Cpu));
    let fc = Tensor::zeros([h, ids.len() as i64 * h], (Kind::Float, Device::Cpu));
    fc.narrow(1, (ids.len() as i64 - 1) * h, h)
        .copy_(&Tensor::eye(h, (Kind::Float, Device::Cpu)));
    let mut tensors = vec![
        ("fc.weight".to_string(), fc),
        ("hidden_norm.weight".into(), ones(h)),
        ("norm.weight".into(), get("model.norm.weight")?),
    ];
    let first = c.num_layers.saturating_sub(options.layers);
    for i in 0..options.layers {
        let source = format!("model.layers.{}", (first + i).min(c.num_layers - 1));
        tensors.extend(warm_started_layer(i, &source, c, &weights)?);
    }
    let extra = match &vocabulary {
        Some(vocabulary) => vocabulary.tensors(c.vocab_size),
        None => Vec::new(),
    };
    write_f32_safetensors(&dir.join("model.safetensors"), &tensors, &extra).map_err(|e| {
        DraftError::Checkpoint {
            path: dir.display().to_string(),
            reason: e,
        }
    })
}

/// Drafter layer `i`'s tensors from target layer `source` (of config `c`): every weight copied, a
/// Qwen2 target's q/k/v biases with a zero o_proj bias, and q/k norms of one.
fn warm_started_layer(
    i: usize,
    source: &str,
    c: &sharpdraft_model::ModelConfig,
    weights: &TargetWeights,
) -> Result<Vec<(String, Tensor)>> {
    let get = |name: &str| weights.get(name);
    let ones = |n: i64| Tensor::ones([n], (Kind::Float, Device::Cpu));
    let mut tensors = Vec::new();
    for part in [
        "input_layernorm",
        "post_attention_layernorm",
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ] {
        tensors.push((
            format!("layers.{i}.{part}.weight"),
            get(&format!("{source}.{part}.weight"))?,
        ));
    }
    if c.qkv_bias {
        for part in ["q_proj", "k_proj", "v_proj"] {
            tensors.push((
                format!("layers.{i}.self_attn.{part}.bias"),
                get(&format!("{source}.self_attn.{part}.bias"))?,
            ));
        }
        tensors.push((
            format!("layers.{i}.self_attn.o_proj.bias"),
            Tensor::zeros([c.hidden_size], (Kind::Float, Device::Cpu)),
        ));
    }
    tensors.push((
        format!("layers.{i}.self_attn.q_norm.weight"),
        ones(c.head_dim),
    ));
    tensors.push((
        format!("layers.{i}.self_attn.k_norm.weight"),
        ones(c.head_dim),
    ));
    Ok(tensors)
}

/// The objective over a DFlash drafter `D`: owned when training offline, borrowed from the drafter that
/// drafts with it when adapting online (one set of weights).
pub struct DFlashObjective<'t, D: Borrow<DFlashDrafter> = DFlashDrafter> {
    target: &'t Transformer,
    drafter: D,
    /// Target id -> draft id or -1, `[vocab]`, when the drafter has a draft vocabulary.
    to_draft: Option<Tensor>,
    options: DFlashOptions,
    seed: u64,
}

impl<'t> DFlashObjective<'t> {
    /// Loads the drafter in `dir` for training.
    pub fn load(
        dir: &Path,
        target: &'t Transformer,
        options: &DFlashOptions,
        seed: u64,
    ) -> Result<Self> {
        Ok(Self::over(
            DFlashDrafter::load(dir, target, 1)?,
            target,
            options,
            seed,
        ))
    }
}

impl<'t, D: Borrow<DFlashDrafter>> DFlashObjective<'t, D> {
    /// The anchors of training step `step` over a window of `t` tokens with blocks of `b`, sorted:
    /// `options.anchors` of 1..=T - B + 1 (a non-empty context, and the last block row's target row
    /// a + B - 2 in the window), drawn from the objective's seed and the step.
    fn anchors(&self, t: i64, b: i64, step: usize) -> Result<Vec<i64>> {
        let last_anchor = t - b + 1;
        if last_anchor < 1 {
            return Err(DraftError::InvalidOption {
                option: "n0".into(),
                value: t.to_string(),
                reason: format!("too short for blocks of {b}"),
            });
        }
        let count = self.options.anchors.min(last_anchor as usize);
        let mut anchors: Vec<i64> =
            sample(&mut step_rng(self.seed, step), last_anchor as usize, count)
                .into_iter()
                .map(|a| a as i64 + 1)
                .collect();
        anchors.sort_unstable();
        Ok(anchors)
    }

    /// The objective over `drafter`'s own weights; `seed` draws the anchors.
    pub fn over(drafter: D, target: &'t Transformer, options: &DFlashOptions, seed: u64) -> Self {
        let to_draft = (drafter.borrow().draft_vocabulary()).map(|v| {
            v.target_to_draft(target.config.vocab_size)
                .to_device(target.device())
        });
        Self {
            target,
            drafter,
            to_draft,
            options: options.clone(),
            seed,
        }
    }
}

/// Visibility `[A B, T + A B]` of blocks of `block` rows at `anchors` over `[context T | blocks]`: block j
/// sees the context strictly before its anchor (within `window` keys of each row, if set) and its own rows
/// (only earlier ones when `causal`), never another block.
pub fn block_visibility(
    anchors: &[i64],
    context: i64,
    block: i64,
    causal: bool,
    window: Option<i64>,
) -> Tensor {
    let rows = anchors.len() as i64 * block;
    let keys = context + rows;
    let mut visible = vec![false; (rows * keys) as usize];
    for (j, &anchor) in anchors.iter().enumerate() {
        for r in 0..block {
            let row = j as i64 * block + r;
            let position = anchor + r;
            let line = &mut visible[(row * keys) as usize..((row + 1) * keys) as usize];
            for (key, seen) in line.iter_mut().enumerate().take(anchor as usize) {
                *seen = window.is_none_or(|w| key as i64 > position - w);
            }
            for r2 in 0..block {
                line[(context + j as i64 * block + r2) as usize] = !causal || r2 <= r;
            }
        }
    }
    Tensor::from_slice(&visible).view([rows, keys])
}

sharpdraft_model::scaled_through!(DFlashObjective<'_>, drafter);

impl<D: Borrow<DFlashDrafter>> Objective for DFlashObjective<'_, D> {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.drafter.borrow().linears()
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.drafter.borrow().target_taps()
    }

    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.drafter.borrow().vars.variables().into_iter().collect()
    }

    fn loss(&self, window: &TrainWindow, step: usize) -> Result<Tensor> {
        let d = self.drafter.borrow();
        let device = self.target.device();
        let t = window.tokens.len() as i64;
        let b = d.block_size;
        let anchors = self.anchors(t, b, step)?;
        let features = window
            .features
            .as_ref()
            .ok_or_else(|| DraftError::Protocol("DFlash training needs target features".into()))?
            .to_device(device);
        let c = d.hidden_norm.forward(&d.fc.forward(&features)); // [T, H]
        let (ctx_cos, ctx_sin) = d
            .rope
            .tables(&Tensor::arange(t, (Kind::Int64, device)), Kind::Float);
        let mut ids = Vec::with_capacity(anchors.len() * b as usize);
        let mut positions = Vec::with_capacity(ids.capacity());
        for &a in &anchors {
            ids.push(window.tokens[a as usize]);
            ids.extend(std::iter::repeat_n(d.mask_token, b as usize - 1));
            positions.extend(a..a + b);
        }
        let positions = Tensor::from_slice(&positions).to_device(device);
        let (cos, sin) = d.rope.tables(&positions, Kind::Float);
        let mut x = tch::no_grad(|| {
            self.target
                .embed(&Tensor::from_slice(&ids).to_device(device))
        })
        .to_kind(Kind::Float);
        // One mask per distinct sliding window (usually one for the whole stack).
        let mut masks: Vec<(Option<i64>, Tensor)> = Vec::new();
        for window in d.layers.iter().map(|layer| layer.window) {
            if !masks.iter().any(|(w, _)| *w == window) {
                let mask = block_visibility(&anchors, t, b, d.causal, window).to_device(device);
                masks.push((window, mask));
            }
        }
        for (layer_index, layer) in d.layers.iter().enumerate() {
            let mask = &masks
                .iter()
                .find(|(w, _)| *w == layer.window)
                .expect("built above")
                .1;
            let y = layer.input_layernorm.forward(&x);
            let mut q = layer.queries(&y, &cos, &sin);
            let (kc, vc) = layer.keys_values(&c, &ctx_cos, &ctx_sin);
            let (kb, vb) = layer.keys_values(&y, &cos, &sin);
            let keys = Tensor::cat(&[kc, kb], 1);
            if !d.query_scaling().is_off() {
                // Row counts: the context before the anchor plus the visible rows of its block.
                let counts = visible_counts(Some(mask), q.size()[1], keys.size()[1])?;
                q = d.query_scaling().scaled(&q, layer_index, &counts)?;
            }
            let values = Tensor::cat(&[vc, vb], 1);
            x = layer.finish(
                &x,
                &attend(
                    &q,
                    &keys,
                    &values,
                    Some(mask),
                    1.0 / (d.head_dim as f64).sqrt(),
                ),
            );
        }
        // Rows k = 1..B of every block: [A, B - 1, H] -> [A (B - 1), H].
        let a = anchors.len() as i64;
        let drafted = x
            .view([a, b, -1])
            .narrow(1, 1, b - 1)
            .reshape([a * (b - 1), -1]);
        let log_q = d
            .draft_logits(self.target, &d.norm.forward(&drafted))
            .log_softmax(-1, Kind::Float);
        // Block row k of anchor a predicts token a + k: the target's row a + k - 1.
        let rows: Vec<i64> = anchors
            .iter()
            .flat_map(|&anchor| (1..b).map(move |k| anchor + k - 1))
            .collect();
        let rows = Tensor::from_slice(&rows).to_device(device);
        let ids = window.top_ids.to_device(device).index_select(0, &rows);
        let probs = window.top_probs.to_device(device).index_select(0, &rows);
        // Over a draft vocabulary, the target's mass outside it trains nothing (as EAGLE-3's t2d).
        let (ids, probs) = match &self.to_draft {
            Some(to_draft) => {
                let draft_ids = to_draft.index_select(0, &ids.flatten(0, -1)).view_as(&ids);
                let held = draft_ids.ge(0).to_kind(Kind::Float);
                (draft_ids.clamp_min(0), probs * held)
            }
            None => (ids, probs),
        };
        let weights: Vec<f32> = (0..a)
            .flat_map(|_| (1..b).map(|k| (-((k - 1) as f64) / self.options.gamma).exp() as f32))
            .collect();
        let weights = Tensor::from_slice(&weights).to_device(device) * window.weights_of(&rows);
        let losses = window.divergence.rows(&log_q, &ids, &probs);
        Ok(weighted_mean(&losses, &weights))
    }

    fn save(&self, dir: &Path, n0: i64) -> Result<()> {
        self.drafter.borrow().save(dir, n0)
    }
}
