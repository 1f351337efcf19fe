//! The speculative decoding loop, the same for every drafter:
//! prefill -> (propose -> verify in one target pass -> commit or roll back) until done.
//!
//! Target cache invariant: it holds every committed token except the root (the last committed token,
//! produced as the previous bonus). A verification pass feeds `[root, nodes...]`; the commit keeps the
//! root and the accepted path (`compact`), everything else is rolled back.
//!
//! With a gate ([`crate::gate`]) a cycle may be a plain target step instead: the root alone through the
//! target, its next token committed, the drafter not called at all. The taps' rows of those steps wait
//! in the session and reach the drafter in one `catch_up` before its next proposal.

use crate::gate::{GateMode, GoodputGate};
use crate::records::{peak_rss_bytes, CycleRecord, SpecReport};
use crate::verify::{verify_greedy, verify_stochastic, Verdict};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sharpdraft_draft::{DraftContext, Drafter, Feedback, Proposal};
use sharpdraft_model::cpu::few_rows;
use sharpdraft_model::generate::PromptPrefill;
use sharpdraft_model::{
    AttentionMask, AttentionObserver, AttentionView, ForwardInput, KvCache, LogitRows, Sampler,
    Sampling, Tap, Transformer,
};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

pub type Result<T> = std::result::Result<T, DecodeError>;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),
    #[error(transparent)]
    Draft(#[from] sharpdraft_draft::DraftError),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    #[error("bad proposal from {method}: {reason}")]
    Proposal {
        method: &'static str,
        reason: String,
    },
    /// An input the decoder cannot use (an empty prompt, a drafter specification or query scaling that
    /// cannot be built); the message names the value, key or flag.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] sharpdraft_store::StoreError),
    #[error(transparent)]
    Math(#[from] sharpdraft_math::MathError),
    /// What was being built when `cause` happened, displayed as `context: cause` on one line.
    #[error("{context}: {cause}")]
    Context {
        context: String,
        cause: Box<DecodeError>,
    },
}

sharpdraft_store::context_chain!(DecodeError);

sharpdraft_store::bail_and_ensure!($ crate::driver::DecodeError);

pub(crate) use ensure;

pub struct SpecOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    pub stop_tokens: Vec<i64>,
    /// Largest proposal the drafter can make (sizes the target cache).
    pub max_proposal: usize,
    /// Whether each cycle's depth is chosen by the goodput gate (plain target steps included).
    pub gate: GateMode,
}

/// Seeds of the drafter's sampler and the verifier's generator, derived from one user seed.
const DRAFTER_SEED_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// One sequence being decoded: the target cache, the committed tokens and the drafter's sampler. The
/// loop of [`speculative_generate`] is `prefill` then `cycle` until `finished`; tests step it by hand to
/// check the cache invariant after each cycle.
pub struct Session<'a> {
    target: &'a Transformer,
    config: &'a SpecOptions,
    pub cache: KvCache,
    /// Prompt and generated tokens; the last one is the root.
    pub committed: Vec<i64>,
    prompt_len: usize,
    taps: Vec<Tap>,
    verifier_rng: StdRng,
    drafter_sampler: Sampler,
    pub finished: bool,
    pub cycles: Vec<CycleRecord>,
    pub target_forward_seconds: f64,
    /// The goodput gate of this request (`None`: every cycle drafts the whole proposal).
    pub gate: Option<GoodputGate>,
    /// The taps' rows (`[1, features]`) of plain steps since the drafter last saw the committed
    /// tokens, and whether any plain step ran since then.
    unseen_rows: Vec<Tensor>,
    drafter_behind: bool,
    /// Whether the gate has seen the drafter's whole proposal (its depth and shape) yet.
    shape_known: bool,
}

impl<'a> Session<'a> {
    /// The cache a session needs: the prompt, every new token, the largest proposal, the root.
    fn capacity(prompt: usize, config: &SpecOptions) -> i64 {
        prompt as i64 + config.max_new_tokens as i64 + config.max_proposal as i64 + 2
    }

