//! One request decoded by one arm, as every table and statistic of a run reads it: a row of
//! `results.parquet` with its cycles from `cycles.parquet`.
//!
//! A run builds its samples from its finished units ([`from_units`]); a results folder that keeps only
//! the two tables (`experiments/results/*`) reads them back ([`read`]), so `sharpdraft report` rebuilds
//! the summary and the report anywhere, with whatever statistic this version computes.

use crate::columns::rows_of;
use crate::error::{bail, Context, Result};
use crate::grid::{Arm, Unit, TARGET_ONLY};
use crate::outline::{Outline, Setting};
use crate::records::CycleRecord;
use crate::records::{ArmInputs, ArmRecord, Provenance, RequestRow, UnitRecord};
use crate::table::Table;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// What a request's unit was doing to the machine, as the summary flags it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitLoad {
    /// The larger one-minute load average of the unit's start and end.
    pub load_average: f64,
    /// Other processes' share of the cores over the unit (0..1).
    pub other_share: f64,
    /// The share of the time stolen by the hypervisor or throttled by the cgroup (0..1).
    pub lost_share: f64,
    /// Whether either share was large enough to flag the unit.
    pub loaded: bool,
}

/// One request decoded by one arm of one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSample {
    pub unit: Unit,
    pub arm: Arm,
    pub setting: Setting,
    pub target: String,
    /// The drafter's training length (none for the target alone, or unrecorded).
    pub n0: Option<i64>,
    /// The query-scaling slope the arm drafted with ([`ArmRecord::scaling_slope`]); NaN where none was
    /// recorded (the target alone, or units of an older version).
    pub scaling_slope: f64,
    /// The request's counters and cycles; `output_ids` is empty when read back from the tables.
    pub row: RequestRow,
    /// Share of distinct 4-grams in the output (NaN below 4 tokens).
    pub distinct_4grams: f64,
    /// The digest of the request's output token ids ([`output_digest`]); empty in a table written
    /// before digests were kept.
    pub output_digest: String,
    /// The target alone's output digest on the same request (empty without one).
    pub target_output_digest: String,
    /// 1 when the output equals the target alone's on the same request, 0 when it differs, -1 when
    /// not comparable (sampling, or no target-alone row). Computed from the two digests
    /// ([`compare_outputs`]); a table written before digests were kept gives its own column.
    pub matches_target: i64,
    pub unit_load: UnitLoad,
    pub provenance: Provenance,
    /// The drafter and schedule the arm read (empty for the target alone).
    pub inputs: ArmInputs,
}

impl RequestSample {
    /// The drafter's name, or [`TARGET_ONLY`].
    pub fn drafter(&self) -> &str {
        self.arm.drafter_name()
    }
}

/// The baseline arm of a unit: the experiment's first target-only method, whose rows are the
/// denominators of the unit's speed-ups and the outputs every greedy arm must reproduce.
pub fn baseline<'a>(outline: &Outline, arms: &'a [ArmRecord]) -> Option<&'a ArmRecord> {
    let method = outline.baseline_method()?;
    arms.iter()
        .find(|a| a.arm.drafter.is_none() && a.arm.method == method)
}

/// The digest of output token ids `ids`: the sha256, in hex, of the ids as little-endian 64-bit
/// integers (in Python: `hashlib.sha256(numpy.asarray(ids, "<i8").tobytes()).hexdigest()`), so a
/// reader of `results.parquet` can check `= target's output` from the raw rows.
pub fn output_digest(ids: &[i64]) -> String {
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update(id.to_le_bytes());
    }
    format!("{:x}", hasher.finalize())
}

/// 1 when `row`'s output is the target alone's on the same request (`target`), compared by digest, 0
/// when it is not, -1 when not comparable (sampling, or no target-alone row).
pub fn matches_target(row: &RequestRow, target: Option<&RequestRow>, greedy: bool) -> i64 {
    match target {
        Some(t) if greedy => {
            i64::from(output_digest(&t.output_ids) == output_digest(&row.output_ids))
        }
        _ => -1,
    }
}

