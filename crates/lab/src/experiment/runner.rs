//! `sharpdraft run`: an experiment's grid, unit by unit, into a run folder that resumes.
//!
//! Before any decoding: the experiment is read and checked, the run folder claimed (a new folder, or this
//! experiment's own run with `--resume`), the target fetched, every prompt of every workload built and
//! checked against the target's context, and every missing drafter trained (and schedule calibrated)
//! from its named config. Then each pending unit runs and is written whole (`units/<id>.json`), and the
//! tables and the report are rebuilt from the finished units.

use super::config::{DrafterEntry, Experiment, MethodEntry, Setting, Workload};
use super::grid::{units, Shard, Unit};
use super::prompts::{chat_ids, excerpt_offset, long_prompt_ids};
use super::records::{provenance, Provenance, RequestRow, UnitRecord};
use super::report::SummaryRow;
use super::run_folder::{recorded_experiment, write_record, EXPERIMENT_RECORD, RUN_KIND, UNITS};
use super::{report, tables};
use crate::drafter_spec;
use crate::error::{bail, ensure, Context, Result};
use crate::scaling::resolve_schedule;
use indicatif::{ProgressBar, ProgressStyle};
use sharpdraft_decode::reset_peak_rss;
use sharpdraft_model::generate::generate;
use sharpdraft_model::output_folder::{self, Claim, Marker};
use sharpdraft_model::{parse_device, parse_kind, registry, CausalLm, Sampler, Sampling};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The run folder; `runs/<name>` (or `runs/<name>.shard-I-of-N`) by default.
    pub out: Option<PathBuf>,
    /// Continue this experiment's run in `out`, skipping finished units.
    pub resume: bool,
    pub shard: Option<Shard>,
}

#[derive(Debug)]
pub struct RunOutcome {
    pub dir: PathBuf,
    pub ran: usize,
    pub skipped: usize,
    /// Every unit of the whole grid (all shards) is in the folder.
    pub finished: bool,
    /// The summary of every finished unit in the folder, in the experiment's order.
    pub summary: Vec<SummaryRow>,
}

/// Writes the tables and the report of `experiment` into run folder `dir` from its finished `units`;
/// returns the summary rows in the experiment's order.
pub fn publish(
    dir: &Path,
    experiment: &Experiment,
    units: &[UnitRecord],
) -> Result<Vec<SummaryRow>> {
    let tables = tables::write_tables(dir, experiment, units)?;
    let rows = report::summary_rows(&tables.summary, experiment)?;
    report::write(dir, experiment, &rows)?;
    Ok(rows)
}

/// Whether every unit of `grid` is among `records`.
pub fn grid_finished(grid: &[Unit], records: &[UnitRecord]) -> bool {
    let done: BTreeSet<&Unit> = records.iter().map(|r| &r.unit).collect();
    grid.iter().all(|u| done.contains(u))
}

/// `sharpdraft report`: the tables and report of run folder `dir` rebuilt from its finished units.
pub fn republish(dir: &Path) -> Result<Vec<SummaryRow>> {
    let experiment = recorded_experiment(dir)?;
    publish(dir, &experiment, &UnitRecord::read_all(&dir.join(UNITS))?)
}

pub fn default_out(experiment: &Experiment, shard: Option<Shard>) -> PathBuf {
    let name = match shard {
        Some(s) => format!("{}.shard-{}-of-{}", experiment.name, s.index, s.count),
        None => experiment.name.clone(),
    };
    PathBuf::from("runs").join(name)
}

/// The prompts of one workload at one context: (prompt index in its source, ids).
type Requests = Vec<(usize, Vec<i64>)>;

