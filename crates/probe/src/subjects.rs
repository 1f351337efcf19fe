//! Running a model over one long token sequence with the probe's recorder attached. A subject is the
//! model whose attention is measured: a causal LM (the target, a vanilla or PARD drafter), an EAGLE-3
//! head on the target's features, or a DFlash drafter's block passes.

use crate::error::{ProbeError, Result};
use crate::recorder::{ProbeRecorder, RowFilter};
use sharpdraft_draft::{DFlashDrafter, Drafter, Eagle3Drafter};
use sharpdraft_model::generate::prefill_with_taps;
use sharpdraft_model::{ForwardInput, LogitRows, Transformer};
use std::collections::BTreeSet;
use tch::{Kind, Tensor};

pub enum Subject<'a> {
    /// A causal LM over the tokens themselves; row p sees p + 1 keys.
    Causal(&'a Transformer),
    /// An EAGLE-3 head's catch-up pass over (token, target feature) pairs; row p sees p + 1 keys.
    Eagle3(&'a mut Eagle3Drafter),
    /// DFlash block passes rooted at sampled positions; every row of a block at p sees p + B keys.
    DFlash(&'a mut DFlashDrafter),
}

/// Probes `subject` over `tokens`: the rows whose key counts are `counts` (from
/// [`crate::LengthBins::sample_counts`]) are recorded. `chunk` bounds the rows of one forward pass;
/// `progress` is told the tokens processed so far.
pub fn probe_sequence(
    subject: Subject<'_>,
    target: &Transformer,
    tokens: &[i64],
    counts: &[i64],
    chunk: i64,
    recorder: &mut ProbeRecorder,
    progress: &mut dyn FnMut(usize),
) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let len = tokens.len() as i64;
    if len < 2 || counts.iter().any(|&n| n < 1 || n > len) {
        return Err(ProbeError::Invalid(format!(
            "{len} tokens cannot give rows that see {counts:?} keys"
        )));
    }
    match subject {
        Subject::Causal(model) => {
            recorder.set_filter(RowFilter::Positions(counts.iter().map(|n| n - 1).collect()));
            let mut cache = model.new_cache(len);
            let device = model.device();
            for (i, part) in tokens.chunks(chunk as usize).enumerate() {
                let start = i as i64 * chunk;
                let ids = Tensor::from_slice(part).to_device(device);
                let positions =
                    Tensor::arange_start(start, start + part.len() as i64, (Kind::Int64, device));
                let input = ForwardInput {
                    logits: LogitRows::None,
                    observer: Some(&mut *recorder),
                    ..ForwardInput::causal(&ids, &positions)
                };
                model.forward(input, &mut cache)?;
                progress((start as usize) + part.len());
            }
        }
        Subject::Eagle3(drafter) => {
            let features = target_features(target, drafter.target_taps(), tokens)?;
            // Pair i: features of token i with token i + 1; the pass's row i sees i + 1 keys.
            recorder.set_filter(RowFilter::Positions(
                counts
                    .iter()
                    .map(|n| n - 1)
                    .filter(|&p| p < len - 1)
                    .collect(),
            ));
            drafter.feed_context(
                target,
                &tokens[1..],
                &features.narrow(0, 0, len - 1),
                chunk,
                recorder,
            )?;
            progress(tokens.len());
        }
        Subject::DFlash(drafter) => {
            let features = target_features(target, drafter.target_taps(), tokens)?;
            let block = drafter.block_size();
            // A block rooted at p sees p + B keys.
            let positions: BTreeSet<i64> = counts
                .iter()
                .map(|n| n - block)
                .filter(|&p| p >= 0 && p < len)
                .collect();
            recorder.set_filter(RowFilter::All);
            drafter.probe_blocks(
                target,
                tokens,
                &features,
                &positions.into_iter().collect::<Vec<_>>(),
                recorder,
            )?;
            progress(tokens.len());
        }
    }
    Ok(())
}

/// The target's taps of every token, `[len, features]`, on the target's device.
fn target_features(
    target: &Transformer,
    taps: Vec<sharpdraft_model::Tap>,
    tokens: &[i64],
) -> Result<Tensor> {
    let mut cache = target.new_cache(tokens.len() as i64);
    let (_, hidden) = prefill_with_taps(target, tokens, &mut cache, &taps)?;
    hidden.ok_or_else(|| {
        ProbeError::Invalid("probe: the drafter asked for no target features".into())
    })
}
