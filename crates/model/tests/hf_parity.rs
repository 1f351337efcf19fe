//! Parity with HF transformers on tiny random llama / qwen2 / qwen3 checkpoints (fixtures written by
//! tests/fixtures/make_hf_parity.py, loaded through the real loader).
mod common;

use common::{expected, forward, load, max_abs_diff, FAMILIES};

#[test]
fn logits_match_hf_transformers_for_every_family() {
    for family in FAMILIES {
        let model = load(family);
        let want = expected(family);
        let mut cache = model.net.new_cache(64);
        let got = forward(&model.net, &want.ids, &mut cache);
        let diff = max_abs_diff(&got, &want.logits);
        assert!(diff < 1e-4, "{family}: max |logit - HF| = {diff}");
    }
}

#[test]
fn prefill_in_chunks_then_single_tokens_matches_one_pass() {
    for family in FAMILIES {
        let model = load(family);
        let want = expected(family);
        let mut cache = model.net.new_cache(64);
        let first = forward(&model.net, &want.ids[..7], &mut cache);
        let second = forward(&model.net, &want.ids[7..15], &mut cache);
        let mut rows = vec![first, second];
        for &id in &want.ids[15..] {
            rows.push(forward(&model.net, &[id], &mut cache));
        }
        let got = tch::Tensor::cat(&rows, 0);
        let diff = max_abs_diff(&got, &want.logits);
        assert!(
            diff < 1e-4,
            "{family}: incremental max |logit - HF| = {diff}"
        );
        assert_eq!(cache.len(), want.ids.len() as i64);
    }
}
