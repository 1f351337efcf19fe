//! Online adaptation of a drafter from verification: the baselines query scaling is compared with
//! (docs/drafters.md §6: OSD's full-parameter update, LoRA, test-time speculation).
//!
//! Verification already computes the target's distribution at every verified row; [`AdaptingDrafter`]
//! keeps those free labels in a [`VerifiedBuffer`] (token, target features, target top-k distribution,
//! and whether the draft was wrong there) and, every `every` cycles or requests, takes `steps` AdamW
//! steps of the drafter's own training objective ([`crate::training::Objective`]) on the buffer, either
//! on every drafter weight (`full`) or on low-rank adapters of chosen projections (`lora`, merged into
//! the weights after each update, or kept beside them as branches of the drafter's linear maps). The target is never touched; verification stays lossless because
//! the drafter only changes between cycles.

mod adapting;
mod buffer;
mod lora;
mod objective;

pub use adapting::AdaptingDrafter;
pub use buffer::VerifiedBuffer;
pub use lora::{LoraAdapters, LoraForm, LoraTarget};
pub use objective::{Adaptable, OnlineObjective};

use crate::option_value::{display_as_yaml, yaml_value};
use crate::training::Divergence;
use serde::{Deserialize, Serialize};

/// What online adaptation trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdaptMode {
    /// AdamW on every weight the drafter's objective trains (OSD's baseline).
    Full,
    /// Rank-r adapters `W + (alpha / r) B A` on chosen projections, B starting at zero.
    Lora,
}

/// What `every` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UpdateUnit {
    /// Verification cycles within a request (test-time speculation: long outputs are where drafters
    /// decay). The buffer holds the current request's latest rows.
    #[default]
    Cycles,
    /// Finished requests (OSD's protocol: every 8 requests). The buffer holds whole requests; the
    /// update runs when the next request starts.
    Requests,
}

/// Which verified rows the loss learns from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LearnFrom {
    /// Every verified row (the root and every accepted draft): the target's distribution for the next
    /// token.
    #[default]
    All,
    /// Only the rows where the draft was wrong: the last kept row of a cycle whose proposal had a
    /// rejected continuation there (OSD's mistake positions).
    Rejected,
}

/// The largest `every`, `steps`, `buffer` and `top_k` an adaptation configuration may name.
pub const MAX_ADAPT_COUNT: usize = 1 << 20;

