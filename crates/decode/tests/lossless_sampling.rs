//! End to end on tiny random models: with sampling (temperature 1), speculative decoding emits tokens
//! with exactly the target's distribution, for sampled chains (q known) and deterministic trees.
mod common;

use common::*;
use sharpdraft_draft::{Drafter, TreeShape};
use sharpdraft_model::{ForwardInput, Sampling};
use tch::{Device, Kind, Tensor};

const RUNS: u64 = 1200;
const SHORT_PROMPT: [i64; 4] = [5, 17, 42, 3];

/// Exact distribution of the second generated token: sum_x1 p(x1 | prompt) p(x2 | prompt, x1).
fn exact_second_token(target: &sharpdraft_model::CausalLm) -> Vec<f64> {
    let _guard = tch::no_grad_guard();
    let probs = |ids: &[i64]| -> Vec<f64> {
        let ids_t = Tensor::from_slice(ids);
        let positions = Tensor::arange(ids.len() as i64, (Kind::Int64, Device::Cpu));
        let logits = target
            .net
            .forward(
                ForwardInput::causal(&ids_t, &positions),
                &mut target.net.new_cache(16),
            )
            .unwrap()
            .logits
            .unwrap();
        Vec::<f32>::try_from(logits.get(ids.len() as i64 - 1).softmax(-1, Kind::Float))
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let first = probs(&SHORT_PROMPT);
    let mut second = vec![0.0; first.len()];
    for (x1, p1) in first.iter().enumerate() {
        let mut ids = SHORT_PROMPT.to_vec();
        ids.push(x1 as i64);
        for (x2, p2) in probs(&ids).iter().enumerate() {
            second[x2] += p1 * p2;
        }
    }
    second
}

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
