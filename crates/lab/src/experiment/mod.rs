//! Experiments: a YAML grid in (`config`), units run and written one by one into a run folder that
//! resumes and shards (`grid`, `runner`, `records`), parquet tables and a report out (`tables`,
//! `report`), shards joined (`merge`). README "Experiments" is the user's guide.

pub mod config;
pub mod grid;
pub mod merge;
pub mod prompts;
pub mod records;
pub mod report;
pub mod run_folder;
pub mod runner;
pub mod tables;

pub use config::{Experiment, Setting};
pub use grid::{Shard, Unit};
pub use runner::{run, RunOptions, RunOutcome};
