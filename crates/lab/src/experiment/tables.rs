//! The run's parquet tables, rebuilt from its finished units:
//! - `results.parquet`: one row per request x arm, raw counters, the paired speed-ups over the target
//!   alone on the same request of the same unit, the machine's state during the unit, provenance;
//! - `cycles.parquet`: one row per verification cycle with the context it drafted at;
//! - `summary.parquet`: per drafter x method x workload x context, and for long generation per context
//!   bin along the generation: tau, the speed-up end to end and of the decode alone, tokens/s, each
//!   with its 95% interval ([`super::intervals`]), the same two speed-ups against the first drafting
//!   method of the same drafter on the same request (paired, so a load or a prompt that slows both
//!   arms cancels out of the comparison), where a cycle's time goes (drafting and verifying,
//!   beside the target alone's time per token on the same requests), update seconds, memory, and how
//!   many units ran under load.
//!
//! Every table is written whole through a rename; plain INT64 / DOUBLE / UTF-8 columns, so polars,
//! pandas and duckdb open them unchanged.

use super::config::{Experiment, Setting};
use super::grid::TARGET_ONLY;
use super::intervals::{median, median_interval, ratio_interval, Interval};
use super::machine_state::LOADED_OTHER_SHARE;
use super::records::{ArmRecord, RequestRow, UnitRecord};
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
    /// An unsigned count as INT64, saturating (counts of this size never occur; no value wraps).
    fn u(&mut self, name: &str, v: u64) {
        self.i(name, i64::try_from(v).unwrap_or(i64::MAX));
    }
    fn f(&mut self, name: &str, v: f64) {
        if let Column::F64(c) = self.column(name, Column::F64(Vec::new())) {
            c.push(v);
        }
    }
    /// `name`, `name_lo` and `name_hi`.
    fn interval(&mut self, name: &str, v: Interval) {
        self.f(name, v.estimate);
        self.f(&format!("{name}_lo"), v.lo);
        self.f(&format!("{name}_hi"), v.hi);
    }
    /// The columns that name a request: drafter, method, workload, setting, context, seed, repeat,
    /// prompt.
    fn request_key(&mut self, record: &UnitRecord, arm: &ArmRecord, prompt: usize) {
        let u = &record.unit;
        self.s("drafter", arm.arm.drafter_name());
        self.s("method", arm.arm.method.as_str());
        self.s("workload", u.workload.as_str());
        self.s("setting", record.setting.name());
        self.u("context", u.context as u64);
        self.u("seed", u.seed);
        self.u("repeat", u.repeat as u64);
        self.u("prompt", prompt as u64);
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

/// The baseline arm of a unit: the experiment's first target-only method, whose rows are the
/// denominators of the unit's speed-ups and the outputs every greedy arm must reproduce.
pub(super) fn baseline<'a>(
    experiment: &Experiment,
    arms: &'a [ArmRecord],
) -> Option<&'a ArmRecord> {
    let method = experiment.methods.iter().find(|m| m.target_only)?;
    arms.iter()
        .find(|a| a.arm.drafter.is_none() && a.arm.method == method.name)
}

/// The reference arm of a drafting arm: the same drafter under the experiment's first drafting method
/// (the unmodified drafter, as the shipped experiments list it), in the same unit.
fn reference<'a>(
    experiment: &Experiment,
    record: &'a UnitRecord,
    arm: &ArmRecord,
) -> Option<&'a ArmRecord> {
    arm.arm.drafter.as_ref()?;
    let method = experiment.reference_method()?;
    record
        .arms
        .iter()
        .find(|a| a.arm.drafter == arm.arm.drafter && a.arm.method == method)
}

/// One request of one arm, with its paired rows on the same request of the same unit, decoded seconds
/// apart: the target alone's (`base`) and, for a drafting arm, its drafter's under the reference method
/// (`reference`).
#[derive(Clone, Copy)]
struct PairedRow<'a> {
    record: &'a UnitRecord,
    row: &'a RequestRow,
    base: Option<&'a RequestRow>,
    reference: Option<&'a RequestRow>,
}

