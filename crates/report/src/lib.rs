//! What a run's numbers become, apart from the engine that measured them and without libtorch:
//! parquet tables of named, typed columns ([`table`]), written from rows of a struct ([`columns`]), intervals over prompts (bootstrap medians and
//! paired ratios: [`intervals`]) and PNG charts ([`charts`]). `cargo test -p sharpdraft-report` builds
//! and runs without libtorch.

pub mod charts;
pub mod columns;
pub mod error;
pub mod intervals;
pub mod table;

pub use error::{ReportError, Result};
