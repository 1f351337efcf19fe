//! A run's tables, report and charts, written from its requests ([`sharpdraft_report::samples`]):
//! - into its run folder, after `run` and `merge` and by `sharpdraft report RUN` ([`publish`],
//!   [`republish`]);
//! - into a new folder by `sharpdraft report SOURCE --out OUT` ([`report_into`]), where SOURCE is a
//!   run folder or a results folder that keeps only `experiment.json`, `results.parquet` and
//!   `cycles.parquet` (as `experiments/results/*` do): the summary and report are computed again with
//!   this version's statistics, so a committed result never waits for its run folder.

use super::run_folder::{
    experiment_record, recorded_experiment, EXPERIMENT_RECORD, RUN_KIND, UNITS,
};
use crate::error::{bail, ensure, Context, Result};
use sharpdraft_report::grid::Unit;
use sharpdraft_report::outline::Outline;
use sharpdraft_report::partial_unit::PartialUnit;
use sharpdraft_report::records::UnitRecord;
use sharpdraft_report::report::{self, ReportInputs};
use sharpdraft_report::samples::{self, RequestSample};
use sharpdraft_report::table::Table;
use sharpdraft_report::tables::{self, SummaryRow, CYCLES, RESULTS};
use sharpdraft_report::timing_noise::{self, VerifySpread};
use sharpdraft_report::unit_provenance;
use sharpdraft_store::folder_lock::FolderLock;
use sharpdraft_store::output_folder::{self, Marker, Staging};
use std::collections::BTreeSet;
use std::path::Path;

/// The marker kind of a folder `report --out` wrote.
pub const REPORT_KIND: &str = "report";

/// What a published run says: the summary's rows in the experiment's order, and the run's timing
/// noise (none under 10 ratios).
#[derive(Debug)]
pub struct Published {
    pub summary: Vec<SummaryRow>,
    pub noise: Option<VerifySpread>,
}

/// Writes the tables and the report of the experiment `outline` into run folder `dir` from its finished `units`,
/// with the requests its unfinished units have.
pub fn publish(dir: &Path, outline: &Outline, units: &[UnitRecord]) -> Result<Published> {
    sharpdraft_report::records::ensure_one_timing_setting(
        units
            .iter()
            .map(|u| (format!("unit {}", u.unit.id()), &u.provenance)),
    )?;
    let samples = samples::from_units(outline, units);
    let finished: Vec<&Unit> = units.iter().map(|r| &r.unit).collect();
    let unfinished = PartialUnit::read_unfinished(&dir.join(UNITS), outline, &finished);
    write_all(dir, outline, &samples, &finished, &unfinished)
}

/// The tables, the report and its charts of `samples` into `dir`.
fn write_all(
    dir: &Path,
    outline: &Outline,
    samples: &[RequestSample],
    finished: &[&Unit],
    unfinished: &[PartialUnit],
) -> Result<Published> {
    let tables = tables::write_tables(dir, outline, samples)?;
    let summary = report::in_experiment_order(&tables.summary, outline);
    let noise = timing_noise::verify_spread(outline, samples);
    report::write(
        dir,
        outline,
        &ReportInputs {
            rows: &summary,
            noise: noise.as_ref(),
            acceptance: &tables.acceptance,
            head_to_head: &tables.head_to_head,
            family: tables.family,
            provenance: &unit_provenance::of_samples(samples),
            finished,
            unfinished,
        },
    )?;
    Ok(Published { summary, noise })
}

/// `sharpdraft report RUN`: the tables and report of run folder `dir` rebuilt in place from its
/// finished units.
pub fn republish(dir: &Path) -> Result<Published> {
    let _lock = FolderLock::acquire(dir, "report")?;
    let outline = recorded_experiment(dir)?.outline();
    ensure!(
        Marker::read(dir)?.is_some_and(|m| m.proven(dir)),
        "{}: its marker does not prove sharpdraft wrote this folder (copied, written by hand, or by an older version): refusing to rewrite its tables and report; `sharpdraft report {} --out NEW` rebuilds them in a new folder",
        dir.display(),
        dir.display()
    );
    let records = UnitRecord::read_belonging(&dir.join(UNITS), &outline)?;
    publish(dir, &outline, &records)
}

/// The experiment and requests of `source`: a run folder's finished units, or a results folder's
/// `results.parquet` and `cycles.parquet` (checked to be of the experiment its `experiment.json`
/// records, and of one run: a request is one row, and its cycles add up to its row's counts).
fn read_source(source: &Path) -> Result<(Outline, Vec<RequestSample>)> {
    let is_run = Marker::read(source)?.is_some_and(|m| m.kind == RUN_KIND);
    if is_run {
        let outline = recorded_experiment(source)?.outline();
        let records = UnitRecord::read_belonging(&source.join(UNITS), &outline)?;
        let samples = samples::from_units(&outline, &records);
        return Ok((outline, samples));
    }
    let record = source.join(EXPERIMENT_RECORD);
    let results_path = source.join(RESULTS);
    if !(record.is_file() && results_path.is_file()) {
        bail!(
            "{}: neither a run folder (its marker names `sharpdraft run`) nor a results folder ({EXPERIMENT_RECORD} and {RESULTS} beside each other)",
            source.display()
        );
    }
    let outline = experiment_record(&record)?.outline();
    let results = Table::read_parquet(&results_path)?;
    // Every run writes its cycles beside its results (an empty table when nothing drafted): a results
    // folder without them would report tau and acceptance from nothing.
    let cycles_path = source.join(CYCLES);
    ensure!(
        cycles_path.is_file(),
        "{}: missing beside {}: a results folder keeps both of its run's raw tables",
        cycles_path.display(),
        results_path.display()
    );
    let cycles = Table::read_parquet(&cycles_path)?;
    let samples = samples::read(
        &outline,
        &results,
        &cycles,
        &results_path.display().to_string(),
        &cycles_path.display().to_string(),
    )?;
    if let Some(other) = samples
        .iter()
        .find(|s| s.provenance.config_hash != outline.hash())
    {
        bail!(
            "{}: a row of config hash {}, not {}'s {}: the tables and the experiment record are of different runs",
            results_path.display(),
            other.provenance.config_hash,
            record.display(),
            outline.hash()
        );
    }
    Ok((outline, samples))
}

/// `sharpdraft report SOURCE --out OUT`: the experiment record, the four tables, the report and its
/// charts of `source` (a run folder or a results folder) written whole into `out`, a new folder or
/// one an earlier `report --out` wrote (replaced whole once the new one is complete).
pub fn report_into(source: &Path, out: &Path) -> Result<Published> {
    let _lock = match Marker::read(source)?.is_some_and(|m| m.kind == RUN_KIND) {
        true => Some(FolderLock::acquire(source, "report")?),
        false => None,
    };
    let (outline, samples) = read_source(source)?;
    output_folder::claim(out, REPORT_KIND, &[source])?;
    let staging = Staging::new(out)?;
    let record = source.join(EXPERIMENT_RECORD);
    std::fs::copy(&record, staging.path().join(EXPERIMENT_RECORD))
        .with_context(|| format!("copying {}", record.display()))?;
    let finished: BTreeSet<&Unit> = samples.iter().map(|s| &s.unit).collect();
    let finished: Vec<&Unit> = finished.into_iter().collect();
    let published = write_all(staging.path(), &outline, &samples, &finished, &[])?;
    let mut marker = Marker::new(REPORT_KIND, true, outline.header.name.clone());
    staging.commit(&mut marker, true)?;
    Ok(published)
}
