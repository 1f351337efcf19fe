//! The lab: what sits on top of the engine for research runs. Datasets from the package registries,
//! drafter training, probe and calibration runs, and experiments: runs, their tables and reports.

pub mod calibrate_run;
pub mod datasets;
pub mod error;
pub mod experiment;
pub mod held_out;
pub mod loss_curve;
pub mod probe_run;
pub mod target_windows;
pub mod train;

pub use error::{LabError, Result};