    /// Runs the target over the prompt, draws the first token and prefills the drafter.
    pub fn prefill(
        target: &'a Transformer,
        drafter: &mut dyn Drafter,
        prompt: &[i64],
        config: &'a SpecOptions,
    ) -> Result<Self> {
        if prompt.is_empty() {
            return Err(DecodeError::Invalid("the prompt is empty".into()));
        }
        target
            .config
            .ensure_positions(prompt.len(), config.max_new_tokens)?;
        let taps = drafter.target_taps();
        let prefilled =
            PromptPrefill::run(target, prompt, &taps, Self::capacity(prompt.len(), config))?;
        let hidden = prefilled.hidden(&taps)?;
        let logits = prefilled.last_logits().shallow_clone();
        Self::start(
            target,
            drafter,
            prompt,
            config,
            prefilled.into_cache(),
            &logits,
            hidden,
        )
    }

    /// After the target's prefill (`cache` and the last row's `last_logits`): draws the first token and
    /// prefills the drafter with the prompt's `prompt_hidden` at its taps.
    fn start(
        target: &'a Transformer,
        drafter: &mut dyn Drafter,
        prompt: &[i64],
        config: &'a SpecOptions,
        cache: KvCache,
        last_logits: &Tensor,
        prompt_hidden: Option<Tensor>,
    ) -> Result<Self> {
        let taps = drafter.target_taps();
        let mut verifier_rng = StdRng::seed_from_u64(config.sampling.seed);
        let drafter_sampler = Sampler::new(Sampling {
            seed: config.sampling.seed ^ DRAFTER_SEED_SALT,
            ..config.sampling
        });
        let gate = match config.gate {
            GateMode::Off => None,
            mode => Some(GoodputGate::new(mode, config.max_proposal.max(1), true)),
        };
        let first = pick(last_logits, &config.sampling, &mut verifier_rng);
        let mut committed = prompt.to_vec();
        committed.push(first);
        let greedy = config.sampling.is_greedy();
        drafter.prefill(
            &DraftContext {
                committed: &committed,
                target,
                greedy,
                max_depth: None,
            },
            prompt_hidden.as_ref(),
        )?;
        let finished = config.stop_tokens.contains(&first) || config.max_new_tokens <= 1;
        Ok(Self {
            target,
            config,
            cache,
            committed,
            prompt_len: prompt.len(),
            taps,
            verifier_rng,
            drafter_sampler,
            finished,
            cycles: Vec::new(),
            target_forward_seconds: 0.0,
            gate,
            unseen_rows: Vec::new(),
            drafter_behind: false,
            shape_known: false,
        })
    }

    pub fn generated(&self) -> &[i64] {
        &self.committed[self.prompt_len..]
    }

