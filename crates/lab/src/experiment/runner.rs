//! `sharpdraft run`: an experiment's grid, unit by unit, into a run folder that resumes.
//!
//! Before the folder is claimed, everything that can be checked is: the YAML, the grid's size, the
//! folder's lock (one command per folder), the target, every prompt of every workload against the
//! target's context, every missing drafter trained and schedule calibrated from its named config, and
//! every arm's drafter built once with its options (so a bad value or a missing schedule fails here,
//! not in the middle of the grid). The run is then tied to the digest of all its inputs (the config
//! hash), the folder claimed (a new folder, or this run's own with `--resume`), and each pending unit
//! run with its arms interleaved request by request ([`super::grid`]) and written whole
//! (`units/<id>.json`); a unit killed in its middle resumes at its next request
//! ([`sharpdraft_report::partial_unit`]); the tables and the report are rebuilt from the finished units.

use super::config::{Experiment, MethodEntry, Workload};
use super::grid::{rotation, Shard};
use super::provenance::provenance;
use super::publish::{publish, Published};
use super::requests::{build_all, inputs_digest, GridRequests, SealedInputs};
use super::run_folder::{recorded_experiment, write_record, EXPERIMENT_RECORD, RUN_KIND, UNITS};
use crate::error::{bail, ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sharpdraft_decode::drafter_spec::{self, DecodedRequest, DrafterSpec, RequestDecoder};
use sharpdraft_decode::reset_peak_rss;
use sharpdraft_decode::scaling::resolve_schedule;
use sharpdraft_model::generate::{generate, generate_from, PromptPrefill};
use sharpdraft_model::{parse_device, CausalLm, Sampler, Sampling, Tap};
use sharpdraft_report::grid::{arms, unit_count, units, Arm, Unit};
use sharpdraft_report::machine_state::{self, MachineState, Quiet, Sample, Waiting};
use sharpdraft_report::outline::Outline;
use sharpdraft_report::partial_unit::{joined, PartialUnit};
use sharpdraft_report::records::{
    ensure_one_timing_setting, ArmInputs, ArmRecord, Provenance, RequestRow, UnitRecord,
};
use sharpdraft_report::{samples, tables};
use sharpdraft_store::folder_lock::FolderLock;
use sharpdraft_store::output_folder::{self, Claim, Marker};
use sharpdraft_store::paths::shown;
use sharpdraft_store::registry;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The run folder; `runs/<name>` (or `runs/<name>.shard-I-of-N`) by default.
    pub out: Option<PathBuf>,
    /// Continue this experiment's run in `out`, skipping finished units.
    pub resume: bool,
    pub shard: Option<Shard>,
    /// Train and calibrate a missing drafter even when the repository ships it (an installed shipped
    /// copy and its schedule are set aside first).
    pub retrain: bool,
}

#[derive(Debug)]
pub struct RunOutcome {
    pub dir: PathBuf,
    pub ran: usize,
    pub skipped: usize,
    /// Every unit of the whole grid (all shards) is in the folder.
    pub finished: bool,
    /// The summary of every finished unit in the folder, in the experiment's order, and the run's
    /// timing noise.
    pub published: Published,
}

/// Whether every unit of `grid` is among `records`.
pub fn grid_finished(grid: &[Unit], records: &[UnitRecord]) -> bool {
    let done: BTreeSet<&Unit> = records.iter().map(|r| &r.unit).collect();
    grid.iter().all(|u| done.contains(u))
}

pub fn default_out(experiment: &Experiment, shard: Option<Shard>) -> PathBuf {
    let name = match shard {
        Some(s) => format!(
            "{}.shard-{}-of-{}",
            experiment.header.name, s.index, s.count
        ),
        None => experiment.header.name.clone(),
    };
    PathBuf::from("runs").join(name)
}

