//! What every drafter's training shares: windows of n0 tokens with the target's view of them (taps and
//! its top-k next-token distribution, extracted once), the optimisation loop, and checkpoints that a run
//! resumes from. The objective of each method lives in its own file (`eagle3_train`, `pard_train`,
//! `dflash_train`) and implements [`Objective`].

use crate::adamw::AdamW;
use crate::drafter::{DraftError, Result};
use serde::{Deserialize, Serialize};
use sharpdraft_model::{ForwardInput, LogitRows, ScaledQueries, Tap, Transformer};
use std::path::Path;
use tch::{Kind, Tensor};

/// One training window: `n0` token ids with the target's taps and its top-k next-token distribution.
/// Offline windows come from [`extract_windows`]; online adaptation builds them from verification.
pub struct TrainWindow {
    pub tokens: Vec<i64>,
    /// `[T, taps * H]` target features (the requested taps, concatenated), f32; `None` without taps.
    pub features: Option<Tensor>,
    /// `[T, K]` target ids of the target's top-k next tokens at every row: row r predicts token r + 1.
    pub top_ids: Tensor,
    /// `[T, K]` their probabilities (renormalised over the k).
    pub top_probs: Tensor,
    /// `[T]` f32 weight of each target row in the loss; `None` weighs every row 1. Online adaptation
    /// puts 0 on rows it does not learn from (OSD learns only where the draft was wrong).
    pub row_weights: Option<Tensor>,
    /// How a draft distribution is compared with the target's at a row.
    pub divergence: Divergence,
}

impl TrainWindow {
    /// The weights `[R]` of target rows `rows` `[R]` (ones without `row_weights`).
    pub fn weights_of(&self, rows: &Tensor) -> Tensor {
        match &self.row_weights {
            Some(w) => w.to_device(rows.device()).index_select(0, rows),
            None => Tensor::ones([rows.size()[0]], (Kind::Float, rows.device())),
        }
    }
}

/// How the draft distribution q is pulled towards the target's p, both over the target's top-k ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Divergence {
    /// Soft cross-entropy `-sum_k p_k log q_k` (forward KL up to p's entropy): offline training and
    /// OSD's default.
    #[default]
    ForwardKl,
    /// `KL(q~ || p)` with q~ the draft renormalised over the target's top-k ids (mode seeking).
    ReverseKl,
    /// OSD's mixture: 0.9 forward + 0.1 reverse.
    Jsd,
}

impl Divergence {
    /// Per-row loss `[R]` from draft log-probabilities `log_q` `[R, V]` and the target's top-k
    /// `(ids [R, K], probs [R, K])`; slots of probability 0 (ids outside a draft vocabulary) count for
    /// nothing.
    pub fn rows(self, log_q: &Tensor, ids: &Tensor, probs: &Tensor) -> Tensor {
        match self {
            Divergence::ForwardKl => soft_cross_entropy(log_q, ids, probs),
            Divergence::ReverseKl => reverse_kl(log_q, ids, probs),
            Divergence::Jsd => {
                soft_cross_entropy(log_q, ids, probs) * 0.9 + reverse_kl(log_q, ids, probs) * 0.1
            }
        }
    }
}

/// `sum_k q~_k (log q~_k - log p_k)` over the live slots (p > 0), q~ = q renormalised over them.
fn reverse_kl(log_q: &Tensor, ids: &Tensor, probs: &Tensor) -> Tensor {
    let live = probs.gt(0.0);
    let masked = log_q
        .gather(1, ids, false)
        .masked_fill(&live.logical_not(), f64::NEG_INFINITY);
    let log_q_tilde = masked.log_softmax(-1, Kind::Float);
    let q_tilde = log_q_tilde.exp();
    let log_p = probs.clamp_min(1e-30).log();
    // Dead slots: q~ = 0 there; `where` keeps 0 * -inf out of the sum.
    let terms = (q_tilde * (log_q_tilde - log_p))
        .where_self(&live, &Tensor::zeros([], (Kind::Float, probs.device())));
    terms.sum_dim_intlist(&[1i64][..], false, Kind::Float)
}

/// `sum(losses * weights) / sum(weights)`, 0 when every weight is 0.
pub fn weighted_mean(losses: &Tensor, weights: &Tensor) -> Tensor {
    (losses * weights).sum(Kind::Float) / weights.sum(Kind::Float).clamp_min(1e-12)
}

