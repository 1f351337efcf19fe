//! `sharpdraft`: the SharpDraft workbench command line.

mod commands;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sharpdraft", version, about = "Workbench for long-context speculative decoding and cardinality-aware query scaling")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate Model A: dilution, the exact correction s*(n) and the fixed slopes over [n0, range-end].
    Derive(commands::derive::DeriveArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Derive(args) => commands::derive::run(&args),
    }
}
