//! One request decoded by one arm, as every table and statistic of a run reads it: a row of
//! `results.parquet` with its cycles from `cycles.parquet`.
//!
//! A run builds its samples from its finished units ([`from_units`]); a results folder that keeps only
//! the two tables (`experiments/results/*`) reads them back ([`read`]), so `sharpdraft report` rebuilds
//! the summary and the report anywhere, with whatever statistic this version computes.

use super::config::{Experiment, Setting};
use super::grid::{Arm, Unit, TARGET_ONLY};
use super::records::{ArmRecord, Provenance, RequestRow, UnitRecord};
use crate::error::{bail, Context, Result};
use sharpdraft_decode::CycleRecord;
use sharpdraft_report::table::{Rows, Table};
use std::collections::BTreeMap;

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
    /// 1 when the output equals the target alone's on the same request, 0 when it differs, -1 when
    /// not comparable (sampling, or no target-alone row).
    pub matches_target: i64,
    pub unit_load: UnitLoad,
    pub provenance: Provenance,
}

impl RequestSample {
    /// The drafter's name, or [`TARGET_ONLY`].
    pub fn drafter(&self) -> &str {
        self.arm.drafter_name()
    }
}

/// The baseline arm of a unit: the experiment's first target-only method, whose rows are the
/// denominators of the unit's speed-ups and the outputs every greedy arm must reproduce.
pub fn baseline<'a>(experiment: &Experiment, arms: &'a [ArmRecord]) -> Option<&'a ArmRecord> {
    let method = experiment.methods.iter().find(|m| m.target_only)?;
    arms.iter()
        .find(|a| a.arm.drafter.is_none() && a.arm.method == method.name)
}

/// 1 when `row`'s output equals the target alone's (`base`) on the same request, 0 when it differs,
/// -1 when not comparable (sampling, or no target-alone row).
pub fn matches_target(row: &RequestRow, base: Option<&RequestRow>, greedy: bool) -> i64 {
    match base {
        Some(b) if greedy && !b.output_ids.is_empty() => i64::from(b.output_ids == row.output_ids),
        _ => -1,
    }
}

/// Every request of every arm of `units`, in unit, arm and request order.
pub fn from_units(experiment: &Experiment, units: &[UnitRecord]) -> Vec<RequestSample> {
    let greedy = experiment.temperature == 0.0;
    let mut out = Vec::new();
    for record in units {
        let base = baseline(experiment, &record.arms);
        let m = &record.machine;
        let unit_load = UnitLoad {
            load_average: m.load_average_start.max(m.load_average_end),
            other_share: m.other_share(),
            lost_share: m.lost_share(),
            loaded: m.loaded(),
        };
        for arm in &record.arms {
            for r in &arm.requests {
                let base_row = base.and_then(|b| b.requests.iter().find(|x| x.prompt == r.prompt));
                out.push(RequestSample {
                    unit: record.unit.clone(),
                    arm: arm.arm.clone(),
                    setting: record.setting,
                    target: record.target.clone(),
                    n0: arm.n0,
                    scaling_slope: arm.scaling_slope.unwrap_or(f64::NAN),
                    row: r.clone(),
                    distinct_4grams: r.distinct_4grams(),
                    matches_target: matches_target(r, base_row, greedy),
                    unit_load,
                    provenance: record.provenance.clone(),
                });
            }
        }
    }
    out
}

/// The columns that name a request: drafter, method, workload, setting, context, seed, repeat, prompt.
fn request_key(rows: &mut Rows, s: &RequestSample) {
    rows.s("drafter", s.drafter());
    rows.s("method", s.arm.method.as_str());
    rows.s("workload", s.unit.workload.as_str());
    rows.s("setting", s.setting.name());
    rows.u("context", s.unit.context as u64);
    rows.u("seed", s.unit.seed);
    rows.u("repeat", s.unit.repeat as u64);
    rows.u("prompt", s.row.prompt as u64);
}

