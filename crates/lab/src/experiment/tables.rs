//! The run's parquet tables, rebuilt from its finished units:
//! - `results.parquet`: one row per request (prompt x unit), raw counters and provenance;
//! - `cycles.parquet`: one row per verification cycle with the context it drafted at;
//! - `summary.parquet`: per drafter x method x workload x context, and for long generation per
//!   context bin along the generation: tau, the geometric-mean speedup over the target alone, update
//!   seconds, memory.
//!
//! Every table is written whole through a rename; plain INT64 / DOUBLE / UTF-8 columns, so polars,
//! pandas and duckdb open them unchanged.

use super::config::{Experiment, Setting};
use super::grid::TARGET_ONLY;
use super::records::{RequestKey, UnitRecord};
use crate::error::Result;
use crate::table::{Column, Table};
use std::collections::BTreeMap;
use std::path::Path;

/// Column builder: appends values row by row under fixed names.
#[derive(Default)]
struct Rows {
    columns: Vec<(String, Column)>,
}

impl Rows {
    fn column(&mut self, name: &str, empty: Column) -> &mut Column {
        if let Some(i) = self.columns.iter().position(|(n, _)| n == name) {
            return &mut self.columns[i].1;
        }
        self.columns.push((name.to_string(), empty));
        &mut self.columns.last_mut().expect("just pushed").1
    }
    fn s(&mut self, name: &str, v: impl Into<String>) {
        if let Column::Str(c) = self.column(name, Column::Str(Vec::new())) {
            c.push(v.into());
        }
    }
    fn i(&mut self, name: &str, v: i64) {
        if let Column::I64(c) = self.column(name, Column::I64(Vec::new())) {
            c.push(v);
        }
    }
    fn f(&mut self, name: &str, v: f64) {
        if let Column::F64(c) = self.column(name, Column::F64(Vec::new())) {
            c.push(v);
        }
    }
    /// The columns that name a request: drafter, method, workload, setting, context, seed, repeat,
    /// prompt.
    fn request_key(&mut self, record: &UnitRecord, prompt: usize) {
        let u = &record.unit;
        self.s("drafter", u.drafter_name());
        self.s("method", u.method.as_str());
        self.s("workload", u.workload.as_str());
        self.s("setting", record.setting.name());
        self.i("context", u.context as i64);
        self.i("seed", u.seed as i64);
        self.i("repeat", u.repeat as i64);
        self.i("prompt", prompt as i64);
    }

    fn table(self) -> Table {
        Table {
            columns: self.columns,
        }
    }
}

/// A context bin: its label and its edges in multiples of n0.
type Bin = (String, f64, f64);

/// The bin of `context` tokens under edges `bins` (multiples of `n0`): (label, low, high) in n0.
pub fn context_bin(context: i64, n0: i64, bins: &[f64]) -> Bin {
    let x = context as f64 / n0.max(1) as f64;
    let mut low = 0.0;
    for &edge in bins {
        if x < edge {
            return (format!("{low}-{edge} n0"), low, edge);
        }
        low = edge;
    }
    (format!(">= {low} n0"), low, f64::INFINITY)
}

