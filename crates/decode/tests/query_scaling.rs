//! SharpDraft query scaling in every drafter: `fixed` with beta = 0 drafts exactly what the unmodified
//! drafter drafts; a strong schedule past n0 changes the drafts; verification stays lossless either way.
mod common;

use common::*;
use sharpdraft_draft::{DraftContext, Drafter, Feedback, Proposal, TreeShape};
use sharpdraft_model::CausalLm;
use sharpdraft_model::{KeySelection, Sampler, Sampling, ScaledQueries, Tap};
use std::path::Path;
use tch::Tensor;

/// Records every proposal of the drafter it wraps.
struct Recording<'a> {
    inner: &'a mut dyn Drafter,
    proposals: Vec<Vec<i64>>,
}

impl Drafter for Recording<'_> {
    fn kind(&self) -> sharpdraft_draft::DrafterKind {
        self.inner.kind()
    }
    fn target_taps(&self) -> Vec<Tap> {
        self.inner.target_taps()
    }
    fn prefill(
        &mut self,
        ctx: &DraftContext<'_>,
        hidden: Option<&Tensor>,
    ) -> sharpdraft_draft::drafter::Result<()> {
        self.inner.prefill(ctx, hidden)
    }
    fn propose(
        &mut self,
        ctx: &DraftContext<'_>,
        sampler: &mut Sampler,
    ) -> sharpdraft_draft::drafter::Result<Proposal> {
        let proposal = self.inner.propose(ctx, sampler)?;
        self.proposals.push(proposal.tokens.clone());
        Ok(proposal)
    }
    fn observe(
        &mut self,
        ctx: &DraftContext<'_>,
        feedback: &Feedback<'_>,
    ) -> sharpdraft_draft::drafter::Result<()> {
        self.inner.observe(ctx, feedback)
    }
    fn stats(&self) -> sharpdraft_draft::DrafterStats {
        self.inner.stats()
    }
    fn variables(&self) -> Vec<(String, tch::Tensor)> {
        self.inner.variables()
    }
    fn set_key_selection(
        &mut self,
        selection: Option<KeySelection>,
    ) -> sharpdraft_draft::drafter::Result<()> {
        self.inner.set_key_selection(selection)
    }
    fn wants_target_attention(&self) -> bool {
        self.inner.wants_target_attention()
    }
}

/// Drafts of a greedy run with `beta` at n0 = 4 (every pass of the 9-token prompt lies past n0).
fn drafts_with(drafter: &mut dyn ScaledDrafter, beta: Option<f64>) -> (Vec<Vec<i64>>, Vec<i64>) {
    let target = load("llama");
    scale_at_n0_4(drafter, beta);
    let mut recording = Recording {
        inner: drafter,
        proposals: Vec::new(),
    };
    let report = spec(&target, &mut recording, &PROMPT, 24, Sampling::greedy());
    (recording.proposals, report.ids)
}

fn check(name: &str, mut make: impl FnMut() -> Box<dyn ScaledDrafter>) {
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 24);
    let (off, off_ids) = drafts_with(make().as_mut(), None);
    let (zero, zero_ids) = drafts_with(make().as_mut(), Some(0.0));
    assert_eq!(
        zero, off,
        "{name}: fixed beta = 0 must draft exactly what off drafts"
    );
    let (strong, strong_ids) = drafts_with(make().as_mut(), Some(4.0));
    assert_ne!(
        strong, off,
        "{name}: beta = 4 past n0 must change some draft"
    );
    for ids in [off_ids, zero_ids, strong_ids] {
        assert_eq!(ids, want, "{name}: verification stays lossless");
    }
}

#[test]
fn every_drafter_is_unchanged_by_beta_zero_and_changed_by_a_strong_schedule() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    check("vanilla", || {
        Box::new(vanilla("qwen2", &target, 4, Sampling::greedy()))
    });
    let eagle = dir.path().join("eagle");
    write_eagle3(
        &eagle,
        &target,
        &EagleOptions {
            eagle31: true,
            ..Default::default()
        },
    );
    check("eagle3 tree", || {
        Box::new(eagle3(
            &eagle,
            &target,
            TreeShape {
                depth: 3,
                top_k: 4,
                total_tokens: 12,
            },
            Sampling::greedy(),
        ))
    });
    let pard_dir = dir.path().join("pard");
    write_pard(&pard_dir, "qwen2");
    check("pard", || Box::new(pard(&pard_dir, &target, 4)));
    let dflash_dir = dir.path().join("dflash");
    write_dflash(&dflash_dir, &target, &dflash_options(4, None));
    check("dflash", || Box::new(dflash(&dflash_dir, &target)));
}