/// Sets each sample's target output digest and `matches_target` from the digests: 1 where its
/// output digest equals the baseline arm's on the same request (same unit and prompt), 0 where it
/// differs, -1 where not comparable (sampling, or no baseline row). Samples without a digest (a table
/// written before digests were kept) keep the `matches_target` they were read with.
pub fn compare_outputs(outline: &Outline, samples: &mut [RequestSample]) {
    let greedy = outline.header.temperature == 0.0;
    let Some(baseline) = outline.baseline_method() else {
        return;
    };
    let base: BTreeMap<(Unit, usize), String> = samples
        .iter()
        .filter(|s| s.arm.drafter.is_none() && s.arm.method == baseline)
        .filter(|s| !s.output_digest.is_empty())
        .map(|s| ((s.unit.clone(), s.row.prompt), s.output_digest.clone()))
        .collect();
    for s in samples.iter_mut().filter(|s| !s.output_digest.is_empty()) {
        let target = base.get(&(s.unit.clone(), s.row.prompt));
        s.target_output_digest = target.cloned().unwrap_or_default();
        s.matches_target = match target {
            Some(t) if greedy => i64::from(*t == s.output_digest),
            _ => -1,
        };
    }
}

/// Every request of every arm of `units`, in unit, arm and request order.
pub fn from_units(outline: &Outline, units: &[UnitRecord]) -> Vec<RequestSample> {
    let mut out = Vec::new();
    for record in units {
        let m = &record.machine;
        let unit_load = UnitLoad {
            load_average: m.load_average_start.max(m.load_average_end),
            other_share: m.other_share(),
            lost_share: m.lost_share(),
            loaded: m.loaded(),
        };
        for arm in &record.arms {
            for r in &arm.requests {
                out.push(RequestSample {
                    unit: record.unit.clone(),
                    arm: arm.arm.clone(),
                    setting: record.setting,
                    target: record.target.clone(),
                    n0: arm.n0,
                    scaling_slope: arm.scaling_slope.unwrap_or(f64::NAN),
                    row: r.clone(),
                    distinct_4grams: r.distinct_4grams(),
                    output_digest: output_digest(&r.output_ids),
                    target_output_digest: String::new(),
                    matches_target: -1,
                    unit_load,
                    provenance: record.provenance.clone(),
                    inputs: arm.inputs.clone(),
                });
            }
        }
    }
    compare_outputs(outline, &mut out);
    out
}

/// The columns that name a request in `results.parquet` and `cycles.parquet`, in this order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestKey {
    pub drafter: String,
    pub method: String,
    pub workload: String,
    pub setting: Setting,
    pub context: u64,
    pub seed: u64,
    pub repeat: u64,
    pub prompt: u64,
}

impl RequestKey {
    fn of(s: &RequestSample) -> Self {
        Self {
            drafter: s.drafter().to_string(),
            method: s.arm.method.clone(),
            workload: s.unit.workload.clone(),
            setting: s.setting,
            context: s.unit.context as u64,
            seed: s.unit.seed,
            repeat: s.unit.repeat as u64,
            prompt: s.row.prompt as u64,
        }
    }
}

