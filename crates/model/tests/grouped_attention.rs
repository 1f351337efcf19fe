//! Grouped-query attention of a few rows (decode steps, verifications, drafter blocks) runs as grouped
//! products without repeating keys and values; it must give what plain attention over repeated keys
//! and values gives, with and without a mask.
use sharpdraft_model::attention::attend;
use tch::{Device, Kind, Tensor};

/// Plain attention: every query head over its key head's keys, repeated.
fn reference(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Tensor>,
    scale: f64,
) -> Tensor {
    let (heads, rows, dim) = q.size3().unwrap();
    let group = heads / keys.size()[0];
    let keys = keys.repeat_interleave_self_int(group, 0, None);
    let values = values.repeat_interleave_self_int(group, 0, None);
    let mut scores = q.matmul(&keys.transpose(1, 2)) * scale; // [H, T, L]
    if let Some(visible) = visible {
        scores = scores.masked_fill(&visible.logical_not().unsqueeze(0), f64::NEG_INFINITY);
    }
    scores
        .softmax(-1, Kind::Float)
        .matmul(&values)
        .permute([1, 0, 2])
        .reshape([rows, heads * dim])
}

#[test]
fn grouped_attention_of_a_few_rows_equals_attention_over_repeated_keys_and_values() {
    tch::manual_seed(3);
    for (heads, kv_heads, rows, length) in
        [(9, 3, 1, 40), (9, 3, 4, 300), (12, 2, 16, 64), (4, 1, 7, 7)]
    {
        let q = Tensor::randn([heads, rows, 16], (Kind::Float, Device::Cpu));
        let keys = Tensor::randn([kv_heads, length, 16], (Kind::Float, Device::Cpu));
        let values = Tensor::randn([kv_heads, length, 16], (Kind::Float, Device::Cpu));
        // A causal chain of `rows` rows at the end of the keys.
        let visible = Tensor::ones([rows, length], (Kind::Bool, Device::Cpu))
            .triu(length - rows + 1)
            .logical_not();
        for mask in [None, Some(&visible)] {
            let got = attend(&q, &keys, &values, mask, 0.25);
            let want = reference(&q, &keys, &values, mask, 0.25);
            let diff = (got - want).abs().max().double_value(&[]);
            assert!(
                diff < 1e-5,
                "{heads}/{kv_heads} heads, {rows} rows, mask {}: {diff}",
                mask.is_some()
            );
        }
    }
}
