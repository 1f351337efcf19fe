//! KV cache operations, attention masks, hidden-state taps, query scaling seen through the observer, and the observer.
mod common;

use common::{expected, forward, forward_masked, load, max_abs_diff, FAMILIES};
use sharpdraft_math::{Beta, ScaleSchedule};
use sharpdraft_model::{
    AttentionMask, AttentionObserver, AttentionView, ForwardInput, KvCache, LogitRows,
    QueryScaling, ScalingMode, Tap,
};
use tch::{Device, Kind, Tensor};

#[test]
fn cropping_then_reappending_equals_a_fresh_prefill() {
    for family in FAMILIES {
        let model = load(family);
        let ids = expected(family).ids;
        let mut fresh = model.net.new_cache(32);
        let want = forward(&model.net, &ids[..15], &mut fresh);
        let mut cache = model.net.new_cache(32);
        let _ = forward(&model.net, &ids[..12], &mut cache);
        let _ = forward(&model.net, &[1, 2, 3], &mut cache); // a rejected draft
        cache.truncate(10).unwrap();
        let again = forward(&model.net, &ids[10..15], &mut cache);
        assert!(
            max_abs_diff(&again, &want.narrow(0, 10, 5)) < 1e-5,
            "{family}"
        );
        for layer in 0..cache.num_layers() {
            let (k, v) = cache.layer(layer);
            let (k0, v0) = fresh.layer(layer);
            assert!(max_abs_diff(&k, &k0) < 1e-5 && max_abs_diff(&v, &v0) < 1e-5);
        }
    }
}

#[test]
fn a_dropped_speculation_rolls_back_and_a_commit_keeps_the_accepted_rows() {
    let model = load("llama");
    let ids = expected("llama").ids;
    let mut cache = model.net.new_cache(32);
    let _ = forward(&model.net, &ids[..5], &mut cache);
    {
        let mut speculation = cache.speculate();
        let _ = forward(&model.net, &ids[5..9], &mut speculation);
        assert_eq!(speculation.len(), 9);
    }
    assert_eq!(cache.len(), 5, "dropping the guard rolls back");
    let mut speculation = cache.speculate();
    let _ = forward(&model.net, &ids[5..9], &mut speculation);
    speculation.commit(2).unwrap();
    assert_eq!(cache.len(), 7);
}

/// A small tree after a 6-token prefix: rows 0 and 1 are alternatives for the first position; row 2
/// extends row 0, row 3 extends row 1, row 4 extends row 2.
const TREE_IDS: [i64; 5] = [11, 12, 21, 22, 31];
const PARENTS: [Option<usize>; 5] = [None, None, Some(0), Some(1), Some(2)];
const DEPTHS: [i64; 5] = [0, 0, 1, 1, 2];

#[test]
fn a_tree_row_sees_only_its_ancestors() {
    for family in FAMILIES {
        let model = load(family);
        let prefix = &expected(family).ids[..6];
        let mut cache = model.net.new_cache(32);
        let _ = forward(&model.net, prefix, &mut cache);
        let mask = AttentionMask::tree(6, &PARENTS, Device::Cpu).unwrap();
        let positions: Vec<i64> = DEPTHS.iter().map(|d| 6 + d).collect();
        let tree = forward_masked(
            &model.net,
            &TREE_IDS,
            &mut cache.speculate(),
            &mask,
            Some(&positions),
        );
        for (row, path) in [
            (0, vec![0]),
            (1, vec![1]),
            (2, vec![0, 2]),
            (3, vec![1, 3]),
            (4, vec![0, 2, 4]),
        ] {
            let mut sequence = prefix.to_vec();
            sequence.extend(path.iter().map(|&i| TREE_IDS[i]));
            let reference = forward(&model.net, &sequence, &mut model.net.new_cache(32));
            let last = reference.narrow(0, sequence.len() as i64 - 1, 1);
            assert!(
                max_abs_diff(&tree.narrow(0, row, 1), &last) < 1e-5,
                "{family} row {row}"
            );
        }
        assert_eq!(mask.visible_counts(6, 5).unwrap(), vec![7, 7, 8, 8, 9]);
    }
}

