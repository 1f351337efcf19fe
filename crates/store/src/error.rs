//! What can go wrong in the store: a file (read, written, fetched or imported) or a tensor of an
//! imported checkpoint, each named.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {reason}")]
    File { path: String, reason: String },

    #[error("tensor {name}: {reason}")]
    Tensor { name: String, reason: String },

    /// A step on a file that failed: what it was doing (`writing <path>`) and why.
    #[error("{doing}: {reason}")]
    Failed { doing: String, reason: String },

    /// A command refused before it touched anything (a folder in use, say); the message says why.
    #[error("{0}")]
    Refused(String),
}

impl StoreError {
    pub fn io(path: &Path, error: impl std::fmt::Display) -> Self {
        StoreError::File {
            path: path.display().to_string(),
            reason: error.to_string(),
        }
    }

    pub fn failed(doing: impl std::fmt::Display, reason: impl std::fmt::Display) -> Self {
        StoreError::Failed {
            doing: doing.to_string(),
            reason: reason.to_string(),
        }
    }

    pub fn tensor(name: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Tensor {
            name: name.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
