//! Vanilla drafting: a small causal LM that shares the target's tokenizer proposes a chain of K tokens,
//! one forward pass per token.
//!
//! Cache invariant: the drafter's KV cache holds a prefix of the committed tokens. `propose` feeds the
//! committed tokens it lacks (at least the root) and then d1..d(n-1) of its chain of n drafts (n = K,
//! or fewer where a chain ends early, [`VanillaDrafter::with_stop_below`]); `observe` truncates back to
//! the rows that the accepted tokens confirmed (the root, and d1..d(min(a, n-1))).

pub mod train;

use crate::causal_drafting::{self, feed, prefill_before_root};
use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::drafter_stats::DrafterStats;
use crate::proposal::Proposal;
use sharpdraft_model::time_split::{self, Step};
use sharpdraft_model::{CausalLm, KeySelection, KvCache, LogitRows, Sampler, Sampling};
use tch::Tensor;

pub struct VanillaDrafter {
    model: CausalLm,
    cache: KvCache,
    /// The longest chain.
    draft_len: usize,
    /// A chain ends at the first draft whose drafter probability falls below this (that draft kept).
    stop_below: Option<f64>,
    sampling: Sampling,
    /// Committed length when the last proposal was made.
    committed_at_proposal: usize,
    forward_seconds: f64,
}

impl VanillaDrafter {
    /// `sampling` is the target's: sampled drafts use the same temperature and filters, so that q and p
    /// are comparable in rejection sampling.
    pub fn new(
        model: CausalLm,
        target: &CausalLm,
        draft_len: usize,
        capacity: i64,
        sampling: Sampling,
    ) -> Result<Self> {
        check_same_vocabulary(&model, target)?;
        if draft_len == 0 {
            return Err(DraftError::InvalidOption {
                option: "--draft-len".into(),
                value: draft_len.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        let cache = model.net.new_cache(capacity);
        Ok(Self {
            model,
            cache,
            draft_len,
            stop_below: None,
            sampling,
            committed_at_proposal: 0,
            forward_seconds: 0.0,
        })
    }

    /// Chains end at the first draft the drafter gives a probability below `threshold` (greedy: its top
    /// probability; sampling: the sampled token's), that draft included; `None`: every chain is
    /// `draft_len` long. Lossless either way: the decision reads only the drafter's own distribution.
    pub fn with_stop_below(mut self, threshold: Option<f64>) -> Self {
        self.stop_below = threshold;
        self
    }

    /// The drafter's cache (tests check it against a fresh prefill of the committed tokens).
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    pub fn model(&self) -> &CausalLm {
        &self.model
    }

    /// Feeds `ids` and returns the last row's logits `[vocab]`.
    fn step(&mut self, ids: &[i64]) -> Result<Tensor> {
        let (logits, seconds) = feed(&self.model, &mut self.cache, ids, LogitRows::Last)?;
        self.forward_seconds += seconds;
        Ok(logits.squeeze_dim(0))
    }
}

/// Drafter and target must map text to the same ids: same tokenizer vocabulary when both have one,
/// else the same vocabulary size.
pub(crate) fn check_same_vocabulary(drafter: &CausalLm, target: &CausalLm) -> Result<()> {
    match (&drafter.tokenizer, &target.tokenizer) {
        (Some(d), Some(t)) => {
            let (dv, tv) = (d.vocabulary(), t.vocabulary());
            if dv != tv {
                let differing = tv
                    .iter()
                    .filter(|(token, id)| dv.get(*token) != Some(id))
                    .count();
                return Err(DraftError::Mismatch(format!(
                    "drafter vocabulary ({} tokens) differs from the target's ({} tokens; {differing} target tokens map differently)",
                    dv.len(),
                    tv.len()
                )));
            }
            Ok(())
        }
        _ if drafter.net.config.vocab_size != target.net.config.vocab_size => {
            Err(DraftError::Mismatch(format!(
                "drafter vocab_size {} differs from the target's {}",
                drafter.net.config.vocab_size, target.net.config.vocab_size
            )))
        }
        _ => Ok(()),
    }
}

impl Drafter for VanillaDrafter {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.model.net.linears()
    }

    fn kind(&self) -> crate::DrafterKind {
        crate::DrafterKind::Vanilla
    }

    fn prefill(&mut self, ctx: &DraftContext<'_>, _target_hidden: Option<&Tensor>) -> Result<()> {
        prefill_before_root(&self.model, &mut self.cache, ctx.committed)
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        let _guard = tch::no_grad_guard();
        // Every cached row is committed here: the moment a bounded cache may drop old keys.
        self.cache.slide();
        self.committed_at_proposal = ctx.committed.len();
        let missing = ctx.committed[self.cache.len() as usize..].to_vec();
        let mut logits = self.step(&missing)?;
        // The gate may want fewer drafts this cycle: each is a pass of its own.
        let draft_len = ctx
            .max_depth
            .map_or(self.draft_len, |d| d.clamp(1, self.draft_len));
        let mut tokens = Vec::with_capacity(draft_len);
        let mut probs = Vec::new();
        for i in 0..draft_len {
            // `unsure`: the drafter gives its draft less than `stop_below`. The probability is
            // computed only where a chain may end early (greedy: a softmax over the vocabulary).
            let (token, unsure) = if ctx.greedy {
                time_split::mark(
                    Step::Sampling,
                    || 0,
                    || {
                        let token = logits.argmax(-1, false).int64_value(&[]);
                        let unsure = self.stop_below.is_some_and(|threshold| {
                            logits.softmax(-1, tch::Kind::Float).double_value(&[token]) < threshold
                        });
                        (token, unsure)
                    },
                )
            } else {
                let q = self.sampling.probabilities(&logits);
                let token = sampler.sample_from(&q)?;
                let unsure = self
                    .stop_below
                    .is_some_and(|threshold| q.double_value(&[token]) < threshold);
                probs.push(q);
                (token, unsure)
            };
            tokens.push(token);
            if unsure || i + 1 == draft_len {
                break;
            }
            logits = self.step(&[token])?;
        }
        let draft_probs = (!probs.is_empty()).then(|| Tensor::stack(&probs, 0));
        Ok(Proposal::chain(tokens, draft_probs))
    }

    fn observe(&mut self, _ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        // The cache holds the root and d1..d(n-1) of the last chain of n <= K drafts; a chain that
        // ended early fed fewer, which the bound by the cache's length below keeps.
        let confirmed = feedback.accepted.len().min(self.draft_len - 1);
        let keep = (self.committed_at_proposal + confirmed) as i64;
        self.cache.truncate(keep.min(self.cache.len()))?;
        Ok(())
    }

    fn stats(&self) -> DrafterStats {
        causal_drafting::stats(&self.model, &self.cache, self.forward_seconds)
    }

    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        causal_drafting::set_key_selection(&mut self.model, &mut self.cache, selection)
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        causal_drafting::variables(&self.model)
    }
}

sharpdraft_model::scaled_through!(VanillaDrafter, model);
