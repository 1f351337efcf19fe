//! Training an EAGLE-3 (or 3.1) head against a target (drafters.md §2.4): target features and target
//! distributions are extracted once per window of n0 tokens; the head is trained with the training-time
//! test objective ([`Eagle3Head::ttt_loss`]) under AdamW; checkpoints are written in the published layout
//! and training resumes from the last one.

use crate::drafter::{DraftError, Result};
use crate::eagle3::{write_random_head, Eagle3Head, RandomHeadOptions};
use serde::{Deserialize, Serialize};
use sharpdraft_model::{ForwardInput, LogitRows, Tap, Transformer};
use std::path::Path;
use tch::nn::OptimizerConfig;
use tch::{Kind, Tensor};

/// One training window: `n0` token ids with the target's taps and its top-k next-token distribution.
pub struct TrainWindow {
    pub tokens: Vec<i64>,
    /// `[T, 3 H]` target features (inputs of the captured layers), f32.
    pub features: Tensor,
    /// `[T, K]` target ids of the target's top-k next tokens at every row.
    pub top_ids: Tensor,
    /// `[T, K]` their probabilities (renormalised over the k).
    pub top_probs: Tensor,
}

/// Cuts `stream` into windows of `n0` tokens (at most `max_windows`) and runs the target over each.
pub fn extract_windows(target: &Transformer, taps: &[Tap], stream: &[i64], n0: i64, max_windows: usize, top_k: i64) -> Result<Vec<TrainWindow>> {
    let _guard = tch::no_grad_guard();
    let device = target.device();
    let mut windows = Vec::new();
    for chunk in stream.chunks_exact(n0 as usize).take(max_windows) {
        let ids = Tensor::from_slice(chunk).to_device(device);
        let positions = Tensor::arange(n0, (Kind::Int64, device));
        let mut cache = target.new_cache(n0);
        let out = target.forward(ForwardInput { taps, logits: LogitRows::All, ..ForwardInput::causal(&ids, &positions) }, &mut cache)?;
        let probs = out.logits.expect("logits requested").softmax(-1, Kind::Float);
        let (top_probs, top_ids) = probs.topk(top_k, -1, true, true);
        let top_probs = &top_probs / top_probs.sum_dim_intlist(&[1i64][..], true, Kind::Float);
        windows.push(TrainWindow { tokens: chunk.to_vec(), features: Tensor::cat(&out.hidden, -1).to_kind(Kind::Float), top_ids, top_probs });
    }
    if windows.is_empty() {
        return Err(DraftError::Mismatch(format!("the training text has {} tokens, fewer than one window of n0 = {n0}", stream.len())));
    }
    Ok(windows)
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Eagle3TrainConfig {
    /// Training length: windows of n0 tokens.
    pub n0: i64,
    pub steps: usize,
    #[serde(default = "default_ttt")]
    pub ttt_steps: usize,
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    /// Size of the reduced draft vocabulary.
    pub draft_vocab: i64,
    #[serde(default = "default_top_k")]
    pub top_k_targets: i64,
    #[serde(default)]
    pub eagle31: bool,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_every")]
    pub checkpoint_every: usize,
}

fn default_ttt() -> usize {
    5
}
fn default_lr() -> f64 {
    1e-3
}
fn default_top_k() -> i64 {
    32
}
fn default_every() -> usize {
    50
}

/// Progress of a run: written next to the checkpoint so that a run resumes where it stopped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainState {
    pub step: usize,
    pub losses: Vec<f64>,
}

/// Trains (or resumes training of) a head in `out_dir` on `windows`. `on_step(step, loss)` reports
/// progress. Returns the final state.
pub fn train(target: &Transformer, windows: &[TrainWindow], out_dir: &Path, config: &Eagle3TrainConfig, mut on_step: impl FnMut(usize, f64)) -> Result<TrainState> {
    let state_path = out_dir.join("train_state.json");
    let mut state = match std::fs::read_to_string(&state_path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| DraftError::Checkpoint { path: state_path.display().to_string(), reason: e.to_string() })?,
        Err(_) => {
            tch::manual_seed(config.seed as i64);
            let used = frequent_tokens(windows, target.config.vocab_size, config.draft_vocab);
            let options = RandomHeadOptions { eagle31: config.eagle31, used_tokens: Some(used), seed: config.seed as i64, ..Default::default() };
            write_random_head(out_dir, target, &options)?;
            TrainState { step: 0, losses: Vec::new() }
        }
    };
    let (head, _taps) = Eagle3Head::load(out_dir, target, true)?;
    let mut optimizer = tch::nn::AdamW::default().build(&head.vars, config.learning_rate)?;
    let device = target.device();
    let to_draft = head.target_to_draft(target.config.vocab_size).to_device(device);
    // A seeded visiting order, so that a resumed run sees the windows a fresh run would have.
    let order = visiting_order(windows.len(), config.seed);
    while state.step < config.steps {
        let window = &windows[order[state.step % order.len()]];
        let tokens = Tensor::from_slice(&window.tokens).to_device(device);
        let embeddings = tch::no_grad(|| target.embed(&tokens)).to_kind(Kind::Float);
        let draft_ids = to_draft.index_select(0, &window.top_ids.flatten(0, -1)).view_as(&window.top_ids);
        let valid = draft_ids.ge(0);
        let probs = window.top_probs.to_device(device) * valid.to_kind(Kind::Float);
        let ids = draft_ids.clamp_min(0);
        let loss = head.ttt_loss(&embeddings, &window.features.to_device(device), (&ids, &probs), config.ttt_steps, 0.8);
        optimizer.backward_step_clip(&loss, 1.0);
        let value = loss.double_value(&[]);
        state.losses.push(value);
        state.step += 1;
        on_step(state.step, value);
        if state.step % config.checkpoint_every == 0 || state.step == config.steps {
            save_checkpoint(&head, out_dir, config.n0, &state)?;
        }
    }
    Ok(state)
}

fn visiting_order(len: usize, seed: u64) -> Vec<usize> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut order: Vec<usize> = (0..len).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    order
}

/// Weights, then the state: a crash between the two resumes from the previous state with newer weights,
/// never from a state that claims more steps than the weights saw.
fn save_checkpoint(head: &Eagle3Head, out_dir: &Path, n0: i64, state: &TrainState) -> Result<()> {
    let io = |e: std::io::Error| DraftError::Checkpoint { path: out_dir.display().to_string(), reason: e.to_string() };
    let staging = out_dir.join(".staging");
    head.save(&staging, n0)?;
    for file in ["config.json", "model.safetensors"] {
        std::fs::rename(staging.join(file), out_dir.join(file)).map_err(io)?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    let tmp = out_dir.join("train_state.json.tmp");
    std::fs::write(&tmp, serde_json::to_string(state).expect("state serialises")).map_err(io)?;
    std::fs::rename(&tmp, out_dir.join("train_state.json")).map_err(io)?;
    let curve: String = state.losses.iter().enumerate().map(|(i, l)| format!("{},{l}\n", i + 1)).collect();
    std::fs::write(out_dir.join("loss.csv"), format!("step,loss\n{curve}")).map_err(io)
}

