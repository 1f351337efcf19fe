//! A drafter's few-row passes run between two verifications, which stream the target's weights through
//! the CPU's cache, so each proposal weighs the target's bytes beside the drafter's own when it picks
//! the few-row kernel (`few_rows::beside`), whatever the drafter's method; and the target's passes in
//! the loop, between two proposals, weigh the drafter's bytes beside the target's own.
mod common;

use common::*;
use sharpdraft_draft::drafter::Result;
use sharpdraft_draft::{DraftContext, Drafter, DrafterKind, DrafterStats, Feedback, Proposal};
use sharpdraft_model::cpu::few_rows;
use sharpdraft_model::{KeySelection, Sampler, Sampling, Tap};
use tch::Tensor;

/// A drafter that notes the bytes streamed beside each of its proposals, and beside the verification
/// before each `observe`, and drafts as the one it wraps.
struct Noting<D> {
    inner: D,
    streamed_during_proposals: Vec<usize>,
    streamed_between_proposals: Vec<usize>,
}

impl<D: Drafter> Drafter for Noting<D> {
    fn kind(&self) -> DrafterKind {
        self.inner.kind()
    }
    fn target_taps(&self) -> Vec<Tap> {
        self.inner.target_taps()
    }
    fn prefill(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        self.inner.prefill(ctx, target_hidden)
    }
    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        self.streamed_during_proposals
            .push(few_rows::streamed_bytes(0));
        self.inner.propose(ctx, sampler)
    }
    fn observe(&mut self, ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        self.streamed_between_proposals
            .push(few_rows::streamed_bytes(0));
        self.inner.observe(ctx, feedback)
    }
    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        self.inner.set_key_selection(selection)
    }
    fn variables(&self) -> Vec<(String, Tensor)> {
        self.inner.variables()
    }
    fn stats(&self) -> DrafterStats {
        self.inner.stats()
    }
}

#[test]
fn every_proposal_weighs_the_targets_weights_and_every_verification_the_drafters() {
    let target = load("llama");
    let targets = target.net.linear_weight_bytes();
    assert!(targets > 0);
    let mut drafter = Noting {
        inner: vanilla("qwen2", &target, 3, Sampling::greedy()),
        streamed_during_proposals: Vec::new(),
        streamed_between_proposals: Vec::new(),
    };
    let drafters = drafter.stats().weight_bytes;
    assert!(drafters > 0 && drafters != targets);

    let report = spec(&target, &mut drafter, &PROMPT, 12, Sampling::greedy());

    assert_eq!(report.ids, greedy_ar(&target, &PROMPT, 12));
    assert_eq!(
        drafter.streamed_during_proposals,
        vec![targets; report.cycles.len()],
        "every proposal weighs the target's {targets} bytes beside the drafter's"
    );
    // The last cycle ends the request before the drafter observes it.
    assert_eq!(
        drafter.streamed_between_proposals,
        vec![drafters; report.cycles.len() - 1],
        "between two proposals the target's passes weigh the drafter's {drafters} bytes"
    );
    assert_eq!(
        few_rows::streamed_bytes(1000),
        1000,
        "outside the loop a pass weighs its own bytes"
    );
}

#[test]
fn the_bytes_beside_a_pass_are_its_callers_only_while_it_runs() {
    let inside = few_rows::beside(5000, || {
        let nested = few_rows::beside(7, || few_rows::streamed_bytes(1));
        (few_rows::streamed_bytes(1000), nested)
    });
    assert_eq!(inside, (6000, 8));
    assert_eq!(few_rows::streamed_bytes(1000), 1000);

    let unwound =
        std::panic::catch_unwind(|| few_rows::beside(5000, || panic!("a failed proposal")));
    assert!(unwound.is_err());
    assert_eq!(
        few_rows::streamed_bytes(1000),
        1000,
        "after a proposal that unwound"
    );
}
