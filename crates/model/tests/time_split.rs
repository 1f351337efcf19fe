//! Where a pass's time goes: marks nest exclusively, nothing is recorded outside a recording, and a
//! pass of a real (tiny) model splits into its embedding, each layer, its cache writes and its LM head,
//! each with the weight bytes it reads.
mod common;

use common::{forward, load};
use sharpdraft_model::time_split::{self, Step};
use std::time::Duration;
use tch::Device;

#[test]
fn a_step_nested_in_another_is_taken_out_of_the_outer_one() {
    let ((), split) = time_split::record(Device::Cpu, || {
        time_split::mark(Step::Layer(0), || 10, || {
            std::thread::sleep(Duration::from_millis(30));
            time_split::mark(Step::CacheWrite, || 0, || std::thread::sleep(Duration::from_millis(60)));
        });
    });
    let layer = split.steps[&Step::Layer(0)];
    let cache = split.steps[&Step::CacheWrite];
    assert!(layer.seconds >= 0.030 && layer.seconds < 0.060, "{layer:?}");
    assert!(cache.seconds >= 0.060, "{cache:?}");
    assert_eq!((layer.calls, layer.weight_bytes, cache.calls), (1, 10, 1));
}

#[test]
fn marks_outside_a_recording_record_nothing_and_still_run() {
    let value = time_split::mark(Step::LmHead, || panic!("bytes are not counted outside"), || 7);
    assert_eq!(value, 7);
    let ((), split) = time_split::record(Device::Cpu, || {});
    assert!(split.steps.is_empty());
}

#[test]
fn a_forward_pass_splits_into_embedding_each_layer_cache_writes_and_the_lm_head() {
    let model = load("llama");
    let net = &model.net;
    let mut cache = net.new_cache(8);
    let (_, split) = time_split::record(Device::Cpu, || forward(net, &[1, 2, 3], &mut cache));
    let layers = net.config.num_layers;
    for i in 0..layers {
        let layer = split.steps[&Step::Layer(i)];
        assert_eq!(layer.calls, 1, "layer {i}");
        assert!(layer.weight_bytes > 0, "layer {i} reads its weights");
    }
    let layer_bytes: usize = (0..layers).map(|i| split.steps[&Step::Layer(i)].weight_bytes).sum();
    let head = split.steps[&Step::LmHead];
    assert_eq!(head.calls, 1);
    let all_linears = net.linear_weight_bytes();
    let head_untied = all_linears - layer_bytes;
    assert!(head_untied == 0 || head_untied == head.weight_bytes, "layers and head cover every linear map");
    assert_eq!(split.steps[&Step::CacheWrite].calls, layers, "one write per layer");
    assert_eq!(split.steps[&Step::Embedding].calls, 1);
    assert!(split.marked_seconds() > 0.0);
}
