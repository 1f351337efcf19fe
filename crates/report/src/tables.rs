//! The run's parquet tables, rebuilt from its requests ([`crate::samples`]):
//! - `results.parquet`: one row per request x arm, raw counters, the paired speed-ups over the target
//!   alone on the same request of the same unit, the machine's state during the unit, provenance;
//! - `cycles.parquet`: one row per verification cycle with the context it drafted at and the depth of
//!   its proposal;
//! - `summary.parquet`: per drafter x method x workload x context, and for long generation per context
//!   bin along the generation: tau, the speed-up end to end and of the decode alone, tokens/s, each
//!   with its 95% interval over prompts ([`crate::intervals`]), the same two speed-ups against the
//!   first drafting method of the same drafter on the same request (paired, so a load or a prompt that
//!   slows both arms cancels out of the comparison) with a Wilcoxon signed-rank p over prompts, where
//!   a cycle's time goes (drafting and verifying, beside the target alone's time per token on the same
//!   requests), update seconds, memory, and how many units ran under load;
//! - `acceptance.parquet`: per drafter x method x workload x context bin and draft position k, how
//!   often position k was accepted once positions 1..k-1 were ([`crate::acceptance`]).
//!
//! The prompt is the unit of evidence: the requests of one prompt (its seeds and repeats) are combined
//! first, tau pooled over them and times by their median, and intervals and tests go over prompts.
//!
//! Every table is written whole through a rename; plain INT64 / DOUBLE / UTF-8 columns, so polars,
//! pandas and duckdb open them unchanged.

use crate::acceptance;
use crate::columns::table_of;
use crate::error::Result;
use crate::grid::{Arm, Unit, TARGET_ONLY};
use crate::head_to_head::{self, HeadToHead};
use crate::intervals::{
    median, median_interval, paired_ratio, ratio_interval, Interval, PairedRatio,
};
use crate::machine_state::LOADED_OTHER_SHARE;
use crate::multiplicity::{self, Family};
use crate::outline::{Outline, Setting};
use crate::records::CycleRecord;
use crate::records::{RequestRow, UnitRecord};
use crate::samples::{self, CycleRow, RequestSample, ResultRow};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One row of `summary.parquet`: a cell (drafter x method x workload x context), whole or over one
/// context bin. Its columns are its fields, in this order ([`table_of`]; an [`Interval`] is the
/// columns `name`, `name_lo`, `name_hi`), and the report reads these rows, not the table.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub target: String,
    pub drafter: String,
    pub method: String,
    pub workload: String,
    pub setting: Setting,
    pub context: i64,
    /// `all` for the whole requests, else the context bin's label.
    pub bin: String,
    pub bin_lo_n0: f64,
    pub bin_hi_n0: f64,
    pub n0: i64,
    pub requests: i64,
    /// Distinct prompts among the requests (their seeds and repeats combined): the unit of evidence.
    pub prompts: i64,
    pub mean_prompt_tokens: f64,
    pub cycles: i64,
    /// Of those, the cycles a gate ran as plain target steps (nothing drafted).
    pub plain_cycles: i64,
    pub tau: Interval,
    /// The query-scaling slope the arm drafted with (a schedule's mean beta); NaN unknown or none.
    pub scaling_slope: f64,
    /// Mean share of distinct 4-grams in the outputs (low: the outputs loop).
    pub distinct_4grams: f64,
    /// Median over prompts of tokens/s against the target alone on the same request.
    pub speedup: Interval,
    /// The same for the decode alone (prefill left out).
    pub decode_speedup: Interval,
    /// Median over prompts of tokens/s against the same drafter under the reference method (the
    /// experiment's first drafting method) on the same request, end to end and decode alone; the
    /// prompts on which the method was faster; the Wilcoxon signed-rank p (two-sided) of the paired
    /// log ratios over prompts (NaN unknown), and that p adjusted with the report's whole family of
    /// paired tests (Holm; NaN outside the family: [`crate::multiplicity`]).
    pub vs_reference: Interval,
    pub vs_reference_faster: i64,
    pub vs_reference_p: f64,
    pub vs_reference_p_adjusted: f64,
    pub decode_vs_reference: Interval,
    pub decode_vs_reference_faster: i64,
    pub decode_vs_reference_p: f64,
    pub decode_vs_reference_p_adjusted: f64,
    pub tokens_per_s: Interval,
    pub ar_tokens_per_s: Interval,
    /// Medians over the cell's cycles: drafting (proposing, and taking in the verified tokens) and
    /// the target's verification (its pass, the verdict, committing); NaN without cycles.
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// Median over requests of the first cycle's drafting (a prompt's catch-up).
    pub first_draft_ms: f64,
    /// The target alone's decode milliseconds per token on the same requests (median over them).
    pub target_ms_per_token: f64,
    /// 1: every request reproduced the target's greedy output; 0: one did not; -1: not comparable.
    pub matches_target: i64,
    pub update_seconds: f64,
    pub updates: i64,
    pub adaptation_bytes: i64,
    pub drafter_weight_bytes: i64,
    pub drafter_cache_bytes: i64,
    pub peak_rss_bytes: i64,
    /// Requests whose kept attempt ran under other processes' load, and those decoded again.
    pub loaded_requests: i64,
    pub retried_requests: i64,
    pub units: i64,
    pub loaded_units: i64,
    pub max_other_cpu_share: f64,
}

