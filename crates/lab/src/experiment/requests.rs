//! The requests of a grid, built once before any decoding, and the digest of every input a run reads.
//!
//! A unit's results depend on more than the experiment's YAML: the prompt files, the filler texts, the
//! target's and drafters' weights, the calibrated schedules. [`inputs_digest`] covers all of them: the
//! token ids of every request (so an edited prompt file or filler text shows), each model folder's
//! content ([`content_digest`], through its marker's sha256 where the files are unchanged) and each
//! schedule file. A run folder belongs to the YAML and these inputs together, so a shard or a resume
//! that would read different inputs is refused instead of pooled.

use super::config::{Experiment, Setting, Workload};
use super::prompts::{chat_ids, ensure_text_can_fit, excerpt_offset, long_prompt_ids};
use crate::error::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use sharpdraft_decode::drafter_spec::DrafterSpec;
use sharpdraft_decode::scaling::resolve_schedule;
use sharpdraft_model::CausalLm;
use sharpdraft_report::records::ArmInputs;
use sharpdraft_store::output_folder::{digest_of, file_digests, sha256_of};
use sharpdraft_store::registry;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The prompts of one workload at one context: (prompt index in its source, ids).
pub type Requests = Vec<(usize, Vec<i64>)>;

/// Every request of the grid: workload name -> context -> requests.
pub type GridRequests = BTreeMap<String, BTreeMap<usize, Requests>>;

/// A grid of at least this many requests shows a bar while they are built (a safety review saw 5,000
/// prompts at 8,000 tokens built in 90 s of silence).
const BAR_FROM_REQUESTS: usize = 500;

/// Builds every request of every workload of `experiment` and checks each against the target's context.
pub fn build_all(experiment: &Experiment, target: &CausalLm) -> Result<GridRequests> {
    let total: usize = experiment
        .workloads
        .iter()
        .map(|w| match w.setting {
            Setting::LongGeneration => w.count,
            Setting::LongPrompt => w.count * w.contexts.len(),
        })
        .sum();
    let bar = if total >= BAR_FROM_REQUESTS {
        ProgressBar::new(total as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} requests built  elapsed {elapsed}  ETA {eta}")
            .expect("a valid progress template"),
    );
    let mut fillers = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for workload in &experiment.workloads {
        requests.insert(
            workload.name.clone(),
            build_requests(workload, target, &mut fillers, &bar)?,
        );
    }
    bar.finish_and_clear();
    Ok(requests)
}

