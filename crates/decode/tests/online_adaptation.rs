//! Online adaptation on tiny random models: an update learns from its buffer, the target and the
//! verifier's guarantee are untouched, and a run is reproducible from its seed.
mod common;

use common::*;
use sharpdraft_draft::adaptation::{
    AdaptMode, AdaptOptions, Adaptable, AdaptingDrafter, LearnFrom, LoraForm, OnlineObjective,
    UpdateUnit,
};
use sharpdraft_draft::DrafterKind;
use sharpdraft_draft::{Drafter, TreeShape};
use sharpdraft_model::{CausalLm, Sampling};
use std::path::Path;
use tch::Tensor;

const METHODS: [DrafterKind; 4] = [
    DrafterKind::Vanilla,
    DrafterKind::Eagle3,
    DrafterKind::Pard,
    DrafterKind::Dflash,
];

/// Writes the drafter checkpoint of `method` for `target` into `dir` (vanilla reads a fixture).
fn write(method: DrafterKind, dir: &Path, target: &CausalLm) {
    match method {
        DrafterKind::Vanilla => {}
        DrafterKind::Eagle3 => write_eagle3(dir, target, &EagleOptions::default()),
        DrafterKind::Pard => write_pard(dir, "llama"),
        DrafterKind::Dflash => write_dflash(dir, target, &dflash_options(4, None)),
    }
}

/// The plain drafter of `method` from `dir`, drafting chains of 3.
fn plain(
    method: DrafterKind,
    dir: &Path,
    target: &CausalLm,
    sampling: Sampling,
) -> Box<dyn Adaptable> {
    match method {
        DrafterKind::Vanilla => Box::new(vanilla("qwen2", target, 3, sampling)),
        DrafterKind::Eagle3 => Box::new(eagle3(dir, target, TreeShape::chain(3), sampling)),
        DrafterKind::Pard => Box::new(pard(dir, target, 3)),
        DrafterKind::Dflash => Box::new(dflash(dir, target)),
    }
}

/// The online objective of `method` in these tests.
fn settings(method: DrafterKind) -> OnlineObjective {
    match method {
        DrafterKind::Vanilla => OnlineObjective::Vanilla,
        DrafterKind::Eagle3 => OnlineObjective::Eagle3 { ttt_steps: 3 },
        DrafterKind::Pard => OnlineObjective::Pard {
            mask_token: 63,
            copies: 3,
        },
        DrafterKind::Dflash => OnlineObjective::Dflash {
            anchors: 4,
            gamma: 4.0,
        },
    }
}

fn adapting<'t>(
    method: DrafterKind,
    dir: &Path,
    target: &'t CausalLm,
    config: AdaptOptions,
    sampling: Sampling,
) -> AdaptingDrafter<'t> {
    let drafter = plain(method, dir, target, sampling);
    AdaptingDrafter::new(drafter, &target.net, settings(method), config).unwrap()
}

/// Plain sampling at temperature 1 from `seed`.
fn sampled(seed: u64) -> Sampling {
    Sampling {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        seed,
    }
}

/// Updates every cycle at a learning rate that moves tiny random models visibly.
fn eager(mode: AdaptMode) -> AdaptOptions {
    AdaptOptions {
        every: 1,
        lr: 1e-2,
        ..AdaptOptions::new(mode)
    }
}

/// Never updates by itself.
fn idle(mode: AdaptMode) -> AdaptOptions {
    AdaptOptions {
        every: 1_000_000,
        lr: 1e-2,
        ..AdaptOptions::new(mode)
    }
}

/// `config` with unmerged LoRA adapters.
fn unmerged(config: AdaptOptions) -> AdaptOptions {
    AdaptOptions {
        lora_form: LoraForm::Unmerged,
        ..config
    }
}

fn snapshot(tensors: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    let mut out: Vec<(String, Tensor)> = tensors.into_iter().map(|(n, t)| (n, t.copy())).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn bit_identical(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((n1, t1), (n2, t2))| n1 == n2 && t1.equal(t2))
}

