//! Test prompts kept apart from the data a schedule was calibrated on and a drafter trained on. Before
//! a run decodes anything it checks every request of its grid against the schedules its arms read
//! and against the training data of every drafter whose training config it knows
//! (`sharpdraft_data::fingerprint`): a request that holds one of those prompts, or a window of their
//! tokens, is refused, naming the workload, the prompt and the file.

use crate::error::{Context, Result};
use crate::experiment::requests::GridRequests;
use crate::experiment::Experiment;
use sharpdraft_data::fingerprint::{refuse_overlap, training_fingerprint};
use sharpdraft_math::DataFingerprint;
use sharpdraft_model::CausalLm;
use std::path::Path;

/// Refuses every request of the grid (`requests`, built from `experiment`'s workloads) that overlaps
/// `data`, read by `source` (described for the error).
pub fn check_grid(
    experiment: &Experiment,
    requests: &GridRequests,
    data: &DataFingerprint,
    source: &str,
) -> Result<()> {
    for workload in &experiment.workloads {
        let texts = workload.prompts.load(workload.skip, workload.count)?;
        for (context, list) in requests.get(&workload.name).into_iter().flatten() {
            for (prompt, ids) in list {
                let text = texts
                    .get(prompt.saturating_sub(workload.skip))
                    .map_or("", String::as_str);
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
                refuse_overlap(data, text, ids, &what, source)?;
            }
        }
    }
    Ok(())
}

/// Refuses a grid whose requests overlap the training data of a drafter whose training config the
/// experiment names (`train:`). Checked before any training or decoding.
pub fn check_training_data(
    experiment: &Experiment,
    target: &CausalLm,
    requests: &GridRequests,
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
        check_grid(experiment, requests, &data, &source)?;
    }
    Ok(())
}

/// Refuses a grid whose requests overlap the calibration data of a schedule one of its arms reads;
/// a schedule that records none (written by hand, or before it was recorded) is named on stderr.
pub fn check_calibration_data(experiment: &Experiment, requests: &GridRequests) -> Result<()> {
    for path in crate::experiment::requests::schedule_files(experiment)? {
        let schedule = sharpdraft_math::ScaleSchedule::load(&path)?;
        match &schedule.calibrated_on {
            Some(data) => check_grid(
                experiment,
                requests,
                data,
                &format!("the calibration of schedule {}", path.display()),
            )?,
            None => eprintln!(
                "note: schedule {} records no calibration data (written by hand, or by an older `sharpdraft calibrate`): its test prompts are not checked against it",
                path.display()
            ),
        }
    }
    Ok(())
}
