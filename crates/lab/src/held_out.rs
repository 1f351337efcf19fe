//! Test prompts kept apart from the data a schedule was calibrated on and a drafter trained on. Before
//! a run decodes anything it checks every request of its grid against the schedules its arms read
//! and against the training data of every drafter whose training config it knows
//! (`sharpdraft_data::fingerprint`): a request that holds one of those prompts, a window of their
//! tokens, or a run of their words in any spelling (the same scene in modern and First Folio
//! spelling) is refused, naming the workload, the prompt and the file.
//!
//! A schedule calibrated before fingerprints recorded words is checked by the words of what its
//! calibrate config's probe reads, found again from the config (`sharpdraft_probe::calibrate::
//! text_read_of`), when the experiment names that config beside the schedule.

use crate::error::{Context, Result};
use crate::experiment::requests::GridRequests;
use crate::experiment::Experiment;
use sharpdraft_data::fingerprint::{has_words, refuse_overlap, training_fingerprint, TestRequest};
use sharpdraft_decode::scaling::resolve_schedule;
use sharpdraft_math::DataFingerprint;
use sharpdraft_model::CausalLm;
use std::path::{Path, PathBuf};

/// One request of the grid as the check reads it: how an error names it, its prompt's own text, its
/// token ids and their text.
pub struct HeldOutRequest {
    pub what: String,
    pub prompt: String,
    pub ids: Vec<i64>,
    pub text: String,
}

impl HeldOutRequest {
    fn as_test(&self) -> TestRequest<'_> {
        TestRequest {
            prompt: &self.prompt,
            ids: &self.ids,
            text: &self.text,
        }
    }
}

/// Every request of the grid (`requests`, built from `experiment`'s workloads), its ids decoded by
/// `target`'s tokenizer once for every check.
pub fn test_requests(
    experiment: &Experiment,
    target: &CausalLm,
    requests: &GridRequests,
) -> Result<Vec<HeldOutRequest>> {
    let tokenizer = target.tokenizer()?;
    let mut out = Vec::new();
    for workload in &experiment.workloads {
        let texts = workload.prompts.load(workload.skip, workload.count)?;
        for (context, list) in requests.get(&workload.name).into_iter().flatten() {
            for (prompt, ids) in list {
                let what = format!(
                    "{}: workload {:?}: prompt {prompt}{}",
                    sharpdraft_store::paths::shown(&experiment.header.file),
                    workload.name,
                    if *context > 0 {
                        format!(" at context {context}")
                    } else {
                        String::new()
                    }
                );
                out.push(HeldOutRequest {
                    what,
                    prompt: texts
                        .get(prompt.saturating_sub(workload.skip))
                        .cloned()
                        .unwrap_or_default(),
                    ids: ids.clone(),
                    text: tokenizer.decode(ids)?,
                });
            }
        }
    }
    Ok(out)
}

/// Refuses every request of `tests` that overlaps `data`, read by `source` (described for the error).
pub fn check_grid(tests: &[HeldOutRequest], data: &DataFingerprint, source: &str) -> Result<()> {
    for request in tests {
        refuse_overlap(data, request.as_test(), &request.what, source)?;
    }
    Ok(())
}

/// Refuses a grid whose requests overlap the training data of a drafter whose training config the
/// experiment names (`train:`). Checked before any training or decoding.
pub fn check_training_data(
    experiment: &Experiment,
    target: &CausalLm,
    tests: &[HeldOutRequest],
) -> Result<()> {
    if experiment.methods.iter().all(|m| m.target_only) {
        return Ok(());
    }
    for drafter in &experiment.drafters {
        let Some(train) = &drafter.train else {
            continue;
        };
        let config = crate::train::TrainConfig::load(train)?;
        let base = train.parent().unwrap_or(Path::new("."));
        let data = training_fingerprint(&config.data, base, target)
            .with_context(|| format!("reading the training data of {}", train.display()))?;
        let source = format!(
            "drafter {:?}'s training config {}",
            drafter.name,
            train.display()
        );
        check_grid(tests, &data, &source)?;
    }
    Ok(())
}

/// The calibrate configs the experiment names beside a schedule that resolves to `schedule`.
fn calibrate_configs_of(experiment: &Experiment, schedule: &Path) -> Vec<PathBuf> {
    experiment
        .drafters
        .iter()
        .filter(|d| {
            d.schedule
                .as_ref()
                .is_some_and(|s| resolve_schedule(s) == schedule)
        })
        .filter_map(|d| d.calibrate.clone())
        .collect()
}

/// Refuses a grid whose requests overlap the calibration data of a schedule one of its arms reads:
/// the fingerprint the schedule records and, where it records no words, what its calibrate config's
/// probe reads (found again from the config). A schedule with neither is named on stderr.
pub fn check_calibration_data(
    experiment: &Experiment,
    target: &CausalLm,
    tests: &[HeldOutRequest],
) -> Result<()> {
    for path in crate::experiment::requests::schedule_files(experiment)? {
        let schedule = sharpdraft_math::ScaleSchedule::load(&path)?;
        let source = format!("the calibration of schedule {}", path.display());
        if let Some(data) = &schedule.calibrated_on {
            check_grid(tests, data, &source)?;
        }
        if schedule.calibrated_on.as_ref().is_some_and(has_words) {
            continue;
        }
        let mut words_checked = false;
        for config in calibrate_configs_of(experiment, &path) {
            let read = sharpdraft_probe::calibrate::text_read_of(
                &config,
                target,
                &experiment.header.target,
                schedule.n0,
            )
            .with_context(|| format!("reading again what {} read", config.display()))?;
            if let Some(read) = read {
                let source = format!(
                    "{source} (as its calibrate config {} reads)",
                    config.display()
                );
                check_grid(tests, &read, &source)?;
                words_checked = true;
            }
        }
        if !words_checked {
            eprintln!(
                "note: schedule {} records {} and the experiment names no calibrate config that made it: its test prompts are checked against {}",
                path.display(),
                if schedule.calibrated_on.is_some() {
                    "no words of its calibration text"
                } else {
                    "no calibration data (written by hand, or by an older `sharpdraft calibrate`)"
                },
                if schedule.calibrated_on.is_some() {
                    "its prompts and tokens only, not its text in another spelling"
                } else {
                    "nothing"
                }
            );
        }
    }
    Ok(())
}
