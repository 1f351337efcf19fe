//! The engine on every device libtorch offers: on CPU always, on CUDA where a GPU is present (skipped,
//! saying so, elsewhere). The same forward logits as the CPU, and greedy speculation that emits the
//! target's own greedy tokens with every drafter, query scaling on and off.
mod common;

use common::*;
use sharpdraft_draft::{DFlashDrafter, Eagle3Drafter, PardDrafter, TreeShape, VanillaDrafter};
use sharpdraft_model::{CausalLm, ForwardInput, Sampling};
use tch::{Device, Kind, Tensor};

/// CPU, and CUDA device 0 when libtorch sees one.
fn devices() -> Vec<Device> {
    let mut devices = vec![Device::Cpu];
    if tch::Cuda::is_available() {
        devices.push(Device::Cuda(0));
    } else {
        sharpdraft_testing::skip_for_this_machine(
            "CUDA: libtorch sees no CUDA device (checked on CPU only)",
        );
    }
    devices
}

fn load_on(family: &str, device: Device) -> CausalLm {
    CausalLm::load(&fixture(family), device, Kind::Float).unwrap()
}

/// The logits of every row of `tokens`, `[T, vocab]` on the CPU.
fn logits_of(model: &CausalLm, tokens: &[i64]) -> Tensor {
    let mut cache = model.net.new_cache(tokens.len() as i64 + 8);
    let device = model.net.device();
    let ids = Tensor::from_slice(tokens).to_device(device);
    let positions = Tensor::arange(tokens.len() as i64, (Kind::Int64, device));
    model
        .net
        .forward(ForwardInput::causal(&ids, &positions), &mut cache)
        .unwrap()
        .logits
        .expect("logits of every row")
        .to_device(Device::Cpu)
}

#[test]
fn every_device_gives_the_cpu_logits() {
    for family in ["llama", "qwen2", "qwen3"] {
        let cpu = logits_of(&load_on(family, Device::Cpu), &PROMPT);
        for device in devices() {
            let logits = logits_of(&load_on(family, device), &PROMPT);
            let diff = (&logits - &cpu).abs().max().double_value(&[]);
            assert!(
                diff < 1e-3,
                "{family} on {device:?}: max |logit difference| = {diff}"
            );
        }
    }
}

/// `got` is the target's greedy continuation `want` (both after `PROMPT`). On a CPU exactly; on CUDA up to
/// a near tie: where they first differ, the target's two best logits lie within 1e-3 (a verification
/// pass and one-row decode steps round differently there, so either token is the target's greedy one).
fn assert_greedy(target: &CausalLm, got: &[i64], want: &[i64], what: &str) {
    let Some(first) = got.iter().zip(want).position(|(a, b)| a != b) else {
        assert_eq!(got.len(), want.len(), "{what}: length");
        return;
    };
    let near_tie = target.net.device().is_cuda() && {
        let prefix: Vec<i64> = PROMPT.iter().chain(&want[..first]).copied().collect();
        let last = logits_of(target, &prefix).select(0, -1);
        let (best, _) = last.topk(2, -1, true, true);
        let best = Vec::<f32>::try_from(best).unwrap();
        best[0] - best[1] < 1e-3
    };
    assert!(
        near_tie,
        "{what}: token {first} differs:\n got {got:?}\nwant {want:?}"
    );
}

#[test]
fn greedy_speculation_emits_the_targets_greedy_tokens_on_every_device() {
    let folder = tempfile::tempdir().unwrap();
    for device in devices() {
        let target = load_on("llama", device);
        let want = greedy_ar(&target, &PROMPT, 20);
        let eagle = folder.path().join("eagle3");
        let dflash_dir = folder.path().join("dflash");
        let pard_dir = folder.path().join("pard");
        if !eagle.exists() {
            write_eagle3(&eagle, &target, &EagleOptions::default());
            write_dflash(&dflash_dir, &target, &dflash_options(4, None));
            write_pard(&pard_dir, "qwen2");
        }
        for beta in [None, Some(0.4)] {
            let mut drafters: Vec<(&str, Box<dyn ScaledDrafter>)> = vec![
                (
                    "vanilla",
                    Box::new(
                        VanillaDrafter::new(
                            load_on("qwen2", device),
                            &target,
                            4,
                            512,
                            Sampling::greedy(),
                        )
                        .unwrap(),
                    ),
                ),
                (
                    "eagle3",
                    Box::new(
                        Eagle3Drafter::load(
                            &eagle,
                            &target.net,
                            TreeShape::chain(4),
                            Sampling::greedy(),
                            512,
                        )
                        .unwrap(),
                    ),
                ),
                (
                    "dflash",
                    Box::new(DFlashDrafter::load(&dflash_dir, &target.net, 512).unwrap()),
                ),
                (
                    "pard",
                    Box::new(
                        PardDrafter::new(
                            CausalLm::load(&pard_dir, device, Kind::Float).unwrap(),
                            &target,
                            4,
                            512,
                        )
                        .unwrap(),
                    ),
                ),
            ];
            for (name, drafter) in drafters.iter_mut() {
                scale_at_n0_4(drafter.as_mut(), beta);
                let got = spec(&target, drafter.as_mut(), &PROMPT, 20, Sampling::greedy());
                assert_greedy(
                    &target,
                    &got.ids,
                    &want,
                    &format!("{name} on {device:?}, beta {beta:?}"),
                );
            }
        }
    }
}
