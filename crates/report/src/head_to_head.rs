//! The calibrated schedule against every other method of its drafter, paired over prompts: the
//! paper's question is whether a *calibrated* slope beats the literature's constants (logn, Llama 4,
//! YaRN), a sweep of fixed slopes and online adaptation, and the unpaired intervals of two arms'
//! tau overlap long before a paired test over the same prompts resolves them. For each workload x
//! context x drafter and each other method: per prompt, the ratio of the calibrated arm's tau to the
//! method's and of their decode tokens/s on the same requests (a prompt's repeats combined by their
//! median), then the median over prompts with its bootstrap interval, how many prompts favour the
//! calibrated arm, and the Wilcoxon signed-rank p of the log ratios.

use crate::intervals::{median, paired_ratio, PairedRatio};
use crate::outline::{Outline, SlopeRole};
use crate::records::RequestRow;
use crate::samples::RequestSample;
use std::collections::BTreeMap;

/// The calibrated arm against one other method in one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadToHead {
    pub workload: String,
    pub context: usize,
    pub drafter: String,
    /// The calibrated schedule's method, and the one it is compared with.
    pub calibrated: String,
    pub method: String,
    pub prompts: usize,
    /// Calibrated over the method: `ahead` counts the prompts where the calibrated arm led.
    pub tau: PairedRatio,
    pub decode: PairedRatio,
}

/// The experiment's calibrated-schedule method: the first drafting method whose slope comes from a
/// schedule (no constant beta, no rule from the literature, no adaptation, window or retrieval).
pub fn calibrated_method(outline: &Outline) -> Option<&str> {
    outline
        .methods
        .iter()
        .find(|m| m.slope == SlopeRole::Calibrated)
        .map(|m| m.name.as_str())
}

/// Every other drafting method against the calibrated one, per workload x context x drafter, in the
/// experiment's method order; empty when the experiment has no calibrated schedule.
pub fn compare(outline: &Outline, samples: &[RequestSample]) -> Vec<HeadToHead> {
    let Some(calibrated) = calibrated_method(outline) else {
        return Vec::new();
    };
    // (workload, context, drafter, method) -> prompt -> the requests' (tau, decode tokens/s) keyed by
    // (seed, repeat), so each request pairs with the same request of the calibrated arm.
    type Requests = BTreeMap<(u64, usize), (f64, f64)>;
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
            .insert(
                (s.unit.seed, s.unit.repeat),
                (s.row.tau(), RequestRow::decode_tokens_per_second(&s.row)),
            );
    }
    let method_rank = |name: &str| outline.method_rank(name);
    let mut out = Vec::new();
    for ((workload, context, drafter, method), prompts) in &cells {
        let key = (
            workload.clone(),
            *context,
            drafter.clone(),
            calibrated.to_string(),
        );
        let Some(reference) = cells.get(&key).filter(|_| method != calibrated) else {
            continue;
        };
        // Per prompt, the median over its requests of calibrated / method (tau; decode tokens/s).
        let (mut tau, mut decode) = (Vec::new(), Vec::new());
        for (prompt, requests) in prompts {
            let pairs: Vec<((f64, f64), (f64, f64))> = reference
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
            let ratios = |f: fn(&(f64, f64)) -> f64| {
                median(&pairs.iter().map(|(c, m)| f(c) / f(m)).collect::<Vec<_>>())
            };
            tau.push(ratios(|r| r.0));
            decode.push(ratios(|r| r.1));
        }
        out.push(HeadToHead {
            workload: workload.clone(),
            context: *context,
            drafter: drafter.clone(),
            calibrated: calibrated.to_string(),
            method: method.clone(),
            prompts: tau.len(),
            tau: paired_ratio(&tau),
            decode: paired_ratio(&decode),
        });
    }
    // The cells come in name order; the report lists methods in the experiment's.
    out.sort_by_key(|h| {
        (
            h.workload.clone(),
            h.context,
            h.drafter.clone(),
            method_rank(&h.method),
        )
    });
    out
}