/// Builds every request of `workload` and checks it against the target's context.
fn build_requests(
    workload: &Workload,
    target: &CausalLm,
    filler_cache: &mut BTreeMap<String, Vec<i64>>,
) -> Result<BTreeMap<usize, Requests>> {
    let at = || format!("workload {:?}", workload.name);
    let tokenizer = target.tokenizer()?;
    let texts = workload
        .prompts
        .load(workload.skip, workload.count)
        .with_context(at)?;
    let mut out = BTreeMap::new();
    match workload.setting {
        Setting::LongGeneration => {
            let requests = texts
                .iter()
                .enumerate()
                .map(|(i, text)| Ok((workload.skip + i, chat_ids(tokenizer, text)?)))
                .collect::<Result<Requests>>()
                .with_context(at)?;
            out.insert(0, requests);
        }
        Setting::LongPrompt => {
            let filler = match &workload.filler {
                Some(source) => {
                    let key = serde_json::to_string(source)?;
                    if !filler_cache.contains_key(&key) {
                        let tokens = source.tokens(target).with_context(at)?;
                        filler_cache.insert(key.clone(), tokens);
                    }
                    filler_cache[&key].clone()
                }
                None => Vec::new(),
            };
            for &context in &workload.contexts {
                let requests = texts
                    .iter()
                    .enumerate()
                    .map(|(i, text)| {
                        let offset =
                            excerpt_offset(i, workload.filler_offset, filler.len(), context);
                        Ok((
                            workload.skip + i,
                            long_prompt_ids(tokenizer, text, &filler, offset, context)?,
                        ))
                    })
                    .collect::<Result<Requests>>()
                    .with_context(|| format!("{}: context {context}", at()))?;
                out.insert(context, requests);
            }
        }
    }
    for (context, requests) in &out {
        for (prompt, ids) in requests {
            target
                .net
                .config
                .ensure_positions(ids.len(), workload.max_new_tokens)
                .with_context(|| {
                    format!(
                        "{}: prompt {prompt} at context {context} ({} tokens) with max_new_tokens {}",
                        at(),
                        ids.len(),
                        workload.max_new_tokens
                    )
                })?;
        }
    }
    Ok(out)
}

/// Trains every drafter whose checkpoint is missing (or unfinished) from its `train` config, and
/// calibrates every schedule a method needs and does not find; errors name what is missing otherwise.
fn ensure_drafters(experiment: &Experiment) -> Result<()> {
    let f = experiment.file.display();
    let drafting: Vec<&MethodEntry> = experiment
        .methods
        .iter()
        .filter(|m| !m.target_only)
        .collect();
    if drafting.is_empty() {
        return Ok(());
    }
    for drafter in &experiment.drafters {
        let checkpoint = &drafter.spec.checkpoint;
        if let Err(missing) = registry::resolve(checkpoint) {
            let Some(train) = &drafter.train else {
                bail!(
                    "{f}: drafter {:?}: {missing} (give it `train:` a training config to make it)",
                    drafter.name
                );
            };
            let config = crate::train::TrainConfig::load(train)?;
            ensure!(
                config.out_dir() == registry::model_dir(checkpoint)
                    || config.out_dir() == Path::new(checkpoint),
                "{f}: drafter {:?}: train config {} writes {}, not checkpoint {checkpoint}",
                drafter.name,
                train.display(),
                config.out
            );
            eprintln!(
                "drafter {:?}: {checkpoint} is missing; training it with {}",
                drafter.name,
                train.display()
            );
            crate::train::run(train)?;
        }
        if drafting.iter().any(|m| m.scales_with_drafter_schedule()) {
            ensure_schedule(experiment, drafter)?;
        }
    }
    Ok(())
}

fn ensure_schedule(experiment: &Experiment, drafter: &DrafterEntry) -> Result<()> {
    let f = experiment.file.display();
    let Some(schedule) = &drafter.schedule else {
        bail!("{f}: drafter {:?} names no schedule", drafter.name);
    };
    let path = resolve_schedule(schedule);
    if path.is_file() {
        return Ok(());
    }
    let Some(calibrate) = &drafter.calibrate else {
        bail!(
            "{f}: drafter {:?}: schedule {} is missing (give the drafter `calibrate:` a calibrate config to make it)",
            drafter.name,
            path.display()
        );
    };
    eprintln!(
        "drafter {:?}: schedule {} is missing; calibrating with {}",
        drafter.name,
        path.display(),
        calibrate.display()
    );
    let out = crate::calibrate_run::run(calibrate)?;
    ensure!(
        out.schedule_path == path,
        "{f}: drafter {:?}: calibrate config {} wrote {}, not schedule {}",
        drafter.name,
        calibrate.display(),
        out.schedule_path.display(),
        path.display()
    );
    Ok(())
}

/// Claims `dir` for this experiment: a fresh folder is set up; this experiment's own run continues
/// only with `--resume`; anything else is refused.
fn claim_run_folder(dir: &Path, experiment: &Experiment, resume: bool) -> Result<bool> {
    match output_folder::claim(dir, RUN_KIND, &[&experiment.file])? {
        Claim::Fresh => Ok(true),
        Claim::Own(_) => {
            if !dir.join(EXPERIMENT_RECORD).exists()
                && UnitRecord::read_all(&dir.join(UNITS))?.is_empty()
            {
                // Killed while being set up: nothing of value is there yet.
                return Ok(true);
            }
            ensure!(
                recorded_experiment(dir)?.hash() == experiment.hash(),
                "{} holds a run of another experiment (or of an earlier version of this one): give --out a new folder",
                dir.display()
            );
            ensure!(
                resume,
                "{} holds this experiment's run already: pass --resume to continue it (finished units are kept), or --out for a new folder",
                dir.display()
            );
            Ok(false)
        }
    }
}