/// Trains every drafter whose checkpoint is missing (or unfinished) from its `train` config, and
/// calibrates every schedule a method needs and does not find; errors name what is missing otherwise.
fn ensure_drafters(experiment: &Experiment, retrain: bool) -> Result<()> {
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
        let shipped = registry::shipped(checkpoint);
        match shipped {
            // The training config is read and checked before the installed copy is set aside, so a
            // refusal leaves the installed drafter where it was.
            Some(model) if retrain => {
                training_config(experiment, drafter, RETRAINED)?;
                registry::set_aside_shipped(model)?;
            }
            // The repository ships this drafter: installed, not trained (`--retrain` trains it).
            Some(model) if registry::resolve(checkpoint).is_err() => {
                registry::fetch(model.name)?;
            }
            _ => {}
        }
        if let Err(missing) = registry::resolve(checkpoint) {
            let why = match (retrain, shipped) {
                (true, Some(_)) => RETRAINED.to_string(),
                _ => missing.to_string(),
            };
            let train = training_config(experiment, drafter, &why)?;
            // A folder left by a killed training run is resumed, not trained anew: say which.
            let unfinished =
                registry::locate(checkpoint).is_some_and(|dir| output_folder::is_unfinished(&dir));
            eprintln!(
                "drafter {:?}: {checkpoint} {}; training it with {}",
                drafter.name,
                if unfinished {
                    "is an unfinished training run (stopped before its last step)"
                } else {
                    "is missing"
                },
                train.display()
            );
            crate::train::run(train)?;
        }
        if drafting
            .iter()
            .any(|m| drafter.runs(m) && m.scales_with_drafter_schedule())
        {
            ensure_schedule(experiment, drafter)?;
        }
    }
    Ok(())
}

/// Why a drafter `--retrain` set aside is to be made.
const RETRAINED: &str = "--retrain trains it from the drafter's `train:` config";

