//! What the drafters that are plain causal LMs (vanilla, PARD) share: feeding tokens through their own
//! cache, timed, prefilling everything committed before the root, and the parts of the `Drafter` trait
//! that are the model's and its cache's alone (stats, key selection, weights).

use crate::drafter::Result;
use crate::drafter_stats::DrafterStats;
use sharpdraft_model::generate::prefill;
use sharpdraft_model::{CausalLm, ForwardInput, KeySelection, KvCache, LogitRows};
use tch::{Kind, Tensor};

/// Feeds `ids` at the cache's next positions; returns the requested logits and the seconds the forward
/// pass took.
pub(crate) fn feed(
    model: &CausalLm,
    cache: &mut KvCache,
    ids: &[i64],
    rows: LogitRows,
) -> Result<(Tensor, f64)> {
    let device = model.net.device();
    let start = cache.len();
    let ids_t = Tensor::from_slice(ids).to_device(device);
    let positions = Tensor::arange_start(start, start + ids.len() as i64, (Kind::Int64, device));
    let input = ForwardInput {
        logits: rows,
        ..ForwardInput::causal(&ids_t, &positions)
    };
    let started = std::time::Instant::now();
    let logits = model
        .net
        .forward(input, cache)?
        .logits
        .expect("logits requested");
    Ok((logits, started.elapsed().as_secs_f64()))
}

/// Prefills `cache` with every committed token but the root (the last one).
pub(crate) fn prefill_before_root(
    model: &CausalLm,
    cache: &mut KvCache,
    committed: &[i64],
) -> Result<()> {
    let _guard = tch::no_grad_guard();
    // A new request: nothing of an earlier one stays in the cache.
    cache.truncate(0)?;
    let before_root = &committed[..committed.len() - 1];
    if !before_root.is_empty() {
        let _ = prefill(&model.net, before_root, cache)?;
    }
    Ok(())
}

/// The drafter's stats: its cache's bytes, its forward seconds and its weights.
pub(crate) fn stats(model: &CausalLm, cache: &KvCache, forward_seconds: f64) -> DrafterStats {
    DrafterStats::of(cache.bytes_allocated(), forward_seconds, &variables(model))
}

/// Every drafting row sees the keys `selection` keeps (all of them for `None`): the model's attention
/// selects them and the cache holds no more than the window needs.
pub(crate) fn set_key_selection(
    model: &mut CausalLm,
    cache: &mut KvCache,
    selection: Option<KeySelection>,
) -> Result<()> {
    refuse_full_layers(selection.as_ref())?;
    cache.bound_to_window(KeySelection::cache_bound(selection.as_ref()))?;
    model.net.set_key_selection(selection);
    Ok(())
}

/// A window on every layer but some is DFlash's alone (it keeps a window per layer); a drafter that
/// applies one window to all its layers refuses it rather than window the layer left out.
pub(crate) fn refuse_full_layers(selection: Option<&KeySelection>) -> Result<()> {
    match selection.and_then(|s| s.full_layers.first()) {
        Some(layer) => Err(crate::DraftError::InvalidOption {
            option: "window_full_layer".into(),
            value: layer.to_string(),
            reason: "only DFlash keeps a window per layer".into(),
        }),
        None => Ok(()),
    }
}

/// The model's weights by name (what online adaptation trains and the stats count).
pub(crate) fn variables(model: &CausalLm) -> Vec<(String, Tensor)> {
    model.vars.variables().into_iter().collect()
}
