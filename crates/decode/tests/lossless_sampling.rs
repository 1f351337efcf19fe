//! End to end on tiny random models: with sampling (temperature 1), speculative decoding emits tokens
//! with exactly the target's distribution, for sampled chains (q known) and deterministic trees.
mod common;

use common::*;
use sharpdraft_draft::{Drafter, TreeShape};
use sharpdraft_model::Sampling;

const RUNS: u64 = 1200;

fn second_token_counts(
    target: &sharpdraft_model::CausalLm,
    mut make: impl FnMut(Sampling) -> Box<dyn Drafter>,
) -> Vec<usize> {
    let mut counts = vec![0usize; target.net.config.vocab_size as usize];
    for seed in 0..RUNS {
        let sampling = Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed,
        };
        let mut drafter = make(sampling);
        let out = spec(target, drafter.as_mut(), &SHORT_PROMPT, 2, sampling);
        counts[out.ids[1] as usize] += 1;
    }
    counts
}

#[test]
fn sampled_vanilla_chains_are_lossless() {
    let target = load("llama");
    let exact = exact_second_token(&target);
    let counts = second_token_counts(&target, |s| Box::new(vanilla("qwen2", &target, 3, s)));
    assert!(chi_square_p_value(&counts, &exact) > 1e-3, "{counts:?}");
}

#[test]
fn eagle3_trees_and_sampled_chains_are_lossless() {
    let target = load("llama");
    let exact = exact_second_token(&target);
    let dir = tempfile::tempdir().unwrap();
    write_eagle3(dir.path(), &target, &EagleOptions::default());
    for shape in [
        TreeShape {
            depth: 2,
            top_k: 4,
            total_tokens: 10,
        },
        TreeShape::chain(3),
    ] {
        let counts =
            second_token_counts(&target, |s| Box::new(eagle3(dir.path(), &target, shape, s)));
        assert!(
            chi_square_p_value(&counts, &exact) > 1e-3,
            "{shape:?}: {counts:?}"
        );
    }
}

#[test]
fn pard_and_dflash_are_lossless() {
    let target = load("llama");
    let exact = exact_second_token(&target);
    let dir = tempfile::tempdir().unwrap();
    let pard_dir = dir.path().join("pard");
    write_pard(&pard_dir, "llama");
    let counts = second_token_counts(&target, |_| Box::new(pard(&pard_dir, &target, 3)));
    assert!(
        chi_square_p_value(&counts, &exact) > 1e-3,
        "pard: {counts:?}"
    );
    let dflash_dir = dir.path().join("dflash");
    write_dflash(&dflash_dir, &target, &dflash_options(4, None));
    let counts = second_token_counts(&target, |_| Box::new(dflash(&dflash_dir, &target)));
    assert!(
        chi_square_p_value(&counts, &exact) > 1e-3,
        "dflash: {counts:?}"
    );
}