#[test]
fn compacting_the_accepted_tree_path_equals_a_fresh_prefill_of_it() {
    let model = load("qwen3");
    let prefix = &expected("qwen3").ids[..6];
    let mut cache = model.net.new_cache(32);
    let _ = forward(&model.net, prefix, &mut cache);
    let mask = AttentionMask::tree(6, &PARENTS, Device::Cpu).unwrap();
    let positions: Vec<i64> = DEPTHS.iter().map(|d| 6 + d).collect();
    let mut speculation = cache.speculate();
    let _ = forward_masked(
        &model.net,
        &TREE_IDS,
        &mut speculation,
        &mask,
        Some(&positions),
    );
    speculation.commit_path(&[0, 2, 4]).unwrap();
    let mut fresh = model.net.new_cache(32);
    let mut sequence = prefix.to_vec();
    sequence.extend([TREE_IDS[0], TREE_IDS[2], TREE_IDS[4]]);
    let _ = forward(&model.net, &sequence, &mut fresh);
    assert_eq!(cache.len(), 9);
    for layer in 0..cache.num_layers() {
        assert!(max_abs_diff(&cache.layer(layer).0, &fresh.layer(layer).0) < 1e-5);
        assert!(max_abs_diff(&cache.layer(layer).1, &fresh.layer(layer).1) < 1e-5);
    }
}

#[test]
fn the_cache_is_preallocated_and_refuses_to_overflow() {
    let model = load("qwen3");
    let cache = model.net.new_cache(16);
    let c = &model.net.config;
    assert_eq!(
        cache.bytes_allocated(),
        2 * c.num_layers * (c.num_kv_heads * 16 * c.head_dim) as usize * 4
    );
    let mut cache = cache;
    let ids = Tensor::from_slice(&[1i64; 17]);
    let positions = Tensor::arange(17, (Kind::Int64, Device::Cpu));
    let err = model
        .net
        .forward(ForwardInput::causal(&ids, &positions), &mut cache)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("exceed the 16 this cache was allocated for"),
        "{err}"
    );
    assert!(cache.truncate(3).is_err(), "cannot truncate beyond len");
}

struct Recorder {
    layer: usize,
    logits: Option<Tensor>,
}

impl AttentionObserver for Recorder {
    fn wants(&self, layer: usize) -> bool {
        layer == self.layer
    }
    fn observe(&mut self, _layer: usize, view: &AttentionView<'_>) {
        let rows = view.queries.size()[1];
        self.logits = Some(view.logits(0..rows, 0..view.keys.size()[1]));
    }
}

/// Layer 0's softmax inputs `[H, rows, keys]` and the logits of a causal pass over `ids`, with the
/// model's queries scaled by `scaling`.
fn layer0_logits(family: &str, ids: &[i64], scaling: QueryScaling) -> (Tensor, Tensor) {
    let mut model = load(family);
    model.net.set_query_scaling(scaling);
    let ids_t = Tensor::from_slice(ids);
    let positions = Tensor::arange(ids.len() as i64, (Kind::Int64, Device::Cpu));
    let mut recorder = Recorder {
        layer: 0,
        logits: None,
    };
    let input = ForwardInput {
        observer: Some(&mut recorder),
        ..ForwardInput::causal(&ids_t, &positions)
    };
    let out = model
        .net
        .forward(input, &mut model.net.new_cache(32))
        .unwrap();
    (recorder.logits.unwrap(), out.logits.unwrap())
}

/// `fixed` scaling with `beta[h]` for head h of every layer, from n0 = 1 (so row i, which sees i + 1
/// keys, gets `1 + beta[h] ln(i + 1)`).
fn per_head(family: &str, beta: &[f64]) -> QueryScaling {
    let config = load(family).net.config.clone();
    let layers = config.num_layers;
    let schedule = ScaleSchedule {
        n0: 1.0,
        beta: Beta::PerHead(vec![beta.to_vec(); layers]),
        exact: None,
        calibrated_on: None,
    };
    QueryScaling::from_schedule(
        ScalingMode::Fixed,
        schedule,
        layers,
        config.num_heads as usize,
    )
    .unwrap()
}