impl PairedRow<'_> {
    /// `rate` of this request over `rate` of the same request in another arm (NaN without one).
    fn ratio(&self, other: Option<&RequestRow>, rate: fn(&RequestRow) -> f64) -> f64 {
        other.map_or(f64::NAN, |o| rate(self.row) / rate(o))
    }

    /// tokens/s against the target alone's on the same request.
    fn speedup(&self) -> f64 {
        self.ratio(self.base, RequestRow::tokens_per_second)
    }

    /// The same for the decode alone (after the prefill).
    fn decode_speedup(&self) -> f64 {
        self.ratio(self.base, RequestRow::decode_tokens_per_second)
    }

    /// tokens/s against the reference method's on the same request (1 for the reference itself).
    fn vs_reference(&self) -> f64 {
        self.ratio(self.reference, RequestRow::tokens_per_second)
    }

    /// The same for the decode alone.
    fn decode_vs_reference(&self) -> f64 {
        self.ratio(self.reference, RequestRow::decode_tokens_per_second)
    }

    /// 1 when the output equals the target's own greedy output, 0 when it differs, -1 when not
    /// comparable (sampling, or no target-alone row).
    fn matches_target(&self, greedy: bool) -> i64 {
        matches_target(self.row, self.base, greedy)
    }
}

/// 1 when `row`'s output equals the target alone's (`base`) on the same request, 0 when it differs,
/// -1 when not comparable (sampling, or no target-alone row).
pub(super) fn matches_target(row: &RequestRow, base: Option<&RequestRow>, greedy: bool) -> i64 {
    match base {
        Some(b) if greedy && !b.output_ids.is_empty() => i64::from(b.output_ids == row.output_ids),
        _ => -1,
    }
}

pub struct RunTables {
    pub results: Table,
    pub cycles: Table,
    pub summary: Table,
}

/// The summary's cells: (drafter, method, workload, context) -> every sample of that cell, the n0 of
/// its drafter and the setting.
type Cells<'a> =
    BTreeMap<(String, String, String, usize), (Vec<PairedRow<'a>>, i64, Setting, &'a str)>;

/// Builds the three tables of `experiment` from its finished `units`.
pub fn build(experiment: &Experiment, units: &[UnitRecord]) -> RunTables {
    let greedy = experiment.temperature == 0.0;
    let mut results = Rows::default();
    let mut cycles = Rows::default();
    let mut cells: Cells = BTreeMap::new();
    for record in units {
        let base = baseline(experiment, &record.arms);
        for arm in &record.arms {
            let reference = reference(experiment, record, arm);
            let cell = cells
                .entry((
                    arm.arm.drafter_name().to_string(),
                    arm.arm.method.clone(),
                    record.unit.workload.clone(),
                    record.unit.context,
                ))
                .or_insert_with(|| (Vec::new(), 0, record.setting, record.target.as_str()));
            cell.1 = cell.1.max(arm.n0.unwrap_or(0));
            for r in &arm.requests {
                let sample = PairedRow {
                    record,
                    row: r,
                    base: base.and_then(|b| b.requests.iter().find(|x| x.prompt == r.prompt)),
                    reference: reference
                        .and_then(|a| a.requests.iter().find(|x| x.prompt == r.prompt)),
                };
                cell.0.push(sample);
                push_result_row(&mut results, arm, &sample, greedy);
                push_cycle_rows(&mut cycles, record, arm, r);
            }
        }
    }
    let summary = summary_rows(experiment, &cells, greedy);
    RunTables {
        results: results.table(),
        cycles: cycles.table(),
        summary: summary.table(),
    }
}

