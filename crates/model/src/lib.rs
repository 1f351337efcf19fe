//! The model layer of SharpDraft on libtorch. Step 1 holds device selection and the tensor form of the
//! top-k mass statistics; the targets (Llama/Qwen), KV cache and hooks arrive with step 2.

pub mod attention_mass;
pub mod device;
pub mod error;

pub use attention_mass::{top_k_mass_batch, TopKMassBatch};
pub use device::{cuda_available, parse_device};
pub use error::{ModelError, Result};