/// One row of `results.parquet`: a request's counters, its paired speed-ups (over the target alone
/// end to end and decoding, and over the reference method the same two ways), the unit's machine
/// state and provenance. Its columns are its fields, in this order
/// ([`crate::columns`]); a results folder is read back into these rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultRow {
    pub target: String,
    #[serde(flatten)]
    pub key: RequestKey,
    pub slot: u64,
    pub attempts: u64,
    pub other_cpu_share: f64,
    pub prompt_tokens: u64,
    pub generated: u64,
    pub cycles: u64,
    pub drafted: u64,
    pub accepted: u64,
    pub emitted: u64,
    pub tau: f64,
    pub distinct_4grams: f64,
    /// [`output_digest`] of the request's output, and of the target alone's on the same request:
    /// `matches_target` is their equality (empty in a table written before digests were kept).
    #[serde(default)]
    pub output_digest: String,
    #[serde(default)]
    pub target_output_digest: String,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub total_seconds: f64,
    pub tokens_per_s: f64,
    pub speedup: f64,
    pub decode_speedup: f64,
    pub vs_reference: f64,
    pub decode_vs_reference: f64,
    pub matches_target: i64,
    pub update_seconds: f64,
    pub updates: u64,
    pub drafter_weight_bytes: u64,
    pub drafter_cache_bytes: u64,
    pub target_cache_bytes: u64,
    pub adaptation_bytes: u64,
    pub peak_rss_bytes: u64,
    /// 0 for none.
    pub n0: i64,
    /// NaN in a table written before the column existed.
    #[serde(default = "unknown_slope")]
    pub scaling_slope: f64,
    pub unit_load_average: f64,
    pub unit_other_cpu_share: f64,
    pub unit_lost_cpu_share: f64,
    /// 1 when the unit was flagged as loaded.
    pub unit_loaded: i64,
    pub config_hash: String,
    pub git_revision: String,
    pub machine: String,
    pub device: String,
    pub dtype: String,
    /// "unknown" in a table written before the column existed.
    #[serde(default = "unknown_version")]
    pub sharpdraft_version: String,
    pub started_unix: u64,
    /// The kernel form and libtorch threads the unit ran with (empty and 0 in a table written before
    /// the columns existed).
    #[serde(default)]
    pub kernel: String,
    #[serde(default)]
    pub threads: u64,
    /// The drafter and schedule the arm read, by content.
    #[serde(flatten)]
    pub inputs: ArmInputs,
}

fn unknown_slope() -> f64 {
    f64::NAN
}

fn unknown_version() -> String {
    "unknown".into()
}

/// One row of `cycles.parquet`: a verification cycle of a request, with the context it drafted at and
/// the proposal's depth (the accepted path is a prefix of it, so depth and accepted give every
/// position's outcome).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CycleRow {
    #[serde(flatten)]
    pub key: RequestKey,
    pub cycle: u64,
    pub cycle_context: i64,
    pub cycle_context_n0: f64,
    pub drafted: u64,
    pub depth: u64,
    pub accepted: u64,
    pub bonus: u64,
    pub draft_seconds: f64,
    pub verify_seconds: f64,
}

/// `results.parquet`'s row of `s`, with its paired speed-ups `paired`: over the target alone end to
/// end and decoding, and over the reference method the same two ways.
pub fn result_row(s: &RequestSample, paired: [f64; 4]) -> ResultRow {
    let r = &s.row;
    let p = &s.provenance;
    let sum = |f: fn(&CycleRecord) -> usize| r.cycles.iter().map(f).sum::<usize>() as u64;
    ResultRow {
        target: s.target.clone(),
        key: RequestKey::of(s),
        slot: r.slot as u64,
        attempts: r.attempts as u64,
        other_cpu_share: r.other_cpu_share,
        prompt_tokens: r.prompt_tokens as u64,
        generated: r.generated as u64,
        cycles: r.cycles.len() as u64,
        drafted: sum(|c| c.drafted),
        accepted: sum(|c| c.accepted),
        emitted: sum(|c| c.accepted + c.bonus),
        tau: r.tau(),
        distinct_4grams: s.distinct_4grams,
        output_digest: s.output_digest.clone(),
        target_output_digest: s.target_output_digest.clone(),
        prefill_seconds: r.prefill_seconds,
        decode_seconds: r.decode_seconds(),
        total_seconds: r.total_seconds,
        tokens_per_s: r.tokens_per_second(),
        speedup: paired[0],
        decode_speedup: paired[1],
        vs_reference: paired[2],
        decode_vs_reference: paired[3],
        matches_target: s.matches_target,
        update_seconds: r.update_seconds,
        updates: r.updates as u64,
        drafter_weight_bytes: r.drafter_weight_bytes as u64,
        drafter_cache_bytes: r.drafter_cache_bytes as u64,
        target_cache_bytes: r.target_cache_bytes as u64,
        adaptation_bytes: r.adaptation_bytes as u64,
        peak_rss_bytes: r.peak_rss_bytes,
        n0: s.n0.unwrap_or(0),
        scaling_slope: s.scaling_slope,
        unit_load_average: s.unit_load.load_average,
        unit_other_cpu_share: s.unit_load.other_share,
        unit_lost_cpu_share: s.unit_load.lost_share,
        unit_loaded: i64::from(s.unit_load.loaded),
        config_hash: p.config_hash.clone(),
        git_revision: p.git_revision.clone(),
        machine: p.machine.clone(),
        device: p.device.clone(),
        dtype: p.dtype.clone(),
        sharpdraft_version: p.sharpdraft_version.clone(),
        started_unix: p.started_unix,
        kernel: p.kernel.clone(),
        threads: p.threads as u64,
        inputs: s.inputs.clone(),
    }
}

