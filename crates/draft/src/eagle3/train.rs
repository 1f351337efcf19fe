//! EAGLE-3 (or EAGLE 3.1) training objective (docs/drafters.md §2.4): the training-time test
//! ([`Eagle3Head::ttt_loss`]) against the target's top-k distribution restricted to a draft vocabulary of
//! the most frequent training tokens (d2t/t2d).

use crate::drafter::Result;
use crate::eagle3::{write_random_head, Eagle3Head, RandomHeadOptions};
use crate::random_init::TargetWeights;
use crate::training::{Objective, TrainWindow};
use serde::{Deserialize, Serialize};
use sharpdraft_model::{CausalLm, QueryScaling, ScaledQueries, Tap, Transformer};
use std::borrow::Borrow;
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// The `eagle3:` block of a training config.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Eagle3Options {
    /// Unrolled training-time-test steps (the tree depth the head learns to draft).
    #[serde(default = "default_ttt")]
    pub ttt_steps: usize,
    /// Weight of step j's loss: `ttt_decay^j`.
    #[serde(default = "default_decay")]
    pub ttt_decay: f64,
    /// Size of the reduced draft vocabulary.
    pub draft_vocab: i64,
    /// EAGLE 3.1: RMSNorm per captured feature before fc, norm on the output.
    #[serde(default)]
    pub eagle31: bool,
    /// Start from the target instead of random weights ([`warm_start`]).
    #[serde(default = "default_warm_start")]
    pub warm_start: bool,
    /// The three target layers whose inputs the head reads (EAGLE's
    /// `eagle_aux_hidden_state_layer_ids`); default `[2, L/2, L-3]`. With `init:`, the checkpoint's own
    /// layers are used and this, when given, must match them.
    #[serde(default)]
    pub capture_layers: Option<Vec<usize>>,
}

fn default_warm_start() -> bool {
    true
}

fn default_ttt() -> usize {
    5
}
fn default_decay() -> f64 {
    0.8
}

/// The `size` most frequent target ids of the windows (ties by id), sorted: the draft vocabulary.
pub fn frequent_tokens(windows: &[TrainWindow], vocab: i64, size: i64) -> Vec<i64> {
    let mut counts = vec![0u64; vocab as usize];
    for window in windows {
        for &t in &window.tokens {
            counts[t as usize] += 1;
        }
    }
    let mut order: Vec<i64> = (0..vocab).collect();
    order.sort_by(|&a, &b| counts[b as usize].cmp(&counts[a as usize]).then(a.cmp(&b)));
    let mut used: Vec<i64> = order.into_iter().take(size.min(vocab) as usize).collect();
    used.sort_unstable();
    used
}

/// Writes the starting head into `dir`: draft vocabulary from the windows' token counts, weights random
/// or (`warm_start`) taken from the target.
pub fn init(
    dir: &Path,
    target: &CausalLm,
    windows: &[TrainWindow],
    options: &Eagle3Options,
    seed: u64,
) -> Result<()> {
    let used = frequent_tokens(windows, target.net.config.vocab_size, options.draft_vocab);
    let (intermediate_size, initial) = if options.warm_start {
        (
            Some(target.net.config.intermediate_size),
            warm_start(target, windows, &used, options.eagle31, seed)?,
        )
    } else {
        (None, Vec::new())
    };
    let random = RandomHeadOptions {
        eagle31: options.eagle31,
        aux_layers: options.capture_layers.clone(),
        used_tokens: Some(used),
        intermediate_size,
        // A Qwen2 target's last layer brings q/k/v biases to the warm start.
        attention_bias: options.warm_start && target.net.config.qkv_bias,
        initial,
        seed: seed as i64,
        ..Default::default()
    };
    write_random_head(dir, &target.net, &random)
}