#[test]
fn one_update_lowers_the_loss_on_its_own_buffer_for_every_method_full_and_lora() {
    let target = load("llama");
    for method in METHODS {
        for mode in [AdaptMode::Full, AdaptMode::Lora] {
            let dir = tempfile::tempdir().unwrap();
            write(method, dir.path(), &target);
            let mut drafter = adapting(method, dir.path(), &target, idle(mode), Sampling::greedy());
            spec(&target, &mut drafter, &PROMPT, 40, Sampling::greedy());
            assert!(
                drafter.buffer().rows() >= 20,
                "{method:?}: {} rows",
                drafter.buffer().rows()
            );
            let before = drafter.buffer_loss(0).unwrap().unwrap();
            drafter.update().unwrap();
            let after = drafter.buffer_loss(0).unwrap().unwrap();
            assert!(
                after < before,
                "{method:?} {mode:?}: loss {before} -> {after}"
            );
            let report = drafter.stats().adaptation.unwrap();
            assert_eq!(report.updates, 1);
            assert_eq!(report.losses, vec![before], "{method:?} {mode:?}");
        }
    }
}

#[test]
fn an_adapting_eagle_tree_keeps_the_targets_greedy_output() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write(DrafterKind::Eagle3, dir.path(), &target);
    let shape = TreeShape {
        depth: 3,
        top_k: 4,
        total_tokens: 12,
    };
    for mode in [AdaptMode::Full, AdaptMode::Lora] {
        let tree = Box::new(eagle3(dir.path(), &target, shape, Sampling::greedy()));
        let objective = OnlineObjective::Eagle3 { ttt_steps: 4 };
        let mut drafter = AdaptingDrafter::new(tree, &target.net, objective, eager(mode)).unwrap();
        let got = spec(&target, &mut drafter, &PROMPT, 32, Sampling::greedy());
        assert_eq!(got.ids, greedy_ar(&target, &PROMPT, 32), "{mode:?}");
        assert!(drafter.stats().adaptation.unwrap().updates >= 3, "{mode:?}");
    }
}

#[test]
fn greedy_output_with_adaptation_on_equals_the_targets_greedy_output() {
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 32);
    for method in METHODS {
        for mode in [AdaptMode::Full, AdaptMode::Lora] {
            let dir = tempfile::tempdir().unwrap();
            write(method, dir.path(), &target);
            let mut drafter =
                adapting(method, dir.path(), &target, eager(mode), Sampling::greedy());
            let got = spec(&target, &mut drafter, &PROMPT, 32, Sampling::greedy());
            assert_eq!(got.ids, want, "{method:?} {mode:?}");
            assert!(
                drafter.stats().adaptation.unwrap().updates >= 3,
                "{method:?} {mode:?}: no updates"
            );
        }
    }
}

#[test]
fn full_adaptation_changes_the_drafter_and_leaves_every_target_tensor_bit_identical() {
    let target = load("llama");
    let before = snapshot(target.vars.variables().into_iter().collect());
    for method in METHODS {
        let dir = tempfile::tempdir().unwrap();
        write(method, dir.path(), &target);
        let mut drafter = adapting(
            method,
            dir.path(),
            &target,
            eager(AdaptMode::Full),
            Sampling::greedy(),
        );
        let untrained = snapshot(drafter.variables());
        spec(&target, &mut drafter, &PROMPT, 24, Sampling::greedy());
        assert!(
            !bit_identical(&untrained, &snapshot(drafter.variables())),
            "{method:?} did not change"
        );
        let after = snapshot(target.vars.variables().into_iter().collect());
        assert!(
            bit_identical(&before, &after),
            "{method:?} changed the target"
        );
    }
}

#[test]
fn lora_with_b_at_zero_drafts_bit_identically_to_the_unadapted_drafter() {
    let target = load("llama");
    let sampling = sampled(7);
    for method in METHODS {
        let dir = tempfile::tempdir().unwrap();
        write(method, dir.path(), &target);
        let mut unadapted = plain(method, dir.path(), &target, sampling);
        let want = spec(&target, unadapted.as_mut(), &PROMPT, 24, sampling);
        for config in [idle(AdaptMode::Lora), unmerged(idle(AdaptMode::Lora))] {
            let form = config.lora_form;
            let mut lora = adapting(method, dir.path(), &target, config, sampling);
            let got = spec(&target, &mut lora, &PROMPT, 24, sampling);
            assert_eq!(got.ids, want.ids, "{method:?} {form:?}");
            let accepted = |r: &sharpdraft_decode::SpecReport| -> Vec<usize> {
                r.cycles.iter().map(|c| c.accepted).collect()
            };
            assert_eq!(accepted(&got), accepted(&want), "{method:?} {form:?}");
            assert!(bit_identical(
                &snapshot(unadapted.variables()),
                &snapshot(lora.variables())
            ));
        }
    }
}