/// `cycles.parquet`'s rows of `s`, one per verification cycle.
pub fn cycle_rows(s: &RequestSample) -> impl Iterator<Item = CycleRow> + '_ {
    let key = RequestKey::of(s);
    s.row.cycles.iter().enumerate().map(move |(i, c)| CycleRow {
        key: key.clone(),
        cycle: i as u64,
        cycle_context: c.context,
        cycle_context_n0: s.n0.map_or(f64::NAN, |n0| c.context as f64 / n0 as f64),
        drafted: c.drafted as u64,
        depth: c.accepted_per_position.len() as u64,
        accepted: c.accepted as u64,
        bonus: c.bonus as u64,
        draft_seconds: c.draft_seconds,
        verify_seconds: c.verify_seconds,
    })
}

/// The samples of a results folder of the experiment `outline`: `results` (`results.parquet`) with
/// the cycles of each request from `cycles` (`cycles.parquet`; `None` when the run drafted nothing),
/// each output compared with the target's by digest ([`compare_outputs`]). `results_name` and
/// `cycles_name` name the files in errors.
pub fn read(
    outline: &Outline,
    results: &Table,
    cycles: &Table,
    results_name: &str,
    cycles_name: &str,
) -> Result<Vec<RequestSample>> {
    let mut by_request = read_cycles(cycles, cycles_name)?;
    let rows: Vec<ResultRow> = rows_of(results).with_context(|| results_name.to_string())?;
    let mut out = Vec::with_capacity(rows.len());
    let mut seen = BTreeSet::new();
    for row in rows {
        let key = &row.key;
        let request = || {
            format!(
                "{} / {} on {} context {} seed {} repeat {} prompt {}",
                key.drafter, key.method, key.workload, key.context, key.seed, key.repeat, key.prompt
            )
        };
        if !seen.insert(key.clone()) {
            bail!(
                "{results_name}: two rows of {}: a request is one row, so the table holds more than one run's",
                request()
            );
        }
        let cycles = by_request.remove(key).unwrap_or_default();
        let sum = |f: fn(&CycleRecord) -> usize| cycles.iter().map(f).sum::<usize>() as u64;
        let (counted, listed) = (
            [row.cycles, row.drafted, row.accepted, row.emitted],
            [
                cycles.len() as u64,
                sum(|c| c.drafted),
                sum(|c| c.accepted),
                sum(|c| c.accepted + c.bonus),
            ],
        );
        if counted != listed {
            bail!(
                "{cycles_name}: {} cycles of {} drafting {}, accepting {} and emitting {} tokens, where {results_name} counts {} cycles, {} drafted, {} accepted and {} emitted: the two tables are not of one run",
                listed[0], request(), listed[1], listed[2], listed[3], counted[0], counted[1], counted[2], counted[3]
            );
        }
        out.push(sample_of(row, cycles));
    }
    compare_outputs(outline, &mut out);
    if let Some((key, _)) = by_request.into_iter().next() {
        bail!(
            "{cycles_name}: cycles of {} / {} on {} context {} seed {} repeat {} prompt {}, a request {results_name} does not hold: the two tables are not of one run",
            key.drafter, key.method, key.workload, key.context, key.seed, key.repeat, key.prompt
        );
    }
    Ok(out)
}

