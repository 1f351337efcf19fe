//! The goodput gate: a cycle it runs plain calls no drafter at all, plain steps between cycles keep
//! every drafter lossless and its state current (its next proposal is a fresh drafter's on the same
//! tokens), and a gated decode emits the target's own tokens.
mod common;

use common::*;
use sharpdraft_decode::gate::GateMode;
use sharpdraft_decode::{speculative_generate, Session, SpecOptions};
use sharpdraft_draft::drafter::Result;
use sharpdraft_draft::{DraftContext, Drafter, DrafterKind, DrafterStats, Feedback, Proposal};
use sharpdraft_model::{KeySelection, Sampler, Sampling, Tap};
use tch::Tensor;

/// A drafter that counts every call the decoder makes after its prefill, keeps its latest proposal's
/// tokens, and drafts as the one it wraps.
struct Counting<D> {
    inner: D,
    calls: usize,
    proposed: Vec<i64>,
}

impl<D> Counting<D> {
    fn new(inner: D) -> Self {
        Self {
            inner,
            calls: 0,
            proposed: Vec::new(),
        }
    }
}

impl<D: Drafter> Drafter for Counting<D> {
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
        self.calls += 1;
        let proposal = self.inner.propose(ctx, sampler)?;
        self.proposed = proposal.tokens.clone();
        Ok(proposal)
    }
    fn observe(&mut self, ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        self.calls += 1;
        self.inner.observe(ctx, feedback)
    }
    fn catch_up(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        self.calls += 1;
        self.inner.catch_up(ctx, target_hidden)
    }
    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        self.calls += 1;
        self.inner.set_key_selection(selection)
    }
    fn variables(&self) -> Vec<(String, Tensor)> {
        self.inner.variables()
    }
    fn stats(&self) -> DrafterStats {
        self.inner.stats()
    }
}

fn options(new_tokens: usize, gate: GateMode) -> SpecOptions {
    SpecOptions {
        max_new_tokens: new_tokens,
        sampling: Sampling::greedy(),
        stop_tokens: vec![],
        max_proposal: 64,
        gate,
    }
}

#[test]
fn cycles_the_gate_runs_plain_make_no_drafter_call() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_dflash(dir.path(), &target, &dflash_options(4, None));
    let drafters: Vec<Box<dyn Drafter>> = vec![
        Box::new(vanilla("qwen2", &target, 3, Sampling::greedy())),
        Box::new(dflash(dir.path(), &target)),
    ];
    for inner in drafters {
        let mut counting = Counting::new(inner);
        let report = speculative_generate(
            &target.net,
            &mut counting,
            &PROMPT,
            &options(20, GateMode::Closed),
        )
        .unwrap();
        assert_eq!(report.ids, greedy_ar(&target, &PROMPT, 20));
        assert!(report.cycles.iter().all(|c| c.drafted == 0));
        assert_eq!(
            report.cycles.len(),
            19,
            "one plain step a token after the first"
        );
        assert_eq!(
            counting.calls, 0,
            "the drafter was called during plain steps"
        );
    }
}

#[test]
fn a_goodput_gated_decode_calls_the_drafter_only_on_the_cycles_it_drafts() {
    let target = load("llama");
    let mut counting = Counting::new(vanilla("qwen2", &target, 3, Sampling::greedy()));
    let report = speculative_generate(
        &target.net,
        &mut counting,
        &PROMPT,
        &options(40, GateMode::Goodput),
    )
    .unwrap();
    assert_eq!(report.ids, greedy_ar(&target, &PROMPT, 40));
    let drafted = report.cycles.iter().filter(|c| c.drafted > 0).count();
    let plain = report.cycles.len() - drafted;
    assert!(
        plain >= 1,
        "the gate times a plain step before it drafts: {:?}",
        report.cycles
    );
    // Each drafted cycle: propose and observe, and a catch-up after a plain run (at most one each).
    assert!(
        (2 * drafted..=3 * drafted).contains(&counting.calls),
        "{} calls for {drafted} drafted cycles",
        counting.calls
    );
}

