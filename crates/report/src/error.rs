//! What can go wrong writing or reading a run's records, tables and charts: a value the caller gave (a
//! ragged or missing column, a unit of another run), a file step, or a drawing call, each naming the
//! column or the file. `Context` records what was being done, outermost first, so `to_string()` reads
//! as one line from the step down to the cause.

use std::fmt::Display;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A column, record or value the caller asked for that is not there or not this run's; the message
    /// names it.
    #[error("{0}")]
    Invalid(String),

    /// A step on a file that failed: what it was doing (`writing <path>`) and why.
    #[error("{doing}: {reason}")]
    Failed { doing: String, reason: String },

    /// A chart the plotting backend could not draw.
    #[error("drawing {path}: {reason}")]
    Plot { path: String, reason: String },

    /// A file that could not be read or written (the path is in the enclosing `Context`).
    #[error(transparent)]
    Io(#[from] std::io::Error),

    /// A record that is not the JSON this version writes.
    #[error(transparent)]
    Json(#[from] serde_json::Error),

    /// A write through the store's atomic rename.
    #[error(transparent)]
    Store(#[from] sharpdraft_store::StoreError),

    /// What was being done when `cause` happened, displayed as `context: cause`.
    #[error("{context}: {cause}")]
    Context {
        context: String,
        cause: Box<ReportError>,
    },
}

impl ReportError {
    pub fn failed(doing: impl Display, reason: impl Display) -> Self {
        ReportError::Failed {
            doing: doing.to_string(),
            reason: reason.to_string(),
        }
    }
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;

sharpdraft_store::context_chain!(ReportError);

sharpdraft_store::bail_and_ensure!($ crate::error::ReportError);

pub(crate) use {bail, ensure};
