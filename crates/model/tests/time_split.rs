//! Where a pass's time goes: marks nest exclusively in time and each counts the weight bytes it reads
//! itself, nothing is recorded outside a recording, and a pass of a real (tiny) model splits into its
//! embedding, each layer, its linear maps, attention, cache writes and LM head, each with the weight
//! bytes it reads.
mod common;

use common::{forward, load};
use sharpdraft_model::time_split::{self, Step};
use std::time::Duration;
use tch::Device;

#[test]
fn a_step_nested_in_another_is_taken_out_of_the_outer_one() {
    let ((), split) = time_split::record(Device::Cpu, || {
        time_split::mark(
            Step::Layer(0),
            || 10,
            || {
                std::thread::sleep(Duration::from_millis(30));
                time_split::mark(
                    Step::CacheWrite,
                    || 0,
                    || std::thread::sleep(Duration::from_millis(60)),
                );
            },
        );
    });
    let layer = split.steps[&Step::Layer(0)];
    let cache = split.steps[&Step::CacheWrite];
    assert!(layer.seconds >= 0.030 && layer.seconds < 0.060, "{layer:?}");
    assert!(cache.seconds >= 0.060, "{cache:?}");
    assert_eq!((layer.calls, layer.weight_bytes, cache.calls), (1, 10, 1));
}

#[test]
fn marks_outside_a_recording_record_nothing_and_still_run() {
    let value = time_split::mark(
        Step::LmHead,
        || panic!("bytes are not counted outside"),
        || 7,
    );
    assert_eq!(value, 7);
    let ((), split) = time_split::record(Device::Cpu, || {});
    assert!(split.steps.is_empty());
}

#[test]
fn a_step_counts_the_weight_bytes_it_declares_and_a_nested_step_its_own_apart() {
    let ((), split) = time_split::record(Device::Cpu, || {
        // A layer reads its weights through its linear maps: it declares none of its own.
        for maps in [[30, 50], [20, 0]] {
            time_split::mark(
                Step::Layer(0),
                || 0,
                || {
                    for bytes in maps {
                        time_split::mark(Step::LinearMaps, || bytes, || ());
                    }
                },
            );
        }
    });
    assert_eq!(split.steps[&Step::Layer(0)].weight_bytes, 0);
    assert_eq!(split.steps[&Step::LinearMaps].weight_bytes, 100);
    assert_eq!(split.steps[&Step::LinearMaps].calls, 4);
}

#[test]
fn a_forward_pass_splits_into_embedding_layers_linear_maps_attention_cache_writes_and_the_lm_head()
{
    let model = load("llama");
    let net = &model.net;
    let mut cache = net.new_cache(8);
    let (_, split) = time_split::record(Device::Cpu, || forward(net, &[1, 2, 3], &mut cache));
    let layers = net.config.num_layers;
    for i in 0..layers {
        let layer = split.steps[&Step::Layer(i)];
        assert_eq!(layer.calls, 1, "layer {i}");
        assert_eq!(
            layer.weight_bytes, 0,
            "layer {i}'s weights are its linear maps'"
        );
    }
    let linear_maps = split.steps[&Step::LinearMaps];
    // q, k, v, o and the MLP's three in every layer.
    assert_eq!(linear_maps.calls, 7 * layers, "{linear_maps:?}");
    let head = split.steps[&Step::LmHead];
    assert_eq!(head.calls, 1);
    // A tied head reads the embedding, which is not among the linear maps.
    let tied_head = match net.config.tie_word_embeddings {
        true => time_split::bytes_of([net.lm_head_weight()]),
        false => 0,
    };
    assert_eq!(
        linear_maps.weight_bytes + head.weight_bytes,
        net.linear_weight_bytes() + tied_head,
        "the layers' linear maps and the head cover every linear map, once"
    );
    assert_eq!(
        split.steps[&Step::Attention].calls,
        layers,
        "one attention per layer"
    );
    assert_eq!(
        split.steps[&Step::CacheWrite].calls,
        layers,
        "one write per layer"
    );
    assert_eq!(split.steps[&Step::Embedding].calls, 1);
    assert!(split.marked_seconds() > 0.0);
}
