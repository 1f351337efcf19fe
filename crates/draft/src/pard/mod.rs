//! PARD (PARallel Draft, arXiv 2504.18583; docs/drafters.md §3): a small causal LM of the target's family,
//! trained to predict several future tokens at once. Each cycle feeds the committed tokens it lacks plus
//! K - 1 mask (`pard_token`) tokens in ONE forward pass: the last real token predicts d1, mask j predicts
//! d(j+1). Drafts are argmax, as in the reference implementation (deterministic drafts).
//!
//! Cache invariant: the drafter's cache holds a prefix of the committed tokens. The mask slots written by
//! a proposal are cropped right after its forward pass; accepted drafts were never fed as real tokens, so
//! the next proposal feeds them (with the bonus) first.

pub mod train;

use crate::causal_drafting::{self, feed, prefill_before_root};
use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::drafter_stats::DrafterStats;
use crate::proposal::Proposal;
use crate::vanilla::check_same_vocabulary;
use sharpdraft_model::time_split::{self, Step};
use sharpdraft_model::{CausalLm, KeySelection, KvCache, LogitRows, Sampler};
use tch::{Device, Tensor};

pub struct PardDrafter {
    model: CausalLm,
    cache: KvCache,
    draft_len: usize,
    mask_token: i64,
    forward_seconds: f64,
}

impl PardDrafter {
    /// The drafter's LM (the weights online adaptation trains).
    pub fn model(&self) -> &CausalLm {
        &self.model
    }

    /// `model`'s config must carry `pard_token` (or vLLM's `ptd_token_id`).
    pub fn new(
        model: CausalLm,
        target: &CausalLm,
        draft_len: usize,
        capacity: i64,
    ) -> Result<Self> {
        check_same_vocabulary(&model, target)?;
        let raw = &model.net.config.raw;
        let mask_token =
            raw.pard_token
                .or(raw.ptd_token_id)
                .ok_or_else(|| DraftError::Checkpoint {
                    path: model.dir.join("config.json").display().to_string(),
                    reason: "no pard_token (or ptd_token_id): not a PARD drafter".into(),
                })?;
        if mask_token < 0 || mask_token >= model.net.config.vocab_size {
            return Err(DraftError::Checkpoint {
                path: model.dir.join("config.json").display().to_string(),
                reason: format!(
                    "pard_token {mask_token} outside the vocabulary of {}",
                    model.net.config.vocab_size
                ),
            });
        }
        if draft_len == 0 {
            return Err(DraftError::InvalidOption {
                option: "--draft-len".into(),
                value: draft_len.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        let cache = model.net.new_cache(capacity + draft_len as i64);
        Ok(Self {
            model,
            cache,
            draft_len,
            mask_token,
            forward_seconds: 0.0,
        })
    }

    pub fn mask_token(&self) -> i64 {
        self.mask_token
    }

    pub fn cache(&self) -> &KvCache {
        &self.cache
    }
}

impl Drafter for PardDrafter {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.model.net.linears()
    }

    fn kind(&self) -> crate::DrafterKind {
        crate::DrafterKind::Pard
    }

    fn prefill(&mut self, ctx: &DraftContext<'_>, _target_hidden: Option<&Tensor>) -> Result<()> {
        prefill_before_root(&self.model, &mut self.cache, ctx.committed)
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, _sampler: &mut Sampler) -> Result<Proposal> {
        let _guard = tch::no_grad_guard();
        // Every cached row is committed here: the moment a bounded cache may drop old keys.
        self.cache.slide();
        let committed_len = ctx.committed.len() as i64;
        let mut ids = ctx.committed[self.cache.len() as usize..].to_vec();
        let real = ids.len() as i64;
        ids.extend(std::iter::repeat_n(self.mask_token, self.draft_len - 1));
        let (logits, seconds) = feed(&self.model, &mut self.cache, &ids, LogitRows::All)?;
        self.forward_seconds += seconds;
        // Drop the mask slots: the cache keeps exactly the committed tokens.
        self.cache.truncate(committed_len)?;
        let predictions = time_split::mark(
            Step::Sampling,
            || 0,
            || {
                let rows = logits.narrow(0, real - 1, self.draft_len as i64);
                Vec::<i64>::try_from(rows.argmax(-1, false).to_device(Device::Cpu))
            },
        )?;
        Ok(Proposal::chain(predictions, None))
    }

    fn observe(&mut self, _ctx: &DraftContext<'_>, _feedback: &Feedback<'_>) -> Result<()> {
        // Nothing to roll back: only committed tokens were kept, and they are all still committed.
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

sharpdraft_model::scaled_through!(PardDrafter, model);