#[test]
fn a_scaled_query_row_is_a_softmax_temperature_of_one_over_s_on_that_row_and_head() {
    for family in FAMILIES {
        let ids = &expected(family).ids[..6];
        let heads = load(family).net.config.num_heads;
        let (plain, _) = layer0_logits(family, ids, QueryScaling::off());
        let betas: Vec<f64> = (0..heads).map(|h| 0.25 + 0.5 * h as f64).collect();
        let (scaled, _) = layer0_logits(family, ids, per_head(family, &betas));
        // s[h][i] = 1 + beta_h ln(i + 1): row i sees i + 1 keys.
        let s: Vec<f32> = betas
            .iter()
            .flat_map(|b| (0..6).map(move |i| (1.0 + b * ((i + 1) as f64).ln()) as f32))
            .collect();
        let s = Tensor::from_slice(&s).view([heads, 6, 1]);
        let want = &plain * &s;
        let finite = plain.isfinite();
        assert!(
            max_abs_diff(&scaled.masked_select(&finite), &want.masked_select(&finite)) < 1e-4,
            "{family}"
        );
        assert!(
            scaled.isfinite().eq_tensor(&finite).all().int64_value(&[]) == 1,
            "the mask is unchanged"
        );
    }
}

#[test]
fn a_scaling_of_beta_zero_changes_nothing() {
    let ids = &expected("llama").ids[..8];
    let heads = load("llama").net.config.num_heads as usize;
    let (_, plain) = layer0_logits("llama", ids, QueryScaling::off());
    let (_, unit) = layer0_logits("llama", ids, per_head("llama", &vec![0.0; heads]));
    assert_eq!(max_abs_diff(&plain, &unit), 0.0);
}

#[test]
fn taps_return_layer_inputs_and_outputs() {
    let model = load("qwen2");
    let ids = Tensor::from_slice(&expected("qwen2").ids[..5]);
    let positions = Tensor::arange(5, (Kind::Int64, Device::Cpu));
    let taps = [
        Tap::LayerOutput(0),
        Tap::LayerInput(1),
        Tap::LayerInput(0),
        Tap::LayerInput(2),
    ];
    let input = ForwardInput {
        taps: &taps,
        logits: LogitRows::All,
        ..ForwardInput::causal(&ids, &positions)
    };
    let out = model
        .net
        .forward(input, &mut model.net.new_cache(8))
        .unwrap();
    assert_eq!(out.hidden.len(), 4);
    assert_eq!(max_abs_diff(&out.hidden[0], &out.hidden[1]), 0.0);
    assert!(max_abs_diff(&out.hidden[2], &model.net.embed(&ids)) == 0.0);
    assert!(
        max_abs_diff(
            &model.net.logits_of(&out.hidden[3]),
            out.logits.as_ref().unwrap()
        ) < 1e-6
    );
    let bad = [Tap::LayerOutput(7)];
    let input = ForwardInput {
        taps: &bad,
        ..ForwardInput::causal(&ids, &positions)
    };
    let err = model
        .net
        .forward(input, &mut model.net.new_cache(8))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("LayerOutput(7)"), "{err}");
}

#[test]
fn a_windowed_mask_lets_each_row_see_only_its_last_w_keys() {
    let visible = AttentionMask::Causal
        .windowed(3, 4, 2, Device::Cpu)
        .unwrap()
        .materialize(3, 4, Device::Cpu)
        .unwrap()
        .unwrap();
    let rows: Vec<Vec<bool>> = (0..4)
        .map(|i| Vec::<bool>::try_from(visible.get(i)).unwrap())
        .collect();
    for (i, row) in rows.iter().enumerate() {
        let seen: Vec<usize> = (0..7).filter(|&j| row[j]).collect();
        assert_eq!(seen, vec![3 + i - 1, 3 + i], "row {i}");
    }
    assert!(AttentionMask::Causal
        .windowed(3, 4, 0, Device::Cpu)
        .is_err());
    // Query scaling's n_i under a window: the keys the window shows, never more than the window.
    let counts = AttentionMask::Causal
        .windowed(3, 4, 2, Device::Cpu)
        .unwrap()
        .visible_counts(3, 4)
        .unwrap();
    assert_eq!(counts, vec![2, 2, 2, 2]);
    let wide = AttentionMask::Causal
        .windowed(3, 4, 100, Device::Cpu)
        .unwrap();
    assert_eq!(wide.visible_counts(3, 4).unwrap(), vec![4, 5, 6, 7]);
}