/// The `adapt:` block of a drafter specification, and the flags of the commands that draft (`--adapt`
/// names the mode, then `--adapt-*`, `--lora-*`): one default and one validation for both. A flattened
/// `Option<AdaptOptions>` is `Some` when any of its flags is given, and every one of them requires
/// `--adapt`, as YAML's block requires `mode:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
#[group(requires = ADAPT_MODE_FLAG)]
pub struct AdaptOptions {
    /// Adapt the drafter online from verification: full (AdamW on every drafter weight) or lora.
    // Not required by clap's parser (`required = false`): without any adaptation flag the group is
    // absent and this is never read; with one, the group's `requires` asks for it by name.
    #[arg(id = ADAPT_MODE_FLAG, long = ADAPT_MODE_FLAG, value_name = "MODE", value_parser = yaml_value::<AdaptMode>, required = false)]
    pub mode: AdaptMode,
    /// Update every N units (cycles, or requests with unit `requests`).
    #[serde(default = "default_every")]
    #[arg(id = "adapt_every", value_name = "ADAPT_EVERY", long = "adapt-every", default_value_t = default_every())]
    pub every: usize,
    /// cycles (within a request: test-time speculation) or requests (OSD).
    #[serde(default)]
    #[arg(id = "adapt_unit", value_name = "ADAPT_UNIT", long = "adapt-unit", value_parser = yaml_value::<UpdateUnit>, default_value_t)]
    pub unit: UpdateUnit,
    /// AdamW learning rate (OSD: 1e-4, constant), no weight decay.
    #[serde(default = "default_lr")]
    #[arg(id = "adapt_lr", value_name = "ADAPT_LR", long = "adapt-lr", default_value_t = default_lr())]
    pub lr: f64,
    /// Optimizer steps per update.
    #[serde(default = "default_steps")]
    #[arg(id = "adapt_steps", value_name = "ADAPT_STEPS", long = "adapt-steps", default_value_t = default_steps())]
    pub steps: usize,
    /// Verified rows kept for updates (the most recent).
    #[serde(default = "default_buffer")]
    #[arg(id = "adapt_buffer", value_name = "ADAPT_BUFFER", long = "adapt-buffer", default_value_t = default_buffer())]
    pub buffer: usize,
    /// all (every verified row) or rejected (only where the draft was wrong, as OSD).
    #[serde(default)]
    #[arg(id = "adapt_learn_from", value_name = "ADAPT_LEARN_FROM", long = "adapt-learn-from", value_parser = yaml_value::<LearnFrom>, default_value_t)]
    pub learn_from: LearnFrom,
    /// forward_kl (soft cross-entropy, OSD's default), reverse_kl or jsd.
    #[serde(default)]
    #[arg(id = "adapt_loss", value_name = "ADAPT_LOSS", long = "adapt-loss", value_parser = yaml_value::<Divergence>, default_value_t)]
    pub loss: Divergence,
    /// Target probabilities kept per row (the top-k, renormalised).
    #[serde(default = "default_top_k")]
    #[arg(id = "adapt_top_k", value_name = "ADAPT_TOP_K", long = "adapt-top-k", default_value_t = default_top_k())]
    pub top_k: i64,
    /// Global gradient-norm clip.
    #[serde(default = "default_clip")]
    #[arg(id = "adapt_clip", value_name = "ADAPT_CLIP", long = "adapt-clip", default_value_t = default_clip())]
    pub clip: f64,
    /// LoRA rank r.
    #[serde(default = "default_rank")]
    #[arg(id = "lora_rank", value_name = "LORA_RANK", long = "lora-rank", default_value_t = default_rank())]
    pub rank: i64,
    /// LoRA alpha (scale alpha / r); default 2 r.
    #[serde(default)]
    #[arg(id = "lora_alpha", value_name = "LORA_ALPHA", long = "lora-alpha")]
    pub alpha: Option<f64>,
    /// Projections with LoRA adapters (a comma-separated list on the command line): attention, mlp, fc.
    #[serde(default = "default_lora_on")]
    #[arg(id = "lora_on", value_name = "LORA_ON", long = "lora-on", value_parser = yaml_value::<LoraTarget>, value_delimiter = ',', default_values_t = default_lora_on())]
    pub lora_on: Vec<LoraTarget>,
    /// merged (adapters folded into the weights after each update) or unmerged (kept as branches of
    /// the drafter's linear maps).
    #[serde(default)]
    #[arg(id = "lora_form", value_name = "LORA_FORM", long = "lora-form", value_parser = yaml_value::<LoraForm>, default_value_t)]
    pub lora_form: LoraForm,
    /// Seeds the adapters' initialisation and the objective's sampling (anchors, dropped tokens).
    #[serde(default)]
    #[arg(
        id = "adapt_seed",
        value_name = "ADAPT_SEED",
        long = "adapt-seed",
        default_value_t = 0
    )]
    pub seed: u64,
}

display_as_yaml!(AdaptMode, UpdateUnit, LearnFrom, Divergence, LoraForm, LoraTarget);

/// The command line's flag naming the adaptation mode (`--adapt full|lora`), and its argument id.
pub const ADAPT_MODE_FLAG: &str = "adapt";

