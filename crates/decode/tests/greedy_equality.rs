//! Greedy speculative decoding is lossless: it emits exactly the target's greedy tokens, for every
//! drafter, chain and tree.
mod common;

use common::*;
use sharpdraft_draft::TreeShape;
use sharpdraft_model::Sampling;

#[test]
fn a_vanilla_chain_emits_the_targets_greedy_tokens() {
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 24);
    for (drafter_family, k) in [("qwen2", 1), ("qwen2", 4), ("qwen3", 6)] {
        let mut drafter = vanilla(drafter_family, &target, k, Sampling::greedy());
        let got = spec(&target, &mut drafter, &PROMPT, 24, Sampling::greedy());
        assert_eq!(got.ids, want, "vanilla {drafter_family}, K = {k}");
        assert!(got.cycles.iter().all(|c| c.drafted == k));
    }
}

#[test]
fn a_drafter_identical_to_the_target_is_always_accepted() {
    let target = load("qwen2");
    let mut drafter = vanilla("qwen2", &target, 4, Sampling::greedy());
    let got = spec(&target, &mut drafter, &PROMPT, 21, Sampling::greedy());
    assert_eq!(got.ids, greedy_ar(&target, &PROMPT, 21));
    assert!(
        got.cycles.iter().all(|c| c.accepted == 4),
        "{:?}",
        got.cycles.iter().map(|c| c.accepted).collect::<Vec<_>>()
    );
    assert_eq!(got.tau(), 5.0);
}

#[test]
fn eagle3_chains_and_trees_emit_the_targets_greedy_tokens() {
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 24);
    let dir = tempfile::tempdir().unwrap();
    for (i, options) in [
        EagleOptions::default(),
        EagleOptions {
            eagle31: true,
            layers0_prefix: true,
            reduced_vocab: false,
            seed: 3,
            ..Default::default()
        },
    ]
    .iter()
    .enumerate()
    {
        let path = dir.path().join(format!("eagle{i}"));
        write_eagle3(&path, &target, options);
        for shape in [
            TreeShape::chain(1),
            TreeShape::chain(5),
            TreeShape {
                depth: 3,
                top_k: 4,
                total_tokens: 12,
            },
            TreeShape {
                depth: 5,
                top_k: 8,
                total_tokens: 40,
            },
        ] {
            let mut drafter = eagle3(&path, &target, shape, Sampling::greedy());
            let got = spec(&target, &mut drafter, &PROMPT, 24, Sampling::greedy());
            assert_eq!(got.ids, want, "eagle {i} {shape:?}");
            assert!(got.cycles.iter().all(|c| c.drafted <= shape.total_tokens));
        }
    }
}

#[test]
fn pard_and_dflash_emit_the_targets_greedy_tokens() {
    let target = load("llama");
    let want = greedy_ar(&target, &PROMPT, 24);
    let dir = tempfile::tempdir().unwrap();
    for family in ["qwen2", "llama"] {
        let path = dir.path().join(format!("pard-{family}"));
        write_pard(&path, family);
        for k in [1, 4, 8] {
            let got = spec(
                &target,
                &mut pard(&path, &target, k),
                &PROMPT,
                24,
                Sampling::greedy(),
            );
            assert_eq!(got.ids, want, "pard {family} K = {k}");
        }
    }
    // A PARD drafter that is the target itself is always right about d1.
    let own = dir.path().join("pard-llama");
    let got = spec(
        &target,
        &mut pard(&own, &target, 4),
        &PROMPT,
        24,
        Sampling::greedy(),
    );
    assert!(got.cycles.iter().all(|c| c.accepted >= 1));
    for (i, (block, window)) in [(4, None), (8, None), (6, Some(5))].into_iter().enumerate() {
        let path = dir.path().join(format!("dflash{i}"));
        write_dflash(&path, &target, &dflash_options(block, window));
        let got = spec(
            &target,
            &mut dflash(&path, &target),
            &PROMPT,
            24,
            Sampling::greedy(),
        );
        assert_eq!(got.ids, want, "dflash block {block} window {window:?}");
        assert!(got.cycles.iter().all(|c| c.drafted == block as usize - 1));
    }
}

/// A target run as stored (its linear weights as Q8_0 blocks, the dtype `gguf`) speculates exactly its
/// own greedy tokens: a decode step and a verification of any size (a tree of 40 drafts: 41 rows)
/// compute each row alike.
#[test]
fn a_target_run_as_stored_speculates_its_own_greedy_tokens() {
    use sharpdraft_model::weight_blocks::write_q8_0_blocks;
    use sharpdraft_model::{CausalLm, ModelDtype};
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("llama");
    std::fs::create_dir_all(&folder).unwrap();
    for entry in std::fs::read_dir(fixture("llama")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, folder.join(path.file_name().unwrap())).unwrap();
        }
    }
    write_q8_0_blocks(&folder).unwrap();
    let target = CausalLm::load_dtype(&folder, tch::Device::Cpu, ModelDtype::AsStored).unwrap();
    let want = greedy_ar(&target, &PROMPT, 24);
    let mut drafter = vanilla("qwen2", &target, 4, Sampling::greedy());
    let got = spec(&target, &mut drafter, &PROMPT, 24, Sampling::greedy());
    assert_eq!(got.ids, want, "vanilla chains");
    let eagle = dir.path().join("eagle");
    write_eagle3(&eagle, &target, &EagleOptions::default());
    let tree = TreeShape {
        depth: 5,
        top_k: 8,
        total_tokens: 40,
    };
    let got = spec(
        &target,
        &mut eagle3(&eagle, &target, tree, Sampling::greedy()),
        &PROMPT,
        24,
        Sampling::greedy(),
    );
    assert_eq!(got.ids, want, "a tree of 40 drafts");
}
