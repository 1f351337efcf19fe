//! EAGLE-3 training on a tiny random target: the loss falls, checkpoints reload in the published layout
//! and draft, and an interrupted run resumes where it stopped.
use sharpdraft_draft::eagle3_train::{extract_windows, frequent_tokens, train, Eagle3TrainConfig, TrainState};
use sharpdraft_draft::{Eagle3Drafter, TreeShape};
use sharpdraft_model::{CausalLm, Sampling, Tap};
use std::path::PathBuf;
use tch::{Device, Kind};

fn target() -> CausalLm {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()
}

/// A token stream with structure to learn: repeated short patterns.
fn stream() -> Vec<i64> {
    (0..2048).map(|i: i64| [3, 17, 42, 8, 8, 21, 5][(i % 7) as usize] + (i / 97) % 3).collect()
}

fn config(steps: usize) -> Eagle3TrainConfig {
    Eagle3TrainConfig { n0: 64, steps, ttt_steps: 3, learning_rate: 3e-3, draft_vocab: 48, top_k_targets: 8, eagle31: true, seed: 1, checkpoint_every: 10 }
}

const TAPS: [Tap; 3] = [Tap::LayerInput(0), Tap::LayerInput(1), Tap::LayerInput(2)];

#[test]
fn a_few_training_steps_lower_the_loss_and_the_checkpoint_drafts() {
    let target = target();
    let windows = extract_windows(&target.net, &TAPS, &stream(), 64, 8, 8).unwrap();
    assert_eq!(windows.len(), 8);
    assert_eq!(frequent_tokens(&windows, 64, 48).len(), 48);
    let dir = tempfile::tempdir().unwrap();
    let state = train(&target.net, &windows, dir.path(), &config(60), |_, _| {}).unwrap();
    let first: f64 = state.losses[..10].iter().sum::<f64>() / 10.0;
    let last: f64 = state.losses[50..].iter().sum::<f64>() / 10.0;
    assert!(last < 0.8 * first, "loss {first:.3} -> {last:.3}");
    let head = Eagle3Drafter::load(dir.path(), &target.net, TreeShape::chain(3), Sampling::greedy(), 128).unwrap();
    assert_eq!(head.training_length(), 64, "n0 is recorded in the checkpoint");
}

#[test]
fn an_interrupted_run_resumes_from_its_last_checkpoint() {
    let target = target();
    let windows = extract_windows(&target.net, &TAPS, &stream(), 64, 4, 8).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let partial = train(&target.net, &windows, dir.path(), &config(20), |_, _| {}).unwrap();
    let state: TrainState = serde_json::from_str(&std::fs::read_to_string(dir.path().join("train_state.json")).unwrap()).unwrap();
    assert_eq!(state, partial);
    let resumed = train(&target.net, &windows, dir.path(), &config(30), |_, _| {}).unwrap();
    assert_eq!(resumed.step, 30);
    assert_eq!(resumed.losses[..20], partial.losses[..], "the first 20 steps are kept, not redone");
    assert!(dir.path().join("loss.csv").exists());
}

#[test]
fn a_saved_head_reloads_bit_identically() {
    let target = target();
    let windows = extract_windows(&target.net, &TAPS, &stream(), 64, 2, 8).unwrap();
    let dir = tempfile::tempdir().unwrap();
    train(&target.net, &windows, dir.path(), &config(10), |_, _| {}).unwrap();
    let (first, _) = sharpdraft_draft::eagle3::Eagle3Head::load(dir.path(), &target.net, false).unwrap();
    let copy = tempfile::tempdir().unwrap();
    first.save(copy.path(), 64).unwrap();
    let (second, _) = sharpdraft_draft::eagle3::Eagle3Head::load(copy.path(), &target.net, false).unwrap();
    let a = first.vars.variables();
    let b = second.vars.variables();
    assert_eq!(a.len(), b.len());
    for (name, tensor) in &a {
        assert!(tensor.equal(&b[name]), "{name} differs after a save/load round trip");
    }
}