/// Runs `experiment_path` as `options` say.
pub fn run(experiment_path: &Path, options: &RunOptions) -> Result<RunOutcome> {
    let experiment = Experiment::load(experiment_path)?;
    let shard = match options.shard {
        Some(shard) => Some(shard),
        None => Shard::from_slurm()?,
    };
    let dir = options
        .out
        .clone()
        .unwrap_or_else(|| default_out(&experiment, shard));
    let fresh = claim_run_folder(&dir, &experiment, options.resume)?;

    // Everything that can fail before decoding, fails here.
    let target_dir = match registry::known(&experiment.target) {
        Some(model) => registry::fetch(model.name)?,
        None => registry::resolve(&experiment.target)?,
    };
    let device = parse_device(&experiment.device)
        .with_context(|| format!("{}: device", experiment.file.display()))?;
    let kind = parse_kind(&experiment.dtype)
        .with_context(|| format!("{}: dtype", experiment.file.display()))?;
    let target = CausalLm::load(&target_dir, device, kind)
        .with_context(|| format!("loading target {}", experiment.target))?;
    let mut fillers = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for workload in &experiment.workloads {
        requests.insert(
            workload.name.clone(),
            build_requests(workload, &target, &mut fillers)?,
        );
    }
    ensure_drafters(&experiment)?;

    let about = format!("{} ({})", experiment.name, experiment.hash());
    let units_dir = dir.join(UNITS);
    if fresh {
        std::fs::create_dir_all(&units_dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    // The marker before the record: a run killed during set-up leaves a folder this command can
    // claim again.
    Marker::new(RUN_KIND, false, about.clone()).write(&dir)?;
    if fresh {
        write_record(&dir, &experiment)?;
    }

    let grid = units(&experiment);
    let mine: Vec<&Unit> = grid
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.holds(*i)))
        .map(|(_, u)| u)
        .collect();
    // Every finished unit in the folder (other shards' too, where they share it), read once.
    let mut records = UnitRecord::read_all(&units_dir)?;
    let done: BTreeSet<&Unit> = records.iter().map(|r| &r.unit).collect();
    let pending: Vec<&Unit> = mine.iter().copied().filter(|u| !done.contains(u)).collect();
    let skipped = mine.len() - pending.len();
    if skipped > 0 {
        eprintln!(
            "resuming {}: {skipped} of {} units finished",
            dir.display(),
            mine.len()
        );
    }
    let base = provenance(&experiment);
    let bar = ProgressBar::new(pending.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} units  {per_sec}  elapsed {elapsed}  ETA {eta}  {msg}",
        )
        .expect("a valid progress template"),
    );
    let runner = UnitRunner {
        experiment: &experiment,
        target: &target,
        requests: &requests,
        provenance: base,
    };
    for unit in &pending {
        bar.set_message(unit.id());
        let record = runner
            .run(unit)
            .with_context(|| format!("unit {}", unit.id()))?;
        record.write(&units_dir)?;
        let line = summary_line(&record);
        bar.suspend(|| eprintln!("{line}"));
        bar.inc(1);
        records.push(record);
        // Tables current after every unit, for a look at a long run; the report comes at the end.
        tables::write_tables(&dir, &experiment, &records)?;
    }
    bar.finish_and_clear();
    let summary = publish(&dir, &experiment, &records)?;
    let finished = grid_finished(&grid, &records);
    Marker::new(RUN_KIND, finished, about).write(&dir)?;
    Ok(RunOutcome {
        dir,
        ran: pending.len(),
        skipped,
        finished,
        summary,
    })
}

fn summary_line(record: &UnitRecord) -> String {
    let (generated, seconds): (usize, f64) = record
        .requests
        .iter()
        .fold((0, 0.0), |(g, s), r| (g + r.generated, s + r.total_seconds));
    let (emitted, cycles) = record.requests.iter().fold((0usize, 0usize), |(e, c), r| {
        (
            e + r.cycles.iter().map(|c| c.accepted + c.bonus).sum::<usize>(),
            c + r.cycles.len(),
        )
    });
    let tau = if cycles == 0 {
        1.0
    } else {
        emitted as f64 / cycles as f64
    };
    format!(
        "{}: tau {tau:.2}, {:.1} tokens/s over {} prompts ({:.0} s)",
        record.unit.id(),
        generated as f64 / seconds.max(1e-9),
        record.requests.len(),
        record.seconds
    )
}