/// `results.parquet`'s row of `s`: the request's counters, its paired speed-ups (`paired`: over the
/// target alone end to end and decoding, and over the reference method the same two ways), the unit's
/// machine state and provenance.
pub fn push_result_row(rows: &mut Rows, s: &RequestSample, paired: [f64; 4]) {
    let r = &s.row;
    let p = &s.provenance;
    rows.s("target", s.target.as_str());
    request_key(rows, s);
    rows.u("slot", r.slot as u64);
    rows.u("attempts", r.attempts as u64);
    rows.f("other_cpu_share", r.other_cpu_share);
    rows.u("prompt_tokens", r.prompt_tokens as u64);
    rows.u("generated", r.generated as u64);
    rows.u("cycles", r.cycles.len() as u64);
    let sum = |f: fn(&CycleRecord) -> usize| r.cycles.iter().map(f).sum::<usize>() as u64;
    rows.u("drafted", sum(|c| c.drafted));
    rows.u("accepted", sum(|c| c.accepted));
    rows.u("emitted", sum(|c| c.accepted + c.bonus));
    rows.f("tau", r.tau());
    rows.f("distinct_4grams", s.distinct_4grams);
    rows.f("prefill_seconds", r.prefill_seconds);
    rows.f("decode_seconds", r.decode_seconds());
    rows.f("total_seconds", r.total_seconds);
    rows.f("tokens_per_s", r.tokens_per_second());
    rows.f("speedup", paired[0]);
    rows.f("decode_speedup", paired[1]);
    rows.f("vs_reference", paired[2]);
    rows.f("decode_vs_reference", paired[3]);
    rows.i("matches_target", s.matches_target);
    rows.f("update_seconds", r.update_seconds);
    rows.u("updates", r.updates as u64);
    rows.u("drafter_weight_bytes", r.drafter_weight_bytes as u64);
    rows.u("drafter_cache_bytes", r.drafter_cache_bytes as u64);
    rows.u("target_cache_bytes", r.target_cache_bytes as u64);
    rows.u("adaptation_bytes", r.adaptation_bytes as u64);
    rows.u("peak_rss_bytes", r.peak_rss_bytes);
    rows.i("n0", s.n0.unwrap_or(0));
    rows.f("scaling_slope", s.scaling_slope);
    rows.f("unit_load_average", s.unit_load.load_average);
    rows.f("unit_other_cpu_share", s.unit_load.other_share);
    rows.f("unit_lost_cpu_share", s.unit_load.lost_share);
    rows.i("unit_loaded", i64::from(s.unit_load.loaded));
    rows.s("config_hash", p.config_hash.as_str());
    rows.s("git_revision", p.git_revision.as_str());
    rows.s("machine", p.machine.as_str());
    rows.s("device", p.device.as_str());
    rows.s("dtype", p.dtype.as_str());
    rows.s("sharpdraft_version", p.sharpdraft_version.as_str());
    rows.u("started_unix", p.started_unix);
}

/// `cycles.parquet`'s rows of `s`: one per verification cycle, with the context it drafted at and
/// the proposal's depth (the accepted path is a prefix of it, so depth and accepted give every
/// position's outcome).
pub fn push_cycle_rows(rows: &mut Rows, s: &RequestSample) {
    for (i, c) in s.row.cycles.iter().enumerate() {
        request_key(rows, s);
        rows.u("cycle", i as u64);
        rows.i("cycle_context", c.context);
        rows.f(
            "cycle_context_n0",
            s.n0.map_or(f64::NAN, |n0| c.context as f64 / n0 as f64),
        );
        rows.u("drafted", c.drafted as u64);
        rows.u("depth", c.accepted_per_position.len() as u64);
        rows.u("accepted", c.accepted as u64);
        rows.u("bonus", c.bonus as u64);
        rows.f("draft_seconds", c.draft_seconds);
        rows.f("verify_seconds", c.verify_seconds);
    }
}

/// The key of one request of one arm in the tables.
type RequestKey = (String, String, String, u64, u64, u64, u64);

/// A column's values by name, as the type the reader asks for; errors name the table and column.
struct Columns<'t> {
    table: &'t Table,
    what: &'t str,
}

impl<'t> Columns<'t> {
    fn s(&self, name: &str) -> Result<&'t [String]> {
        self.table
            .strs(name)
            .with_context(|| format!("{}: column {name}", self.what))
    }
    fn i(&self, name: &str) -> Result<&'t [i64]> {
        self.table
            .i64s(name)
            .with_context(|| format!("{}: column {name}", self.what))
    }
    fn u(&self, name: &str) -> Result<Vec<u64>> {
        self.i(name)?
            .iter()
            .map(|&v| {
                u64::try_from(v)
                    .ok()
                    .with_context(|| format!("{}: column {name} holds {v}, not a count", self.what))
            })
            .collect()
    }
    fn f(&self, name: &str) -> Result<&'t [f64]> {
        self.table
            .f64s(name)
            .with_context(|| format!("{}: column {name}", self.what))
    }
}