/// Builds every request of `workload` and checks it against the target's context.
fn build_requests(
    workload: &Workload,
    target: &CausalLm,
    filler_cache: &mut BTreeMap<String, Vec<i64>>,
    bar: &ProgressBar,
) -> Result<BTreeMap<usize, Requests>> {
    let at = || format!("workload {:?}", workload.name);
    let tokenizer = target.tokenizer()?;
    let texts = workload
        .prompts
        .load(workload.skip, workload.count)
        .with_context(at)?;
    let positions = target.net.config.positions();
    for (i, text) in texts.iter().enumerate() {
        ensure_text_can_fit(text, positions)
            .with_context(|| format!("{}: prompt {}", at(), workload.skip + i))?;
    }
    let mut out = BTreeMap::new();
    match workload.setting {
        Setting::LongGeneration => {
            let requests = texts
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    bar.inc(1);
                    Ok((workload.skip + i, chat_ids(tokenizer, text)?))
                })
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
                        let offset = excerpt_offset(
                            workload.excerpts,
                            (i, texts.len()),
                            workload.filler_offset,
                            filler.len(),
                            context,
                        );
                        bar.inc(1);
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

/// The files each request loads again for itself (every drafter's checkpoint files, when some method
/// drafts, and every schedule), each with the sha256 of its content when the run started, read once:
/// the run's digest ([`inputs_digest`]) is made of them, and a unit checks their content again before
/// its first request and after every request ([`SealedInputs::verify`]), so a drafter or schedule
/// replaced mid-run is refused, named, and no row decoded from it is kept. The target is loaded once
/// per run and needs no check.
pub struct SealedInputs {
    /// Each drafter folder's files: (path relative to the folder, sha256), sorted.
    drafters: BTreeMap<PathBuf, Vec<(String, String)>>,
    /// Each schedule file with its sha256.
    schedules: BTreeMap<PathBuf, String>,
}

impl SealedInputs {
    /// Reads every such file of `experiment` now.
    pub fn seal(experiment: &Experiment) -> Result<Self> {
        let mut drafters = BTreeMap::new();
        if experiment.methods.iter().any(|m| !m.target_only) {
            for drafter in &experiment.drafters {
                let dir = registry::resolve(&drafter.spec.checkpoint)?;
                if !drafters.contains_key(&dir) {
                    let files = file_digests(&dir).with_context(|| {
                        format!("reading {} for the run's inputs", dir.display())
                    })?;
                    drafters.insert(dir, files);
                }
            }
        }
        let mut schedules = BTreeMap::new();
        for schedule in schedule_files(experiment)? {
            let sha256 = sha256_of(&schedule)
                .with_context(|| format!("reading schedule {}", schedule.display()))?;
            schedules.insert(schedule, sha256);
        }
        Ok(Self {
            drafters,
            schedules,
        })
    }

    /// What an arm drafting with `spec` reads, by the digests sealed at the start: its drafter's
    /// folder and schedule, and the dtype it runs in (`target_dtype` unless the spec says).
    pub fn arm_inputs(&self, spec: &DrafterSpec, target_dtype: &str) -> Result<ArmInputs> {
        let dir = registry::resolve(&spec.checkpoint)?;
        let files = self
            .drafters
            .get(&dir)
            .with_context(|| format!("{} was not sealed", dir.display()))?;
        let schedule_digest = match &spec.scaling.schedule {
            Some(schedule) => {
                let path = resolve_schedule(schedule);
                self.schedules
                    .get(&path)
                    .with_context(|| format!("schedule {} was not sealed", path.display()))?
                    .clone()
            }
            None => String::new(),
        };
        Ok(ArmInputs {
            drafter_digest: digest_of(files),
            drafter_dtype: spec
                .dtype
                .clone()
                .unwrap_or_else(|| target_dtype.to_string()),
            schedule_digest,
        })
    }

    /// Every sealed file: (path, sha256 at the start).
    fn files(&self) -> impl Iterator<Item = (PathBuf, &str)> {
        let drafter_files = self.drafters.iter().flat_map(|(dir, files)| {
            files
                .iter()
                .map(move |(relative, sha256)| (dir.join(relative), sha256.as_str()))
        });
        let schedules = self
            .schedules
            .iter()
            .map(|(path, sha256)| (path.clone(), sha256.as_str()));
        drafter_files.chain(schedules)
    }

    /// Refuses, naming the file, when any sealed file's content is not what it was at the start.
    pub fn verify(&self) -> Result<()> {
        for (path, sealed) in self.files() {
            let now = sha256_of(&path).map_err(|e| {
                crate::error::LabError::Invalid(format!(
                    "{} was read when the run started and is gone or unreadable now ({e}): a run reads each input as it was at its start; restore it, or start a new run",
                    path.display()
                ))
            })?;
            if now != sealed {
                return Err(crate::error::LabError::Invalid(format!(
                    "{} changed since the run started (sha256 {} then, {} now): a run reads each input as it was at its start, so its units are not pooled across two versions; restore it, or start a new run (a resume then refuses the folder of the old inputs)",
                    path.display(),
                    &sealed[..12],
                    &now[..12]
                )));
            }
        }
        Ok(())
    }
}

/// Every schedule file some arm of `experiment` reads.
pub fn schedule_files(experiment: &Experiment) -> Result<BTreeSet<PathBuf>> {
    let mut out = BTreeSet::new();
    for (drafter, method) in experiment.drafting_pairs() {
        let spec = experiment.spec(drafter, method)?;
        if let Some(schedule) = &spec.scaling.schedule {
            out.insert(resolve_schedule(schedule));
        }
    }
    Ok(out)
}

/// The digest of every input the grid's units read besides the YAML: the requests' token ids, the
/// target's folder (read whole now), and every drafter's checkpoint and schedule as `sealed` read them.
pub fn inputs_digest(
    experiment: &Experiment,
    target_dir: &Path,
    requests: &GridRequests,
    sealed: &SealedInputs,
) -> Result<String> {
    let mut hasher = Sha256::new();
    let mut field = |name: &str, value: &[u8]| {
        hasher.update(name.as_bytes());
        hasher.update((value.len() as u64).to_le_bytes());
        hasher.update(value);
    };
    let target = file_digests(target_dir)
        .with_context(|| format!("reading {} for the run's inputs", target_dir.display()))?;
    field("target", digest_of(&target).as_bytes());
    for (workload, contexts) in requests {
        for (context, list) in contexts {
            for (prompt, ids) in list {
                let head = format!("request {workload} {context} {prompt}");
                let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
                field(&head, &bytes);
            }
        }
    }
    if experiment.methods.iter().any(|m| !m.target_only) {
        for drafter in &experiment.drafters {
            let dir = registry::resolve(&drafter.spec.checkpoint)?;
            let files = sealed.drafters.get(&dir).with_context(|| {
                format!(
                    "drafter {:?}: {} was not sealed",
                    drafter.name,
                    dir.display()
                )
            })?;
            field(
                &format!("drafter {}", drafter.name),
                digest_of(files).as_bytes(),
            );
        }
    }
    // Each drafting arm bound to its own schedule's content (the path left out: the same schedules
    // under another $SHARPDRAFT_HOME give the same digest, two arms' schedules swapped do not).
    for (drafter, method) in experiment.drafting_pairs() {
        let spec = experiment.spec(drafter, method)?;
        if let Some(schedule) = &spec.scaling.schedule {
            let path = resolve_schedule(schedule);
            let sha = sealed
                .schedules
                .get(&path)
                .with_context(|| format!("schedule {} was not sealed", path.display()))?;
            field(
                &format!("schedule of {} with {}", drafter.name, method.name),
                sha.as_bytes(),
            );
        }
    }
    Ok(format!("{:x}", hasher.finalize()))
}
