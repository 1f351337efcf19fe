//! The probe's one error type: a model or drafter failure, input the probe cannot use (named), and
//! what its runs (`probe`, `calibrate`) read and write: configs, data, tables, schedules. `Context`
//! records what was being done, outermost first, so `to_string()` reads as one line down to the cause.

pub type Result<T, E = ProbeError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A config key, tensor or value the probe cannot use; the message names it.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),
    #[error(transparent)]
    Draft(#[from] sharpdraft_draft::DraftError),
    #[error(transparent)]
    Decode(#[from] sharpdraft_decode::DecodeError),
    #[error(transparent)]
    Math(#[from] sharpdraft_math::MathError),
    #[error(transparent)]
    Data(#[from] sharpdraft_data::DataError),
    #[error(transparent)]
    Store(#[from] sharpdraft_store::StoreError),
    /// A table or chart that could not be written or read.
    #[error(transparent)]
    Report(#[from] sharpdraft_report::ReportError),
    /// A file that could not be read or written (the path is in the enclosing `Context`).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Yaml(#[from] serde_norway::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// What the run was doing when `cause` happened, displayed as `context: cause`.
    #[error("{context}: {cause}")]
    Context {
        context: String,
        cause: Box<ProbeError>,
    },
}

sharpdraft_store::context_chain!(ProbeError);

sharpdraft_store::bail_and_ensure!($ crate::error::ProbeError);

pub(crate) use {bail, ensure};