#[test]
fn a_window_of_one_key_makes_every_row_its_own_single_token_pass_and_a_wide_one_changes_nothing() {
    for family in FAMILIES {
        let mut model = load(family);
        let ids = expected(family).ids;
        let plain = forward(&model.net, &ids[..12], &mut model.net.new_cache(32));
        model.net.set_key_window(Some(12));
        let wide = forward(&model.net, &ids[..12], &mut model.net.new_cache(32));
        assert!(wide.equal(&plain), "{family}: a window over every key");
        model.net.set_key_window(Some(1));
        let narrow = forward(&model.net, &ids[..12], &mut model.net.new_cache(32));
        model.net.set_key_window(None);
        for p in [0usize, 5, 11] {
            let alone = forward_masked(
                &model.net,
                &ids[p..p + 1],
                &mut model.net.new_cache(4),
                &AttentionMask::Causal,
                Some(&[p as i64]),
            );
            assert!(
                max_abs_diff(&narrow.narrow(0, p as i64, 1), &alone) < 1e-4,
                "{family}: row {p}"
            );
        }
        assert!(
            max_abs_diff(&narrow, &plain) > 1e-3,
            "{family}: the window did nothing"
        );
    }
}

#[test]
fn a_key_selection_shows_each_row_its_recent_keys_and_the_retrieved_ones() {
    let selection = sharpdraft_model::KeySelection {
        retrieved: Some(Tensor::from_slice(&[true, false, false, true])),
        ..sharpdraft_model::KeySelection::recent_only(1)
    };
    let visible = AttentionMask::Causal
        .selected(6, 2, &selection, Device::Cpu)
        .unwrap()
        .materialize(6, 2, Device::Cpu)
        .unwrap()
        .unwrap();
    let seen = |row: i64| -> Vec<usize> {
        let row = Vec::<bool>::try_from(visible.get(row)).unwrap();
        (0..row.len()).filter(|&j| row[j]).collect()
    };
    assert_eq!(seen(0), vec![0, 3, 6]);
    assert_eq!(seen(1), vec![0, 3, 7]);
}

/// Writes position p as keys and values all equal to p, one committed row at a time, sliding between
/// rows as a drafter does between cycles.
fn fill_one_row_at_a_time(cache: &mut KvCache, positions: i64) {
    for p in cache.len()..positions {
        cache.slide();
        let row = Tensor::full([2, 1, 4], p as f64, (Kind::Float, Device::Cpu));
        let _ = cache.write(0, &row, &row).unwrap();
        cache.advance(1);
    }
}

#[test]
fn a_cache_bounded_to_a_window_holds_the_last_positions_in_a_few_windows_of_memory() {
    let window = 8;
    let mut cache = KvCache::new(1, 2, 4, 10_000, Kind::Float, Device::Cpu);
    let whole = cache.bytes_allocated();
    cache
        .bound_to_window(Some(sharpdraft_model::WindowBound::recent(window)))
        .unwrap();
    fill_one_row_at_a_time(&mut cache, 1000);
    assert_eq!(cache.len(), 1000);
    let first = cache.first_position();
    assert!(
        (1000 - 2 * window..=1000 - window).contains(&first),
        "first held position {first}"
    );
    let (keys, values) = cache.layer(0);
    let held: Vec<f32> = Vec::try_from(keys.select(0, 0).select(1, 0)).unwrap();
    let want: Vec<f32> = (first..1000).map(|p| p as f32).collect();
    assert_eq!(held, want, "row j holds position first + j");
    assert!(values.equal(&keys));
    let row_bytes = 2 * 2 * 4 * 4; // keys and values, 2 heads x 4 dims of f32
    assert!(cache.bytes_allocated() <= 4 * window as usize * row_bytes);
    assert!(cache.bytes_allocated() * 100 < whole);
}

