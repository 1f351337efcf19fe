//! Errors of the lab layer (configs, datasets, runs, tables, charts). Every message names the file, key
//! or value at fault; `Context` records what the run was doing, outermost first, so `to_string()` reads
//! as one line from the command down to the cause and callers can still match on the cause (`root`).

use std::fmt::Display;

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

    #[error(transparent)]
    Utf8(#[from] std::string::FromUtf8Error),

    /// A package archive (wheel) that would not unpack.
    #[error(transparent)]
    Archive(#[from] zip::result::ZipError),

    /// A table or chart that could not be written or read.
    #[error(transparent)]
    Report(#[from] sharpdraft_report::ReportError),

    /// An external program (pip, tar) that failed or is missing.
    #[error("{program}: {reason}")]
    Program { program: String, reason: String },

    #[error(transparent)]
    Math(#[from] sharpdraft_math::MathError),

    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),

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

impl LabError {
    /// The cause under every `Context`: what to match on.
    pub fn root(&self) -> &LabError {
        match self {
            LabError::Context { cause, .. } => cause.root(),
            other => other,
        }
    }

    /// The contexts from the outermost in, without the cause.
    pub fn contexts(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut at = self;
        while let LabError::Context { context, cause } = at {
            out.push(context.as_str());
            at = cause;
        }
        out
    }
}

/// `.context(..)` / `.with_context(|| ..)` on results and options, as anyhow's, into a `LabError`.
pub trait Context<T> {
    fn context<C: Display>(self, context: C) -> Result<T>;
    fn with_context<C: Display, F: FnOnce() -> C>(self, context: F) -> Result<T>;
}

impl<T, E: Into<LabError>> Context<T> for std::result::Result<T, E> {
    fn context<C: Display>(self, context: C) -> Result<T> {
        self.map_err(|e| LabError::Context {
            context: context.to_string(),
            cause: Box::new(e.into()),
        })
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, context: F) -> Result<T> {
        self.map_err(|e| LabError::Context {
            context: context().to_string(),
            cause: Box::new(e.into()),
        })
    }
}

/// A missing value is an invalid input; the context is the whole message.
impl<T> Context<T> for Option<T> {
    fn context<C: Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| LabError::Invalid(context.to_string()))
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, context: F) -> Result<T> {
        self.ok_or_else(|| LabError::Invalid(context().to_string()))
    }
}

/// Returns `LabError::Invalid` with a formatted message.
macro_rules! bail {
    ($($message:tt)+) => {
        return Err($crate::error::LabError::Invalid(format!($($message)+)))
    };
}

/// Returns `LabError::Invalid` with a formatted message unless the condition holds.
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {{
        // Bound first: `!(x >= y)` on floats reads as `x < y` and is not (NaN).
        let holds: bool = $condition;
        if !holds {
            $crate::error::bail!($($message)+);
        }
    }};
}

pub(crate) use {bail, ensure};