/// Steps `session` through `pattern` (true: a cycle as the drafter proposes it, false: a plain
/// step), then checks that the drafter's next proposal is what a fresh drafter, prefilled on the same
/// committed tokens, proposes: its state caught up with every plain step.
fn interleave_and_compare<D: Drafter>(
    target: &sharpdraft_model::CausalLm,
    drafter: D,
    mut fresh: impl FnMut() -> D,
    what: &str,
) {
    let _guard = tch::no_grad_guard();
    let drafter = &mut Counting::new(drafter);
    let config = options(80, GateMode::Off);
    let mut session = Session::prefill(&target.net, drafter, &PROMPT, &config).unwrap();
    let pattern = [
        true, false, false, true, false, true, true, false, false, false, true,
    ];
    for &draft in &pattern {
        if session.finished {
            break;
        }
        if draft {
            session.cycle(drafter).unwrap();
        } else {
            session.plain_step().unwrap();
        }
    }
    assert!(!session.finished, "{what}: the pattern outran the tokens");
    let committed = session.committed.clone();
    assert_eq!(
        &committed[PROMPT.len()..],
        &greedy_ar(target, &PROMPT, committed.len() - PROMPT.len())[..],
        "{what}: plain steps and cycles emit the target's tokens"
    );
    // The next cycle of the caught-up drafter against a fresh one prefilled on every committed token.
    session.cycle(drafter).unwrap();
    let caught_up = session.cycles.last().unwrap().clone();
    let mut other = Counting::new(fresh());
    let mut fresh_session = Session::prefill(
        &target.net,
        &mut other,
        &committed[..committed.len() - 1],
        &config,
    )
    .unwrap();
    assert_eq!(fresh_session.committed, committed, "{what}: the same root");
    fresh_session.cycle(&mut other).unwrap();
    let first = fresh_session.cycles.last().unwrap();
    assert_eq!(
        drafter.proposed, other.proposed,
        "{what}: the caught-up drafter drafts as a fresh one"
    );
    assert_eq!(
        (caught_up.drafted, caught_up.accepted),
        (first.drafted, first.accepted),
        "{what}"
    );
    assert_eq!(
        &session.committed[..],
        &fresh_session.committed[..],
        "{what}: the same tokens after it"
    );
}

#[test]
fn plain_steps_between_cycles_leave_every_drafter_as_a_fresh_one_on_the_same_tokens() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    // A vanilla drafter that is the target: every draft accepted, so a stale cache would show.
    interleave_and_compare(
        &target,
        vanilla("llama", &target, 3, Sampling::greedy()),
        || vanilla("llama", &target, 3, Sampling::greedy()),
        "vanilla",
    );
    let eagle = dir.path().join("eagle");
    write_eagle3(&eagle, &target, &EagleOptions::default());
    for shape in [
        sharpdraft_draft::TreeShape::chain(3),
        sharpdraft_draft::TreeShape {
            depth: 3,
            top_k: 3,
            total_tokens: 8,
        },
    ] {
        interleave_and_compare(
            &target,
            eagle3(&eagle, &target, shape, Sampling::greedy()),
            || eagle3(&eagle, &target, shape, Sampling::greedy()),
            &format!("eagle3 {shape:?}"),
        );
    }
    let pard_dir = dir.path().join("pard");
    write_pard(&pard_dir, "llama");
    interleave_and_compare(
        &target,
        pard(&pard_dir, &target, 3),
        || pard(&pard_dir, &target, 3),
        "pard",
    );
    let dflash_dir = dir.path().join("dflash");
    write_dflash(&dflash_dir, &target, &dflash_options(4, None));
    interleave_and_compare(
        &target,
        dflash(&dflash_dir, &target),
        || dflash(&dflash_dir, &target),
        "dflash",
    );
}

#[test]
fn a_goodput_gated_decode_emits_the_targets_greedy_tokens_for_every_drafter() {
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 32);
    let dir = tempfile::tempdir().unwrap();
    let config = options(32, GateMode::Goodput);
    let got = speculative_generate(
        &target.net,
        &mut vanilla("qwen2", &target, 4, Sampling::greedy()),
        &PROMPT,
        &config,
    )
    .unwrap();
    assert_eq!(got.ids, want, "vanilla");
    let eagle = dir.path().join("eagle");
    write_eagle3(&eagle, &target, &EagleOptions::default());
    let tree = sharpdraft_draft::TreeShape {
        depth: 3,
        top_k: 4,
        total_tokens: 12,
    };
    let got = speculative_generate(
        &target.net,
        &mut eagle3(&eagle, &target, tree, Sampling::greedy()),
        &PROMPT,
        &config,
    )
    .unwrap();
    assert_eq!(got.ids, want, "eagle3 tree");
    let dflash_dir = dir.path().join("dflash");
    write_dflash(&dflash_dir, &target, &dflash_options(6, Some(5)));
    let got = speculative_generate(
        &target.net,
        &mut dflash(&dflash_dir, &target),
        &PROMPT,
        &config,
    )
    .unwrap();
    assert_eq!(got.ids, want, "dflash");
}