#[test]
fn a_cache_bounded_to_a_window_with_sinks_holds_the_first_positions_and_the_last() {
    let (window, sink) = (8, 3);
    let mut cache = KvCache::new(1, 2, 4, 10_000, Kind::Float, Device::Cpu);
    cache
        .bound_to_window(Some(sharpdraft_model::WindowBound {
            recent: window,
            sink,
        }))
        .unwrap();
    fill_one_row_at_a_time(&mut cache, 1000);
    let first = cache.first_position();
    assert!(
        (1000 - 2 * window..=1000 - window).contains(&first),
        "first held position after the sinks {first}"
    );
    let (keys, _) = cache.layer(0);
    let held: Vec<f32> = Vec::try_from(keys.select(0, 0).select(1, 0)).unwrap();
    let want: Vec<f32> = (0..sink).chain(first..1000).map(|p| p as f32).collect();
    assert_eq!(held, want, "the sinks, then the window");
    // A [1, 1001] mask over every position cut to the held keys: the sinks and the window's last 8.
    let mask = AttentionMask::Causal
        .selected(
            1000,
            1,
            &sharpdraft_model::KeySelection::window(window).with_sink(sink),
            Device::Cpu,
        )
        .unwrap()
        .materialize(1000, 1, Device::Cpu)
        .unwrap();
    let cut = cache.held_columns(mask).unwrap();
    assert_eq!(cut.size(), [1, sink + 1001 - first]);
    assert_eq!(cut.sum(Kind::Int64).int64_value(&[]), sink + window);
}

#[test]
fn a_bounded_cache_cuts_masks_to_its_held_keys_and_refuses_to_roll_back_past_them() {
    let mut cache = KvCache::new(1, 2, 4, 100, Kind::Float, Device::Cpu);
    cache
        .bound_to_window(Some(sharpdraft_model::WindowBound::recent(2)))
        .unwrap();
    fill_one_row_at_a_time(&mut cache, 10);
    let first = cache.first_position();
    assert!(first > 0);
    // A [1, 11] mask over every position, as a pass of one new row builds it.
    let mask = AttentionMask::Causal
        .windowed(10, 1, 2, Device::Cpu)
        .unwrap()
        .materialize(10, 1, Device::Cpu)
        .unwrap();
    let held = cache.held_columns(mask).unwrap();
    assert_eq!(held.size(), [1, 11 - first]);
    assert_eq!(
        held.sum(Kind::Int64).int64_value(&[]),
        2,
        "the window's two keys"
    );
    assert!(cache
        .truncate(first - 1)
        .unwrap_err()
        .to_string()
        .contains("dropped"));
    assert!(
        cache.bound_to_window(None).is_err(),
        "dropped keys cannot come back"
    );
    cache.truncate(0).unwrap();
    assert_eq!(cache.first_position(), 0, "emptied for a new request");
    cache.bound_to_window(None).unwrap();
}

#[test]
fn query_scaling_counts_the_keys_a_window_leaves_so_a_wide_window_scales_for_its_width() {
    // Rows at cache indices 1000..1003 of a window of 256 keys (and of 256 with 4 sinks): each sees
    // 256 keys (260), the n of s(n) for a window wider than n0, however long the context.
    let window = AttentionMask::Causal
        .selected(
            1000,
            3,
            &sharpdraft_model::KeySelection::window(256),
            Device::Cpu,
        )
        .unwrap();
    assert_eq!(window.visible_counts(1000, 3).unwrap(), vec![256, 256, 256]);
    let sinks = AttentionMask::Causal
        .selected(
            1000,
            3,
            &sharpdraft_model::KeySelection::window(256).with_sink(4),
            Device::Cpu,
        )
        .unwrap();
    assert_eq!(sinks.visible_counts(1000, 3).unwrap(), vec![260, 260, 260]);
    // Within the window every key counts.
    let short = AttentionMask::Causal
        .selected(
            100,
            2,
            &sharpdraft_model::KeySelection::window(256),
            Device::Cpu,
        )
        .unwrap();
    assert_eq!(short.visible_counts(100, 2).unwrap(), vec![101, 102]);
}