#[test]
fn every_drafter_reports_its_query_layout_for_schedules() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    let eagle = dir.path().join("eagle");
    write_eagle3(&eagle, &target, &EagleOptions::default());
    assert_eq!(
        eagle3(&eagle, &target, TreeShape::chain(3), Sampling::greedy()).query_layout(),
        (1, 4)
    );
    let dflash_dir = dir.path().join("dflash");
    write_dflash(&dflash_dir, &target, &dflash_options(4, None));
    assert_eq!(dflash(&dflash_dir, &target).query_layout(), (2, 4));
    let drafter = vanilla("qwen3", &target, 4, Sampling::greedy());
    let c = &drafter.model().net.config;
    assert_eq!(drafter.query_layout(), (c.num_layers, c.num_heads as usize));
}

/// Every proposal of `drafter` over the test prompt; the greedy output must be the target's.
fn proposals_of(drafter: &mut dyn Drafter) -> Vec<Vec<i64>> {
    let target = load("llama");
    let mut recording = Recording {
        inner: drafter,
        proposals: Vec::new(),
    };
    let report = spec(&target, &mut recording, &PROMPT, 24, Sampling::greedy());
    assert_eq!(
        report.ids,
        greedy_ar(&target, &PROMPT, 24),
        "verification stays lossless"
    );
    recording.proposals
}

/// Writes one drafter of each method into `dir`.
fn write_drafters(dir: &Path, target: &CausalLm) {
    write_eagle3(&dir.join("eagle"), target, &EagleOptions::default());
    write_pard(&dir.join("pard"), "qwen2");
    write_dflash(&dir.join("dflash"), target, &dflash_options(4, None));
}

/// The proposals of drafter `method` (vanilla, EAGLE-3 tree, PARD, DFlash) from `dir` under
/// `selection`, and the bytes its cache holds at the end.
fn drafts_under(
    dir: &Path,
    target: &CausalLm,
    method: usize,
    selection: Option<KeySelection>,
) -> (Vec<Vec<i64>>, usize) {
    let mut drafter: Box<dyn Drafter> = match method {
        0 => Box::new(vanilla("qwen2", target, 4, Sampling::greedy())),
        1 => {
            let shape = TreeShape {
                depth: 3,
                top_k: 4,
                total_tokens: 12,
            };
            Box::new(eagle3(
                &dir.join("eagle"),
                target,
                shape,
                Sampling::greedy(),
            ))
        }
        2 => Box::new(pard(&dir.join("pard"), target, 4)),
        _ => Box::new(dflash(&dir.join("dflash"), target)),
    };
    drafter.set_key_selection(selection).unwrap();
    let proposals = proposals_of(drafter.as_mut());
    (proposals, drafter.stats().cache_bytes)
}

const METHOD_NAMES: [&str; 4] = ["vanilla", "eagle3 tree", "pard", "dflash"];

/// The training-free alternative beside query scaling: a sliding window of 2 keys changes what every
/// drafter drafts, a window wider than the context drafts exactly what no window drafts, and greedy
/// output stays the target's.
#[test]
fn a_narrow_sliding_window_changes_every_drafters_drafts_and_a_wide_one_none() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_drafters(dir.path(), &target);
    let drafts = |method, window: Option<i64>| {
        drafts_under(
            dir.path(),
            &target,
            method,
            window.map(KeySelection::window),
        )
        .0
    };
    for (method, name) in METHOD_NAMES.iter().enumerate() {
        let plain = drafts(method, None);
        assert_eq!(
            drafts(method, Some(1000)),
            plain,
            "{name}: a window over the whole context"
        );
        assert_ne!(
            drafts(method, Some(2)),
            plain,
            "{name}: a window of 2 keys changed nothing"
        );
    }
}

/// A sliding window bounds the drafter's cache: the keys it hides are dropped (33 positions, a window
/// of 3), and every drafter drafts exactly what the same window drafts as a mask over a cache that
/// keeps every key.
#[test]
fn a_sliding_window_bounds_every_drafters_cache_and_drafts_as_the_mask_alone() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_drafters(dir.path(), &target);
    for (method, name) in METHOD_NAMES.iter().enumerate() {
        let (bounded, bounded_bytes) =
            drafts_under(dir.path(), &target, method, Some(KeySelection::window(3)));
        let (masked, full_bytes) = drafts_under(
            dir.path(),
            &target,
            method,
            Some(KeySelection::recent_only(3)),
        );
        assert_eq!(bounded, masked, "{name}");
        assert!(
            bounded_bytes < full_bytes,
            "{name}: {bounded_bytes} bytes bounded, {full_bytes} kept whole"
        );
    }
}

