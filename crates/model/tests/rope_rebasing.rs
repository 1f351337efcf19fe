//! Positions rebased into a window change nothing but float rounding: under RoPE a query-key score
//! depends on the two positions' distance alone, so every position moved by one constant (a window's
//! keys renumbered from 0) leaves a forward pass's logits as they were, to the rounding of the angles'
//! f32 sines and cosines (an angle of 8000 radians holds about 5e-4 of it, one of 200 radians 1e-5).
//! No drafter here reads an absolute position anywhere else (the masks and query scaling count keys,
//! not positions), so a window drafts the same at any offset and needs no rebasing
//! (docs/drafters.md, "Windows").
mod common;

use common::{forward_masked, load, max_abs_diff, FAMILIES};
use sharpdraft_model::rope::{apply, Rope};
use sharpdraft_model::AttentionMask;
use tch::{Device, Kind, Tensor};

#[test]
fn a_score_under_rope_depends_on_the_distance_alone() {
    let rope = Rope::with_base(64, 10_000.0, None, Device::Cpu);
    let q = Tensor::randn([1, 1, 64], (Kind::Float, Device::Cpu));
    let k = Tensor::randn([1, 1, 64], (Kind::Float, Device::Cpu));
    let score = |query_at: i64, key_at: i64| {
        let (cq, sq) = rope.tables(&Tensor::from_slice(&[query_at]), Kind::Float);
        let (ck, sk) = rope.tables(&Tensor::from_slice(&[key_at]), Kind::Float);
        (apply(&q, &cq, &sq) * apply(&k, &ck, &sk))
            .sum(Kind::Float)
            .double_value(&[])
    };
    let near = score(300, 44);
    let far = score(8_100, 7_844);
    assert!(
        (near - far).abs() < 1e-2 * near.abs().max(1.0),
        "{near} {far}"
    );
    assert!(
        (score(300, 44) - score(300, 45)).abs() > 1e-4,
        "the distance matters"
    );
}

#[test]
fn every_position_moved_by_one_constant_leaves_the_logits_to_float_rounding() {
    let ids: Vec<i64> = vec![5, 17, 42, 3, 3, 60, 21, 9, 33, 12, 7, 19];
    for family in FAMILIES {
        let net = &load(family).net;
        let logits_from = |first: i64| {
            let positions: Vec<i64> = (first..first + ids.len() as i64).collect();
            let mut cache = net.new_cache(64);
            forward_masked(
                net,
                &ids,
                &mut cache,
                &AttentionMask::Causal,
                Some(&positions),
            )
        };
        let (at_zero, at_7000) = (logits_from(0), logits_from(7_000));
        let diff = max_abs_diff(&at_zero, &at_7000);
        assert!(diff < 1e-2, "{family}: logits moved by {diff}");
        assert!(
            at_zero.argmax(-1, false).equal(&at_7000.argmax(-1, false)),
            "{family}: the greedy tokens moved"
        );
    }
}
