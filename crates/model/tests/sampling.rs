//! Sampling: the filtered distribution, seeded reproducibility, and greedy decoding through the cache.
mod common;

use common::{expected, forward, load};
use sharpdraft_model::generate::generate;
use sharpdraft_model::{Sampler, Sampling};
use tch::{Kind, Tensor};

fn logits() -> Tensor {
    Tensor::from_slice(&[2.0f32, 1.0, 0.5, 0.0, -1.0, -3.0])
}

fn as_vec(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t).unwrap()
}

#[test]
fn temperature_one_without_filters_is_the_softmax() {
    let probs = Sampling {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        seed: 0,
    }
    .probabilities(&logits());
    let want = logits().softmax(-1, Kind::Float);
    assert!((probs - want).abs().max().double_value(&[]) < 1e-7);
}

#[test]
fn top_k_keeps_exactly_the_k_largest() {
    let probs = as_vec(
        &Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 2,
            seed: 0,
        }
        .probabilities(&logits()),
    );
    assert!(probs[2..].iter().all(|&p| p == 0.0));
    let z = 1.0 + (-1.0f32).exp();
    assert!((probs[0] - 1.0 / z).abs() < 1e-6 && (probs[1] - (-1.0f32).exp() / z).abs() < 1e-6);
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    let full = as_vec(&logits().softmax(-1, Kind::Float));
    // The first token alone has ~0.55 of the mass: p = 0.5 keeps only it, p = 0.6 keeps two.
    let half = as_vec(
        &Sampling {
            temperature: 1.0,
            top_p: 0.5,
            top_k: 0,
            seed: 0,
        }
        .probabilities(&logits()),
    );
    assert_eq!(half.iter().filter(|&&p| p > 0.0).count(), 1, "{full:?}");
    let more = as_vec(
        &Sampling {
            temperature: 1.0,
            top_p: 0.6,
            top_k: 0,
            seed: 0,
        }
        .probabilities(&logits()),
    );
    assert_eq!(more.iter().filter(|&&p| p > 0.0).count(), 2);
    assert!((more.iter().sum::<f32>() - 1.0).abs() < 1e-6);
}

#[test]
fn a_top_p_too_small_for_f32_keeps_the_most_likely_token_not_a_nan() {
    for top_p in [1e-300, f64::MIN_POSITIVE, 1e-45] {
        let probs = as_vec(
            &Sampling {
                temperature: 1.0,
                top_p,
                top_k: 0,
                seed: 0,
            }
            .probabilities(&logits()),
        );
        assert_eq!(probs, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0], "top_p {top_p}");
    }
}

#[test]
fn sampling_follows_the_distribution_and_repeats_with_the_seed() {
    let sampling = Sampling {
        temperature: 0.8,
        top_p: 1.0,
        top_k: 0,
        seed: 42,
    };
    let probs = as_vec(&sampling.probabilities(&logits()));
    let mut sampler = Sampler::new(sampling);
    let draws: Vec<i64> = (0..20_000)
        .map(|_| sampler.sample(&logits()).unwrap())
        .collect();
    for (token, p) in probs.iter().enumerate() {
        let freq = draws.iter().filter(|&&d| d == token as i64).count() as f64 / draws.len() as f64;
        // 5 standard errors.
        assert!(
            (freq - *p as f64).abs()
                < 5.0 * (*p as f64 * (1.0 - *p as f64) / 20_000.0).sqrt() + 1e-3,
            "token {token}: {freq} vs {p}"
        );
    }
    let mut again = Sampler::new(sampling);
    assert_eq!(
        (0..100)
            .map(|_| again.sample(&logits()).unwrap())
            .collect::<Vec<_>>(),
        draws[..100].to_vec()
    );
}

#[test]
fn greedy_generation_with_the_cache_equals_recomputing_from_scratch() {
    let model = load("qwen2");
    let prompt = &expected("qwen2").ids[..6];
    let out = generate(
        &model.net,
        prompt,
        10,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap();
    let mut sequence = prompt.to_vec();
    for _ in 0..10 {
        let logits = forward(&model.net, &sequence, &mut model.net.new_cache(32));
        sequence.push(
            logits
                .get(sequence.len() as i64 - 1)
                .argmax(-1, false)
                .int64_value(&[]),
        );
    }
    assert_eq!(out.ids, sequence[6..].to_vec());
    let stop_at = out.ids[3];
    let stopped = generate(
        &model.net,
        prompt,
        10,
        &mut Sampler::new(Sampling::greedy()),
        &[stop_at],
    )
    .unwrap();
    let first = out.ids.iter().position(|&t| t == stop_at).unwrap();
    assert_eq!(
        stopped.ids,
        out.ids[..=first].to_vec(),
        "stops after the first stop token"
    );
}

#[test]
fn temperatures_are_taken_from_greedy_to_the_bound_and_nothing_else() {
    use sharpdraft_model::{is_valid_temperature, MAX_TEMPERATURE};
    for t in [0.0, 0.7, 1.0, MAX_TEMPERATURE] {
        assert!(is_valid_temperature(t), "{t}");
    }
    for t in [
        -0.1,
        MAX_TEMPERATURE + 0.5,
        f64::NAN,
        f64::INFINITY,
        4294967296.0,
    ] {
        assert!(!is_valid_temperature(t), "{t}");
    }
}