/// The sample a row of `results.parquet` and its `cycles` describe (the output is there as its digest
/// alone).
fn sample_of(row: ResultRow, cycles: Vec<CycleRecord>) -> RequestSample {
    let key = row.key;
    RequestSample {
        unit: Unit {
            workload: key.workload,
            context: key.context as usize,
            seed: key.seed,
            repeat: key.repeat as usize,
        },
        arm: Arm {
            drafter: (key.drafter != TARGET_ONLY).then_some(key.drafter),
            method: key.method,
        },
        setting: key.setting,
        target: row.target,
        n0: (row.n0 > 0).then_some(row.n0),
        scaling_slope: row.scaling_slope,
        row: RequestRow {
            prompt: key.prompt as usize,
            prompt_tokens: row.prompt_tokens as usize,
            generated: row.generated as usize,
            prefill_seconds: row.prefill_seconds,
            total_seconds: row.total_seconds,
            slot: row.slot as usize,
            other_cpu_share: row.other_cpu_share,
            attempts: row.attempts as usize,
            update_seconds: row.update_seconds,
            updates: row.updates as usize,
            drafter_weight_bytes: row.drafter_weight_bytes as usize,
            drafter_cache_bytes: row.drafter_cache_bytes as usize,
            target_cache_bytes: row.target_cache_bytes as usize,
            adaptation_bytes: row.adaptation_bytes as usize,
            peak_rss_bytes: row.peak_rss_bytes,
            cycles,
            output_ids: Vec::new(),
        },
        distinct_4grams: row.distinct_4grams,
        output_digest: row.output_digest,
        target_output_digest: row.target_output_digest,
        matches_target: row.matches_target,
        unit_load: UnitLoad {
            load_average: row.unit_load_average,
            other_share: row.unit_other_cpu_share,
            lost_share: row.unit_lost_cpu_share,
            loaded: row.unit_loaded != 0,
        },
        provenance: Provenance {
            config_hash: row.config_hash,
            git_revision: row.git_revision,
            machine: row.machine,
            device: row.device,
            dtype: row.dtype,
            sharpdraft_version: row.sharpdraft_version,
            started_unix: row.started_unix,
            kernel: row.kernel,
            threads: row.threads as usize,
        },
        inputs: row.inputs,
    }
}

/// The cycles of `cycles.parquet`, per request, in cycle order.
fn read_cycles(t: &Table, what: &str) -> Result<BTreeMap<RequestKey, Vec<CycleRecord>>> {
    let rows: Vec<CycleRow> = rows_of(t).with_context(|| what.to_string())?;
    let mut out: BTreeMap<RequestKey, Vec<(u64, CycleRecord)>> = BTreeMap::new();
    for (r, row) in rows.into_iter().enumerate() {
        if row.accepted > row.depth {
            bail!(
                "{what}: row {r}: {} tokens accepted of a proposal {} deep",
                row.accepted,
                row.depth
            );
        }
        let per_position = (0..row.depth).map(|d| u8::from(d < row.accepted)).collect();
        out.entry(row.key).or_default().push((
            row.cycle,
            CycleRecord {
                context: row.cycle_context,
                drafted: row.drafted as usize,
                accepted: row.accepted as usize,
                accepted_per_position: per_position,
                bonus: row.bonus as usize,
                draft_seconds: row.draft_seconds,
                verify_seconds: row.verify_seconds,
            },
        ));
    }
    out.into_iter()
        .map(|(key, mut cycles)| {
            cycles.sort_by_key(|(i, _)| *i);
            if let Some(pair) = cycles.windows(2).find(|pair| pair[0].0 == pair[1].0) {
                bail!(
                    "{what}: two rows of cycle {} of {} / {} on {} context {} seed {} repeat {} prompt {}: the table holds more than one run's",
                    pair[0].0, key.drafter, key.method, key.workload, key.context, key.seed, key.repeat, key.prompt
                );
            }
            Ok((key, cycles.into_iter().map(|(_, c)| c).collect()))
        })
        .collect()
}