fn default_every() -> usize {
    8
}
fn default_lr() -> f64 {
    1e-4
}
fn default_steps() -> usize {
    1
}
fn default_buffer() -> usize {
    256
}
fn default_top_k() -> i64 {
    32
}
fn default_clip() -> f64 {
    1.0
}
fn default_rank() -> i64 {
    8
}
fn default_lora_on() -> Vec<LoraTarget> {
    vec![LoraTarget::Attention]
}

impl AdaptOptions {
    /// OSD's defaults for `mode`: updates every 8 cycles, lr 1e-4, one step, clip 1.
    pub fn new(mode: AdaptMode) -> Self {
        Self {
            mode,
            every: default_every(),
            unit: UpdateUnit::default(),
            lr: default_lr(),
            steps: default_steps(),
            buffer: default_buffer(),
            learn_from: LearnFrom::default(),
            loss: Divergence::default(),
            top_k: default_top_k(),
            clip: default_clip(),
            rank: default_rank(),
            alpha: None,
            lora_on: default_lora_on(),
            lora_form: LoraForm::default(),
            seed: 0,
        }
    }

    /// The LoRA scale alpha / r.
    pub fn lora_scale(&self) -> f64 {
        self.alpha.unwrap_or(2.0 * self.rank as f64) / self.rank as f64
    }

    /// Checks every option against its range; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let positive = [
            ("every", self.every),
            ("steps", self.steps),
            ("buffer", self.buffer),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(format!("adapt.{key} = 0: must be at least 1"));
            }
            // Counts of cycles, requests, optimizer steps per update and buffered cycles: beyond this
            // no run ends, and a buffer of that many is never filled (nor allocated).
            if value > MAX_ADAPT_COUNT {
                return Err(format!(
                    "adapt.{key} = {value}: must be at most {MAX_ADAPT_COUNT}"
                ));
            }
        }
        if self.top_k > MAX_ADAPT_COUNT as i64 {
            return Err(format!(
                "adapt.top_k = {}: must be at most {MAX_ADAPT_COUNT} (a vocabulary is smaller)",
                self.top_k
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(format!("adapt.lr = {}: must be a positive number", self.lr));
        }
        if !(self.clip.is_finite() && self.clip > 0.0) {
            return Err(format!(
                "adapt.clip = {}: must be a positive number",
                self.clip
            ));
        }
        if self.top_k < 1 {
            return Err(format!("adapt.top_k = {}: must be at least 1", self.top_k));
        }
        if self.mode == AdaptMode::Full {
            // A LoRA option under full adaptation would be read and ignored. (A value equal to its
            // default cannot be told from one left out, and changes nothing.)
            let given = [
                ("rank", (self.rank != default_rank()).then(|| self.rank.to_string())),
                ("alpha", self.alpha.map(|alpha| alpha.to_string())),
                (
                    "lora_on",
                    (self.lora_on != default_lora_on()).then(|| {
                        let names: Vec<String> = self.lora_on.iter().map(|t| t.to_string()).collect();
                        format!("[{}]", names.join(", "))
                    }),
                ),
                (
                    "lora_form",
                    (self.lora_form != LoraForm::default()).then(|| self.lora_form.to_string()),
                ),
            ];
            if let Some((key, Some(value))) = given.into_iter().find(|(_, value)| value.is_some()) {
                return Err(format!(
                    "adapt.{key} = {value}: a LoRA option, and mode is full (every drafter weight is adapted, no adapters): set mode: lora (--adapt lora) or leave {key} out"
                ));
            }
        }
        if self.mode == AdaptMode::Lora {
            if self.rank < 1 {
                return Err(format!("adapt.rank = {}: must be at least 1", self.rank));
            }
            if let Some(alpha) = self.alpha.filter(|a| !(a.is_finite() && *a > 0.0)) {
                return Err(format!("adapt.alpha = {alpha}: must be a positive number"));
            }
            if self.lora_on.is_empty() {
                return Err("adapt.lora_on: name at least one of attention, mlp, fc".into());
            }
        }
        Ok(())
    }
}