/// One `results` row: the request's counters, its paired speed-ups, the unit's machine state and
/// provenance.
fn push_result_row(results: &mut Rows, arm: &ArmRecord, sample: &PairedRow, greedy: bool) {
    let (record, r) = (sample.record, sample.row);
    let m = &record.machine;
    let p = &record.provenance;
    results.s("target", record.target.as_str());
    results.request_key(record, arm, r.prompt);
    results.u("slot", r.slot as u64);
    results.u("attempts", r.attempts as u64);
    results.f("other_cpu_share", r.other_cpu_share);
    results.u("prompt_tokens", r.prompt_tokens as u64);
    results.u("generated", r.generated as u64);
    results.u("cycles", r.cycles.len() as u64);
    let sum = |f: fn(&sharpdraft_decode::CycleRecord) -> usize| {
        r.cycles.iter().map(f).sum::<usize>() as u64
    };
    results.u("drafted", sum(|c| c.drafted));
    results.u("accepted", sum(|c| c.accepted));
    results.u("emitted", sum(|c| c.accepted + c.bonus));
    results.f("tau", r.tau());
    results.f("distinct_4grams", r.distinct_4grams());
    results.f("prefill_seconds", r.prefill_seconds);
    results.f("decode_seconds", r.decode_seconds());
    results.f("total_seconds", r.total_seconds);
    results.f("tokens_per_s", r.tokens_per_second());
    results.f("speedup", sample.speedup());
    results.f("decode_speedup", sample.decode_speedup());
    results.f("vs_reference", sample.vs_reference());
    results.f("decode_vs_reference", sample.decode_vs_reference());
    results.i("matches_target", sample.matches_target(greedy));
    results.f("update_seconds", r.update_seconds);
    results.u("updates", r.updates as u64);
    results.u("drafter_weight_bytes", r.drafter_weight_bytes as u64);
    results.u("drafter_cache_bytes", r.drafter_cache_bytes as u64);
    results.u("target_cache_bytes", r.target_cache_bytes as u64);
    results.u("adaptation_bytes", r.adaptation_bytes as u64);
    results.u("peak_rss_bytes", r.peak_rss_bytes);
    results.i("n0", arm.n0.unwrap_or(0));
    results.f(
        "unit_load_average",
        m.load_average_start.max(m.load_average_end),
    );
    results.f("unit_other_cpu_share", m.other_share());
    results.f("unit_lost_cpu_share", m.lost_share());
    results.i("unit_loaded", i64::from(m.loaded()));
    results.s("config_hash", p.config_hash.as_str());
    results.s("git_revision", p.git_revision.as_str());
    results.s("machine", p.machine.as_str());
    results.s("device", p.device.as_str());
    results.s("dtype", p.dtype.as_str());
    results.u("started_unix", p.started_unix);
}

/// One `cycles` row per verification cycle of request `r`, with the context it drafted at.
fn push_cycle_rows(cycles: &mut Rows, record: &UnitRecord, arm: &ArmRecord, r: &RequestRow) {
    for (i, c) in r.cycles.iter().enumerate() {
        cycles.request_key(record, arm, r.prompt);
        cycles.u("cycle", i as u64);
        cycles.i("cycle_context", c.context);
        cycles.f(
            "cycle_context_n0",
            arm.n0.map_or(f64::NAN, |n0| c.context as f64 / n0 as f64),
        );
        cycles.u("drafted", c.drafted as u64);
        cycles.u("accepted", c.accepted as u64);
        cycles.u("bonus", c.bonus as u64);
        cycles.f("draft_seconds", c.draft_seconds);
        cycles.f("verify_seconds", c.verify_seconds);
    }
}

/// The `summary` rows: per cell its whole requests, and for long generation with a drafter one row
/// per context bin its cycles reach.
fn summary_rows(experiment: &Experiment, cells: &Cells, greedy: bool) -> Rows {
    let mut summary = Rows::default();
    for ((drafter, method, workload, context), (samples, n0, setting, target)) in cells {
        let key = CellKey {
            target,
            drafter,
            method,
            workload,
            setting: *setting,
            context: *context,
            n0: *n0,
        };
        let whole = |s: &PairedRow| {
            let emitted = s
                .row
                .cycles
                .iter()
                .map(|c| c.accepted + c.bonus)
                .sum::<usize>();
            (emitted as f64, s.row.cycles.len() as f64)
        };
        summary_row(
            &mut summary,
            &key,
            samples,
            ("all".into(), 0.0, f64::INFINITY),
            whole,
            greedy,
        );
        if *setting == Setting::LongGeneration && drafter != TARGET_ONLY && *n0 > 0 {
            push_context_bin_rows(&mut summary, &key, samples, &experiment.bins_n0, greedy);
        }
    }
    summary
}