/// The samples of a results folder: `results` (`results.parquet`) with the cycles of each request
/// from `cycles` (`cycles.parquet`; `None` when the run drafted nothing). `results_name` and
/// `cycles_name` name the files in errors.
pub fn read(
    results: &Table,
    cycles: Option<&Table>,
    results_name: &str,
    cycles_name: &str,
) -> Result<Vec<RequestSample>> {
    let mut by_request = match cycles {
        Some(t) => read_cycles(t, cycles_name)?,
        None => BTreeMap::new(),
    };
    let c = Columns {
        table: results,
        what: results_name,
    };
    let (target, drafter, method, workload, setting) = (
        c.s("target")?,
        c.s("drafter")?,
        c.s("method")?,
        c.s("workload")?,
        c.s("setting")?,
    );
    let (context, seed, repeat, prompt) = (
        c.u("context")?,
        c.u("seed")?,
        c.u("repeat")?,
        c.u("prompt")?,
    );
    let (matches, n0, distinct) = (c.i("matches_target")?, c.i("n0")?, c.f("distinct_4grams")?);
    let slope = results.f64s_or("scaling_slope", f64::NAN)?;
    let (rows, unit_loads, provenances) = (
        RequestColumns::read(&c)?,
        UnitLoadColumns::read(&c)?,
        ProvenanceColumns::read(&c)?,
    );
    let mut out = Vec::with_capacity(results.rows());
    for r in 0..results.rows() {
        let setting = match setting[r].as_str() {
            "long_prompt" => Setting::LongPrompt,
            "long_generation" => Setting::LongGeneration,
            other => bail!("{results_name}: row {r}: setting {other:?} is neither long_prompt nor long_generation"),
        };
        let key: RequestKey = (
            drafter[r].clone(),
            method[r].clone(),
            workload[r].clone(),
            context[r],
            seed[r],
            repeat[r],
            prompt[r],
        );
        let request_cycles = by_request.remove(&key).unwrap_or_default();
        out.push(RequestSample {
            unit: Unit {
                workload: workload[r].clone(),
                context: context[r] as usize,
                seed: seed[r],
                repeat: repeat[r] as usize,
            },
            arm: Arm {
                drafter: (drafter[r] != TARGET_ONLY).then(|| drafter[r].clone()),
                method: method[r].clone(),
            },
            setting,
            target: target[r].clone(),
            n0: (n0[r] > 0).then_some(n0[r]),
            scaling_slope: slope[r],
            row: rows.row(r, prompt[r], request_cycles),
            distinct_4grams: distinct[r],
            matches_target: matches[r],
            unit_load: unit_loads.row(r),
            provenance: provenances.row(r),
        });
    }
    if let Some(((drafter, method, workload, context, seed, repeat, prompt), _)) =
        by_request.into_iter().next()
    {
        bail!(
            "{cycles_name}: cycles of {drafter} / {method} on {workload} context {context} seed {seed} repeat {repeat} prompt {prompt}, a request {results_name} does not hold: the two tables are not of one run"
        );
    }
    Ok(out)
}

/// The columns of `results.parquet` a [`RequestRow`] is read from.
struct RequestColumns<'t> {
    slot: Vec<u64>,
    attempts: Vec<u64>,
    prompt_tokens: Vec<u64>,
    generated: Vec<u64>,
    updates: Vec<u64>,
    weights: Vec<u64>,
    drafter_cache: Vec<u64>,
    target_cache: Vec<u64>,
    adaptation: Vec<u64>,
    peak: Vec<u64>,
    other_share: &'t [f64],
    prefill: &'t [f64],
    total: &'t [f64],
    update_seconds: &'t [f64],
}

impl<'t> RequestColumns<'t> {
    fn read(c: &Columns<'t>) -> Result<Self> {
        Ok(Self {
            slot: c.u("slot")?,
            attempts: c.u("attempts")?,
            prompt_tokens: c.u("prompt_tokens")?,
            generated: c.u("generated")?,
            updates: c.u("updates")?,
            weights: c.u("drafter_weight_bytes")?,
            drafter_cache: c.u("drafter_cache_bytes")?,
            target_cache: c.u("target_cache_bytes")?,
            adaptation: c.u("adaptation_bytes")?,
            peak: c.u("peak_rss_bytes")?,
            other_share: c.f("other_cpu_share")?,
            prefill: c.f("prefill_seconds")?,
            total: c.f("total_seconds")?,
            update_seconds: c.f("update_seconds")?,
        })
    }

    /// Row `r`, of prompt `prompt`, with its `cycles` (the outputs are not in the table).
    fn row(&self, r: usize, prompt: u64, cycles: Vec<CycleRecord>) -> RequestRow {
        RequestRow {
            prompt: prompt as usize,
            prompt_tokens: self.prompt_tokens[r] as usize,
            generated: self.generated[r] as usize,
            prefill_seconds: self.prefill[r],
            total_seconds: self.total[r],
            slot: self.slot[r] as usize,
            other_cpu_share: self.other_share[r],
            attempts: self.attempts[r] as usize,
            update_seconds: self.update_seconds[r],
            updates: self.updates[r] as usize,
            drafter_weight_bytes: self.weights[r] as usize,
            drafter_cache_bytes: self.drafter_cache[r] as usize,
            target_cache_bytes: self.target_cache[r] as usize,
            adaptation_bytes: self.adaptation[r] as usize,
            peak_rss_bytes: self.peak[r],
            cycles,
            output_ids: Vec::new(),
        }
    }
}

