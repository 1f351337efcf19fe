//! The lab: what sits on top of the engine for research runs: experiments (the runner, its run folders,
//! publishing and merging; the tables and report are `sharpdraft_report`'s) and drafter training. Data
//! comes from `sharpdraft_data`, probe and calibration runs are `sharpdraft_probe`'s.

pub mod error;
pub mod experiment;
pub mod held_out;
pub mod loss_curve;
pub mod target_windows;
pub mod train;

pub use error::{LabError, Result};