impl SummaryRow {
    /// The row's context as a table cell: its prompt length, or where a long generation started.
    pub fn context_label(&self) -> String {
        if self.setting == Setting::LongGeneration {
            format!("generation from {:.0}", self.mean_prompt_tokens)
        } else {
            self.context.to_string()
        }
    }
}

/// A context bin: its label and its edges in multiples of n0.
pub type Bin = (String, f64, f64);

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

/// One request of one arm, with its paired rows on the same request of the same unit, decoded seconds
/// apart: the target alone's (`base`) and, for a drafting arm, its drafter's under the reference method
/// (`reference`).
#[derive(Clone, Copy)]
struct PairedRow<'a> {
    sample: &'a RequestSample,
    base: Option<&'a RequestSample>,
    reference: Option<&'a RequestSample>,
}

impl PairedRow<'_> {
    fn row(&self) -> &RequestRow {
        &self.sample.row
    }

    /// `rate` of this request over `rate` of the same request in another arm (NaN without one).
    fn ratio(&self, other: Option<&RequestSample>, rate: fn(&RequestRow) -> f64) -> f64 {
        other.map_or(f64::NAN, |o| rate(self.row()) / rate(&o.row))
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
}

/// The tables' file names.
pub const RESULTS: &str = "results.parquet";
pub const CYCLES: &str = "cycles.parquet";
pub const SUMMARY: &str = "summary.parquet";
pub const ACCEPTANCE: &str = "acceptance.parquet";

pub struct RunTables {
    /// `results.parquet`'s rows, a request of an arm each.
    pub results: Vec<ResultRow>,
    /// `cycles.parquet`'s rows, a verification cycle each.
    pub cycles: Vec<CycleRow>,
    /// `summary.parquet`'s rows, in cell order (the report orders them as the experiment does).
    pub summary: Vec<SummaryRow>,
    /// `acceptance.parquet`'s cells.
    pub acceptance: Vec<acceptance::PositionRate>,
    /// The calibrated schedule against each other method, paired over prompts.
    pub head_to_head: Vec<HeadToHead>,
    /// The report's family of paired tests (the summary's comparisons with the reference method and
    /// the head-to-head's), adjusted together.
    pub family: Family,
}

/// Pairs every sample with the target alone's and its reference method's on the same request of the
/// same unit.
fn paired<'a>(outline: &Outline, samples: &'a [RequestSample]) -> Vec<PairedRow<'a>> {
    let base_method = outline.baseline_method();
    let reference_method = outline.reference_method();
    let index: BTreeMap<(&Unit, usize, &Arm), &RequestSample> = samples
        .iter()
        .map(|s| ((&s.unit, s.row.prompt, &s.arm), s))
        .collect();
    let find = |s: &RequestSample, drafter: Option<&String>, method: Option<&str>| {
        let arm = Arm {
            drafter: drafter.cloned(),
            method: method?.to_string(),
        };
        index.get(&(&s.unit, s.row.prompt, &arm)).copied()
    };
    samples
        .iter()
        .map(|s| PairedRow {
            sample: s,
            base: find(s, None, base_method),
            reference: match &s.arm.drafter {
                Some(d) => find(s, Some(d), reference_method),
                None => None,
            },
        })
        .collect()
}

/// Builds the tables of `outline` from its finished `units`.
pub fn build(outline: &Outline, units: &[UnitRecord]) -> RunTables {
    build_from_samples(outline, &samples::from_units(outline, units))
}

