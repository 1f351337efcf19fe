//! Experiments: a YAML grid in (`config`), its requests and the digest of its inputs (`requests`),
//! units run with their arms interleaved and written one by one into a locked run folder that resumes
//! (at a killed unit's next request: `partial_unit`) and shards (`grid`, `runner`, `records`; the
//! folder lock and the load check are `sharpdraft_store`'s and `sharpdraft_report`'s), typed tables
//! with intervals over prompts and a report out (`samples`, `tables`, `acceptance`, `report`, with the
//! run's own timing noise: `timing_noise`, and the calibrated schedule against each other method:
//! `head_to_head`), shards joined (`merge`).
//! docs/experiments.md is the user's guide.

pub mod acceptance;
pub mod config;
pub mod grid;
pub mod head_to_head;
pub mod merge;
pub mod partial_unit;
pub mod prompts;
pub mod publish;
pub mod records;
pub mod report;
pub mod requests;
pub mod run_folder;
pub mod runner;
pub mod samples;
pub mod tables;
pub mod timing_noise;

pub use config::{Experiment, Setting};
pub use grid::{Arm, Shard, Unit};
pub use runner::{run, RunOptions, RunOutcome};
