//! On the real default target (when fetched; `make test` fetches it): speculative greedy output equals
//! autoregressive greedy output for every drafter, chain and tree (DFlash and EAGLE-3 in bf16 too).
mod common;

use common::*;
use sharpdraft_draft::{TreeShape, VanillaDrafter};
use sharpdraft_math::ScaleSchedule;
use sharpdraft_model::{CausalLm, ChatMessage, QueryScaling, Sampling, ScaledQueries, ScalingMode};
use sharpdraft_store::registry;
use tch::{Device, Kind};

fn smollm2() -> Option<CausalLm> {
    match registry::resolve("smollm2-135m-instruct") {
        Ok(dir) => Some(CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()),
        Err(e) => {
            sharpdraft_testing::skip(e);
            None
        }
    }
}

fn prompt(model: &CausalLm) -> Vec<i64> {
    let tokenizer = model.tokenizer().unwrap();
    let message = ChatMessage {
        role: "user".into(),
        content: "Explain in two sentences why the sky is blue.".into(),
    };
    tokenizer
        .encode(
            &tokenizer.apply_chat_template(&[message], true).unwrap(),
            false,
        )
        .unwrap()
}

#[test]
fn smollm2_speculative_greedy_equals_autoregressive_greedy_for_every_drafter() {
    let Some(target) = smollm2() else { return };
    let prompt = prompt(&target);
    let want = greedy_ar(&target, &prompt, 24);
    // Vanilla: the model drafting for itself is always accepted.
    let mut own =
        VanillaDrafter::new(smollm2().unwrap(), &target, 4, 512, Sampling::greedy()).unwrap();
    let report = spec(&target, &mut own, &prompt, 24, Sampling::greedy());
    assert_eq!(report.ids, want);
    assert!(report.tau() > 4.0, "tau {}", report.tau());
    // Chains that end at the first draft the drafter is less than 60% sure of: some end early, some
    // run to their length, and the output is still the target's.
    let mut unsure = VanillaDrafter::new(smollm2().unwrap(), &target, 6, 512, Sampling::greedy())
        .unwrap()
        .with_stop_below(Some(0.6));
    let report = spec(&target, &mut unsure, &prompt, 24, Sampling::greedy());
    assert_eq!(report.ids, want);
    let lengths: Vec<usize> = report.cycles.iter().map(|c| c.drafted).collect();
    assert!(lengths.iter().all(|&n| (1..=6).contains(&n)), "{lengths:?}");
    assert!(
        lengths.iter().any(|&n| n < 6),
        "no chain ended early: {lengths:?}"
    );
    assert!(
        lengths.iter().any(|&n| n == 6),
        "every chain ended early: {lengths:?}"
    );
    // The model drafting for itself: a rejection would mean its cache lost track of a shorter chain.
    assert!(report.cycles.iter().all(|c| c.accepted == c.drafted));
    // EAGLE-3 heads in the published layout (random weights), chain and tree.
    let dir = tempfile::tempdir().unwrap();
    write_eagle3(
        dir.path(),
        &target,
        &EagleOptions {
            eagle31: true,
            ..EagleOptions::default()
        },
    );
    for shape in [
        TreeShape::chain(4),
        TreeShape {
            depth: 4,
            top_k: 6,
            total_tokens: 24,
        },
    ] {
        let mut drafter = eagle3(dir.path(), &target, shape, Sampling::greedy());
        assert_eq!(
            spec(&target, &mut drafter, &prompt, 24, Sampling::greedy()).ids,
            want,
            "{shape:?}"
        );
    }
    // PARD: the target's own weights with a mask token; d1 comes from the last real token, so it is
    // always accepted.
    let pard_dir = dir.path().join("pard");
    std::fs::create_dir_all(&pard_dir).unwrap();
    let source = registry::resolve("smollm2-135m-instruct").unwrap();
    for file in [
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::os::unix::fs::symlink(source.join(file), pard_dir.join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap())
            .unwrap();
    config["pard_token"] = 16.into(); // <empty_output>, a special token chat never uses
    std::fs::write(pard_dir.join("config.json"), config.to_string()).unwrap();
    let mut drafter = sharpdraft_draft::PardDrafter::new(
        CausalLm::load(&pard_dir, Device::Cpu, Kind::Float).unwrap(),
        &target,
        4,
        512,
    )
    .unwrap();
    let report = spec(&target, &mut drafter, &prompt, 24, Sampling::greedy());
    assert_eq!(report.ids, want);
    assert!(
        report.cycles.iter().all(|c| c.accepted >= 1),
        "real verification accepts PARD's d1"
    );
    // DFlash, random weights in the published layout.
    let dflash_dir = dir.path().join("dflash");
    sharpdraft_draft::dflash::write_random_dflash(
        &dflash_dir,
        &target.net,
        &sharpdraft_draft::dflash::RandomDFlashOptions {
            layers: 2,
            block_size: 8,
            sliding_window: None,
            mask_token: 16,
            seed: 0,
        },
    )
    .unwrap();
    let mut drafter = dflash(&dflash_dir, &target);
    assert_eq!(
        spec(&target, &mut drafter, &prompt, 24, Sampling::greedy()).ids,
        want,
        "dflash"
    );
    // The DFlash drafter and the EAGLE-3 head in bf16 beside the f32 target (half the bytes a draft),
    // their queries scaled past n0 = 4: the output is still the target's.
    let scaled = |drafter: &mut dyn ScaledQueries| {
        let (layers, heads) = drafter.query_layout();
        let schedule = ScaleSchedule::global(4.0, 0.5).unwrap();
        let scaling =
            QueryScaling::from_schedule(ScalingMode::Fixed, schedule, layers, heads).unwrap();
        drafter.set_query_scaling(scaling);
    };
    let mut bf16_dflash =
        sharpdraft_draft::DFlashDrafter::load_as(&dflash_dir, &target.net, 512, Kind::BFloat16)
            .unwrap();
    scaled(&mut bf16_dflash);
    let report = spec(&target, &mut bf16_dflash, &prompt, 24, Sampling::greedy());
    assert_eq!(report.ids, want, "bf16 dflash");
    let mut bf16_eagle = sharpdraft_draft::Eagle3Drafter::load_as(
        dir.path(),
        &target.net,
        TreeShape::chain(4),
        Sampling::greedy(),
        512,
        Kind::BFloat16,
    )
    .unwrap();
    scaled(&mut bf16_eagle);
    let report = spec(&target, &mut bf16_eagle, &prompt, 24, Sampling::greedy());
    assert_eq!(report.ids, want, "bf16 eagle3");
    // Its chains ended early: random weights give no draft as much as 99%, so each chain is its
    // first draft; and no draft is under one in a billion, so each chain is the whole block.
    for (threshold, length) in [(0.99, 1), (1e-9, 7)] {
        let mut drafter = dflash(&dflash_dir, &target).with_stop_below(Some(threshold));
        let report = spec(&target, &mut drafter, &prompt, 24, Sampling::greedy());
        assert_eq!(report.ids, want, "dflash, stop below {threshold}");
        let lengths: Vec<usize> = report.cycles.iter().map(|c| c.drafted).collect();
        assert!(
            lengths.iter().all(|&n| n == length),
            "stop below {threshold}: {lengths:?}"
        );
    }
}

/// SmolLM2 as its GGUF file stores it (the dtype `gguf`: Q4_1 and Q8_0 blocks), after a prompt of
/// more than `weight_blocks::BLOCK_ROWS` tokens (prefilled with the f32 weights): speculation from
/// its own prefill, from a prefill shared with the target alone (as `run` hands every arm) and over a
/// tree emits the target's greedy tokens. A verification's attention computed for all its rows at
/// once rounds unlike a decode step's, and the next product's 8-bit rows turn that into tenths of a
/// logit: this failed until verifications attended row by row (`attention::row_by_row`).
#[test]
fn smollm2_as_stored_speculates_its_own_greedy_tokens_after_a_long_prompt() {
    use sharpdraft_model::generate::{generate_from, PromptPrefill};
    use sharpdraft_model::{ModelDtype, Sampler};
    let Ok(dir) = registry::resolve("smollm2-135m-instruct") else {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
        return;
    };
    let load = || CausalLm::load_dtype(&dir, Device::Cpu, ModelDtype::AsStored).unwrap();
    let target = load();
    let tokenizer = target.tokenizer().unwrap();
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom. "
        .repeat(12)
        + "Continue the story in three sentences.";
    let prompt = tokenizer.encode(&text, false).unwrap();
    assert!(prompt.len() > 100, "{}", prompt.len());
    let want = greedy_ar(&target, &prompt, 32);
    let mut own = VanillaDrafter::new(load(), &target, 4, 512, Sampling::greedy()).unwrap();
    assert_eq!(
        spec(&target, &mut own, &prompt, 32, Sampling::greedy()).ids,
        want,
        "own prefill"
    );
    let prefilled = PromptPrefill::run(&target.net, &prompt, &[], prompt.len() as i64).unwrap();
    let alone = generate_from(
        &target.net,
        &prefilled,
        32,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap();
    assert_eq!(alone.ids, want, "the target alone from the shared prefill");
    let mut own = VanillaDrafter::new(load(), &target, 4, 512, Sampling::greedy()).unwrap();
    let config = sharpdraft_decode::SpecOptions {
        max_new_tokens: 32,
        sampling: Sampling::greedy(),
        stop_tokens: vec![],
        max_proposal: 64,
        gate: Default::default(),
    };
    let shared =
        sharpdraft_decode::speculative_generate_from(&target.net, &mut own, &prefilled, &config)
            .unwrap();
    assert_eq!(shared.ids, want, "speculation from the shared prefill");
    // A tree: each row attends to the prompt and its own ancestors, gathered from among the drafts.
    let eagle = tempfile::tempdir().unwrap();
    write_eagle3(eagle.path(), &target, &EagleOptions::default());
    let tree = TreeShape {
        depth: 4,
        top_k: 6,
        total_tokens: 24,
    };
    let mut drafter = eagle3(eagle.path(), &target, tree, Sampling::greedy());
    let report = spec(&target, &mut drafter, &prompt, 32, Sampling::greedy());
    assert_eq!(report.ids, want, "a tree of 24 drafts");
}