    /// One draft -> verify -> commit cycle, or a plain target step where the gate says so.
    pub fn cycle(&mut self, drafter: &mut dyn Drafter) -> Result<()> {
        let depth = self.gate.as_mut().map(GoodputGate::choose);
        if depth == Some(0) {
            return self.plain_step();
        }
        let (target, config) = (self.target, self.config);
        let greedy = config.sampling.is_greedy();
        let device = target.device();
        let cycle_start = Instant::now();
        let context = self.committed.len() as i64;
        if self.drafter_behind {
            self.catch_up(drafter)?;
        }
        let catch_up_seconds = cycle_start.elapsed().as_secs_f64();
        // Until the gate has seen one whole proposal, the drafter drafts its own depth.
        let max_depth = depth.filter(|_| self.shape_known);
        // The target's verification streams its weights through the cache between two proposals, so
        // the drafter's few-row passes weigh them beside its own (few_rows::beside).
        let proposal = few_rows::beside(target.linear_weight_bytes(), || {
            drafter.propose(
                &DraftContext {
                    committed: &self.committed,
                    target,
                    greedy,
                    max_depth,
                },
                &mut self.drafter_sampler,
            )
        })?;
        let proposal = match max_depth {
            Some(k) => proposal.within_depth(k),
            None => proposal,
        };
        proposal
            .validate(target.config.vocab_size)
            .map_err(|reason| DecodeError::Proposal {
                method: drafter.kind().name(),
                reason,
            })?;
        let draft_seconds = cycle_start.elapsed().as_secs_f64();

        let verify_start = Instant::now();
        let base = self.cache.len();
        let root = *self.committed.last().expect("committed is never empty");
        let depths = proposal.depths();
        let (ids, positions, parents) = verification_rows(root, base, &proposal, &depths);
        let mask = AttentionMask::tree(base, &parents, device)?;
        let ids_t = Tensor::from_slice(&ids).to_device(device);
        let positions_t = Tensor::from_slice(&positions).to_device(device);
        let mut speculation = self.cache.speculate();
        // Retrieval reads what the target's last layer attended to from the root.
        let mut root_attention = drafter
            .wants_target_attention()
            .then(|| RootAttention::new(target.config.num_layers - 1));
        let forward_start = Instant::now();
        let out = target.forward(
            ForwardInput {
                mask: &mask,
                logits: LogitRows::All,
                taps: &self.taps,
                observer: root_attention
                    .as_mut()
                    .map(|o| o as &mut dyn AttentionObserver),
                ..ForwardInput::causal(&ids_t, &positions_t)
            },
            &mut speculation,
        )?;
        let logits = out.logits.expect("logits requested");
        self.target_forward_seconds += forward_start.elapsed().as_secs_f64();
        let verdict = verify(&logits, &proposal, &config.sampling, &mut self.verifier_rng);
        let kept_rows: Vec<i64> = std::iter::once(0)
            .chain(verdict.accepted.iter().map(|&n| n as i64 + 1))
            .collect();
        speculation.commit_path(&kept_rows)?;

        self.commit(&verdict, &proposal);
        let verify_seconds = verify_start.elapsed().as_secs_f64();
        let observe_start = Instant::now();
        if !self.finished {
            let hidden = (!self.taps.is_empty()).then(|| {
                Tensor::cat(&out.hidden, -1)
                    .index_select(0, &Tensor::from_slice(&kept_rows).to_device(device))
            });
            let feedback = Feedback {
                accepted: &verdict.accepted,
                bonus: verdict.bonus,
                target_hidden: hidden.as_ref(),
                verified_logits: &logits,
                target_attention: root_attention.as_ref().and_then(|o| o.scores.as_ref()),
            };
            drafter.observe(
                &DraftContext {
                    committed: &self.committed,
                    target,
                    greedy,
                    max_depth: None,
                },
                &feedback,
            )?;
        }
        let proposal_depth = depths.iter().max().map_or(0, |d| *d as usize + 1);
        let draft_seconds = draft_seconds + observe_start.elapsed().as_secs_f64();
        if let Some(gate) = &mut self.gate {
            if !self.shape_known {
                let chain = proposal
                    .parents
                    .iter()
                    .enumerate()
                    .all(|(i, p)| *p == i.checked_sub(1));
                gate.learn_shape(proposal_depth.max(1), chain);
                self.shape_known = true;
            }
            // The catch-up is paid once a plain run, not each cycle: the gate's cycle leaves it out.
            gate.record_draft(
                proposal_depth,
                draft_seconds - catch_up_seconds,
                verify_seconds,
                verdict.accepted.len(),
            );
        }
        self.cycles.push(CycleRecord {
            context,
            drafted: proposal.len(),
            accepted: verdict.accepted.len(),
            accepted_per_position: (0..proposal_depth)
                .map(|d| u8::from(d < verdict.accepted.len()))
                .collect(),
            bonus: 1,
            draft_seconds,
            verify_seconds,
        });
        Ok(())
    }

    /// A plain target step: the root alone through the target, its next token committed (argmax, or
    /// drawn from the target's distribution: a verification of an empty proposal), the drafter not
    /// called. The taps' row of the root waits for the drafter's next `catch_up`.
    pub fn plain_step(&mut self) -> Result<()> {
        let (target, config) = (self.target, self.config);
        let device = target.device();
        let started = Instant::now();
        let context = self.committed.len() as i64;
        let root = *self.committed.last().expect("committed is never empty");
        let ids = Tensor::from_slice(&[root]).to_device(device);
        let positions = Tensor::from_slice(&[self.cache.len()]).to_device(device);
        let out = target.forward(
            ForwardInput {
                logits: LogitRows::Last,
                taps: &self.taps,
                ..ForwardInput::causal(&ids, &positions)
            },
            &mut self.cache,
        )?;
        let logits = out.logits.expect("logits requested"); // [1, vocab]
        self.target_forward_seconds += started.elapsed().as_secs_f64();
        let empty = Proposal::empty();
        let verdict = verify(&logits, &empty, &config.sampling, &mut self.verifier_rng);
        self.commit(&verdict, &empty);
        if !self.taps.is_empty() {
            self.unseen_rows.push(Tensor::cat(&out.hidden, -1)); // [1, features]
        }
        self.drafter_behind = true;
        let seconds = started.elapsed().as_secs_f64();
        if let Some(gate) = &mut self.gate {
            gate.record_plain(seconds);
        }
        self.cycles.push(CycleRecord {
            context,
            drafted: 0,
            accepted: 0,
            accepted_per_position: Vec::new(),
            bonus: 1,
            draft_seconds: 0.0,
            verify_seconds: seconds,
        });
        Ok(())
    }

