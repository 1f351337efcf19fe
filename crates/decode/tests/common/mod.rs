//! Tiny models for the engine tests: the HF fixtures of sharpdraft-model as targets and vanilla drafters,
//! and random EAGLE-3 heads written in the published checkpoint layout.
#![allow(dead_code)]

use sharpdraft_decode::{speculative_generate, SpecOptions, SpecReport};
use sharpdraft_draft::dflash::{write_random_dflash, RandomDFlashOptions};
pub use sharpdraft_draft::eagle3::RandomHeadOptions as EagleOptions;
use sharpdraft_draft::{
    DFlashDrafter, Drafter, Eagle3Drafter, PardDrafter, TreeShape, VanillaDrafter,
};
use sharpdraft_model::generate::generate;
use sharpdraft_model::{CausalLm, Sampler, Sampling, ScaledQueries};
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

/// A concrete drafter as its set-up sees it: it drafts, and its queries can be scaled.
pub trait ScaledDrafter: Drafter + ScaledQueries {}
impl<T: Drafter + ScaledQueries> ScaledDrafter for T {}

/// The tiny model `family` (llama, qwen2, qwen3) of crates/model/tests/fixtures: in the workspace this
/// test was built in, or under `$SHARPDRAFT_SOURCE_ROOT` for a test binary carried to another machine
/// (scripts/gpu-check.sh).
pub fn fixture(family: &str) -> PathBuf {
    let fixtures = "crates/model/tests/fixtures";
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = match std::env::var_os("SHARPDRAFT_SOURCE_ROOT") {
        Some(root) if !built.join(fixtures).is_dir() => PathBuf::from(root),
        _ => built,
    };
    root.join(fixtures).join(family)
}

pub fn load(family: &str) -> CausalLm {
    CausalLm::load(&fixture(family), Device::Cpu, Kind::Float).unwrap()
}

pub const PROMPT: [i64; 9] = [5, 17, 42, 3, 3, 60, 21, 9, 33];

pub fn write_eagle3(dir: &Path, target: &CausalLm, options: &EagleOptions) {
    sharpdraft_draft::eagle3::write_random_head(dir, &target.net, options).unwrap();
}

pub fn eagle3(
    dir: &Path,
    target: &CausalLm,
    shape: TreeShape,
    sampling: Sampling,
) -> Eagle3Drafter {
    Eagle3Drafter::load(dir, &target.net, shape, sampling, 512).unwrap()
}

pub fn vanilla(
    drafter_family: &str,
    target: &CausalLm,
    draft_len: usize,
    sampling: Sampling,
) -> VanillaDrafter {
    VanillaDrafter::new(load(drafter_family), target, draft_len, 512, sampling).unwrap()
}

pub fn spec(
    target: &CausalLm,
    drafter: &mut dyn Drafter,
    prompt: &[i64],
    new_tokens: usize,
    sampling: Sampling,
) -> SpecReport {
    let config = SpecOptions {
        max_new_tokens: new_tokens,
        sampling,
        stop_tokens: vec![],
        max_proposal: 64,
        gate: Default::default(),
    };
    speculative_generate(&target.net, drafter, prompt, &config).unwrap()
}

pub fn greedy_ar(target: &CausalLm, prompt: &[i64], new_tokens: usize) -> Vec<i64> {
    generate(
        &target.net,
        prompt,
        new_tokens,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap()
    .ids
}

/// A PARD drafter folder: a copy of a fixture whose config names `pard_token` (id 63, unused by the
/// tiny models' prompts).
pub fn write_pard(dir: &Path, family: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(family).join("config.json")).unwrap(),
    )
    .unwrap();
    config["pard_token"] = 63.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        fixture(family).join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
}

pub fn pard(dir: &Path, target: &CausalLm, draft_len: usize) -> PardDrafter {
    PardDrafter::new(
        CausalLm::load(dir, Device::Cpu, Kind::Float).unwrap(),
        target,
        draft_len,
        512,
    )
    .unwrap()
}

pub fn dflash_options(block_size: i64, sliding_window: Option<i64>) -> RandomDFlashOptions {
    RandomDFlashOptions {
        layers: 2,
        block_size,
        sliding_window,
        mask_token: 63,
        seed: 1,
    }
}

pub fn write_dflash(dir: &Path, target: &CausalLm, options: &RandomDFlashOptions) {
    write_random_dflash(dir, &target.net, options).unwrap();
}

pub fn dflash(dir: &Path, target: &CausalLm) -> DFlashDrafter {
    DFlashDrafter::load(dir, &target.net, 512).unwrap()
}

pub const SHORT_PROMPT: [i64; 4] = [5, 17, 42, 3];

/// Exact distribution of the second generated token: sum_x1 p(x1 | prompt) p(x2 | prompt, x1).
pub fn exact_second_token(target: &sharpdraft_model::CausalLm) -> Vec<f64> {
    let _guard = tch::no_grad_guard();
    let probs = |ids: &[i64]| -> Vec<f64> {
        let ids_t = tch::Tensor::from_slice(ids);
        let positions = tch::Tensor::arange(ids.len() as i64, (Kind::Int64, Device::Cpu));
        let logits = target
            .net
            .forward(
                sharpdraft_model::ForwardInput::causal(&ids_t, &positions),
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

/// Pearson chi-square p-value of `counts` against probabilities `p`, merging cells expected below 5.
pub fn chi_square_p_value(counts: &[usize], p: &[f64]) -> f64 {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    let n: usize = counts.iter().sum();
    let (mut stat, mut cells, mut rest_observed, mut rest_expected) = (0.0, 0, 0.0, 0.0);
    for (&c, &pi) in counts.iter().zip(p) {
        let expected = pi * n as f64;
        if expected < 5.0 {
            rest_observed += c as f64;
            rest_expected += expected;
        } else {
            stat += (c as f64 - expected).powi(2) / expected;
            cells += 1;
        }
    }
    if rest_expected > 0.0 {
        stat += (rest_observed - rest_expected).powi(2) / rest_expected;
        cells += 1;
    }
    1.0 - ChiSquared::new((cells - 1) as f64).unwrap().cdf(stat)
}

/// Sets `drafter`'s query scaling to a fixed global `beta` at n0 = 4 (every pass of the 9-token
/// [`PROMPT`] lies past n0), or off when `beta` is `None`.
pub fn scale_at_n0_4(drafter: &mut dyn ScaledDrafter, beta: Option<f64>) {
    let (layers, heads) = drafter.query_layout();
    let scaling = match beta {
        None => sharpdraft_model::QueryScaling::off(),
        Some(beta) => {
            let schedule = sharpdraft_math::ScaleSchedule::global(4.0, beta).unwrap();
            sharpdraft_model::QueryScaling::from_schedule(
                sharpdraft_model::ScalingMode::Fixed,
                schedule,
                layers,
                heads,
            )
            .unwrap()
        }
    };
    drafter.set_query_scaling(scaling);
}
