//! The engine on every device libtorch offers: on CPU always, on CUDA where a GPU is present (skipped,
//! saying so, elsewhere). The same forward logits as the CPU, and greedy speculation that emits the
//! target's own greedy tokens with every drafter, query scaling on and off.
mod common;

use common::*;
use sharpdraft_draft::{
    DFlashDrafter, Drafter, Eagle3Drafter, PardDrafter, TreeShape, VanillaDrafter,
};
use sharpdraft_math::ScaleSchedule;
use sharpdraft_model::{CausalLm, ForwardInput, QueryScaling, Sampling, ScalingMode};
use tch::{Device, Kind, Tensor};

/// CPU, and CUDA device 0 when libtorch sees one.
fn devices() -> Vec<Device> {
    let mut devices = vec![Device::Cpu];
    if tch::Cuda::is_available() {
        devices.push(Device::Cuda(0));
    } else {
        eprintln!("skipped on CUDA: libtorch sees no CUDA device (checked on CPU only)");
    }
    devices
}

fn load_on(family: &str, device: Device) -> CausalLm {
    CausalLm::load(&fixture(family), device, Kind::Float).unwrap()
}

fn prompt_logits(model: &CausalLm) -> Tensor {
    let mut cache = model.net.new_cache(64);
    let device = model.net.device();
    let ids = Tensor::from_slice(&PROMPT).to_device(device);
    let positions = Tensor::arange(PROMPT.len() as i64, (Kind::Int64, device));
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
        let cpu = prompt_logits(&load_on(family, Device::Cpu));
        for device in devices() {
            let logits = prompt_logits(&load_on(family, device));
            let diff = (&logits - &cpu).abs().max().double_value(&[]);
            assert!(
                diff < 1e-3,
                "{family} on {device:?}: max |logit difference| = {diff}"
            );
        }
    }
}

fn with_scaling(drafter: &mut dyn Drafter, beta: Option<f64>) {
    let (layers, heads) = drafter.query_layout();
    let mode = match beta {
        None => ScalingMode::Off,
        Some(beta) => ScalingMode::Fixed(ScaleSchedule::global(4.0, beta).unwrap()),
    };
    drafter.set_query_scaling(QueryScaling::new(mode, layers, heads).unwrap());
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
            let mut drafters: Vec<(&str, Box<dyn Drafter>)> = vec![
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
                with_scaling(drafter.as_mut(), beta);
                let got = spec(&target, drafter.as_mut(), &PROMPT, 20, Sampling::greedy());
                assert_eq!(got.ids, want, "{name} on {device:?}, beta {beta:?}");
            }
        }
    }
}
