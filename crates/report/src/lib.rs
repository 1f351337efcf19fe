//! What a run's numbers become, apart from the engine that measured them and without libtorch:
//! parquet tables of named, typed columns ([`table`]), written from and read into rows of a struct
//! ([`columns`]), intervals over prompts (bootstrap medians and paired ratios: [`intervals`]), PNG
//! charts ([`charts`]), and what else the machine was doing while something was timed, with the wait
//! for quiet that keeps a decode's timing clean ([`machine_state`]). `cargo test -p sharpdraft-report`
//! builds and runs without libtorch.

pub mod charts;
pub mod columns;
pub mod error;
pub mod intervals;
pub mod machine_state;
pub mod table;

pub use error::{ReportError, Result};
