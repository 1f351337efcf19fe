//! Errors of the lab layer (configs, runs, training, probes and calibrations). Every message names the file, key
//! or value at fault; `Context` records what the run was doing, outermost first, so `to_string()` reads
//! as one line from the command down to the cause and callers can still match on the cause (`root`).

pub type Result<T, E = LabError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A config key, option or data value the run cannot use; the message names it.
    #[error("{0}")]
    Invalid(String),

    /// A file the run could not read or write (the path is in the enclosing `Context`).
    #[error(transparent)]
    Io(#[from] std::io::Error),

    #[error(transparent)]
    Yaml(#[from] serde_norway::Error),

    #[error(transparent)]
    Json(#[from] serde_json::Error),

    /// A table or chart that could not be written or read.
    #[error(transparent)]
    Report(#[from] sharpdraft_report::ReportError),

    #[error(transparent)]
    Math(#[from] sharpdraft_math::MathError),

    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),

    /// Data that could not be read from its source.
    #[error(transparent)]
    Data(#[from] sharpdraft_data::DataError),

    #[error(transparent)]
    Store(#[from] sharpdraft_store::StoreError),

    #[error(transparent)]
    Draft(#[from] sharpdraft_draft::DraftError),

    #[error(transparent)]
    Decode(#[from] sharpdraft_decode::DecodeError),

    #[error(transparent)]
    Probe(#[from] sharpdraft_probe::ProbeError),

    #[error(transparent)]
    Torch(#[from] tch::TchError),

    /// What the run was doing when `cause` happened. Displayed as `context: cause` (the whole chain on
    /// one line); the field is not a `source()` so reporters that walk the chain do not print it twice.
    #[error("{context}: {cause}")]
    Context {
        context: String,
        cause: Box<LabError>,
    },
}

sharpdraft_store::context_chain!(LabError);

sharpdraft_store::bail_and_ensure!($ crate::error::LabError);

pub(crate) use {bail, ensure};