/// Attention sinks beside a window (StreamingLLM's): a bounded cache keeps the first keys and the
/// last ones, and every drafter drafts exactly what the same selection drafts as a mask over a cache
/// that keeps every key; the sinks change what a narrow window drafts.
#[test]
fn a_window_with_sinks_bounds_every_drafters_cache_and_drafts_as_the_mask_alone() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_drafters(dir.path(), &target);
    for (method, name) in METHOD_NAMES.iter().enumerate() {
        let sinks = KeySelection::window(3).with_sink(2);
        let (bounded, bounded_bytes) = drafts_under(dir.path(), &target, method, Some(sinks));
        let (masked, full_bytes) = drafts_under(
            dir.path(),
            &target,
            method,
            Some(KeySelection::recent_only(3).with_sink(2)),
        );
        assert_eq!(bounded, masked, "{name}");
        assert!(
            bounded_bytes < full_bytes,
            "{name}: {bounded_bytes} bytes bounded, {full_bytes} kept whole"
        );
        let (window_alone, _) =
            drafts_under(dir.path(), &target, method, Some(KeySelection::window(3)));
        assert_ne!(bounded, window_alone, "{name}: two sinks changed nothing");
    }
}

/// A window on every layer but one is DFlash's (it keeps a window per layer): its drafts differ from
/// the window on every layer and from none; a drafter with one window for all its layers refuses it.
#[test]
fn a_window_on_every_dflash_layer_but_one_drafts_between_the_window_and_none() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_drafters(dir.path(), &target);
    let dflash = METHOD_NAMES.len() - 1;
    let (all_but_last, _) = drafts_under(
        dir.path(),
        &target,
        dflash,
        Some(KeySelection::window(2).leaving_full(vec![1])),
    );
    let (every_layer, _) = drafts_under(dir.path(), &target, dflash, Some(KeySelection::window(2)));
    let (none, _) = drafts_under(dir.path(), &target, dflash, None);
    assert_ne!(all_but_last, every_layer);
    assert_ne!(all_but_last, none);
    let mut vanilla_drafter = vanilla("qwen2", &target, 4, Sampling::greedy());
    let err = vanilla_drafter
        .set_key_selection(Some(KeySelection::window(2).leaving_full(vec![0])))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("window_full_layer") && err.contains("DFlash"),
        "{err}"
    );
}

/// SpecExtend's retrieval over every drafter: retrieving every chunk with a window over the whole
/// context drafts exactly what the plain drafter drafts; one chunk and a window of one key change the
/// drafts; greedy output stays the target's either way.
#[test]
fn retrieval_of_every_chunk_drafts_as_none_and_a_narrow_retrieval_changes_the_drafts() {
    use sharpdraft_draft::retrieval::{RetrievalOptions, RetrievingDrafter};
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 24);
    let dir = tempfile::tempdir().unwrap();
    let (eagle_dir, pard_dir, dflash_dir) = (
        dir.path().join("eagle"),
        dir.path().join("pard"),
        dir.path().join("dflash"),
    );
    write_eagle3(&eagle_dir, &target, &EagleOptions::default());
    write_pard(&pard_dir, "qwen2");
    write_dflash(&dflash_dir, &target, &dflash_options(4, None));
    let plain = |method: usize| -> Box<dyn Drafter + '_> {
        match method {
            0 => Box::new(vanilla("qwen2", &target, 4, Sampling::greedy())),
            1 => Box::new(eagle3(
                &eagle_dir,
                &target,
                TreeShape::chain(3),
                Sampling::greedy(),
            )),
            2 => Box::new(pard(&pard_dir, &target, 4)),
            _ => Box::new(dflash(&dflash_dir, &target)),
        }
    };
    let run = |drafter: &mut dyn Drafter| -> (Vec<Vec<i64>>, Vec<i64>) {
        let mut recording = Recording {
            inner: drafter,
            proposals: Vec::new(),
        };
        let report = spec(&target, &mut recording, &PROMPT, 24, Sampling::greedy());
        (recording.proposals, report.ids)
    };
    for (method, name) in ["vanilla", "eagle3", "pard", "dflash"].iter().enumerate() {
        let (unrestricted, ids) = run(plain(method).as_mut());
        assert_eq!(ids, want, "{name}");
        let everything = RetrievalOptions {
            chunk: 4,
            top_chunks: 1000,
            recent: 1000,
            every: 1,
        };
        let mut wide = RetrievingDrafter::new(plain(method), everything).unwrap();
        let (drafts, ids) = run(&mut wide);
        assert_eq!(
            (drafts, ids),
            (unrestricted.clone(), want.clone()),
            "{name}: every chunk"
        );
        assert!(wide.retrievals() >= 2, "{name}");
        let narrow = RetrievalOptions {
            chunk: 2,
            top_chunks: 1,
            recent: 1,
            every: 1,
        };
        // Before the first verification only the recent window: the first proposal sees one key. (Later
        // ones differ too: a deeper layer's cached keys were computed under that window.)
        let once = RetrievalOptions {
            chunk: 4,
            top_chunks: 1000,
            recent: 1,
            every: 1000,
        };
        let mut once = RetrievingDrafter::new(plain(method), once).unwrap();
        let (drafts, ids) = run(&mut once);
        assert_eq!(ids, want, "{name}");
        if *name == "vanilla" {
            // The random EAGLE head drafts the same first chain from one key; the small LM does not.
            assert_ne!(
                drafts[0], unrestricted[0],
                "{name}: the first proposal sees one key"
            );
        }
        assert_eq!(
            once.retrievals(),
            1,
            "{name}: one retrieval, after the first verification"
        );
        let mut narrow = RetrievingDrafter::new(plain(method), narrow).unwrap();
        let (drafts, ids) = run(&mut narrow);
        assert_eq!(ids, want, "{name}: lossless with retrieval");
        assert_ne!(
            drafts, unrestricted,
            "{name}: one chunk of 2 keys changed nothing"
        );
    }
}

