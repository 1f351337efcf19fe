//! `sharpdraft run`, `merge` and `report`: experiments from YAML into run folders (parquet tables and a
//! report), and shards joined.

use anyhow::Result;
use clap::Args;
use sharpdraft_lab::experiment::merge::merge;
use sharpdraft_lab::experiment::publish::{self, Published};
use sharpdraft_lab::experiment::run_folder::experiment_record;
use sharpdraft_lab::experiment::{self, RunOptions, Shard};
use sharpdraft_report::report::headline;
use sharpdraft_store::paths::shown;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The experiment YAML (see experiments/).
    pub experiment: PathBuf,
    /// The run folder; default runs/<name> (runs/<name>.shard-I-of-N for a shard).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue this experiment's run in the folder: finished units are kept and skipped.
    #[arg(long)]
    pub resume: bool,
    /// Run shard I of N (0-based): every unit whose grid position is I modulo N. Required inside a
    /// SLURM array task (SLURM_ARRAY_TASK_ID set), whose array bounds do not give the grid's N.
    #[arg(long)]
    pub shard: Option<String>,
    /// Train and calibrate a missing drafter even when the repository ships it, as the quickstart's
    /// (an installed shipped copy and its schedule are moved aside, never deleted).
    #[arg(long)]
    pub retrain: bool,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The merged run folder (new, or an earlier merge of the same experiment).
    pub out: PathBuf,
    /// The shard run folders.
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A run folder, or (with --out) a results folder: experiment.json beside results.parquet and
    /// cycles.parquet, as under experiments/results/.
    pub source: PathBuf,
    /// Write the tables, report and charts into this folder (new, or an earlier `report --out`'s)
    /// instead of rebuilding the run folder in place.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn print_headline(dir: &Path, published: &Published) -> Result<()> {
    let experiment =
        experiment_record(&dir.join(sharpdraft_lab::experiment::run_folder::EXPERIMENT_RECORD))?;
    println!(
        "{}",
        headline(
            &published.summary,
            &experiment.outline(),
            published.noise.as_ref()
        )
    );
    println!("report: {}", shown(&dir.join("report.md")));
    Ok(())
}

pub fn run(args: &RunArgs) -> Result<()> {
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let outcome = experiment::run(
        &args.experiment,
        &RunOptions {
            out: args.out.clone(),
            resume: args.resume,
            shard,
            retrain: args.retrain,
        },
    )?;
    eprintln!(
        "{}: {} units run, {} already finished{}",
        shown(&outcome.dir),
        outcome.ran,
        outcome.skipped,
        if outcome.finished {
            ""
        } else {
            " (the grid's other shards are not in this folder: `sharpdraft merge` joins them)"
        }
    );
    print_headline(&outcome.dir, &outcome.published)
}

pub fn merge_shards(args: &MergeArgs) -> Result<()> {
    let outcome = merge(&args.out, &args.shards)?;
    eprintln!(
        "{}: {} units{}",
        shown(&outcome.dir),
        outcome.units,
        if outcome.finished {
            ", the whole grid"
        } else {
            " (some units of the grid are missing)"
        }
    );
    print_headline(&outcome.dir, &outcome.published)
}

pub fn report(args: &ReportArgs) -> Result<()> {
    match &args.out {
        Some(out) => {
            let published = publish::report_into(&args.source, out)?;
            print_headline(out, &published)
        }
        None => {
            let published = publish::republish(&args.source)?;
            print_headline(&args.source, &published)
        }
    }
}
