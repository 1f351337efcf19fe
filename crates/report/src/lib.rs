//! What a run's numbers become, apart from the engine that measured them and without libtorch.
//!
//! A run folder's records: the experiment as a report sees it ([`outline`]), its grid of units and
//! arms ([`grid`]), the per-unit and per-cycle records a run writes ([`records`], [`partial_unit`]).
//! What is built from them: samples joined to their baseline ([`samples`]), the typed tables with
//! intervals over prompts ([`tables`], [`acceptance`]), the run's own timing noise ([`timing_noise`]),
//! the calibrated schedule against each other method ([`head_to_head`]) and the report with its
//! charts ([`report`]).
//!
//! The tools under them: parquet tables of named, typed columns ([`table`]), written from and read into
//! rows of a struct ([`columns`]), intervals over prompts (bootstrap medians and paired ratios:
//! [`intervals`]), PNG charts ([`charts`]), and what else the machine was doing while something was
//! timed, with the wait for quiet that keeps a decode's timing clean ([`machine_state`]).
//! `cargo test -p sharpdraft-report` builds and runs without libtorch.

pub mod acceptance;
pub mod charts;
pub mod columns;
pub mod error;
pub mod grid;
pub mod head_to_head;
pub mod intervals;
pub mod machine_state;
pub mod multiplicity;
pub mod outline;
pub mod partial_unit;
pub mod records;
pub mod report;
pub mod samples;
pub mod table;
pub mod tables;
pub mod timing_noise;
pub mod unit_provenance;

pub use error::{ReportError, Result};