/// The training config of `drafter`, which is to make its checkpoint (`why`: the checkpoint is
/// missing, or `--retrain` sets it aside), loaded and checked to write that checkpoint; refused,
/// naming the drafter and `why`, when it has none or it writes elsewhere.
fn training_config<'d>(
    experiment: &Experiment,
    drafter: &'d super::config::DrafterEntry,
    why: &str,
) -> Result<&'d Path> {
    let f = shown(&experiment.header.file);
    let checkpoint = &drafter.spec.checkpoint;
    let Some(train) = &drafter.train else {
        bail!(
            "{f}: drafter {:?}: {why} (give it `train:` a training config to make it)",
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
    Ok(train.as_path())
}

fn ensure_schedule(experiment: &Experiment, drafter: &super::config::DrafterEntry) -> Result<()> {
    let f = shown(&experiment.header.file);
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
    let out = sharpdraft_probe::calibrate::run(calibrate)?;
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

/// Checks every arm's drafter against the target before the folder is claimed: options bounded by the
/// target's context, and the drafter built once with its scaling, window, retrieval and adaptation (a
/// missing schedule, a bad slope or a LoRA rank wider than a layer fails here).
fn check_arms(
    experiment: &Experiment,
    target: &CausalLm,
    requests: &GridRequests,
) -> Result<Vec<Tap>> {
    let f = shown(&experiment.header.file);
    let positions = target.net.config.max_position_embeddings.max(1) as u64;
    let sampling = Sampling {
        temperature: experiment.header.temperature,
        top_p: 1.0,
        top_k: 0,
        seed: 0,
    };
    // The shortest request is enough to build every part of a drafter.
    let shortest = requests
        .values()
        .flat_map(|c| c.values())
        .flat_map(|list| list.iter().map(|(_, ids)| ids.len()))
        .min()
        .unwrap_or(1);
    // The target's hidden states every drafting arm reads: a request's one prefill records them all.
    let mut taps: Vec<Tap> = Vec::new();
    for (drafter, method) in experiment.drafting_pairs() {
        let at = || {
            format!(
                "{f}: drafter {:?} with method {:?}",
                drafter.name, method.name
            )
        };
        let spec = experiment.spec(drafter, method)?;
        if let Some(window) = spec.window {
            ensure!(
                window as u64 <= positions,
                "{}: window {window} is wider than the {positions} positions the target sees",
                at()
            );
        }
        if let Some(r) = &spec.retrieval {
            ensure!(
                r.chunk as u64 <= positions
                    && r.recent as u64 <= positions
                    && r.top_chunks as u64 <= positions,
                "{}: retrieval chunk {}, top_chunks {} and recent {} must each fit the {positions} positions the target sees",
                at(),
                r.chunk,
                r.top_chunks,
                r.recent
            );
        }
        let (built, _) =
            drafter_spec::prepare(&spec, target, sampling, shortest, 1).with_context(at)?;
        for tap in built.drafter.target_taps() {
            if !taps.contains(&tap) {
                taps.push(tap);
            }
        }
    }
    Ok(taps)
}

/// What the folder holds before this run claims it.
enum Previous {
    /// Nothing, an empty folder, or a run killed while being set up.
    Nothing,
    /// A run with its record.
    Run,
}

/// Looks at `dir` without changing it: a folder this run may not write is refused here, before any
/// compute; a run of another YAML is refused by its recorded YAML hash.
fn look_at_folder(dir: &Path, experiment: &Experiment, resume: bool) -> Result<Previous> {
    match output_folder::claim(dir, RUN_KIND, &[&experiment.header.file])? {
        Claim::Fresh => Ok(Previous::Nothing),
        Claim::Own(_) => {
            if !dir.join(EXPERIMENT_RECORD).exists()
                && UnitRecord::files(&dir.join(UNITS))?.is_empty()
            {
                // Killed while being set up: nothing of value is there yet.
                return Ok(Previous::Nothing);
            }
            let recorded = recorded_experiment(dir)?;
            ensure!(
                recorded.yaml_hash == experiment.yaml_hash,
                "{} holds a run of another experiment (or of an earlier version of this one): give --out a new folder",
                dir.display()
            );
            ensure!(
                resume,
                "{} holds this experiment's run already: pass --resume to continue it (finished units are kept), or --out for a new folder",
                dir.display()
            );
            Ok(Previous::Run)
        }
    }
}

/// Runs `experiment_path` as `options` say.
pub fn run(experiment_path: &Path, options: &RunOptions) -> Result<RunOutcome> {
    let shard = options.shard;
    if shard.is_none() {
        Shard::refuse_unnamed_array_task()?;
    }
    let mut experiment = Experiment::load(experiment_path)?;
    unit_count(&experiment.outline())?;
    let dir = options
        .out
        .clone()
        .unwrap_or_else(|| default_out(&experiment, shard));
    let _lock = FolderLock::acquire(&dir, "run")?;
    let previous = look_at_folder(&dir, &experiment, options.resume)?;
    // Everything that can fail before decoding, fails here, before the folder is claimed.
    let loaded = load_and_check(&mut experiment, options)?;
    let about = claim(&dir, &experiment, previous)?;
    let units_dir = dir.join(UNITS);
    let outline = experiment.outline();

    let grid = units(&outline);
    let mine: Vec<&Unit> = grid
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.holds(*i)))
        .map(|(_, u)| u)
        .collect();
    // Every finished unit in the folder (other shards' too, where they share it), read once.
    let mut records = UnitRecord::read_belonging(&units_dir, &outline)?;
    let done: BTreeSet<&Unit> = records.iter().map(|r| &r.unit).collect();
    let pending: Vec<&Unit> = mine.iter().copied().filter(|u| !done.contains(u)).collect();
    for finished in mine.iter().filter(|u| done.contains(*u)) {
        PartialUnit::remove_own(&units_dir, finished, experiment.hash())?;
    }
    let skipped = mine.len() - pending.len();
    if skipped > 0 {
        eprintln!(
            "resuming {}: {skipped} of {} units finished",
            shown(&dir),
            mine.len()
        );
    }
    // A resume measures under this process's kernel form and threads: the same as the units before.
    let this_run = provenance(&experiment);
    ensure_one_timing_setting(
        records
            .iter()
            .map(|r| (format!("unit {}", r.unit.id()), &r.provenance))
            .chain((!pending.is_empty()).then(|| ("this run".to_string(), &this_run))),
    )?;
    if !pending.is_empty() {
        eprintln!("{}", plan(&experiment, pending.len(), skipped));
        warn_if_busy(machine_state::observe(Duration::from_secs(1)));
    }
    let runner = UnitRunner {
        experiment: &experiment,
        outline: &outline,
        target: &loaded.target,
        requests: &loaded.requests,
        prefill_taps: loaded.prefill_taps,
        provenance: this_run,
        arms: arms(&outline),
        wait_budget_left: std::cell::Cell::new(Duration::ZERO),
        sealed: loaded.sealed,
    };
    runner.run_all(&pending, &dir, &mut records)?;
    let published = publish(&dir, &outline, &records)?;
    let finished = grid_finished(&grid, &records);
    Marker::new(RUN_KIND, finished, about).write(&dir)?;
    Ok(RunOutcome {
        dir,
        ran: pending.len(),
        skipped,
        finished,
        published,
    })
}

