//! Experiments: a YAML grid in (`config`), its requests and the digest of its inputs (`requests`),
//! units run with their arms interleaved (`grid`: the rotation and shards; `runner`) and written one by
//! one into a locked run folder (`run_folder`, `provenance`) that resumes at a killed unit's next
//! request and shards, the tables and report published from it (`publish`), shards joined (`merge`).
//! The records a run writes, the tables, intervals and report built from them are
//! `sharpdraft_report`'s (libtorch-free), fed the experiment's `outline()`; the folder lock is
//! `sharpdraft_store`'s. docs/experiments.md is the user's guide.

pub mod config;
pub mod grid;
pub mod merge;
pub mod prompts;
pub mod provenance;
pub mod publish;
pub mod requests;
pub mod run_folder;
pub mod runner;

pub use config::{Experiment, Setting};
pub use grid::Shard;
pub use runner::{run, RunOptions, RunOutcome};
pub use sharpdraft_report::grid::{Arm, Unit};