/// What every unit of a run shares.
struct UnitRunner<'a> {
    experiment: &'a Experiment,
    target: &'a CausalLm,
    requests: &'a BTreeMap<String, BTreeMap<usize, Requests>>,
    provenance: Provenance,
}

impl UnitRunner<'_> {
    fn run(&self, unit: &Unit) -> Result<UnitRecord> {
        let started = Instant::now();
        reset_peak_rss();
        let workload = self
            .experiment
            .workloads
            .iter()
            .find(|w| w.name == unit.workload)
            .with_context(|| format!("no workload {:?}", unit.workload))?;
        let method = self
            .experiment
            .methods
            .iter()
            .find(|m| m.name == unit.method)
            .with_context(|| format!("no method {:?}", unit.method))?;
        let requests = &self.requests[&unit.workload][&unit.context];
        let stop = if workload.ignore_eos {
            Vec::new()
        } else {
            self.target.stop_tokens()
        };
        let sampling = |prompt: usize| Sampling {
            temperature: self.experiment.temperature,
            top_p: 1.0,
            top_k: 0,
            seed: unit.seed.wrapping_add(prompt as u64),
        };
        let (rows, n0) = match &unit.drafter {
            None => (
                self.target_only(requests, workload.max_new_tokens, &stop, sampling)?,
                None,
            ),
            Some(name) => {
                let drafter = self
                    .experiment
                    .drafters
                    .iter()
                    .find(|d| &d.name == name)
                    .with_context(|| format!("no drafter {name:?}"))?;
                let spec = self.experiment.spec(drafter, method)?;
                self.speculative(&spec, requests, workload.max_new_tokens, &stop, sampling)?
            }
        };
        let mut provenance = self.provenance.clone();
        provenance.started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .saturating_sub(started.elapsed().as_secs());
        Ok(UnitRecord {
            unit: unit.clone(),
            setting: workload.setting,
            target: self.experiment.target.clone(),
            n0,
            max_new_tokens: workload.max_new_tokens,
            provenance,
            requests: rows,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn target_only(
        &self,
        requests: &Requests,
        max_new_tokens: usize,
        stop: &[i64],
        sampling: impl Fn(usize) -> Sampling,
    ) -> Result<Vec<RequestRow>> {
        requests
            .iter()
            .map(|(prompt, ids)| {
                let mut sampler = Sampler::new(sampling(*prompt));
                let out = generate(&self.target.net, ids, max_new_tokens, &mut sampler, stop)?;
                Ok(RequestRow {
                    prompt: *prompt,
                    prompt_tokens: ids.len(),
                    generated: out.ids.len(),
                    prefill_seconds: out.prefill_seconds,
                    total_seconds: out.prefill_seconds + out.decode_seconds,
                    update_seconds: 0.0,
                    updates: 0,
                    drafter_weight_bytes: 0,
                    drafter_cache_bytes: 0,
                    target_cache_bytes: 0,
                    adaptation_bytes: 0,
                    peak_rss_bytes: sharpdraft_decode::peak_rss_bytes(),
                    cycles: Vec::new(),
                    output_ids: out.ids,
                })
            })
            .collect()
    }

    fn speculative(
        &self,
        spec: &drafter_spec::DrafterSpec,
        requests: &Requests,
        max_new_tokens: usize,
        stop: &[i64],
        sampling: impl Fn(usize) -> Sampling,
    ) -> Result<(Vec<RequestRow>, Option<i64>)> {
        let ids: Vec<&[i64]> = requests.iter().map(|(_, ids)| ids.as_slice()).collect();
        let decoded = drafter_spec::decode_requests(
            spec,
            self.target,
            &ids,
            max_new_tokens,
            Some(stop),
            |i| sampling(requests[i].0),
        )?;
        let n0 = decoded.first().and_then(|d| d.training_length);
        let rows = requests
            .iter()
            .zip(decoded)
            .map(|((prompt, ids), d)| {
                let memory = d.report.memory();
                RequestRow {
                    prompt: *prompt,
                    prompt_tokens: ids.len(),
                    generated: d.report.ids.len(),
                    prefill_seconds: d.report.prefill_seconds,
                    total_seconds: d.report.total_seconds,
                    update_seconds: d.update_seconds,
                    updates: d.updates,
                    drafter_weight_bytes: memory.drafter_weight_bytes,
                    drafter_cache_bytes: memory.drafter_cache_bytes,
                    target_cache_bytes: memory.target_cache_bytes,
                    adaptation_bytes: memory.adaptation_bytes,
                    peak_rss_bytes: memory.peak_rss_bytes,
                    cycles: d.report.cycles,
                    output_ids: d.report.ids,
                }
            })
            .collect();
        Ok((rows, n0))
    }
}