/// One summary row per context bin (edges `bins_n0`, in multiples of the cell's n0) that some cycle
/// of the cell's samples drafted in, tau over the cycles in that bin.
fn push_context_bin_rows(
    summary: &mut Rows,
    key: &CellKey,
    samples: &[PairedRow],
    bins_n0: &[f64],
    greedy: bool,
) {
    let n0 = key.n0;
    let mut bins: BTreeMap<u64, Bin> = BTreeMap::new();
    for s in samples {
        for c in &s.row.cycles {
            let bin = context_bin(c.context, n0, bins_n0);
            // Keyed by the low edge's bits, which order as the (non-negative) edges do.
            bins.entry(bin.1.to_bits()).or_insert(bin);
        }
    }
    for bin in bins.into_values() {
        let (lo, hi) = (bin.1, bin.2);
        let in_bin = move |s: &PairedRow| {
            let x = |c: &&sharpdraft_decode::CycleRecord| {
                let at = c.context as f64 / n0 as f64;
                at >= lo && at < hi
            };
            let emitted = s
                .row
                .cycles
                .iter()
                .filter(x)
                .map(|c| c.accepted + c.bonus)
                .sum::<usize>();
            (emitted as f64, s.row.cycles.iter().filter(x).count() as f64)
        };
        summary_row(summary, key, samples, bin, in_bin, greedy);
    }
}

/// What names a summary cell.
struct CellKey<'a> {
    target: &'a str,
    drafter: &'a str,
    method: &'a str,
    workload: &'a str,
    setting: Setting,
    context: usize,
    n0: i64,
}