/// A head that starts as the target's last layer read off the deepest captured feature: `fc` passes
/// that feature through (scaled back to its mean RMS over the windows when EAGLE 3.1's `fc_norm` has
/// normalised it), the layer's norms, attention (on the feature half of its 2H input; the embedding half
/// starts small) and MLP are the target's last layer, and `norm` / `lm_head` are the target's final norm
/// and its LM head rows of the draft vocabulary `used` (a Qwen2 target's q/k/v biases too, in a head
/// written with `attention_bias`), at the target's RoPE base. With a few hundred thousand training
/// tokens a
/// random head never learns the target's output space; this one starts in it and only has to learn to
/// look one token further.
pub fn warm_start(
    target: &CausalLm,
    windows: &[TrainWindow],
    used: &[i64],
    eagle31: bool,
    seed: u64,
) -> Result<Vec<(String, Tensor)>> {
    let c = &target.net.config;
    let h = c.hidden_size;
    let cpu = (Kind::Float, Device::Cpu);
    let weights = TargetWeights::of(target);
    let get = |name: &str| weights.get(name);
    let last = format!("model.layers.{}", c.num_layers - 1);
    let head_rows = get("lm_head.weight").or_else(|_| get("model.embed_tokens.weight"))?;
    let used_ids = Tensor::from_slice(used);
    // The deepest tap's mean RMS: what fc_norm divided out, restored so that the residual starts at the
    // scale the target's layer expects.
    let scale = if eagle31 {
        let (mut sum, mut rows) = (0.0, 0i64);
        for window in windows {
            if let Some(features) = &window.features {
                let deepest = features.narrow(1, 2 * h, h).to_device(Device::Cpu);
                let rms = deepest
                    .square()
                    .mean_dim(&[1i64][..], false, Kind::Float)
                    .sqrt();
                sum += rms.sum(Kind::Double).double_value(&[]);
                rows += rms.size()[0];
            }
        }
        if rows == 0 {
            1.0
        } else {
            sum / rows as f64
        }
    } else {
        1.0
    };
    let fc = Tensor::zeros([h, 3 * h], cpu);
    fc.narrow(1, 2 * h, h).copy_(&(Tensor::eye(h, cpu) * scale));
    tch::manual_seed(seed as i64);
    let two_halves = |name: &str| -> Result<Tensor> {
        let w = get(&format!("{last}.self_attn.{name}.weight"))?;
        let embedding_half = Tensor::randn(w.size(), cpu) * 0.02;
        Ok(Tensor::cat(&[embedding_half, w], 1))
    };
    let block = "midlayer";
    let mut initial = vec![
        ("fc.weight".to_string(), fc),
        ("norm.weight".into(), get("model.norm.weight")?),
        (
            "lm_head.weight".into(),
            head_rows.index_select(0, &used_ids),
        ),
        (
            format!("{block}.hidden_norm.weight"),
            get(&format!("{last}.input_layernorm.weight"))?,
        ),
        (
            format!("{block}.input_layernorm.weight"),
            get(&format!("{last}.input_layernorm.weight"))?,
        ),
    ];
    for name in ["q_proj", "k_proj", "v_proj"] {
        initial.push((
            format!("{block}.self_attn.{name}.weight"),
            two_halves(name)?,
        ));
        // A Qwen2 target's q/k/v biases (the head is written with `attention_bias`; o's stays zero).
        if c.qkv_bias {
            initial.push((
                format!("{block}.self_attn.{name}.bias"),
                get(&format!("{last}.self_attn.{name}.bias"))?,
            ));
        }
    }
    initial.push((
        format!("{block}.self_attn.o_proj.weight"),
        get(&format!("{last}.self_attn.o_proj.weight"))?,
    ));
    for part in [
        "post_attention_layernorm",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ] {
        initial.push((
            format!("{block}.{part}.weight"),
            get(&format!("{last}.{part}.weight"))?,
        ));
    }
    if eagle31 {
        for i in 0..3 {
            initial.push((format!("fc_norm.{i}.weight"), Tensor::ones([h], cpu)));
        }
    }
    Ok(initial)
}

/// The objective over an EAGLE-3 head `H`: owned when training offline, borrowed from the drafter that
/// drafts with it when adapting online (one set of weights).
pub struct Eagle3Objective<'t, H: Borrow<Eagle3Head> = Eagle3Head> {
    target: &'t Transformer,
    head: H,
    /// The target layers the head reads (its checkpoint's capture layers).
    taps: Vec<Tap>,
    /// Target id -> draft id or -1, `[vocab]`.
    to_draft: Tensor,
    options: Eagle3Options,
}

impl<'t> Eagle3Objective<'t> {
    /// Loads the head in `dir` for training.
    pub fn load(dir: &Path, target: &'t Transformer, options: &Eagle3Options) -> Result<Self> {
        let (head, taps) = Eagle3Head::load(dir, target, true)?;
        Ok(Self::over(head, taps, target, options))
    }
}

impl<'t, H: Borrow<Eagle3Head>> Eagle3Objective<'t, H> {
    /// The objective over `head`'s own weights, which read the target at `taps`.
    pub fn over(head: H, taps: Vec<Tap>, target: &'t Transformer, options: &Eagle3Options) -> Self {
        let to_draft = head
            .borrow()
            .target_to_draft(target.config.vocab_size)
            .to_device(target.device());
        Self {
            target,
            head,
            taps,
            to_draft,
            options: options.clone(),
        }
    }
}

impl ScaledQueries for Eagle3Objective<'_> {
    fn query_layout(&self) -> (usize, usize) {
        (1, self.head.query_heads())
    }

    fn training_length(&self) -> Option<i64> {
        Some(self.head.training_length())
    }

    fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.head.set_query_scaling(scaling);
    }
}

impl<H: Borrow<Eagle3Head>> Objective for Eagle3Objective<'_, H> {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.head.borrow().linears()
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.taps.clone()
    }

    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.head.borrow().vars.variables().into_iter().collect()
    }

    fn loss(&self, window: &TrainWindow, _step: usize) -> Result<Tensor> {
        let device = self.target.device();
        let tokens = Tensor::from_slice(&window.tokens).to_device(device);
        let embeddings = tch::no_grad(|| self.target.embed(&tokens)).to_kind(Kind::Float);
        let features = window.features.as_ref().ok_or_else(|| {
            crate::DraftError::Protocol("EAGLE-3 training needs target features".into())
        })?;
        // Target ids outside the draft vocabulary contribute nothing (t2d masking of docs/drafters.md §2.4).
        let draft_ids = self
            .to_draft
            .index_select(0, &window.top_ids.flatten(0, -1).to_device(device))
            .view_as(&window.top_ids);
        let probs = window.top_probs.to_device(device) * draft_ids.ge(0).to_kind(Kind::Float);
        let ids = draft_ids.clamp_min(0);
        Ok(self.head.borrow().ttt_loss(
            &embeddings,
            &features.to_device(device),
            (&ids, &probs),
            self.options.ttt_steps,
            self.options.ttt_decay,
            window.divergence,
            window
                .row_weights
                .as_ref()
                .map(|w| w.to_device(device))
                .as_ref(),
        ))
    }

    fn save(&self, dir: &Path, n0: i64) -> Result<()> {
        self.head.borrow().save(dir, n0)
    }
}
