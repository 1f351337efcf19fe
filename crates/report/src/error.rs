//! What can go wrong writing or reading a table or a chart: a value the caller gave (a ragged or
//! missing column), a file step, or a drawing call, each naming the column or the file.

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A column or value the caller asked for that the table does not hold; the message names it.
    #[error("{0}")]
    Invalid(String),

    /// A step on a file that failed: what it was doing (`writing <path>`) and why.
    #[error("{doing}: {reason}")]
    Failed { doing: String, reason: String },

    /// A chart the plotting backend could not draw.
    #[error("drawing {path}: {reason}")]
    Plot { path: String, reason: String },
}

impl ReportError {
    pub fn failed(doing: impl std::fmt::Display, reason: impl std::fmt::Display) -> Self {
        ReportError::Failed {
            doing: doing.to_string(),
            reason: reason.to_string(),
        }
    }
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;