/// One summary row: the cell's `samples` over `bin`, tau from `emitted_and_cycles` of each sample
/// (the whole request, or its cycles in the bin). Speed-ups, tokens/s and the time columns describe
/// whole requests, so a bin row leaves them NaN.
fn summary_row(
    summary: &mut Rows,
    key: &CellKey,
    samples: &[PairedRow],
    bin: Bin,
    emitted_and_cycles: impl Fn(&PairedRow) -> (f64, f64),
    greedy: bool,
) {
    let whole = bin.0 == "all";
    let counts: Vec<(f64, f64)> = samples.iter().map(&emitted_and_cycles).collect();
    let cycle_count: f64 = counts.iter().map(|c| c.1).sum();
    summary.s("target", key.target);
    summary.s("drafter", key.drafter);
    summary.s("method", key.method);
    summary.s("workload", key.workload);
    summary.s("setting", key.setting.name());
    summary.u("context", key.context as u64);
    summary.s("bin", bin.0);
    summary.f("bin_lo_n0", bin.1);
    summary.f("bin_hi_n0", bin.2);
    summary.i("n0", key.n0);
    summary.u("requests", samples.len() as u64);
    summary.f(
        "mean_prompt_tokens",
        samples
            .iter()
            .map(|s| s.row.prompt_tokens as f64)
            .sum::<f64>()
            / samples.len().max(1) as f64,
    );
    summary.u("cycles", cycle_count as u64);
    let tau = if key.drafter == TARGET_ONLY {
        Interval {
            estimate: 1.0,
            lo: 1.0,
            hi: 1.0,
        }
    } else {
        ratio_interval(
            &counts
                .iter()
                .copied()
                .filter(|c| c.1 > 0.0)
                .collect::<Vec<_>>(),
        )
    };
    summary.interval("tau", tau);
    let distinct: Vec<f64> = samples
        .iter()
        .map(|s| s.row.distinct_4grams())
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
    let of = |f: fn(&PairedRow) -> f64| -> Interval {
        if whole {
            median_interval(&samples.iter().map(f).collect::<Vec<_>>())
        } else {
            Interval::UNKNOWN
        }
    };
    summary.interval("speedup", of(|s| s.speedup()));
    summary.interval("decode_speedup", of(|s| s.decode_speedup()));
    // The paired comparison with the reference method: the median over requests of the ratio of the
    // two arms' tokens/s on each request. Two methods whose speed-up intervals overlap (the prompts
    // differ more than the methods do) can still differ on every request, which this resolves.
    summary.interval("vs_reference", of(|s| s.vs_reference()));
    summary.interval("decode_vs_reference", of(|s| s.decode_vs_reference()));
    // How many requests the method decoded faster than the reference: with few requests a bootstrap
    // interval is narrow (it cannot be wider than the samples' range), so the report shows the count
    // beside it (all n of n faster has a sign test's one-sided p of 2^-n).
    let faster = |f: fn(&PairedRow) -> f64| samples.iter().filter(|s| f(s) > 1.0).count() as u64;
    summary.u("vs_reference_faster", faster(|s| s.vs_reference()));
    summary.u(
        "decode_vs_reference_faster",
        faster(|s| s.decode_vs_reference()),
    );
    summary.interval("tokens_per_s", of(|s| s.row.tokens_per_second()));
    summary.interval(
        "ar_tokens_per_s",
        of(|s| s.base.map_or(f64::NAN, |b| b.tokens_per_second())),
    );
    let nan_unless = |v: f64| if whole { v } else { f64::NAN };
    // Where a cycle goes: medians over the cell's cycles, against the target alone's milliseconds per
    // decoded token on the same requests (the denominator of `decode_speedup`); whole rows only.
    let cycle_ms = |f: fn(&sharpdraft_decode::CycleRecord) -> f64| {
        let ms: Vec<f64> = samples
            .iter()
            .flat_map(|s| s.row.cycles.iter().map(move |c| 1e3 * f(c)))
            .collect();
        nan_unless(median(&ms))
    };
    summary.f("draft_ms", cycle_ms(|c| c.draft_seconds));
    summary.f("verify_ms", cycle_ms(|c| c.verify_seconds));
    // The first cycle's drafting, median over requests: a drafter that takes in the prompt on its first
    // proposal, not in its prefill, pays for it there, a cost the medians over cycles leave out and the
    // decode speed-up counts.
    let first_draft_ms: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.row.cycles.first())
        .map(|c| 1e3 * c.draft_seconds)
        .collect();
    summary.f("first_draft_ms", nan_unless(median(&first_draft_ms)));
    let target_ms: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.base)
        .map(|b| 1e3 / b.decode_tokens_per_second())
        .filter(|ms| ms.is_finite())
        .collect();
    summary.f("target_ms_per_token", nan_unless(median(&target_ms)));
    // 1 when every request reproduced the target's greedy output, 0 when any did not, -1 when not
    // comparable.
    let matches: Vec<i64> = samples.iter().map(|s| s.matches_target(greedy)).collect();
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
    summary.f(
        "update_seconds",
        nan_unless(samples.iter().map(|s| s.row.update_seconds).sum()),
    );
    summary.u(
        "updates",
        samples.iter().map(|s| s.row.updates as u64).sum::<u64>(),
    );
    let max = |f: fn(&RequestRow) -> u64| samples.iter().map(|s| f(s.row)).max().unwrap_or(0);
    summary.u("adaptation_bytes", max(|r| r.adaptation_bytes as u64));
    summary.u(
        "drafter_weight_bytes",
        max(|r| r.drafter_weight_bytes as u64),
    );
    summary.u("drafter_cache_bytes", max(|r| r.drafter_cache_bytes as u64));
    summary.u("peak_rss_bytes", max(|r| r.peak_rss_bytes));
    // Requests whose kept attempt still ran while other processes took more than a tenth of the
    // cores (waiting for quiet timed out, or the arm could not be decoded again).
    summary.u(
        "loaded_requests",
        samples
            .iter()
            .filter(|s| s.row.other_cpu_share > LOADED_OTHER_SHARE)
            .count() as u64,
    );
    summary.u(
        "retried_requests",
        samples.iter().filter(|s| s.row.attempts > 1).count() as u64,
    );
    // Units, not requests: each unit's machine state covers all of its requests.
    let mut units: Vec<&UnitRecord> = samples.iter().map(|s| s.record).collect();
    units.sort_by_key(|u| &u.unit);
    units.dedup_by_key(|u| &u.unit);
    summary.u("units", units.len() as u64);
    summary.u(
        "loaded_units",
        units.iter().filter(|u| u.machine.loaded()).count() as u64,
    );
    summary.f(
        "max_other_cpu_share",
        units
            .iter()
            .map(|u| u.machine.other_share())
            .fold(f64::NAN, f64::max),
    );
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