    /// Hands the drafter what the plain steps since it last drafted committed: their taps' rows, in one
    /// call.
    fn catch_up(&mut self, drafter: &mut dyn Drafter) -> Result<()> {
        let rows = (!self.unseen_rows.is_empty()).then(|| Tensor::cat(&self.unseen_rows, 0));
        drafter.catch_up(
            &DraftContext {
                committed: &self.committed,
                target: self.target,
                greedy: self.config.sampling.is_greedy(),
                max_depth: None,
            },
            rows.as_ref(),
        )?;
        self.unseen_rows.clear();
        self.drafter_behind = false;
        Ok(())
    }

    /// Appends the accepted drafts and the bonus token to the committed tokens, up to the first stop
    /// token or the token limit, which finish the sequence.
    fn commit(&mut self, verdict: &Verdict, proposal: &Proposal) {
        let emitted = (verdict.accepted.iter().map(|&n| proposal.tokens[n]))
            .chain(std::iter::once(verdict.bonus));
        for token in emitted {
            self.committed.push(token);
            if self.config.stop_tokens.contains(&token)
                || self.committed.len() - self.prompt_len >= self.config.max_new_tokens
            {
                self.finished = true;
                break;
            }
        }
    }
}

/// The rows of a verification pass from cache length `base`: the last committed token `root`, then
/// the proposal's nodes (at `depths`): their token ids `[1 + n]`, positions `[1 + n]` (the root at
/// `base`, a node at `base + 1 + depth`) and parent rows (node i is row i + 1 and hangs off its parent's row, the
/// root for depth 0).
fn verification_rows(
    root: i64,
    base: i64,
    proposal: &Proposal,
    depths: &[i64],
) -> (Vec<i64>, Vec<i64>, Vec<Option<usize>>) {
    let ids: Vec<i64> = std::iter::once(root)
        .chain(proposal.tokens.iter().copied())
        .collect();
    let positions: Vec<i64> = std::iter::once(base)
        .chain(depths.iter().map(|d| base + 1 + d))
        .collect();
    let parents: Vec<Option<usize>> = std::iter::once(None)
        .chain(
            proposal
                .parents
                .iter()
                .map(|p| Some(p.map_or(0, |p| p + 1))),
        )
        .collect();
    (ids, positions, parents)
}

/// The target's attention of the root row (row 0 of a verification pass) in one layer, over the
/// committed keys and the root itself, averaged over heads: `[past + 1]`.
struct RootAttention {
    layer: usize,
    scores: Option<Tensor>,
}

impl RootAttention {
    fn new(layer: usize) -> Self {
        Self {
            layer,
            scores: None,
        }
    }
}

impl AttentionObserver for RootAttention {
    fn wants(&self, layer: usize) -> bool {
        layer == self.layer
    }

    fn observe(&mut self, _layer: usize, view: &AttentionView<'_>) {
        let logits = view.logits(0..1, 0..view.past + 1); // [H, 1, past + 1]
        self.scores = Some(logits.softmax(-1, Kind::Float).mean_dim(
            &[0i64, 1][..],
            false,
            Kind::Float,
        ));
    }
}

pub fn speculative_generate(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    prompt: &[i64],
    config: &SpecOptions,
) -> Result<SpecReport> {
    let _guard = tch::no_grad_guard();
    let started = Instant::now();
    let session = Session::prefill(target, drafter, prompt, config)?;
    let prefill_seconds = started.elapsed().as_secs_f64();
    decode_session(session, drafter, started, prefill_seconds, 0.0)
}

