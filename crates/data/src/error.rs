//! What can go wrong reading data from the registries: a source a config names that is not there or
//! not usable (named), a file or archive step, an external program (pip, tar), or the target that
//! tokenizes and continues the text. `Context` records what was being read, outermost first.

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A source, key or value the data cannot be read from; the message names it.
    #[error("{0}")]
    Invalid(String),

    /// A file that could not be read or written (the path is in the enclosing `Context`).
    #[error(transparent)]
    Io(#[from] std::io::Error),

    #[error(transparent)]
    Yaml(#[from] serde_norway::Error),

    #[error(transparent)]
    Json(#[from] serde_json::Error),

    #[error(transparent)]
    Utf8(#[from] std::string::FromUtf8Error),

    /// A package archive (wheel) that would not unpack.
    #[error(transparent)]
    Archive(#[from] zip::result::ZipError),

    /// An external program (pip, tar) that failed or is missing.
    #[error("{program}: {reason}")]
    Program { program: String, reason: String },

    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),

    #[error(transparent)]
    Store(#[from] sharpdraft_store::StoreError),

    /// What was being read when `cause` happened, displayed as `context: cause`.
    #[error("{context}: {cause}")]
    Context {
        context: String,
        cause: Box<DataError>,
    },
}

pub type Result<T, E = DataError> = std::result::Result<T, E>;

sharpdraft_store::context_chain!(DataError);

sharpdraft_store::bail_and_ensure!($ crate::error::DataError);

pub(crate) use {bail, ensure};