/// Cuts `stream` into windows of `n0` tokens (at most `max_windows`) and runs the target over each.
pub fn extract_windows(
    target: &Transformer,
    taps: &[Tap],
    stream: &[i64],
    n0: i64,
    max_windows: usize,
    top_k: i64,
) -> Result<Vec<TrainWindow>> {
    let _guard = tch::no_grad_guard();
    let device = target.device();
    let mut windows = Vec::new();
    for chunk in stream.chunks_exact(n0 as usize).take(max_windows) {
        let ids = Tensor::from_slice(chunk).to_device(device);
        let positions = Tensor::arange(n0, (Kind::Int64, device));
        let mut cache = target.new_cache(n0);
        let out = target.forward(
            ForwardInput {
                taps,
                logits: LogitRows::All,
                ..ForwardInput::causal(&ids, &positions)
            },
            &mut cache,
        )?;
        let probs = out
            .logits
            .expect("logits requested")
            .softmax(-1, Kind::Float);
        let (top_probs, top_ids) = probs.topk(top_k, -1, true, true);
        let top_probs = &top_probs / top_probs.sum_dim_intlist(&[1i64][..], true, Kind::Float);
        let features =
            (!out.hidden.is_empty()).then(|| Tensor::cat(&out.hidden, -1).to_kind(Kind::Float));
        windows.push(TrainWindow {
            tokens: chunk.to_vec(),
            features,
            top_ids,
            top_probs,
            row_weights: None,
            divergence: Divergence::ForwardKl,
        });
    }
    if windows.is_empty() {
        return Err(DraftError::InvalidOption {
            option: "n0".into(),
            value: n0.to_string(),
            reason: format!(
                "the training text has {} tokens, fewer than one window",
                stream.len()
            ),
        });
    }
    Ok(windows)
}

/// Soft cross-entropy `-sum_k p_k log q(id_k)` per row, from log-probabilities `[R, V]` and the target's
/// top-k `(ids [R, K], probs [R, K])`; returns `[R]`.
pub fn soft_cross_entropy(log_q: &Tensor, ids: &Tensor, probs: &Tensor) -> Tensor {
    -(log_q.gather(1, ids, false) * probs).sum_dim_intlist(&[1i64][..], false, Kind::Float)
}

/// The optimisation settings every method shares.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopOptions {
    /// Training length n0, recorded in the checkpoint.
    pub n0: i64,
    pub steps: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub seed: u64,
    pub checkpoint_every: usize,
    /// Steps over which the learning rate rises linearly from 0 to `learning_rate`.
    pub warmup_steps: usize,
    pub decay: LrDecay,
}

/// How the learning rate falls after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LrDecay {
    #[default]
    Constant,
    /// Half a cosine from `learning_rate` down to a tenth of it at `steps`.
    Cosine,
}

impl LoopOptions {
    /// The learning rate of update `step` (0-based): a function of the step alone, so that a resumed run
    /// follows the schedule of an uninterrupted one.
    pub fn learning_rate_at(&self, step: usize) -> f64 {
        let warm = if step < self.warmup_steps {
            (step + 1) as f64 / self.warmup_steps as f64
        } else {
            1.0
        };
        let decay = match self.decay {
            LrDecay::Constant => 1.0,
            LrDecay::Cosine => {
                let span = self.steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let progress = (step.saturating_sub(self.warmup_steps) as f64 / span).min(1.0);
                0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
        };
        self.learning_rate * warm * decay
    }
}

/// A method's training objective over the drafter it trains: the drafter's own model, owned (offline
/// training) or borrowed from the drafter that drafts with it (online adaptation). The drafter's query
/// scaling is applied in every training pass: rows past n0 are scaled as when drafting.
pub trait Objective {
    /// The trainable parameters by name (the optimizer marks them as taking gradients).
    fn parameters(&self) -> Vec<(String, Tensor)>;
    /// The drafter's linear maps in the objective's forward pass, named by checkpoint weight (unmerged
    /// LoRA attaches its branches here).
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear>;
    /// The differentiable loss of one window at `step` (any randomness is seeded from `step`, so that a
    /// resumed run draws what an uninterrupted one would).
    fn loss(&self, window: &TrainWindow, step: usize) -> Result<Tensor>;
    /// Writes the drafter in its published layout (config.json + model.safetensors) into `dir`,
    /// recording the training length `n0`.
    fn save(&self, dir: &Path, n0: i64) -> Result<()>;
    /// The target features the drafter reads, as its checkpoint declares them (EAGLE-3's capture
    /// layers, DFlash's `target_layer_ids`); windows must be extracted at exactly these.
    fn target_taps(&self) -> Vec<sharpdraft_model::Tap>;
}

/// An objective that owns the drafter it trains (offline training), so that the run sets the drafter's
/// query scaling through it.
pub trait OwnedObjective: Objective + ScaledQueries {}

impl<T: Objective + ScaledQueries> OwnedObjective for T {}

/// Progress of a run: written next to the checkpoint so that a run resumes where it stopped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainState {
    pub step: usize,
    pub losses: Vec<f64>,
    /// Wall-clock seconds since the run started at each step (summed over resumed runs).
    #[serde(default)]
    pub seconds: Vec<f64>,
}

impl TrainState {
    /// The state a run left in `dir`, or `None` for a fresh run.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(STATE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| DraftError::Checkpoint {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(DraftError::Checkpoint {
                path: path.display().to_string(),
                reason: e.to_string(),
            }),
        }
    }
}