/// The target-only tokens/s of each request, averaged over repeats: the denominators of speedups.
/// The experiment's first target-only method is the baseline.
fn baselines(experiment: &Experiment, units: &[UnitRecord]) -> BTreeMap<RequestKey, f64> {
    let mut sums: BTreeMap<RequestKey, (f64, usize)> = BTreeMap::new();
    let baseline_method = experiment.methods.iter().find(|m| m.target_only);
    for record in units.iter().filter(|u| {
        u.unit.drafter.is_none() && baseline_method.is_some_and(|m| m.name == u.unit.method)
    }) {
        for r in &record.requests {
            let entry = sums.entry(record.request_key(r.prompt)).or_default();
            entry.0 += r.tokens_per_second();
            entry.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(k, (sum, n))| (k, sum / n as f64))
        .collect()
}

/// The target-only outputs of each (workload, context, seed, prompt): under greedy decoding every
/// method must reproduce them exactly.
fn target_outputs(units: &[UnitRecord]) -> BTreeMap<RequestKey, &[i64]> {
    let mut out = BTreeMap::new();
    for record in units.iter().filter(|u| u.unit.drafter.is_none()) {
        for r in &record.requests {
            out.entry(record.request_key(r.prompt))
                .or_insert(r.output_ids.as_slice());
        }
    }
    out
}

/// 1 when `output` equals the target's own greedy output, 0 when it differs, -1 when not comparable
/// (sampling, or no target-only run of that request).
fn matches_target(
    greedy: bool,
    target: &BTreeMap<RequestKey, &[i64]>,
    key: &RequestKey,
    output: &[i64],
) -> i64 {
    match target.get(key) {
        Some(expected) if greedy && !expected.is_empty() => i64::from(*expected == output),
        _ => -1,
    }
}

pub struct RunTables {
    pub results: Table,
    pub cycles: Table,
    pub summary: Table,
}

/// Builds the three tables of `experiment` from its finished `units`.
pub fn build(experiment: &Experiment, units: &[UnitRecord]) -> RunTables {
    let (bins, greedy) = (&experiment.bins_n0, experiment.temperature == 0.0);
    let base = baselines(experiment, units);
    let target = target_outputs(units);
    let mut results = Rows::default();
    let mut cycles = Rows::default();
    let mut summary = Rows::default();
    // (drafter, method, workload, context) -> the units of that cell, in order.
    let mut cells: BTreeMap<(String, String, String, usize), Vec<&UnitRecord>> = BTreeMap::new();
    for record in units {
        let u = &record.unit;
        cells
            .entry((
                u.drafter_name().to_string(),
                u.method.clone(),
                u.workload.clone(),
                u.context,
            ))
            .or_default()
            .push(record);
        let p = &record.provenance;
        for r in &record.requests {
            results.s("target", record.target.as_str());
            results.request_key(record, r.prompt);
            results.i("prompt_tokens", r.prompt_tokens as i64);
            results.i("generated", r.generated as i64);
            results.i("cycles", r.cycles.len() as i64);
            results.i(
                "drafted",
                r.cycles.iter().map(|c| c.drafted).sum::<usize>() as i64,
            );
            results.i(
                "accepted",
                r.cycles.iter().map(|c| c.accepted).sum::<usize>() as i64,
            );
            results.i(
                "emitted",
                r.cycles.iter().map(|c| c.accepted + c.bonus).sum::<usize>() as i64,
            );
            results.f("tau", r.tau());
            results.f("distinct_4grams", r.distinct_4grams());
            results.f("prefill_seconds", r.prefill_seconds);
            results.f("total_seconds", r.total_seconds);
            results.f("tokens_per_s", r.tokens_per_second());
            let key = record.request_key(r.prompt);
            let ar = base.get(&key).copied();
            results.f(
                "speedup",
                ar.map_or(f64::NAN, |ar| r.tokens_per_second() / ar),
            );
            results.i(
                "matches_target",
                matches_target(greedy, &target, &key, &r.output_ids),
            );
            results.f("update_seconds", r.update_seconds);
            results.i("updates", r.updates as i64);
            results.i("drafter_weight_bytes", r.drafter_weight_bytes as i64);
            results.i("drafter_cache_bytes", r.drafter_cache_bytes as i64);
            results.i("target_cache_bytes", r.target_cache_bytes as i64);
            results.i("adaptation_bytes", r.adaptation_bytes as i64);
            results.i("peak_rss_bytes", r.peak_rss_bytes as i64);
            results.i("n0", record.n0.unwrap_or(0));
            results.s("config_hash", p.config_hash.as_str());
            results.s("git_revision", p.git_revision.as_str());
            results.s("machine", p.machine.as_str());
            results.s("device", p.device.as_str());
            results.s("dtype", p.dtype.as_str());
            results.i("started_unix", p.started_unix as i64);
            for (i, c) in r.cycles.iter().enumerate() {
                cycles.request_key(record, r.prompt);
                cycles.i("cycle", i as i64);
                cycles.i("cycle_context", c.context);
                cycles.f(
                    "cycle_context_n0",
                    record
                        .n0
                        .map_or(f64::NAN, |n0| c.context as f64 / n0 as f64),
                );
                cycles.i("drafted", c.drafted as i64);
                cycles.i("accepted", c.accepted as i64);
                cycles.i("bonus", c.bonus as i64);
                cycles.f("draft_seconds", c.draft_seconds);
                cycles.f("verify_seconds", c.verify_seconds);
            }
        }
    }
    for ((drafter, method, workload, context), records) in &cells {
        let first = records[0];
        let requests: Vec<(&UnitRecord, &super::records::RequestRow)> = records
            .iter()
            .flat_map(|u| u.requests.iter().map(move |r| (*u, r)))
            .collect();
        let all_cycles = || requests.iter().flat_map(|(_, r)| r.cycles.iter());
        let tau_of = |emitted: usize, count: usize| {
            if drafter == TARGET_ONLY {
                1.0
            } else {
                emitted as f64 / count.max(1) as f64
            }
        };
        let (generated, seconds) = requests.iter().fold((0usize, 0.0), |(g, s), (_, r)| {
            (g + r.generated, s + r.total_seconds)
        });
        let ratios: Vec<f64> = requests
            .iter()
            .filter_map(|(u, r)| {
                base.get(&u.request_key(r.prompt))
                    .map(|ar| r.tokens_per_second() / ar)
            })
            .collect();
        let speedup = if ratios.len() == requests.len() && !ratios.is_empty() {
            (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp()
        } else {
            f64::NAN
        };
        let ar: Vec<f64> = requests
            .iter()
            .filter_map(|(u, r)| base.get(&u.request_key(r.prompt)).copied())
            .collect();
        let n0 = first.n0.unwrap_or(0);
        let mut row = |bin: Bin, cycle_count: usize, emitted: usize, whole: bool| {
            summary.s("target", first.target.as_str());
            summary.s("drafter", drafter.as_str());
            summary.s("method", method.as_str());
            summary.s("workload", workload.as_str());
            summary.s("setting", first.setting.name());
            summary.i("context", *context as i64);
            summary.s("bin", bin.0);
            summary.f("bin_lo_n0", bin.1);
            summary.f("bin_hi_n0", bin.2);
            summary.i("n0", n0);
            summary.i("requests", requests.len() as i64);
            summary.f(
                "mean_prompt_tokens",
                requests
                    .iter()
                    .map(|(_, r)| r.prompt_tokens as f64)
                    .sum::<f64>()
                    / requests.len().max(1) as f64,
            );
            summary.i("cycles", cycle_count as i64);
            summary.f("tau", tau_of(emitted, cycle_count));
            let distinct: Vec<f64> = requests
                .iter()
                .map(|(_, r)| r.distinct_4grams())
                .filter(|d| d.is_finite())
                .collect();
            summary.f(
                "distinct_4grams",
                if distinct.is_empty() {
                    f64::NAN
                } else {
                    distinct.iter().sum::<f64>() / distinct.len() as f64
                },
            );
            let nan_unless = |v: f64| if whole { v } else { f64::NAN };
            summary.f("speedup", nan_unless(speedup));
            summary.f(
                "tokens_per_s",
                nan_unless(generated as f64 / seconds.max(1e-9)),
            );
            summary.f(
                "ar_tokens_per_s",
                nan_unless(if ar.is_empty() {
                    f64::NAN
                } else {
                    ar.iter().sum::<f64>() / ar.len() as f64
                }),
            );
            let sum_f = |f: fn(&super::records::RequestRow) -> f64| {
                requests.iter().map(|(_, r)| f(r)).sum::<f64>()
            };
            let max_i = |f: fn(&super::records::RequestRow) -> u64| {
                requests.iter().map(|(_, r)| f(r)).max().unwrap_or(0) as i64
            };
            // 1 when every request reproduced the target's greedy output, 0 when any did not, -1 when
            // not comparable.
            let matches: Vec<i64> = requests
                .iter()
                .map(|(u, r)| {
                    matches_target(greedy, &target, &u.request_key(r.prompt), &r.output_ids)
                })
                .collect();
            summary.i(
                "matches_target",
                if matches.contains(&0) {
                    0
                } else if !matches.is_empty() && matches.iter().all(|&m| m == 1) {
                    1
                } else {
                    -1
                },
            );
            summary.f("update_seconds", nan_unless(sum_f(|r| r.update_seconds)));
            summary.i(
                "updates",
                requests.iter().map(|(_, r)| r.updates).sum::<usize>() as i64,
            );
            summary.i("adaptation_bytes", max_i(|r| r.adaptation_bytes as u64));
            summary.i(
                "drafter_weight_bytes",
                max_i(|r| r.drafter_weight_bytes as u64),
            );
            summary.i(
                "drafter_cache_bytes",
                max_i(|r| r.drafter_cache_bytes as u64),
            );
            summary.i("peak_rss_bytes", max_i(|r| r.peak_rss_bytes));
        };
        let emitted_all: usize = all_cycles().map(|c| c.accepted + c.bonus).sum();
        row(
            ("all".into(), 0.0, f64::INFINITY),
            all_cycles().count(),
            emitted_all,
            true,
        );
        if first.setting == Setting::LongGeneration && drafter != TARGET_ONLY && n0 > 0 {
            let mut by_bin: BTreeMap<u64, (Bin, usize, usize)> = BTreeMap::new();
            for c in all_cycles() {
                let bin = context_bin(c.context, n0, bins);
                let entry = by_bin.entry(bin.1.to_bits()).or_insert_with(|| (bin, 0, 0));
                entry.1 += 1;
                entry.2 += c.accepted + c.bonus;
            }
            // Keyed by the low edge's bits, which order as the (non-negative) edges do.
            for (bin, count, emitted) in by_bin.into_values() {
                row(bin, count, emitted, false);
            }
        }
    }
    RunTables {
        results: results.table(),
        cycles: cycles.table(),
        summary: summary.table(),
    }
}

/// Writes `results.parquet`, `cycles.parquet` and `summary.parquet` of `experiment` into run folder
/// `dir` from its finished `units`.
pub fn write_tables(
    dir: &Path,
    experiment: &Experiment,
    units: &[UnitRecord],
) -> Result<RunTables> {
    let tables = build(experiment, units);
    // A table without rows has no columns yet (a run of target-only methods has no cycles): it is
    // not written rather than written without a schema.
    for (name, table) in [
        ("results.parquet", &tables.results),
        ("cycles.parquet", &tables.cycles),
        ("summary.parquet", &tables.summary),
    ] {
        if !table.columns.is_empty() {
            table.write_parquet(&dir.join(name))?;
        }
    }
    Ok(tables)
}