/// The columns of `results.parquet` a request's unit's [`UnitLoad`] is read from.
struct UnitLoadColumns<'t> {
    load_average: &'t [f64],
    other_share: &'t [f64],
    lost_share: &'t [f64],
    loaded: &'t [i64],
}

impl<'t> UnitLoadColumns<'t> {
    fn read(c: &Columns<'t>) -> Result<Self> {
        Ok(Self {
            load_average: c.f("unit_load_average")?,
            other_share: c.f("unit_other_cpu_share")?,
            lost_share: c.f("unit_lost_cpu_share")?,
            loaded: c.i("unit_loaded")?,
        })
    }

    fn row(&self, r: usize) -> UnitLoad {
        UnitLoad {
            load_average: self.load_average[r],
            other_share: self.other_share[r],
            lost_share: self.lost_share[r],
            loaded: self.loaded[r] != 0,
        }
    }
}

/// The columns of `results.parquet` a request's [`Provenance`] is read from (the kernel form and
/// threads are in the unit records, not the table).
struct ProvenanceColumns<'t> {
    config_hash: &'t [String],
    git_revision: &'t [String],
    machine: &'t [String],
    device: &'t [String],
    dtype: &'t [String],
    started: Vec<u64>,
    /// "unknown" in every row of a table written before the column existed.
    version: Vec<String>,
}

impl<'t> ProvenanceColumns<'t> {
    fn read(c: &Columns<'t>) -> Result<Self> {
        let version = match c.table.column("sharpdraft_version") {
            Ok(_) => c.s("sharpdraft_version")?.to_vec(),
            Err(_) => vec!["unknown".to_string(); c.table.rows()],
        };
        Ok(Self {
            config_hash: c.s("config_hash")?,
            git_revision: c.s("git_revision")?,
            machine: c.s("machine")?,
            device: c.s("device")?,
            dtype: c.s("dtype")?,
            started: c.u("started_unix")?,
            version,
        })
    }

    fn row(&self, r: usize) -> Provenance {
        Provenance {
            config_hash: self.config_hash[r].clone(),
            git_revision: self.git_revision[r].clone(),
            machine: self.machine[r].clone(),
            device: self.device[r].clone(),
            dtype: self.dtype[r].clone(),
            sharpdraft_version: self.version[r].clone(),
            started_unix: self.started[r],
            kernel: String::new(),
            threads: 0,
        }
    }
}

/// The cycles of `cycles.parquet`, per request, in cycle order.
fn read_cycles(t: &Table, what: &str) -> Result<BTreeMap<RequestKey, Vec<CycleRecord>>> {
    let c = Columns { table: t, what };
    let (drafter, method, workload) = (c.s("drafter")?, c.s("method")?, c.s("workload")?);
    let (context, seed, repeat, prompt, cycle) = (
        c.u("context")?,
        c.u("seed")?,
        c.u("repeat")?,
        c.u("prompt")?,
        c.u("cycle")?,
    );
    let (cycle_context, drafted, depth, accepted, bonus) = (
        c.i("cycle_context")?,
        c.u("drafted")?,
        c.u("depth")?,
        c.u("accepted")?,
        c.u("bonus")?,
    );
    let (draft_seconds, verify_seconds) = (c.f("draft_seconds")?, c.f("verify_seconds")?);
    let mut out: BTreeMap<RequestKey, Vec<(u64, CycleRecord)>> = BTreeMap::new();
    for r in 0..t.rows() {
        if accepted[r] > depth[r] {
            bail!(
                "{what}: row {r}: {} tokens accepted of a proposal {} deep",
                accepted[r],
                depth[r]
            );
        }
        let per_position = (0..depth[r]).map(|d| u8::from(d < accepted[r])).collect();
        out.entry((
            drafter[r].clone(),
            method[r].clone(),
            workload[r].clone(),
            context[r],
            seed[r],
            repeat[r],
            prompt[r],
        ))
        .or_default()
        .push((
            cycle[r],
            CycleRecord {
                context: cycle_context[r],
                drafted: drafted[r] as usize,
                accepted: accepted[r] as usize,
                accepted_per_position: per_position,
                bonus: bonus[r] as usize,
                draft_seconds: draft_seconds[r],
                verify_seconds: verify_seconds[r],
            },
        ));
    }
    Ok(out
        .into_iter()
        .map(|(key, mut cycles)| {
            cycles.sort_by_key(|(i, _)| *i);
            (key, cycles.into_iter().map(|(_, c)| c).collect())
        })
        .collect())
}