/// What a run decodes with, loaded and checked before its folder is claimed.
struct Loaded {
    target: CausalLm,
    requests: GridRequests,
    prefill_taps: Vec<Tap>,
    sealed: SealedInputs,
}

/// Loads the target and builds every request, checks that the test prompts are held out from what
/// the drafters learned and the schedules were fitted on (the training data before any training,
/// the calibration data once every schedule exists and every arm has been built with it), trains
/// the drafters that need it, and seals `experiment` with the digest of everything it reads.
fn load_and_check(experiment: &mut Experiment, options: &RunOptions) -> Result<Loaded> {
    let target_dir = match registry::known(&experiment.header.target) {
        Some(model) => registry::fetch(model.name)?,
        None => registry::resolve(&experiment.header.target)?,
    };
    let device = parse_device(&experiment.header.device)
        .with_context(|| format!("{}: device", shown(&experiment.header.file)))?;
    let (dtype, why) =
        sharpdraft_model::resolve_dtype(&experiment.header.dtype, &target_dir, device)
            .with_context(|| format!("{}: dtype", shown(&experiment.header.file)))?;
    if let Some(why) = why {
        eprintln!("dtype auto: {} ({why})", dtype.name());
    }
    // The record, the units' provenance and the report name the dtype that ran.
    experiment.header.dtype = dtype.name().to_string();
    let target = CausalLm::load_dtype(&target_dir, device, dtype)
        .with_context(|| format!("loading target {}", experiment.header.target))?;
    let requests = build_all(experiment, &target)?;
    let tests = crate::held_out::test_requests(experiment, &target, &requests)?;
    crate::held_out::check_training_data(experiment, &target, &tests)?;
    ensure_drafters(experiment, options.retrain)?;
    let prefill_taps = check_arms(experiment, &target, &requests)?;
    crate::held_out::check_calibration_data(experiment, &target, &tests)?;
    let sealed = SealedInputs::seal(experiment)?;
    let digest = inputs_digest(experiment, &target_dir, &requests, &sealed)?;
    experiment.seal(&digest);
    Ok(Loaded {
        target,
        requests,
        prefill_taps,
        sealed,
    })
}

