//! One prefill a request: every arm decoding from the target's prefill made once (its cache copied,
//! its hidden states read at each drafter's taps) emits exactly what it emits from its own prefill, and
//! no arm's decode changes what the next arm reads.
mod common;

use common::*;
use sharpdraft_decode::{speculative_generate_from, SpecOptions};
use sharpdraft_draft::{Drafter, TreeShape};
use sharpdraft_model::generate::{generate, generate_from, PromptPrefill};
use sharpdraft_model::{Sampler, Sampling, Tap};

fn config(new_tokens: usize) -> SpecOptions {
    SpecOptions {
        max_new_tokens: new_tokens,
        sampling: Sampling::greedy(),
        stop_tokens: vec![],
        max_proposal: 64,
        gate: Default::default(),
    }
}

#[test]
fn every_drafter_decodes_from_one_shared_prefill_as_from_its_own() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_eagle3(&dir.path().join("eagle"), &target, &EagleOptions::default());
    write_dflash(
        &dir.path().join("dflash"),
        &target,
        &dflash_options(4, None),
    );
    let mut eagle = eagle3(
        &dir.path().join("eagle"),
        &target,
        TreeShape::chain(4),
        Sampling::greedy(),
    );
    let mut flash = dflash(&dir.path().join("dflash"), &target);
    let mut plain = vanilla("qwen2", &target, 3, Sampling::greedy());
    // The union of every arm's taps, in the order they first come, as a run records them.
    let mut taps: Vec<Tap> = Vec::new();
    for drafter in [&eagle as &dyn Drafter, &flash, &plain] {
        for tap in drafter.target_taps() {
            if !taps.contains(&tap) {
                taps.push(tap);
            }
        }
    }
    assert!(
        taps.len() > eagle.target_taps().len(),
        "the drafters read different taps"
    );
    let shared = PromptPrefill::run(&target.net, &PROMPT, &taps, PROMPT.len() as i64).unwrap();
    let want = greedy_ar(&target, &PROMPT, 24);
    // The target alone first, then the drafters, each twice: a decode changes nothing the next reads.
    let alone = generate_from(
        &target.net,
        &shared,
        24,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap();
    assert_eq!(alone.ids, want);
    assert_eq!(
        alone.prefill_seconds,
        shared.seconds(),
        "the shared prefill's own seconds"
    );
    for round in 0..2 {
        for (name, drafter) in [
            ("eagle", &mut eagle as &mut dyn Drafter),
            ("dflash", &mut flash),
            ("vanilla", &mut plain),
        ] {
            let own = spec(&target, drafter, &PROMPT, 24, Sampling::greedy());
            let from_shared =
                speculative_generate_from(&target.net, drafter, &shared, &config(24)).unwrap();
            assert_eq!(from_shared.ids, want, "{name}, round {round}");
            assert_eq!(
                from_shared
                    .cycles
                    .iter()
                    .map(|c| c.accepted)
                    .collect::<Vec<_>>(),
                own.cycles.iter().map(|c| c.accepted).collect::<Vec<_>>(),
                "{name}: the same drafts accepted"
            );
            assert!(
                from_shared.prefill_seconds >= shared.seconds()
                    && from_shared.total_seconds >= from_shared.prefill_seconds,
                "{name}: the shared prefill is counted in the arm's time"
            );
        }
    }
}

#[test]
fn a_copied_cache_is_the_callers_own() {
    let target = load("qwen2");
    let shared = PromptPrefill::run(&target.net, &PROMPT, &[], PROMPT.len() as i64).unwrap();
    let before = shared
        .cache_copy(PROMPT.len() as i64)
        .unwrap()
        .layer(0)
        .0
        .copy();
    let mut copy = shared.cache_copy(PROMPT.len() as i64 + 8).unwrap();
    assert_eq!(
        (copy.len(), copy.capacity()),
        (PROMPT.len() as i64, PROMPT.len() as i64 + 8)
    );
    // Rows of the copy written over with another prompt's, and another arm's decode: the shared
    // prefill's cache keeps its own.
    copy.truncate(1).unwrap();
    let _ = sharpdraft_model::generate::prefill(&target.net, &[7, 7, 7, 7, 7], &mut copy).unwrap();
    let _ = generate_from(
        &target.net,
        &shared,
        6,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap();
    let after = shared.cache_copy(PROMPT.len() as i64).unwrap().layer(0).0;
    assert!(before.equal(&after));
    assert!(
        shared.cache_copy(PROMPT.len() as i64 - 1).is_err(),
        "a copy never drops rows"
    );
    let want = generate(
        &target.net,
        &PROMPT,
        6,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap();
    let got = generate_from(
        &target.net,
        &shared,
        6,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap();
    assert_eq!(got.ids, want.ids);
}
