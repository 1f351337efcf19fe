//! Errors of the model layer; each names the file, field, tensor or value at fault.

use std::path::Path;

pub type Result<T> = std::result::Result<T, ModelError>;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("device {device:?}: {reason}")]
    Device { device: String, reason: String },

    #[error("tensor {name}: {reason}")]
    Tensor { name: String, reason: String },

    #[error("config {field}: {reason}")]
    Config { field: String, reason: String },

    /// A checkpoint whose tensors do not match the architecture: every problem, each on its own line.
    #[error("checkpoint {path}: {} problem(s)\n  {}", problems.len(), problems.join("\n  "))]
    Checkpoint { path: String, problems: Vec<String> },

    #[error("{path}: {reason}")]
    File { path: String, reason: String },

    #[error("KV cache: {0}")]
    Cache(String),

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error(transparent)]
    Torch(#[from] tch::TchError),
}

impl ModelError {
    pub fn io(path: &Path, error: impl std::fmt::Display) -> Self {
        ModelError::File {
            path: path.display().to_string(),
            reason: error.to_string(),
        }
    }

    pub fn tensor(name: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError::Tensor {
            name: name.into(),
            reason: reason.into(),
        }
    }
}