/// The two forms compute `W0 x + s B A x` in a different order, so they agree to rounding: the same
/// loss at every update, the same drafts; the unmerged one never writes the checkpoint's weights and
/// keeps gradients the size of its adapters only.
#[test]
fn unmerged_lora_takes_the_updates_of_merged_lora_and_leaves_the_weights_untouched() {
    let target = load("llama");
    for method in METHODS {
        let dir = tempfile::tempdir().unwrap();
        write(method, dir.path(), &target);
        let run = |config: AdaptOptions| {
            let mut drafter = adapting(method, dir.path(), &target, config, Sampling::greedy());
            let checkpoint = snapshot(drafter.variables());
            let report = spec(&target, &mut drafter, &PROMPT, 32, Sampling::greedy());
            let accepted: Vec<usize> = report.cycles.iter().map(|c| c.accepted).collect();
            let unchanged = bit_identical(&checkpoint, &snapshot(drafter.variables()));
            (
                report.ids,
                accepted,
                drafter.stats().adaptation.unwrap(),
                unchanged,
            )
        };
        let (merged_ids, merged_accepted, merged, merged_unchanged) = run(eager(AdaptMode::Lora));
        let (ids, accepted, report, unchanged) = run(unmerged(eager(AdaptMode::Lora)));
        assert_eq!(ids, merged_ids, "{method:?}");
        assert_eq!(accepted, merged_accepted, "{method:?}");
        assert!(
            merged.updates >= 3,
            "{method:?}: {} updates",
            merged.updates
        );
        assert_eq!(report.updates, merged.updates, "{method:?}");
        for (u, m) in report.losses.iter().zip(&merged.losses) {
            assert!(
                (u - m).abs() <= 1e-4 * m.abs().max(1.0),
                "{method:?}: losses {:?} vs merged {:?}",
                report.losses,
                merged.losses
            );
        }
        assert!(!merged_unchanged, "{method:?}: merged LoRA wrote nothing");
        assert!(unchanged, "{method:?}: unmerged LoRA changed a weight");
        assert_eq!(report.mode, "lora_unmerged");
        assert_eq!(report.gradient_bytes, report.adapter_bytes, "{method:?}");
        assert!(report.gradient_bytes < merged.gradient_bytes, "{method:?}");
    }
}

#[test]
fn a_run_with_adaptation_is_reproducible_from_its_seed() {
    let target = load("llama");
    let sampling = sampled(11);
    for method in [DrafterKind::Pard, DrafterKind::Dflash, DrafterKind::Vanilla] {
        let run = || {
            let dir = tempfile::tempdir().unwrap();
            write(method, dir.path(), &target);
            let config = AdaptOptions {
                seed: 5,
                ..eager(AdaptMode::Lora)
            };
            let mut drafter = adapting(method, dir.path(), &target, config, sampling);
            let report = spec(&target, &mut drafter, &PROMPT, 24, sampling);
            (
                report.ids,
                drafter.stats().adaptation.unwrap().losses,
                snapshot(drafter.variables()),
            )
        };
        let (ids, losses, weights) = run();
        let (ids2, losses2, weights2) = run();
        assert_eq!(ids, ids2, "{method:?}");
        assert_eq!(losses, losses2, "{method:?}");
        assert!(!losses.is_empty());
        assert!(bit_identical(&weights, &weights2), "{method:?}");
    }
}