/// Claims `dir` for `experiment`: a run already there must be of the same inputs; a fresh folder gets
/// its units folder, its marker and the experiment's record. Returns what the marker says the run is.
fn claim(dir: &Path, experiment: &Experiment, previous: Previous) -> Result<String> {
    let fresh = match previous {
        Previous::Nothing => true,
        Previous::Run => {
            let recorded = recorded_experiment(dir)?;
            ensure!(
                recorded.hash() == experiment.hash(),
                "{} holds a run of this YAML over other inputs (a prompt file, filler text, checkpoint or schedule changed since; config hash {} now, {} then): give --out a new folder, or restore the inputs",
                dir.display(),
                experiment.hash(),
                recorded.hash()
            );
            false
        }
    };
    let about = format!("{} ({})", experiment.header.name, experiment.hash());
    if fresh {
        std::fs::create_dir_all(dir.join(UNITS))
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    // The marker before the record: a run killed during set-up leaves a folder this command can
    // claim again.
    Marker::new(RUN_KIND, false, about.clone()).write(dir)?;
    if fresh {
        write_record(dir, experiment)?;
    }
    Ok(about)
}

/// The line `run` starts with: what it will run, and what waiting for a quiet machine may cost.
fn plan(experiment: &Experiment, pending: usize, finished: usize) -> String {
    let t = &experiment.timing;
    format!(
        "plan: {pending} units to run ({finished} finished before); a decode that runs under other processes' load is measured again up to {} times, waiting up to {:.0} s for quiet each time and at most {:.0} s a unit (`timing:` in the experiment)",
        t.retries, t.max_wait_seconds, t.unit_wait_seconds
    )
}

fn warn_if_busy(state: MachineState) {
    if state.loaded() {
        eprintln!(
            "warning: the machine is busy ({}). Every arm of a request runs back to back, so speed-ups stay paired, but they get noisier: units measured under load are flagged in the report",
            state.describe()
        );
    }
}

/// A unit's lines for the log: one per arm, then the machine's state.
fn summary_lines(record: &UnitRecord) -> String {
    let mut lines = Vec::new();
    for arm in &record.arms {
        let (generated, seconds) = arm
            .requests
            .iter()
            .fold((0, 0.0), |(g, s), r| (g + r.generated, s + r.total_seconds));
        let (emitted, cycles) = arm.requests.iter().fold((0usize, 0usize), |(e, c), r| {
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
        lines.push(format!(
            "{} {}: tau {tau:.2}, {:.1} tokens/s over {} prompts",
            record.unit.id(),
            arm.arm.label(),
            generated as f64 / seconds.max(1e-9),
            arm.requests.len(),
        ));
    }
    lines.push(format!(
        "{}: {:.0} s; {}{}",
        record.unit.id(),
        record.seconds,
        record.machine.describe(),
        if record.machine.loaded() {
            " (measured under load)"
        } else {
            ""
        }
    ));
    lines.join("\n")
}

/// What every unit of a run shares.
struct UnitRunner<'a> {
    experiment: &'a Experiment,
    /// The sealed experiment as its records and tables see it.
    outline: &'a Outline,
    target: &'a CausalLm,
    requests: &'a GridRequests,
    /// The target's hidden states any drafting arm reads, recorded by each request's one prefill.
    prefill_taps: Vec<Tap>,
    provenance: Provenance,
    arms: Vec<Arm>,
    /// What the unit running now may still spend waiting for quiet (`timing.unit_wait_seconds`).
    wait_budget_left: std::cell::Cell<Duration>,
    /// The drafters' and schedules' content at the start, checked after every unit.
    sealed: SealedInputs,
}

impl UnitRunner<'_> {
    /// Runs the `pending` units one by one into `dir`, adding each record to `records` once its
    /// inputs were checked against the seal, and keeps the tables current after every unit.
    fn run_all(&self, pending: &[&Unit], dir: &Path, records: &mut Vec<UnitRecord>) -> Result<()> {
        let units_dir = dir.join(UNITS);
        let bar = ProgressBar::new(pending.len() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} units  {per_sec}  elapsed {elapsed}  ETA {eta}  {msg}",
            )
            .expect("a valid progress template"),
        );
        for unit in pending {
            bar.set_message(unit.id());
            let record = self
                .run(unit, &units_dir)
                .with_context(|| format!("unit {}", unit.id()))?;
            record.write(&units_dir)?;
            PartialUnit::remove_own(&units_dir, unit, self.experiment.hash())?;
            let lines = summary_lines(&record);
            bar.suspend(|| eprintln!("{lines}"));
            bar.inc(1);
            records.push(record);
            // Tables current after every unit, for a look at a long run; the report comes at the end.
            tables::write_tables(
                dir,
                self.outline,
                &samples::from_units(self.outline, records),
            )?;
        }
        bar.finish_and_clear();
        Ok(())
    }
}

/// What every request of a unit shares: the unit, its workload and the tokens that end a decode (none
/// when the workload ignores end-of-sequence).
struct UnitScope<'u> {
    unit: &'u Unit,
    workload: &'u Workload,
    stop: Vec<i64>,
}

/// One arm while its unit runs: how it decodes, and its rows so far.
struct ArmRun<'t> {
    arm: Arm,
    /// `None` for the target alone.
    decoder: Option<RequestDecoder<'t>>,
    n0: Option<i64>,
    scaling_slope: Option<f64>,
    /// The drafter and schedule it reads, by their sealed digests (empty for the target alone).
    inputs: ArmInputs,
    rows: Vec<RequestRow>,
}