pub const STATE_FILE: &str = "train_state.json";
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// What the loop reports: every step, and every checkpoint written.
pub trait TrainObserver {
    fn step(&mut self, state: &TrainState);
    fn checkpoint(&mut self, _state: &TrainState, _dir: &Path) -> Result<()> {
        Ok(())
    }
}

/// Trains `objective` on `windows`, resuming from the state and optimizer moments in `out_dir` when a
/// previous run left them (the weights were loaded from there by the caller). Returns the final state.
pub fn train(
    objective: &dyn Objective,
    windows: &[TrainWindow],
    out_dir: &Path,
    config: &LoopOptions,
    observer: &mut dyn TrainObserver,
) -> Result<TrainState> {
    let mut optimizer = AdamW::new(
        objective.parameters(),
        config.learning_rate,
        config.weight_decay,
    );
    let mut state = match TrainState::load(out_dir)? {
        Some(state) => {
            optimizer.load(&out_dir.join(OPTIMIZER_FILE))?;
            state
        }
        None => TrainState {
            step: 0,
            losses: Vec::new(),
            seconds: Vec::new(),
        },
    };
    let offset = state.seconds.last().copied().unwrap_or(0.0);
    let started = std::time::Instant::now();
    // A seeded visiting order, so that a resumed run sees the windows a fresh run would have.
    let order = visiting_order(windows.len(), config.seed);
    while state.step < config.steps {
        let window = &windows[order[state.step % order.len()]];
        let loss = objective.loss(window, state.step)?;
        optimizer.learning_rate = config.learning_rate_at(state.step);
        optimizer.backward_step(&loss, 1.0);
        state.losses.push(loss.double_value(&[]));
        state.seconds.push(offset + started.elapsed().as_secs_f64());
        state.step += 1;
        observer.step(&state);
        if state.step % config.checkpoint_every.max(1) == 0 || state.step == config.steps {
            save_checkpoint(objective, &optimizer, out_dir, config.n0, &state)?;
            observer.checkpoint(&state, out_dir)?;
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

/// A seeded generator for the randomness of one training step (anchors, dropped tokens).
pub fn step_rng(seed: u64, step: usize) -> rand::rngs::StdRng {
    use rand::SeedableRng;
    rand::rngs::StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ step as u64)
}

/// Weights and optimizer moments, then the state: a crash between the two resumes from the previous
/// state with newer weights, never from a state that claims more steps than the weights saw.
fn save_checkpoint(
    objective: &dyn Objective,
    optimizer: &AdamW,
    out_dir: &Path,
    n0: i64,
    state: &TrainState,
) -> Result<()> {
    let io = |e: std::io::Error| DraftError::Checkpoint {
        path: out_dir.display().to_string(),
        reason: e.to_string(),
    };
    let staging = out_dir.join(".staging");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(io)?;
    objective.save(&staging, n0)?;
    optimizer.save(&staging.join(OPTIMIZER_FILE))?;
    for entry in std::fs::read_dir(&staging).map_err(io)? {
        let path = entry.map_err(io)?.path();
        std::fs::rename(&path, out_dir.join(path.file_name().expect("a file"))).map_err(io)?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    let tmp = out_dir.join(format!("{STATE_FILE}.tmp"));
    std::fs::write(
        &tmp,
        serde_json::to_string(state).expect("state serialises"),
    )
    .map_err(io)?;
    std::fs::rename(&tmp, out_dir.join(STATE_FILE)).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(warmup_steps: usize, decay: LrDecay) -> LoopOptions {
        LoopOptions {
            n0: 8,
            steps: 100,
            learning_rate: 1.0,
            weight_decay: 0.0,
            seed: 0,
            checkpoint_every: 10,
            warmup_steps,
            decay,
        }
    }

    #[test]
    fn the_learning_rate_warms_up_linearly_then_falls_by_half_a_cosine_to_a_tenth() {
        let cosine = schedule(10, LrDecay::Cosine);
        assert!((cosine.learning_rate_at(0) - 0.1).abs() < 1e-12);
        assert!((cosine.learning_rate_at(4) - 0.5).abs() < 1e-12);
        assert!((cosine.learning_rate_at(10) - 1.0).abs() < 1e-12);
        assert!((cosine.learning_rate_at(55) - 0.55).abs() < 1e-12);
        assert!((cosine.learning_rate_at(100) - 0.1).abs() < 1e-12);
        let rates: Vec<f64> = (10..100).map(|s| cosine.learning_rate_at(s)).collect();
        assert!(rates.windows(2).all(|w| w[1] <= w[0]), "not falling");
    }

    #[test]
    fn a_constant_schedule_without_warm_up_is_the_learning_rate_at_every_step() {
        let constant = schedule(0, LrDecay::Constant);
        assert!((0..120).all(|s| constant.learning_rate_at(s) == 1.0));
    }
}