/// Builds the tables of `outline` from its requests.
pub fn build_from_samples(outline: &Outline, samples: &[RequestSample]) -> RunTables {
    let pairs = paired(outline, samples);
    let mut results = Vec::with_capacity(pairs.len());
    let mut cycles = Vec::new();
    let mut cells: Cells = BTreeMap::new();
    for p in &pairs {
        let s = p.sample;
        results.push(samples::result_row(
            s,
            [
                p.speedup(),
                p.decode_speedup(),
                p.vs_reference(),
                p.decode_vs_reference(),
            ],
        ));
        cycles.extend(samples::cycle_rows(s));
        let cell = cells
            .entry((
                s.drafter().to_string(),
                s.arm.method.clone(),
                s.unit.workload.clone(),
                s.unit.context,
            ))
            .or_insert_with(|| (Vec::new(), 0, s.setting, s.target.as_str()));
        cell.1 = cell.1.max(s.n0.unwrap_or(0));
        cell.0.push(*p);
    }
    let mut summary = summary_rows(outline, &cells);
    let mut head_to_head = head_to_head::compare(outline, samples);
    let family = multiplicity::adjust(&mut summary, &mut head_to_head);
    RunTables {
        results,
        cycles,
        summary,
        acceptance: acceptance::rates(outline, samples),
        head_to_head,
        family,
    }
}

/// The summary's cells: (drafter, method, workload, context) -> every sample of that cell, the n0 of
/// its drafter, the setting and the target.
type Cells<'a> =
    BTreeMap<(String, String, String, usize), (Vec<PairedRow<'a>>, i64, Setting, &'a str)>;

/// A cell's samples grouped by prompt (its seeds and repeats together), in prompt order: the unit of
/// evidence the summary's intervals and tests resample.
fn by_prompt<'a>(samples: &[PairedRow<'a>]) -> Vec<Vec<PairedRow<'a>>> {
    let mut groups: BTreeMap<usize, Vec<PairedRow<'a>>> = BTreeMap::new();
    for s in samples {
        groups.entry(s.row().prompt).or_default().push(*s);
    }
    groups.into_values().collect()
}

/// `f` of each prompt: the median over that prompt's requests (non-finite values left out; NaN when
/// none is finite).
fn per_prompt(prompts: &[Vec<PairedRow>], f: impl Fn(&PairedRow) -> f64) -> Vec<f64> {
    prompts
        .iter()
        .map(|requests| {
            let values: Vec<f64> = requests.iter().map(&f).filter(|v| v.is_finite()).collect();
            median(&values)
        })
        .collect()
}

/// The `summary` rows: per cell its whole requests, and for long generation with a drafter one row
/// per context bin its cycles reach.
fn summary_rows(outline: &Outline, cells: &Cells) -> Vec<SummaryRow> {
    let mut summary = Vec::new();
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
        summary.push(summary_row(
            &key,
            samples,
            ("all".into(), 0.0, f64::INFINITY),
            |_: &CycleRecord| true,
        ));
        if *setting == Setting::LongGeneration && drafter != TARGET_ONLY && *n0 > 0 {
            push_context_bin_rows(&mut summary, &key, samples, &outline.bins_n0);
        }
    }
    summary
}

