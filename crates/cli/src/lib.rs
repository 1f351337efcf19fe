//! The SharpDraft workbench command line: the command tree (`Cli`, also read by the tests that walk
//! every flag) and the commands behind it.

pub mod allocator;
pub mod commands;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sharpdraft",
    version,
    about = "Workbench for long-context speculative decoding and cardinality-aware query scaling"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Load drafters whose training run has not finished (killed, or still running) as they are;
    /// without it such a folder is refused.
    #[arg(long, global = true)]
    pub allow_unfinished: bool,
}

#[derive(Subcommand)]
pub enum Command {
    /// Evaluate Model A: dilution, the exact correction s*(n) and the fixed slopes over [n0, range-end].
    Derive(commands::derive::DeriveArgs),
    /// Download and import a known model into $SHARPDRAFT_HOME (default ~/.cache/sharpdraft).
    Fetch(commands::models::FetchArgs),
    /// Convert a model from another format.
    #[command(subcommand)]
    Import(commands::models::ImportCommand),
    /// Initialise a drafter checkpoint (random weights, published layout).
    #[command(subcommand)]
    Init(commands::models::InitCommand),
    /// Generate text with a target model, autoregressively or with a drafter.
    Generate(commands::generate::GenerateArgs),
    /// Acceptance (tau) of a drafter on held-out chat prompts at chosen context lengths.
    Tau(commands::tau::TauArgs),
    /// Top logits of a model for the last position of a raw prompt.
    Logits(commands::generate::LogitsArgs),
    /// Train a drafter for a target from a YAML config (see configs/train/).
    Train { config: std::path::PathBuf },
    /// Attention statistics of a drafter (or the target) over long texts, per layer/head/length bin
    /// (see configs/probe/); writes parquet.
    Probe { config: std::path::PathBuf },
    /// Fit beta from probe statistics with every estimator and write a schedule YAML (see
    /// configs/calibrate/); runs the probe first when needed.
    Calibrate { config: std::path::PathBuf },
    /// Run an experiment YAML (see experiments/) into a run folder: parquet tables and report.md;
    /// resumable (--resume) and shardable (--shard I/N).
    Run(commands::experiment::RunArgs),
    /// Join the shard folders of one experiment into one run folder, with its tables and report.
    Merge(commands::experiment::MergeArgs),
    /// Rebuild a run folder's tables and report.md (charts included) from its finished units; with
    /// --out, from a run folder or a results folder (experiment.json, results.parquet, cycles.parquet)
    /// into a new folder.
    Report(commands::experiment::ReportArgs),
    /// Throughput benchmarks.
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    // A SHARPDRAFT_KERNEL this CPU cannot run stops every command here, before any work.
    sharpdraft_kernel::form::check_requested()?;
    sharpdraft_store::output_folder::set_allow_unfinished(cli.allow_unfinished);
    match cli.command {
        Command::Derive(args) => commands::derive::run(&args),
        Command::Fetch(args) => commands::models::fetch(&args),
        Command::Import(command) => commands::models::import(&command),
        Command::Init(command) => commands::models::init(&command),
        Command::Generate(args) => commands::generate::run_generate(&args),
        Command::Tau(args) => commands::tau::run(&args),
        Command::Logits(args) => commands::generate::run_logits(&args),
        Command::Bench(command) => commands::bench::run(&command),
        Command::Run(args) => commands::experiment::run(&args),
        Command::Merge(args) => commands::experiment::merge_shards(&args),
        Command::Report(args) => commands::experiment::report(&args),
        Command::Probe { config } => {
            let out = sharpdraft_probe::run::run(&config)?;
            sharpdraft_probe::run::print_summary(&out);
            println!(
                "probe statistics: {}",
                sharpdraft_store::paths::shown(&out.dir.join("stats.parquet"))
            );
            Ok(())
        }
        Command::Calibrate { config } => {
            let out = sharpdraft_probe::calibrate::run(&config)?;
            println!("calibration: {}", sharpdraft_store::paths::shown(&out.dir));
            Ok(())
        }
        Command::Train { config } => {
            let out = sharpdraft_lab::train::run(&config)?;
            println!("trained drafter: {}", sharpdraft_store::paths::shown(&out));
            Ok(())
        }
    }
}