/// What retrieval reads: after every verification, the target's last-layer attention of the root over
/// the committed keys (a distribution), for a drafter that asks, and nothing for one that does not.
#[test]
fn a_drafter_that_asks_gets_the_targets_root_attention_over_the_committed_keys() {
    struct Asking<'a> {
        inner: &'a mut dyn Drafter,
        seen: Vec<(usize, i64, f64)>,
        asks: bool,
    }
    impl Drafter for Asking<'_> {
        fn kind(&self) -> sharpdraft_draft::DrafterKind {
            self.inner.kind()
        }
        fn prefill(
            &mut self,
            ctx: &DraftContext<'_>,
            hidden: Option<&Tensor>,
        ) -> sharpdraft_draft::drafter::Result<()> {
            self.inner.prefill(ctx, hidden)
        }
        fn propose(
            &mut self,
            ctx: &DraftContext<'_>,
            sampler: &mut Sampler,
        ) -> sharpdraft_draft::drafter::Result<Proposal> {
            self.inner.propose(ctx, sampler)
        }
        fn observe(
            &mut self,
            ctx: &DraftContext<'_>,
            feedback: &Feedback<'_>,
        ) -> sharpdraft_draft::drafter::Result<()> {
            // Committed before this cycle's root: everything but the accepted drafts and the bonus, less the root.
            let before_root = ctx.committed.len() - feedback.accepted.len() - 2;
            if let Some(a) = feedback.target_attention {
                self.seen.push((
                    before_root,
                    a.size()[0],
                    a.sum(tch::Kind::Double).double_value(&[]),
                ));
            } else {
                self.seen.push((before_root, -1, 0.0));
            }
            self.inner.observe(ctx, feedback)
        }
        fn wants_target_attention(&self) -> bool {
            self.asks
        }
        fn set_key_selection(
            &mut self,
            selection: Option<KeySelection>,
        ) -> sharpdraft_draft::drafter::Result<()> {
            self.inner.set_key_selection(selection)
        }
        fn stats(&self) -> sharpdraft_draft::DrafterStats {
            self.inner.stats()
        }
        fn variables(&self) -> Vec<(String, Tensor)> {
            self.inner.variables()
        }
    }
    let target = load("llama");
    for asks in [true, false] {
        let mut inner = vanilla("qwen2", &target, 3, Sampling::greedy());
        let mut asking = Asking {
            inner: &mut inner,
            seen: Vec::new(),
            asks,
        };
        spec(&target, &mut asking, &PROMPT, 16, Sampling::greedy());
        assert!(!asking.seen.is_empty());
        for &(before_root, len, sum) in &asking.seen {
            if asks {
                assert_eq!(
                    len,
                    before_root as i64 + 1,
                    "the committed keys and the root"
                );
                assert!((sum - 1.0).abs() < 1e-4, "a distribution: {sum}");
            } else {
                assert_eq!(len, -1, "no attention for a drafter that does not ask");
            }
        }
    }
}
