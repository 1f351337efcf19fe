//! EAGLE-3 (or 3.1) training objective (drafters.md §2.4): the training-time test
//! ([`Eagle3Head::ttt_loss`]) against the target's top-k distribution restricted to a draft vocabulary of
//! the most frequent training tokens (d2t/t2d).

use crate::drafter::Result;
use crate::eagle3::{write_random_head, Eagle3Head, RandomHeadOptions};
use crate::training::{Objective, TrainWindow};
use serde::{Deserialize, Serialize};
use sharpdraft_model::Transformer;
use std::path::Path;
use tch::{Kind, Tensor};

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

/// Writes the starting head into `dir`: random weights, draft vocabulary from the windows' token counts.
pub fn init(
    dir: &Path,
    target: &Transformer,
    windows: &[TrainWindow],
    options: &Eagle3Options,
    seed: u64,
) -> Result<()> {
    let used = frequent_tokens(windows, target.config.vocab_size, options.draft_vocab);
    let random = RandomHeadOptions {
        eagle31: options.eagle31,
        used_tokens: Some(used),
        seed: seed as i64,
        ..Default::default()
    };
    write_random_head(dir, target, &random)
}

pub struct Eagle3Objective<'t> {
    target: &'t Transformer,
    head: Eagle3Head,
    /// Target id -> draft id or -1, `[vocab]`.
    to_draft: Tensor,
    options: Eagle3Options,
}

impl<'t> Eagle3Objective<'t> {
    /// Loads the head in `dir` for training.
    pub fn load(dir: &Path, target: &'t Transformer, options: &Eagle3Options) -> Result<Self> {
        let (head, _taps) = Eagle3Head::load(dir, target, true)?;
        let to_draft = head
            .target_to_draft(target.config.vocab_size)
            .to_device(target.device());
        Ok(Self {
            target,
            head,
            to_draft,
            options: options.clone(),
        })
    }
}

impl Objective for Eagle3Objective<'_> {
    fn query_layout(&self) -> (usize, usize) {
        (1, self.head.query_heads())
    }

    fn set_query_scaling(&mut self, scaling: sharpdraft_model::QueryScaling) {
        self.head.set_query_scaling(scaling);
    }

    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.head.vars.variables().into_iter().collect()
    }

    fn loss(&self, window: &TrainWindow, _step: usize) -> Result<Tensor> {
        let device = self.target.device();
        let tokens = Tensor::from_slice(&window.tokens).to_device(device);
        let embeddings = tch::no_grad(|| self.target.embed(&tokens)).to_kind(Kind::Float);
        let features = window.features.as_ref().ok_or_else(|| {
            crate::DraftError::Mismatch("EAGLE-3 training needs target features".into())
        })?;
        // Target ids outside the draft vocabulary contribute nothing (t2d masking of drafters.md §2.4).
        let draft_ids = self
            .to_draft
            .index_select(0, &window.top_ids.flatten(0, -1).to_device(device))
            .view_as(&window.top_ids);
        let probs = window.top_probs.to_device(device) * draft_ids.ge(0).to_kind(Kind::Float);
        let ids = draft_ids.clamp_min(0);
        Ok(self.head.ttt_loss(
            &embeddings,
            &features.to_device(device),
            (&ids, &probs),
            self.options.ttt_steps,
            self.options.ttt_decay,
        ))
    }

    fn save(&self, dir: &Path, n0: i64) -> Result<()> {
        self.head.save(dir, n0)
    }
}
