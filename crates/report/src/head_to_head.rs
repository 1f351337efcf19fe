//! An anchor method against every other method of its drafter, paired over prompts. The anchors are
//! the methods the experiment names (`head_to_head:`), else its calibrated schedule: the paper's
//! question is whether a *calibrated* slope beats the literature's constants (logn, Llama 4, YaRN), a
//! sweep of fixed slopes and online adaptation, and whether a window's variants beat the window; the
//! unpaired intervals of two arms' tau overlap long before a paired test over the same prompts
//! resolves them. For each anchor, workload x context x drafter and each other method, over the
//! prompts both arms decoded:
//! - tau: the anchor's pooled tau (tokens emitted over target passes, summed over the prompts)
//!   over the method's, with its bootstrap interval over prompts: tau is a count, and pooling it keeps a
//!   comparison where most prompts tie exactly from pinning to 1 (a median of per-prompt ratios does);
//! - decode: per prompt the ratio of the two arms' decode tokens/s on the same requests (a prompt's
//!   repeats combined by their median), then the median over prompts with its bootstrap interval;
//! each with how many prompts favour the anchor and the Wilcoxon signed-rank p of the
//! per-prompt log ratios, adjusted with the rest of the report's tests ([`crate::multiplicity`]).

use crate::intervals::{median, paired_pooled_ratio, paired_ratio, PairedRatio};
use crate::outline::Outline;
use crate::records::RequestRow;
use crate::samples::RequestSample;
use std::collections::BTreeMap;

/// An anchor against one other method in one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadToHead {
    pub workload: String,
    pub context: usize,
    pub drafter: String,
    /// The anchor method (the calibrated schedule's, by default), and the one it is compared with.
    pub anchor: String,
    pub method: String,
    pub prompts: usize,
    /// The anchor over the method: `ahead` counts the prompts where the anchor led. tau is the ratio of
    /// the two arms' pooled tau; decode the median of per-prompt ratios.
    pub tau: PairedRatio,
    pub decode: PairedRatio,
}

/// What a request contributes to a comparison: its tokens emitted and target passes (tau's
/// numerator and denominator) and its decode tokens/s.
#[derive(Debug, Clone, Copy)]
struct RequestCounts {
    emitted: f64,
    passes: f64,
    decode_tokens_per_second: f64,
}

impl RequestCounts {
    fn of(row: &RequestRow) -> Self {
        Self {
            emitted: row
                .cycles
                .iter()
                .map(|c| (c.accepted + c.bonus) as f64)
                .sum(),
            passes: row.cycles.len() as f64,
            decode_tokens_per_second: row.decode_tokens_per_second(),
        }
    }
}

/// Every other drafting method against each anchor ([`Outline::anchors`]), per anchor, workload x
/// context x drafter, in the experiment's method order; empty without anchors.
pub fn compare(outline: &Outline, samples: &[RequestSample]) -> Vec<HeadToHead> {
    let anchors = outline.anchors();
    if anchors.is_empty() {
        return Vec::new();
    }
    // (workload, context, drafter, method) -> prompt -> the requests' (tokens emitted, target passes,
    // decode tokens/s) keyed by (seed, repeat), so each request pairs with the same request of the
    // anchor's arm.
    let mut cells: BTreeMap<(String, usize, String, String), BTreeMap<usize, Requests>> =
        BTreeMap::new();
    for s in samples.iter().filter(|s| s.arm.drafter.is_some()) {
        let key = (
            s.unit.workload.clone(),
            s.unit.context,
            s.drafter().to_string(),
            s.arm.method.clone(),
        );
        cells
            .entry(key)
            .or_default()
            .entry(s.row.prompt)
            .or_default()
            .insert((s.unit.seed, s.unit.repeat), RequestCounts::of(&s.row));
    }
    let method_rank = |name: &str| outline.method_rank(name);
    let mut out = Vec::new();
    for (rank, anchor) in anchors.iter().enumerate() {
        for ((workload, context, drafter, method), prompts) in &cells {
            let key = (
                workload.clone(),
                *context,
                drafter.clone(),
                anchor.to_string(),
            );
            let Some(reference) = cells.get(&key).filter(|_| method != anchor) else {
                continue;
            };
            let (tau, decode) = paired_over_prompts(reference, prompts);
            out.push((
                rank,
                HeadToHead {
                    workload: workload.clone(),
                    context: *context,
                    drafter: drafter.clone(),
                    anchor: anchor.to_string(),
                    method: method.clone(),
                    prompts: tau.len(),
                    tau: paired_pooled_ratio(&tau),
                    decode: paired_ratio(&decode),
                },
            ));
        }
    }
    // The cells come in name order; the report lists anchors and methods in the experiment's.
    out.sort_by_key(|(rank, h)| {
        (
            *rank,
            h.workload.clone(),
            h.context,
            h.drafter.clone(),
            method_rank(&h.method),
        )
    });
    out.into_iter().map(|(_, h)| h).collect()
}

/// A prompt's requests, keyed by (seed, repeat).
type Requests = BTreeMap<(u64, usize), RequestCounts>;

/// Per prompt both arms decoded: each arm's emitted tokens and target passes summed over the paired
/// requests (for the pooled tau), and the median over those requests of the anchor's decode tokens/s
/// over the method's.
fn paired_over_prompts(
    anchor: &BTreeMap<usize, Requests>,
    method: &BTreeMap<usize, Requests>,
) -> (Vec<((f64, f64), (f64, f64))>, Vec<f64>) {
    let (mut tau, mut decode) = (Vec::new(), Vec::new());
    for (prompt, requests) in method {
        let pairs: Vec<(RequestCounts, RequestCounts)> = anchor
            .get(prompt)
            .into_iter()
            .flat_map(|theirs| {
                requests
                    .iter()
                    .filter_map(|(request, mine)| theirs.get(request).map(|c| (*c, *mine)))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let pooled = |arm: fn(&(RequestCounts, RequestCounts)) -> &RequestCounts| {
            pairs
                .iter()
                .map(arm)
                .fold((0.0, 0.0), |(e, n), c| (e + c.emitted, n + c.passes))
        };
        tau.push((pooled(|p| &p.0), pooled(|p| &p.1)));
        decode.push(median(
            &pairs
                .iter()
                .map(|(c, m)| c.decode_tokens_per_second / m.decode_tokens_per_second)
                .filter(|ratio| ratio.is_finite())
                .collect::<Vec<_>>(),
        ));
    }
    (tau, decode)
}