#[test]
fn learning_only_from_rejected_rows_weighs_the_rows_where_the_draft_was_wrong() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    let config = AdaptOptions {
        learn_from: LearnFrom::Rejected,
        ..idle(AdaptMode::Full)
    };
    let mut drafter = adapting(
        DrafterKind::Vanilla,
        dir.path(),
        &target,
        config,
        Sampling::greedy(),
    );
    let report = spec(&target, &mut drafter, &PROMPT, 40, Sampling::greedy());
    // Every observed cycle whose chain was cut short left one wrong row (the final cycle is not observed).
    let cut: usize = report.cycles[..report.cycles.len() - 1]
        .iter()
        .filter(|c| c.accepted < c.drafted)
        .count();
    assert!(cut > 0);
    assert_eq!(drafter.buffer().wrong_rows(), cut);
}

#[test]
fn updating_every_n_requests_learns_between_requests_only() {
    let target = load("llama");
    let config = AdaptOptions {
        unit: UpdateUnit::Requests,
        every: 2,
        ..eager(AdaptMode::Full)
    };
    let dir = tempfile::tempdir().unwrap();
    let mut drafter = adapting(
        DrafterKind::Vanilla,
        dir.path(),
        &target,
        config,
        Sampling::greedy(),
    );
    let mut updates = Vec::new();
    for _ in 0..5 {
        spec(&target, &mut drafter, &PROMPT, 16, Sampling::greedy());
        updates.push(drafter.stats().adaptation.unwrap().updates);
    }
    // Requests 3 and 5 start after 2 and 4 finished ones.
    assert_eq!(updates, vec![0, 0, 1, 1, 2]);
}

/// One adapting drafter serves every run (updating as each new request starts, and every cycle within
/// one), so each run drafts with weights no earlier run had; the second token must still follow the
/// target's distribution exactly.
#[test]
fn sampled_decoding_stays_lossless_while_the_drafter_adapts() {
    let target = load("llama");
    let exact = exact_second_token(&target);
    for (method, config) in [
        (
            DrafterKind::Vanilla,
            AdaptOptions {
                unit: UpdateUnit::Requests,
                every: 1,
                ..eager(AdaptMode::Full)
            },
        ),
        (DrafterKind::Eagle3, eager(AdaptMode::Lora)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write(method, dir.path(), &target);
        let mut drafter = adapting(method, dir.path(), &target, config, sampled(0));
        let mut counts = vec![0usize; target.net.config.vocab_size as usize];
        for seed in 0..1200 {
            let out = spec(&target, &mut drafter, &SHORT_PROMPT, 8, sampled(seed));
            counts[out.ids[1] as usize] += 1;
        }
        assert!(
            drafter.stats().adaptation.unwrap().updates > 100,
            "{method:?}"
        );
        assert!(
            chi_square_p_value(&counts, &exact) > 1e-3,
            "{method:?}: {counts:?}"
        );
    }
}

#[test]
fn every_methods_objective_trains_the_drafters_own_weights_not_a_copy() {
    let target = load("llama");
    for method in METHODS {
        let dir = tempfile::tempdir().unwrap();
        write(method, dir.path(), &target);
        let drafter = plain(method, dir.path(), &target, Sampling::greedy());
        let held: std::collections::HashMap<String, Tensor> =
            drafter.variables().into_iter().collect();
        let objective = drafter.objective(settings(method), &target.net, 0).unwrap();
        let trained = objective.parameters();
        assert!(!trained.is_empty(), "{method:?}");
        for (name, weight) in trained {
            let drafted = held
                .get(&name)
                .unwrap_or_else(|| panic!("{method:?}: the drafter does not hold {name}"));
            assert_eq!(
                weight.data_ptr(),
                drafted.data_ptr(),
                "{method:?}: {name} is a second copy"
            );
        }
    }
}

#[test]
fn a_drafter_asked_to_adapt_with_another_methods_objective_is_refused_by_name() {
    let target = load("llama");
    let dir = tempfile::tempdir().unwrap();
    write(DrafterKind::Dflash, dir.path(), &target);
    let drafter = plain(DrafterKind::Dflash, dir.path(), &target, Sampling::greedy());
    let error = AdaptingDrafter::new(
        drafter,
        &target.net,
        OnlineObjective::Vanilla,
        eager(AdaptMode::Full),
    )
    .err()
    .expect("a vanilla objective over a DFlash drafter is refused")
    .to_string();
    assert!(
        error.contains("dflash") && error.contains("Vanilla"),
        "{error}"
    );
}