/// [`speculative_generate`] from the target's prefill of the prompt made once for every arm of a
/// request ([`PromptPrefill`]). The report's times count that prefill's measured seconds, as if this
/// arm had run it, and leave out copying its cache: the arm's prefill is the shared one's seconds plus
/// the drafter's own prefill, its total that plus the decode.
pub fn speculative_generate_from(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    prefilled: &PromptPrefill,
    config: &SpecOptions,
) -> Result<SpecReport> {
    let _guard = tch::no_grad_guard();
    let prompt = prefilled.prompt();
    target
        .config
        .ensure_positions(prompt.len(), config.max_new_tokens)?;
    let cache = prefilled.cache_copy(Session::capacity(prompt.len(), config))?;
    // Timed from here: the copy above is what sharing costs, not what decoding this arm costs.
    let started = Instant::now();
    let taps = drafter.target_taps();
    let hidden = prefilled.hidden(&taps)?;
    let session = Session::start(
        target,
        drafter,
        prompt,
        config,
        cache,
        prefilled.last_logits(),
        hidden,
    )?;
    let prefill_seconds = prefilled.seconds() + started.elapsed().as_secs_f64();
    decode_session(
        session,
        drafter,
        started,
        prefill_seconds,
        prefilled.seconds(),
    )
}

/// Cycles `session` to its end and reports it; `started` is when this arm's own work began, and
/// `shared_seconds` the seconds of work done for it before then (a shared prefill), counted in its
/// total.
fn decode_session(
    mut session: Session<'_>,
    drafter: &mut dyn Drafter,
    started: Instant,
    prefill_seconds: f64,
    shared_seconds: f64,
) -> Result<SpecReport> {
    let target = session.target;
    let prompt = session.committed[..session.prompt_len].to_vec();
    // Each proposal streams the drafter's weights through the cache between two verifications, so the
    // loop and the target's passes in it weigh them beside the target's own, as each proposal weighs
    // the target's (Session::cycle).
    let drafter_bytes = drafter.stats().weight_bytes;
    few_rows::beside(drafter_bytes, || {
        target.decoding(|| -> Result<()> {
            while !session.finished {
                session.cycle(drafter)?;
            }
            Ok(())
        })
    })?;
    let drafter_stats = drafter.stats();
    Ok(SpecReport {
        prompt_ids: prompt,
        ids: session.generated().to_vec(),
        prefill_seconds,
        total_seconds: shared_seconds + started.elapsed().as_secs_f64(),
        target_forward_seconds: session.target_forward_seconds,
        drafter_forward_seconds: drafter_stats.forward_seconds,
        target_cache_bytes: session.cache.bytes_allocated(),
        drafter_cache_bytes: drafter_stats.cache_bytes,
        drafter_weight_bytes: drafter_stats.weight_bytes,
        adaptation: drafter_stats.adaptation,
        peak_rss_bytes: peak_rss_bytes(),
        cycles: session.cycles,
    })
}

/// Greedy or stochastic verification of `proposal` against the target logits `[1 + N, vocab]`.
fn verify(logits: &Tensor, proposal: &Proposal, sampling: &Sampling, rng: &mut StdRng) -> Verdict {
    if sampling.is_greedy() {
        let argmax = Vec::<i64>::try_from(logits.argmax(-1, false).to_device(Device::Cpu))
            .expect("argmax ids");
        return verify_greedy(&argmax, proposal);
    }
    let probs = sampling.probabilities(logits);
    let row = |t: &Tensor, i: usize| -> Vec<f64> {
        Vec::<f32>::try_from(t.get(i as i64).to_device(Device::Cpu))
            .expect("probability row")
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let mut target_probs = |r: usize| row(&probs, r);
    let mut draft_probs = |n: usize| proposal.draft_probs.as_ref().map(|q| row(q, n));
    let mut uniform = || rng.random::<f64>();
    verify_stochastic(&mut target_probs, &mut draft_probs, proposal, &mut uniform)
}

/// The first token after the prompt, drawn from the target alone.
fn pick(logits: &Tensor, sampling: &Sampling, rng: &mut StdRng) -> i64 {
    if sampling.is_greedy() {
        return logits.argmax(-1, false).int64_value(&[]);
    }
    let p: Vec<f64> = Vec::<f32>::try_from(sampling.probabilities(logits).to_device(Device::Cpu))
        .expect("probabilities")
        .into_iter()
        .map(f64::from)
        .collect();
    sharpdraft_model::sampling::inverse_cdf(&p, rng.random::<f64>())
}
