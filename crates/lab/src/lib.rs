//! The lab: what sits on top of the engine for research runs. Datasets from the package registries and
//! drafter training today; experiment runs and reports with the next steps.

pub mod datasets;
pub mod train;