impl UnitRunner<'_> {
    /// Runs `unit`'s requests, from the first its partial record under `units_dir` lacks, writing
    /// that record anew after each request but the last.
    fn run(&self, unit: &Unit, units_dir: &Path) -> Result<UnitRecord> {
        let started = Instant::now();
        self.wait_budget_left.set(Duration::from_secs_f64(
            self.experiment.timing.unit_wait_seconds,
        ));
        let started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let machine_before = Sample::now();
        let workload = self
            .experiment
            .workloads
            .iter()
            .find(|w| w.name == unit.workload)
            .with_context(|| format!("no workload {:?}", unit.workload))?;
        let requests = &self.requests[&unit.workload][&unit.context];
        let longest = requests.iter().map(|(_, ids)| ids.len()).max().unwrap_or(0);
        let mut runs = self.arm_runs(workload, longest, requests.len())?;
        // An arm that learns across requests cannot take up a unit in the middle.
        let resumable = !runs.iter().any(|r| {
            r.decoder
                .as_ref()
                .is_some_and(RequestDecoder::keeps_state_across_requests)
        });
        let prompts: Vec<usize> = requests.iter().map(|(prompt, _)| *prompt).collect();
        let earlier = if resumable {
            PartialUnit::read_belonging(units_dir, unit, self.outline, &prompts)?
        } else {
            None
        };
        let mut piece_provenance = self.provenance.clone();
        piece_provenance.started_unix = started_unix;
        let provenance = match &earlier {
            Some(earlier) => joined(&earlier.provenance, &piece_provenance),
            None => piece_provenance,
        };
        if let Some(earlier) = &earlier {
            self.take_up(unit, earlier, &mut runs, requests.len())?;
        }
        // The pieces before this one, and this one so far.
        let so_far = |runs: &[ArmRun]| {
            let machine = machine_before.until(&Sample::now());
            let seconds = started.elapsed().as_secs_f64();
            let (machine, seconds) = match &earlier {
                Some(e) => (e.machine.then(&machine), e.seconds + seconds),
                None => (machine, seconds),
            };
            let arms = runs
                .iter()
                .map(|r| ArmRecord {
                    arm: r.arm.clone(),
                    n0: r.n0,
                    scaling_slope: r.scaling_slope,
                    inputs: r.inputs.clone(),
                    requests: r.rows.clone(),
                })
                .collect();
            (arms, machine, seconds)
        };
        let first = earlier.as_ref().map_or(0, PartialUnit::requests_done);
        let scope = UnitScope {
            unit,
            workload,
            stop: if workload.ignore_eos {
                Vec::new()
            } else {
                self.target.stop_tokens()
            },
        };
        // Every arm loads its drafter and schedule again for each request: the inputs are checked
        // against the seal before the first request and after each one, so no row decoded from a
        // changed input is kept, not even in units/partial (a change undone before a resume included).
        self.sealed
            .verify()
            .with_context(|| format!("before request {} of unit {}", first + 1, unit.id()))?;
        for (position, (prompt, ids)) in requests.iter().enumerate().skip(first) {
            self.decode_in_every_arm(&scope, position, *prompt, ids, &mut runs)?;
            self.sealed.verify().with_context(|| {
                format!(
                    "request {} of unit {} (decoded, not recorded)",
                    position + 1,
                    unit.id()
                )
            })?;
            if resumable && position + 1 < requests.len() {
                let (arms, machine, seconds) = so_far(&runs);
                PartialUnit {
                    unit: unit.clone(),
                    provenance: provenance.clone(),
                    arms,
                    machine,
                    seconds,
                }
                .write(units_dir)?;
            }
        }
        let (arms, machine, seconds) = so_far(&runs);
        Ok(UnitRecord {
            unit: unit.clone(),
            setting: workload.setting,
            target: self.experiment.header.target.clone(),
            max_new_tokens: workload.max_new_tokens,
            provenance,
            machine,
            arms,
            seconds,
        })
    }

    /// Every arm of the experiment ready to decode `requests` of `workload`, the longest prompt
    /// `longest` tokens: a drafter built for each drafting arm.
    fn arm_runs(
        &self,
        workload: &Workload,
        longest: usize,
        requests: usize,
    ) -> Result<Vec<ArmRun<'_>>> {
        self.arms
            .iter()
            .map(|arm| {
                let (decoder, inputs) = match &arm.drafter {
                    None => (None, ArmInputs::default()),
                    Some(name) => {
                        let spec = self.spec(name, &arm.method)?;
                        let inputs = self
                            .sealed
                            .arm_inputs(&spec, &self.experiment.header.dtype)?;
                        let decoder = RequestDecoder::new(
                            &spec,
                            self.target,
                            longest,
                            workload.max_new_tokens,
                        );
                        (Some(decoder), inputs)
                    }
                };
                Ok(ArmRun {
                    arm: arm.clone(),
                    decoder,
                    n0: None,
                    scaling_slope: None,
                    inputs,
                    rows: Vec::with_capacity(requests),
                })
            })
            .collect()
    }

    /// Takes up `unit` where a killed run left it (`earlier`): its rows back into `runs`, after
    /// checking that it measured under this run's kernel form and threads.
    fn take_up(
        &self,
        unit: &Unit,
        earlier: &PartialUnit,
        runs: &mut [ArmRun],
        requests: usize,
    ) -> Result<()> {
        ensure_one_timing_setting([
            (
                format!("unit {}'s first requests", unit.id()),
                &earlier.provenance,
            ),
            ("this run".to_string(), &self.provenance),
        ])?;
        for (run, recorded) in runs.iter_mut().zip(&earlier.arms) {
            run.rows.clone_from(&recorded.requests);
            run.n0 = recorded.n0;
            run.scaling_slope = recorded.scaling_slope;
        }
        eprintln!(
            "resuming unit {} at request {} of {}",
            unit.id(),
            earlier.requests_done() + 1,
            requests
        );
        Ok(())
    }

    /// Decodes request `position` of the unit in `scope` (prompt `prompt`, token `ids`) in every arm,
    /// in the unit's rotation, each arm's row added to its run.
    fn decode_in_every_arm(
        &self,
        scope: &UnitScope,
        position: usize,
        prompt: usize,
        ids: &[i64],
        runs: &mut [ArmRun],
    ) -> Result<()> {
        let UnitScope {
            unit,
            workload,
            stop,
        } = scope;
        let sampling = Sampling {
            temperature: self.experiment.header.temperature,
            top_p: 1.0,
            top_k: 0,
            seed: unit.seed.wrapping_add(prompt as u64),
        };
        // The target's prefill of the request, once for every arm (each decodes from its own copy
        // of the cache and counts the prefill's seconds as its own): the same computation in every
        // arm, so measuring it once changes no ratio and saves every arm but one the prompt's
        // pass. Taken like a decode: again once the machine is quiet if it ran under load.
        let shared = match self.experiment.timing.shared_prefill {
            true => Some(
                self.shared_prefill(ids, &format!("the target's prefill of prompt {prompt}"))
                    .with_context(|| format!("the target's prefill of prompt {prompt}"))?,
            ),
            false => None,
        };
        for (slot, a) in rotation(runs.len(), position, unit.repeat)
            .into_iter()
            .enumerate()
        {
            let run = &mut runs[a];
            let label = run.arm.label();
            let retries = match &run.decoder {
                Some(d) if d.keeps_state_across_requests() => 0,
                _ => self.experiment.timing.retries,
            };
            let (mut n0, mut slope) = (run.n0, run.scaling_slope);
            let prefilled = shared.as_ref().map(|q| &q.value);
            let what = format!("{label}'s decode of prompt {prompt}");
            let mut row = self.measured(retries, &what, || {
                reset_peak_rss();
                Ok(match &mut run.decoder {
                    None => self.target_alone(
                        prompt,
                        ids,
                        prefilled,
                        workload.max_new_tokens,
                        stop,
                        sampling,
                    )?,
                    Some(decoder) => {
                        let decoded = match prefilled {
                            Some(p) => decoder.decode_prefilled(p, Some(stop), sampling),
                            None => decoder.decode(ids, Some(stop), sampling),
                        }
                        .with_context(|| format!("{label}, prompt {prompt}"))?;
                        n0 = n0.or(decoded.training_length);
                        slope = slope.or(decoded.scaling_slope);
                        speculative_row(prompt, ids, decoded)
                    }
                })
            })?;
            run.n0 = n0;
            run.scaling_slope = slope;
            row.slot = slot;
            // The shared prefill's load is this arm's too: it is inside the arm's time.
            if let Some(q) = &shared {
                row.other_cpu_share = row.other_cpu_share.max(q.other_share);
            }
            run.rows.push(row);
        }
        Ok(())
    }

    /// `decode`, decoded again while it ran under other processes' load
    /// ([`machine_state::measure_quietly`]), with the kept attempt's load and the attempts made.
    fn measured(
        &self,
        retries: usize,
        what: &str,
        decode: impl FnMut() -> Result<RequestRow>,
    ) -> Result<RequestRow> {
        let quiet = machine_state::measure_quietly(&self.waiting(retries, what), decode)?;
        let mut row = quiet.value;
        row.other_cpu_share = quiet.other_share;
        row.attempts = quiet.attempts;
        Ok(row)
    }

    /// How a measurement of this unit waits for quiet: the experiment's `timing:` within what is left of
    /// the unit's budget.
    fn waiting<'w>(&'w self, retries: usize, what: &'w str) -> Waiting<'w> {
        Waiting {
            retries,
            max_wait: Duration::from_secs_f64(self.experiment.timing.max_wait_seconds),
            budget_left: &self.wait_budget_left,
            what,
        }
    }

    fn spec(&self, drafter: &str, method: &str) -> Result<DrafterSpec> {
        let drafter = self
            .experiment
            .drafters
            .iter()
            .find(|d| d.name == drafter)
            .with_context(|| format!("no drafter {drafter:?}"))?;
        let method = self
            .experiment
            .methods
            .iter()
            .find(|m| m.name == method)
            .with_context(|| format!("no method {method:?}"))?;
        self.experiment.spec(drafter, method)
    }

    /// The target's prefill of `ids` with every drafting arm's taps, measured like a decode.
    fn shared_prefill(&self, ids: &[i64], what: &str) -> Result<Quiet<PromptPrefill>> {
        let waiting = self.waiting(self.experiment.timing.retries, what);
        machine_state::measure_quietly(&waiting, || {
            PromptPrefill::run(&self.target.net, ids, &self.prefill_taps, ids.len() as i64)
        })
        .map_err(Into::into)
    }

    fn target_alone(
        &self,
        prompt: usize,
        ids: &[i64],
        prefilled: Option<&PromptPrefill>,
        max_new_tokens: usize,
        stop: &[i64],
        sampling: Sampling,
    ) -> Result<RequestRow> {
        let mut sampler = Sampler::new(sampling);
        let out = match prefilled {
            Some(p) => generate_from(&self.target.net, p, max_new_tokens, &mut sampler, stop),
            None => generate(&self.target.net, ids, max_new_tokens, &mut sampler, stop),
        }
        .with_context(|| format!("the target alone, prompt {prompt}"))?;
        Ok(RequestRow {
            prompt,
            prompt_tokens: ids.len(),
            generated: out.ids.len(),
            prefill_seconds: out.prefill_seconds,
            total_seconds: out.prefill_seconds + out.decode_seconds,
            slot: 0,
            other_cpu_share: f64::NAN,
            attempts: 1,
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
    }
}

fn speculative_row(prompt: usize, ids: &[i64], d: DecodedRequest) -> RequestRow {
    let memory = d.report.memory();
    RequestRow {
        prompt,
        prompt_tokens: ids.len(),
        generated: d.report.ids.len(),
        prefill_seconds: d.report.prefill_seconds,
        total_seconds: d.report.total_seconds,
        slot: 0,
        other_cpu_share: f64::NAN,
        attempts: 1,
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
}
