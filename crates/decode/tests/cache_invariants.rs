//! After every cycle, whatever was accepted or rejected, the target cache (and a vanilla drafter's)
//! equals a fresh prefill of the committed tokens.
mod common;

use common::*;
use sharpdraft_decode::{Session, SpecOptions};
use sharpdraft_draft::{Drafter, TreeShape};
use sharpdraft_model::generate::prefill;
use sharpdraft_model::{KvCache, Sampling, Transformer};

fn assert_cache_is_fresh_prefill(net: &Transformer, cache: &KvCache, tokens: &[i64], what: &str) {
    let mut fresh = net.new_cache(256);
    let _ = prefill(net, tokens, &mut fresh).unwrap();
    assert_eq!(cache.len(), tokens.len() as i64, "{what}: cache length");
    for layer in 0..cache.num_layers() {
        let (k, v) = cache.layer(layer);
        let (k0, v0) = fresh.layer(layer);
        let diff = (k - k0)
            .abs()
            .max()
            .double_value(&[])
            .max((v - v0).abs().max().double_value(&[]));
        assert!(diff < 1e-5, "{what}: layer {layer} differs by {diff}");
    }
}

fn run<D: Drafter>(
    target: &sharpdraft_model::CausalLm,
    drafter: &mut D,
    sampling: Sampling,
    mut check_drafter: impl FnMut(&D, &[i64]),
) -> (usize, usize) {
    let _guard = tch::no_grad_guard();
    let config = SpecOptions {
        max_new_tokens: 40,
        sampling,
        stop_tokens: vec![],
        max_proposal: 64,
        gate: Default::default(),
    };
    let mut session = Session::prefill(&target.net, drafter, &PROMPT, &config).unwrap();
    let (mut full, mut partial) = (0, 0);
    while !session.finished {
        session.cycle(drafter).unwrap();
        let cycle = session.cycles.last().unwrap();
        if cycle.accepted == cycle.drafted {
            full += 1
        } else {
            partial += 1
        }
        if !session.finished {
            let committed = &session.committed;
            assert_cache_is_fresh_prefill(
                &target.net,
                &session.cache,
                &committed[..committed.len() - 1],
                "target",
            );
            check_drafter(drafter, committed);
        }
    }
    (full, partial)
}

#[test]
fn target_and_vanilla_caches_stay_a_fresh_prefill_of_the_committed_tokens() {
    let target = load("qwen3");
    let drafter_net = load("qwen3");
    for sampling in [
        Sampling::greedy(),
        Sampling {
            temperature: 1.0,
            top_p: 0.9,
            top_k: 0,
            seed: 5,
        },
    ] {
        // Chains of 3; and chains that end at a draft the drafter is less than 99.9% sure of, which a
        // tiny random model always is: every chain of those ends at its first draft.
        for stop_below in [None, Some(0.999)] {
            // A drafter that shares some behaviour with the target gives a mix of accepts and rejects.
            let mut drafter = vanilla("qwen3", &target, 3, sampling).with_stop_below(stop_below);
            let (full, partial) = run(&target, &mut drafter, sampling, |d, committed| {
                let cache = d.cache();
                let len = cache.len() as usize;
                assert!(len < committed.len(), "the drafter never caches the root");
                assert_cache_is_fresh_prefill(
                    &drafter_net.net,
                    cache,
                    &committed[..len],
                    "drafter",
                );
            });
            assert!(full + partial > 3);
            if stop_below.is_some() {
                let mut drafter =
                    vanilla("qwen3", &target, 3, sampling).with_stop_below(stop_below);
                let report = spec(&target, &mut drafter, &PROMPT, 12, sampling);
                assert!(report.cycles.iter().all(|c| c.drafted == 1));
            }
        }
    }
    let mut other = vanilla("qwen2", &target, 4, Sampling::greedy());
    let (_, partial) = run(&target, &mut other, Sampling::greedy(), |_, _| {});
    assert!(partial > 0, "a different model gets rejected at least once");
}

#[test]
fn the_target_cache_stays_exact_under_eagle3_trees() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write_eagle3(dir.path(), &target, &EagleOptions::default());
    for sampling in [
        Sampling::greedy(),
        Sampling {
            temperature: 0.8,
            top_p: 1.0,
            top_k: 0,
            seed: 9,
        },
    ] {
        let mut drafter = eagle3(
            dir.path(),
            &target,
            TreeShape {
                depth: 3,
                top_k: 3,
                total_tokens: 10,
            },
            sampling,
        );
        run(&target, &mut drafter, sampling, |_, _| {});
    }
}

#[test]
fn pard_and_dflash_keep_every_cache_exact() {
    let target = load("qwen2");
    let dir = tempfile::tempdir().unwrap();
    let pard_dir = dir.path().join("pard");
    write_pard(&pard_dir, "qwen2");
    let pard_model =
        sharpdraft_model::CausalLm::load(&pard_dir, tch::Device::Cpu, tch::Kind::Float).unwrap();
    for sampling in [
        Sampling::greedy(),
        Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: 2,
        },
    ] {
        let mut drafter = pard(&pard_dir, &target, 4);
        run(&target, &mut drafter, sampling, |d, committed| {
            // PARD keeps a prefix of the committed tokens (everything committed when it proposed, the root
            // included) and none of its mask slots.
            let len = d.cache().len() as usize;
            assert!(len < committed.len());
            assert_cache_is_fresh_prefill(&pard_model.net, d.cache(), &committed[..len], "pard");
        });
        let dflash_dir = dir.path().join("dflash");
        write_dflash(&dflash_dir, &target, &dflash_options(5, Some(7)));
        let mut drafter = dflash(&dflash_dir, &target);
        run(&target, &mut drafter, sampling, |_, _| {});
    }
}