/// One summary row per context bin (edges `bins_n0`, in multiples of the cell's n0) that some cycle
/// of the cell's samples drafted in, tau over the cycles in that bin.
fn push_context_bin_rows(
    summary: &mut Vec<SummaryRow>,
    key: &CellKey,
    samples: &[PairedRow],
    bins_n0: &[f64],
) {
    let n0 = key.n0;
    let mut bins: BTreeMap<u64, Bin> = BTreeMap::new();
    for s in samples {
        for c in &s.row().cycles {
            let bin = context_bin(c.context, n0, bins_n0);
            // Keyed by the low edge's bits, which order as the (non-negative) edges do.
            bins.entry(bin.1.to_bits()).or_insert(bin);
        }
    }
    for bin in bins.into_values() {
        let (lo, hi) = (bin.1, bin.2);
        let in_bin = move |c: &CycleRecord| {
            let at = c.context as f64 / n0 as f64;
            at >= lo && at < hi
        };
        summary.push(summary_row(key, samples, bin, in_bin));
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

/// A count as an INT64 column holds it (counts of this size never occur; none wraps).
fn count(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// One summary row: the cell's `samples` over `bin`, tau over the cycles `in_bin` keeps (all of them,
/// or those in a context bin). Speed-ups, tokens/s and the time columns describe whole requests, so a
/// bin row leaves them NaN. Intervals and tests go over prompts (each prompt's requests combined).
fn summary_row(
    key: &CellKey,
    samples: &[PairedRow],
    bin: Bin,
    in_bin: impl Fn(&CycleRecord) -> bool,
) -> SummaryRow {
    let whole = bin.0 == "all";
    let prompts = by_prompt(samples);
    // tau pooled over each prompt's requests: (tokens emitted, cycles) per prompt.
    let counts: Vec<(f64, f64)> = prompts
        .iter()
        .map(|requests| {
            requests
                .iter()
                .flat_map(|s| s.row().cycles.iter().filter(|c| in_bin(c)))
                .fold((0.0, 0.0), |(e, n), c| {
                    (e + (c.accepted + c.bonus) as f64, n + 1.0)
                })
        })
        .collect();
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
    let speeds = Speeds::over(&prompts, whole);
    let times = CycleTimes::of(samples, whole);
    let load = MachineLoad::of(samples);
    let max = |f: fn(&RequestRow) -> u64| samples.iter().map(|s| f(s.row())).max().unwrap_or(0);
    let update_seconds: f64 = samples.iter().map(|s| s.row().update_seconds).sum();
    SummaryRow {
        target: key.target.to_string(),
        drafter: key.drafter.to_string(),
        method: key.method.to_string(),
        workload: key.workload.to_string(),
        setting: key.setting,
        context: count(key.context),
        bin_lo_n0: bin.1,
        bin_hi_n0: bin.2,
        bin: bin.0,
        n0: key.n0,
        requests: count(samples.len()),
        // Prompts that reach the bin (every prompt of the cell for a whole row).
        prompts: count(counts.iter().filter(|c| whole || c.1 > 0.0).count()),
        mean_prompt_tokens: samples
            .iter()
            .map(|s| s.row().prompt_tokens as f64)
            .sum::<f64>()
            / samples.len().max(1) as f64,
        cycles: count(counts.iter().map(|c| c.1).sum::<f64>() as u64),
        plain_cycles: count(
            samples
                .iter()
                .flat_map(|s| s.row().cycles.iter().filter(|c| in_bin(c)))
                .filter(|c| c.drafted == 0)
                .count(),
        ),
        tau,
        // The query-scaling slope the cell's arm drafted with (the same in every request).
        scaling_slope: samples
            .iter()
            .map(|s| s.sample.scaling_slope)
            .find(|b| b.is_finite())
            .unwrap_or(f64::NAN),
        distinct_4grams: mean_distinct_4grams(samples),
        speedup: speeds.speedup,
        decode_speedup: speeds.decode_speedup,
        vs_reference: speeds.vs_reference.ratio,
        vs_reference_faster: count(speeds.vs_reference.ahead),
        vs_reference_p: speeds.vs_reference.p,
        // Set with the rest of the report's tests once every row exists (`build_from_samples`).
        vs_reference_p_adjusted: f64::NAN,
        decode_vs_reference: speeds.decode_vs_reference.ratio,
        decode_vs_reference_faster: count(speeds.decode_vs_reference.ahead),
        decode_vs_reference_p: speeds.decode_vs_reference.p,
        decode_vs_reference_p_adjusted: f64::NAN,
        tokens_per_s: speeds.tokens_per_s,
        ar_tokens_per_s: speeds.ar_tokens_per_s,
        draft_ms: times.draft_ms,
        verify_ms: times.verify_ms,
        first_draft_ms: times.first_draft_ms,
        target_ms_per_token: times.target_ms_per_token,
        matches_target: matches_target(samples),
        update_seconds: if whole { update_seconds } else { f64::NAN },
        updates: count(samples.iter().map(|s| s.row().updates as u64).sum::<u64>()),
        adaptation_bytes: count(max(|r| r.adaptation_bytes as u64)),
        drafter_weight_bytes: count(max(|r| r.drafter_weight_bytes as u64)),
        drafter_cache_bytes: count(max(|r| r.drafter_cache_bytes as u64)),
        peak_rss_bytes: count(max(|r| r.peak_rss_bytes)),
        loaded_requests: load.loaded_requests,
        retried_requests: load.retried_requests,
        units: load.units,
        loaded_units: load.loaded_units,
        max_other_cpu_share: load.max_other_cpu_share,
    }
}

/// The mean share of distinct 4-grams over the cell's outputs that have one; NaN when none does.
fn mean_distinct_4grams(samples: &[PairedRow]) -> f64 {
    let distinct: Vec<f64> = samples
        .iter()
        .map(|s| s.sample.distinct_4grams)
        .filter(|d| d.is_finite())
        .collect();
    if distinct.is_empty() {
        f64::NAN
    } else {
        distinct.iter().sum::<f64>() / distinct.len() as f64
    }
}

/// 1 when every request reproduced the target's greedy output, 0 when any did not, -1 when not
/// comparable.
fn matches_target(samples: &[PairedRow]) -> i64 {
    let matches: Vec<i64> = samples.iter().map(|s| s.sample.matches_target).collect();
    if matches.contains(&0) {
        0
    } else if !matches.is_empty() && matches.iter().all(|&m| m == 1) {
        1
    } else {
        -1
    }
}

/// A cell's speed-ups, paired comparisons with the reference method and tokens/s, over prompts;
/// unknown unless the row is whole (they describe whole requests).
struct Speeds {
    speedup: Interval,
    decode_speedup: Interval,
    vs_reference: PairedRatio,
    decode_vs_reference: PairedRatio,
    tokens_per_s: Interval,
    ar_tokens_per_s: Interval,
}

impl Speeds {
    fn over(prompts: &[Vec<PairedRow>], whole: bool) -> Self {
        let over_prompts = |f: fn(&PairedRow) -> f64| -> Vec<f64> {
            if whole {
                per_prompt(prompts, f)
            } else {
                Vec::new()
            }
        };
        let of = |f: fn(&PairedRow) -> f64| -> Interval {
            if whole {
                median_interval(&over_prompts(f))
            } else {
                Interval::UNKNOWN
            }
        };
        Self {
            speedup: of(|s| s.speedup()),
            decode_speedup: of(|s| s.decode_speedup()),
            // The paired comparison with the reference method: per prompt the ratio of the two arms'
            // tokens/s on the same request (the median over its repeats), then the median over
            // prompts. Two methods whose speed-up intervals overlap (the prompts differ more than the
            // methods do) can still differ on every prompt, which this resolves; how many prompts
            // were faster and the signed-rank p say how firmly.
            vs_reference: paired_ratio(&over_prompts(|s| s.vs_reference())),
            decode_vs_reference: paired_ratio(&over_prompts(|s| s.decode_vs_reference())),
            tokens_per_s: of(|s| s.row().tokens_per_second()),
            ar_tokens_per_s: of(|s| s.base.map_or(f64::NAN, |b| b.row.tokens_per_second())),
        }
    }
}

/// Where a cycle goes: medians over the cell's cycles, against the target alone's milliseconds per
/// decoded token on the same requests (the denominator of `decode_speedup`); whole rows only.
struct CycleTimes {
    draft_ms: f64,
    verify_ms: f64,
    first_draft_ms: f64,
    target_ms_per_token: f64,
}

impl CycleTimes {
    fn of(samples: &[PairedRow], whole: bool) -> Self {
        let nan_unless = |v: f64| if whole { v } else { f64::NAN };
        // Over the cycles that drafted: a gate's plain steps draft nothing.
        let cycle_ms = |f: fn(&CycleRecord) -> f64| {
            let ms: Vec<f64> = samples
                .iter()
                .flat_map(|s| s.row().cycles.iter().filter(|c| c.drafted > 0))
                .map(|c| 1e3 * f(c))
                .collect();
            nan_unless(median(&ms))
        };
        // The first cycle's drafting, median over requests: a drafter that takes in the prompt on
        // its first proposal, not in its prefill, pays for it there, a cost the medians over cycles
        // leave out and the decode speed-up counts.
        let first_draft_ms: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.row().cycles.first())
            .map(|c| 1e3 * c.draft_seconds)
            .collect();
        let target_ms: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.base)
            .map(|b| 1e3 / b.row.decode_tokens_per_second())
            .filter(|ms| ms.is_finite())
            .collect();
        Self {
            draft_ms: cycle_ms(|c| c.draft_seconds),
            verify_ms: cycle_ms(|c| c.verify_seconds),
            first_draft_ms: nan_unless(median(&first_draft_ms)),
            target_ms_per_token: nan_unless(median(&target_ms)),
        }
    }
}

/// How loaded the machine was while a cell ran.
struct MachineLoad {
    /// Requests whose kept attempt still ran while other processes took more than a tenth of the
    /// cores (waiting for quiet timed out, or the arm could not be decoded again).
    loaded_requests: i64,
    retried_requests: i64,
    /// Units, not requests: each unit's machine state covers all of its requests.
    units: i64,
    loaded_units: i64,
    max_other_cpu_share: f64,
}

impl MachineLoad {
    fn of(samples: &[PairedRow]) -> Self {
        let mut units: Vec<(&Unit, &RequestSample)> =
            samples.iter().map(|s| (&s.sample.unit, s.sample)).collect();
        units.sort_by_key(|u| u.0);
        units.dedup_by_key(|u| u.0);
        Self {
            loaded_requests: count(
                samples
                    .iter()
                    .filter(|s| s.row().other_cpu_share > LOADED_OTHER_SHARE)
                    .count(),
            ),
            retried_requests: count(samples.iter().filter(|s| s.row().attempts > 1).count()),
            units: count(units.len()),
            loaded_units: count(units.iter().filter(|u| u.1.unit_load.loaded).count()),
            max_other_cpu_share: units
                .iter()
                .map(|u| u.1.unit_load.other_share)
                .fold(f64::NAN, f64::max),
        }
    }
}

/// Writes `results.parquet`, `cycles.parquet`, `summary.parquet` and `acceptance.parquet` of
/// `outline` into folder `dir` from its `samples`.
pub fn write_tables(dir: &Path, outline: &Outline, samples: &[RequestSample]) -> Result<RunTables> {
    let tables = build_from_samples(outline, samples);
    let (results, cycles) = (table_of(&tables.results)?, table_of(&tables.cycles)?);
    let summary = table_of(&tables.summary)?;
    let acceptance = acceptance::table(&tables.acceptance)?;
    // A table without rows has no columns yet (a run of target-only methods has no cycles): it is
    // not written rather than written without a schema.
    for (name, table) in [
        (RESULTS, &results),
        (CYCLES, &cycles),
        (SUMMARY, &summary),
        (ACCEPTANCE, &acceptance),
    ] {
        if !table.columns.is_empty() {
            table.write_parquet(&dir.join(name))?;
        }
    }
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::Arm;
    use crate::outline::{ExperimentHeader, MethodOutline, SlopeRole, WorkloadOutline};
    use crate::records::Provenance;
    use crate::report::{headline, in_experiment_order, paired};
    use crate::samples::UnitLoad;

    /// The target alone, an unmodified drafter and a fixed-slope one, 2 prompts, 3 repeats.
    fn outline() -> Outline {
        outline_with("fixed", SlopeRole::Constant)
    }

    /// The target alone (`ar`), an unmodified drafter and `third`, a method placed on the slope chart
    /// as `slope`, on one workload of 2 prompts, 3 repeats.
    fn outline_with(third: &str, slope: SlopeRole) -> Outline {
        let method = |name: &str, target_only: bool, slope: SlopeRole| MethodOutline {
            name: name.into(),
            target_only,
            slope,
            reads_target_attention: false,
        };
        Outline {
            header: ExperimentHeader {
                file: "e.yaml".into(),
                name: "t".into(),
                target: "smollm2-135m-instruct".into(),
                device: "cpu".into(),
                dtype: "f32".into(),
                temperature: 0.0,
                seeds: vec![0],
                repeats: 3,
            },
            config_hash: "h".into(),
            drafters: vec!["self".into()],
            methods: vec![
                method("ar", true, SlopeRole::Apart),
                method("unmodified", false, SlopeRole::Constant),
                method(third, false, slope),
            ],
            workloads: vec![WorkloadOutline {
                name: "w".into(),
                setting: Setting::LongPrompt,
                contexts: vec![0],
            }],
            drafting: vec![
                ("self".into(), "unmodified".into()),
                ("self".into(), third.into()),
            ],
            bins_n0: vec![0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            shared_prefill: false,
            head_to_head: Vec::new(),
        }
    }

    /// One request: `cycles` cycles each accepting `accepted` of 3 drafts, `seconds` in all.
    fn sample(
        method: &str,
        repeat: usize,
        prompt: usize,
        accepted: usize,
        seconds: f64,
    ) -> RequestSample {
        let drafting = method != "ar";
        let cycles = if drafting {
            vec![
                CycleRecord {
                    context: 20,
                    drafted: 3,
                    accepted,
                    accepted_per_position: (0..3).map(|d| u8::from(d < accepted)).collect(),
                    bonus: 1,
                    draft_seconds: 0.01,
                    verify_seconds: 0.02,
                };
                4
            ]
        } else {
            Vec::new()
        };
        RequestSample {
            unit: Unit {
                workload: "w".into(),
                context: 0,
                seed: 0,
                repeat,
            },
            arm: Arm {
                drafter: drafting.then(|| "self".to_string()),
                method: method.into(),
            },
            setting: Setting::LongPrompt,
            target: "smollm2-135m-instruct".into(),
            n0: drafting.then_some(4),
            scaling_slope: f64::NAN,
            row: RequestRow {
                prompt,
                prompt_tokens: 20,
                generated: 8,
                prefill_seconds: 0.1,
                total_seconds: seconds,
                slot: 0,
                other_cpu_share: 0.0,
                attempts: 1,
                update_seconds: 0.0,
                updates: 0,
                drafter_weight_bytes: 0,
                drafter_cache_bytes: 0,
                target_cache_bytes: 0,
                adaptation_bytes: 0,
                peak_rss_bytes: 0,
                cycles,
                output_ids: Vec::new(),
            },
            distinct_4grams: f64::NAN,
            output_digest: String::new(),
            target_output_digest: String::new(),
            matches_target: 1,
            unit_load: UnitLoad {
                load_average: 0.0,
                other_share: 0.0,
                lost_share: 0.0,
                loaded: false,
            },
            provenance: Provenance {
                config_hash: String::new(),
                git_revision: String::new(),
                machine: String::new(),
                device: "cpu".into(),
                dtype: "f32".into(),
                sharpdraft_version: String::new(),
                started_unix: 0,
                kernel: String::new(),
                threads: 0,
            },
            inputs: Default::default(),
        }
    }

    /// Prompt 0 accepts every draft, prompt 1 none; the repeats of a prompt emit the same tokens
    /// (greedy) and differ only in time; the fixed slopes are faster on both prompts.
    fn two_prompts_three_repeats() -> Vec<RequestSample> {
        let mut out = Vec::new();
        for repeat in 0..3 {
            let jitter = 0.01 * repeat as f64;
            for (prompt, accepted) in [(0, 3), (1, 0)] {
                out.push(sample("ar", repeat, prompt, 0, 1.0 + jitter));
                out.push(sample("unmodified", repeat, prompt, accepted, 0.8 + jitter));
                out.push(sample("fixed", repeat, prompt, accepted, 0.7 + jitter));
            }
        }
        out
    }

    #[test]
    fn the_repeats_of_a_prompt_are_one_sample_and_the_interval_is_the_one_two_prompts_give() {
        let outline = outline();
        let samples = two_prompts_three_repeats();
        let tables = build_from_samples(&outline, &samples);
        let rows = in_experiment_order(&tables.summary, &outline);
        let unmodified = rows.iter().find(|r| r.method == "unmodified").unwrap();
        assert_eq!((unmodified.prompts, unmodified.requests), (2, 6));
        // Two prompts: tau 4 (all 3 drafts + the bonus) and 1; pooled over the prompts' 12 cycles each.
        let two_prompts = ratio_interval(&[(48.0, 12.0), (12.0, 12.0)]);
        assert_eq!(unmodified.tau, two_prompts);
        assert_eq!((two_prompts.lo, two_prompts.hi), (1.0, 4.0));
        // Resampling the six requests as if independent claims a narrower interval.
        let six_requests: Vec<(f64, f64)> =
            (0..3).flat_map(|_| [(16.0, 4.0), (4.0, 4.0)]).collect();
        assert_ne!(ratio_interval(&six_requests), unmodified.tau);
    }

    #[test]
    fn requests_of_one_token_have_no_decode_step_and_no_decode_speed_up() {
        let outline = outline();
        let mut samples = two_prompts_three_repeats();
        // max_new_tokens: 1: the prefill's logits give the only token; what follows is bookkeeping.
        for s in &mut samples {
            s.row.generated = 1;
            s.row.cycles.clear();
        }
        let tables = build_from_samples(&outline, &samples);
        let rows = in_experiment_order(&tables.summary, &outline);
        let fixed = rows.iter().find(|r| r.method == "fixed").unwrap();
        assert!(fixed.speedup.estimate.is_finite(), "end to end is measured");
        assert!(
            !fixed.decode_speedup.estimate.is_finite() && !fixed.decode_vs_reference.estimate.is_finite(),
            "{:?} {:?}",
            fixed.decode_speedup,
            fixed.decode_vs_reference
        );
    }

    #[test]
    fn two_prompts_faster_on_every_repeat_give_no_verdict() {
        let outline = outline();
        let tables = build_from_samples(&outline, &two_prompts_three_repeats());
        let rows = in_experiment_order(&tables.summary, &outline);
        let fixed = rows.iter().find(|r| r.method == "fixed").unwrap();
        assert!(fixed.vs_reference.lo > 1.0, "{:?}", fixed.vs_reference);
        assert_eq!(fixed.vs_reference_faster, 2);
        assert!((fixed.vs_reference_p - 0.5).abs() < 1e-12);
        let table = paired(&rows, &outline, None).unwrap();
        let line = table.lines().find(|l| l.contains("| fixed |")).unwrap();
        assert!(line.contains("n < 10 (2/2 faster, p 0.500)"), "{line}");
        assert!(!line.contains("higher"), "{line}");
    }

    #[test]
    fn the_methods_an_experiment_names_head_to_head_each_meet_every_other_method() {
        let mut outline = outline_with("calibrated", SlopeRole::Calibrated);
        outline.head_to_head = vec!["unmodified".into(), "calibrated".into()];
        assert_eq!(outline.anchors(), vec!["unmodified", "calibrated"]);
        let mut samples = Vec::new();
        for prompt in 0..2 {
            samples.push(sample("ar", 0, prompt, 0, 1.0));
            samples.push(sample("unmodified", 0, prompt, 1, 0.8));
            samples.push(sample("calibrated", 0, prompt, 3, 0.7));
        }
        let cells = crate::head_to_head::compare(&outline, &samples);
        let pairs: Vec<(&str, &str)> = cells
            .iter()
            .map(|c| (c.anchor.as_str(), c.method.as_str()))
            .collect();
        assert_eq!(
            pairs,
            vec![("unmodified", "calibrated"), ("calibrated", "unmodified")]
        );
    }

    #[test]
    fn the_calibrated_schedule_meets_each_method_on_the_same_prompts() {
        let outline = outline_with("calibrated", SlopeRole::Calibrated);
        assert_eq!(outline.anchors(), vec!["calibrated"]);
        // Prompt 0: the calibrated arm accepts all 3 drafts (tau 4), the unmodified 1 (tau 2); prompt
        // 1: neither accepts any. The calibrated arm decodes in 0.6 s against 0.7 on both.
        let mut samples = Vec::new();
        for (prompt, calibrated, unmodified) in [(0, 3, 1), (1, 0, 0)] {
            samples.push(sample("ar", 0, prompt, 0, 1.0));
            samples.push(sample("unmodified", 0, prompt, unmodified, 0.8));
            samples.push(sample("calibrated", 0, prompt, calibrated, 0.7));
        }
        let cells = crate::head_to_head::compare(&outline, &samples);
        assert_eq!(cells.len(), 1, "one other drafting method: {cells:?}");
        let cell = &cells[0];
        assert_eq!((cell.method.as_str(), cell.prompts), ("unmodified", 2));
        // Pooled over both prompts: the calibrated arm emits 16 + 4 tokens in 8 passes (2.5), the
        // unmodified 8 + 4 (1.5); the median of the per-prompt ratios, 4/2 and 1/1, would say 1.5.
        assert!(
            (cell.tau.ratio.estimate - 2.5 / 1.5).abs() < 1e-12,
            "pooled tau over pooled tau: {:?}",
            cell.tau
        );
        assert_eq!(cell.tau.ahead, 1);
        assert!((cell.decode.ratio.estimate - 0.7 / 0.6).abs() < 1e-9);
        assert_eq!(cell.decode.ahead, 2);
    }

    #[test]
    fn the_headline_has_eight_columns_and_the_short_verdicts() {
        let outline = outline();
        let tables = build_from_samples(&outline, &two_prompts_three_repeats());
        let rows = in_experiment_order(&tables.summary, &outline);
        let table = headline(&rows, &outline, None);
        for line in table.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(line.matches('|').count(), 9, "8 columns: {line}");
        }
        let fixed = table.lines().find(|l| l.contains("| fixed |")).unwrap();
        assert!(fixed.contains(" n < 10 / "), "{fixed}");
        assert!(
            !table.lines().any(|l| l.contains("| ar |")),
            "the target alone's row is under Costs: {table}"
        );
    }
}
