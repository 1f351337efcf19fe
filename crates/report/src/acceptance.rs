//! Acceptance by draft position and context: how often position k of a proposal is accepted once
//! positions 1..k-1 were, per drafter x method x workload and context bin (multiples of the drafter's
//! n0, the cycle's own context).
//!
//! Two effects lower tau as the context grows, and this table tells them apart. Softmax dilution,
//! which query scaling corrects, weakens every draft at a long context: whole rows of the table fall
//! as the bin grows, at every position alike. Depth drift (a draft chain conditioned on its own
//! earlier guesses strays from the target's hidden states) lowers the later positions at every
//! context: each row falls from left to right, at short contexts as at long ones.

use crate::columns::table_of;
use crate::error::Result;
use crate::outline::Outline;
use crate::samples::RequestSample;
use crate::table::Table;
use crate::tables::context_bin;
use serde::Serialize;
use std::collections::BTreeMap;

/// One cell of the table: position `position` (1-based) in context bin `bin` of one arm. Its fields
/// are `acceptance.parquet`'s columns, the rate after them ([`AcceptanceRow`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionRate {
    pub workload: String,
    pub drafter: String,
    pub method: String,
    pub bin: String,
    pub bin_lo_n0: f64,
    pub bin_hi_n0: f64,
    pub position: usize,
    /// Cycles whose proposal reached this position with every earlier position accepted.
    pub reached: u64,
    /// Of those, the cycles that accepted this position too.
    pub accepted: u64,
}

impl PositionRate {
    /// P(position k accepted | positions 1..k-1 accepted); NaN when no cycle reached it.
    pub fn rate(&self) -> f64 {
        if self.reached == 0 {
            f64::NAN
        } else {
            self.accepted as f64 / self.reached as f64
        }
    }
}

/// Every arm's conditional acceptance per context bin and position, in workload, drafter, method,
/// bin and position order. The target alone drafts nothing and is left out; an arm whose drafter
/// records no n0 (a model drafting for another) has one bin, "all contexts".
pub fn rates(outline: &Outline, samples: &[RequestSample]) -> Vec<PositionRate> {
    // (workload, drafter, method, bin's low edge bits, position) -> (bin, reached, accepted)
    type Key = (String, String, String, u64, usize);
    let mut counts: BTreeMap<Key, (crate::tables::Bin, u64, u64)> = BTreeMap::new();
    for s in samples {
        let Some(drafter) = &s.arm.drafter else {
            continue;
        };
        for c in &s.row.cycles {
            let bin = match s.n0 {
                Some(n0) => context_bin(c.context, n0, &outline.bins_n0),
                None => ("all contexts".to_string(), 0.0, f64::INFINITY),
            };
            let depth = c.accepted_per_position.len();
            // Positions 1..=accepted+1 were reached (all earlier ones accepted), up to the depth.
            for position in 1..=depth.min(c.accepted + 1) {
                let entry = counts
                    .entry((
                        s.unit.workload.clone(),
                        drafter.clone(),
                        s.arm.method.clone(),
                        bin.1.to_bits(),
                        position,
                    ))
                    .or_insert_with(|| (bin.clone(), 0, 0));
                entry.1 += 1;
                entry.2 += u64::from(position <= c.accepted);
            }
        }
    }
    let order = |names: Vec<&str>, name: &str| names.iter().position(|n| *n == name);
    let mut out: Vec<PositionRate> = counts
        .into_iter()
        .map(
            |((workload, drafter, method, _, position), (bin, reached, accepted))| PositionRate {
                workload,
                drafter,
                method,
                bin: bin.0,
                bin_lo_n0: bin.1,
                bin_hi_n0: bin.2,
                position,
                reached,
                accepted,
            },
        )
        .collect();
    // The experiment's order of workloads, drafters and methods, then bins and positions.
    out.sort_by(|a, b| {
        let key = |r: &PositionRate| {
            (
                order(
                    outline.workloads.iter().map(|w| w.name.as_str()).collect(),
                    &r.workload,
                ),
                order(
                    outline.drafters.iter().map(String::as_str).collect(),
                    &r.drafter,
                ),
                order(
                    outline.methods.iter().map(|m| m.name.as_str()).collect(),
                    &r.method,
                ),
            )
        };
        key(a)
            .cmp(&key(b))
            .then(a.bin_lo_n0.total_cmp(&b.bin_lo_n0))
            .then(a.position.cmp(&b.position))
    });
    out
}

/// A row of `acceptance.parquet`: a [`PositionRate`] and its rate.
#[derive(Serialize)]
struct AcceptanceRow {
    #[serde(flatten)]
    cell: PositionRate,
    rate: f64,
}

/// `acceptance.parquet` of `rates` ([`rates`]): one row each, with its rate.
pub fn table(rates: &[PositionRate]) -> Result<Table> {
    let rows: Vec<AcceptanceRow> = rates
        .iter()
        .map(|cell| AcceptanceRow {
            rate: cell.rate(),
            cell: cell.clone(),
        })
        .collect();
    Ok(table_of(&rows)?)
}
