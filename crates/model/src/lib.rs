//! The model layer of SharpDraft on libtorch: HF-format llama/qwen2/qwen3 checkpoints (and GGUF import),
//! an explicit KV cache, attention masks for chains, trees and blocks, hidden-state taps, the SharpDraft
//! query-scale hook, an attention observer, tokenizers and generation.

pub mod attention_mass;
pub mod causal_lm;
pub mod config;
pub mod device;
pub mod error;
pub mod few_rows;
#[cfg(target_arch = "x86_64")]
mod few_rows_avx2;
pub mod generate;
pub mod gguf;
pub mod gguf_check;
pub mod kernel_form;
pub mod kernel_workers;
pub mod kv_cache;
pub mod layers;
pub mod mask;
pub mod output_folder;
pub mod packed_generate;
pub mod query_scaling;
pub mod registry;
pub mod rope;
pub mod sampling;
pub mod tokenizer;
pub mod transformer;
pub mod weights;

pub use attention_mass::{top_k_mass_batch, TopKMassBatch};
pub use causal_lm::{parse_kind, CausalLm, WeightLoading};
pub use config::{HfConfig, ModelConfig};
pub use device::{cuda_available, parse_device};
pub use error::{ModelError, Result};
pub use kv_cache::KvCache;
pub use mask::{AttentionMask, KeySelection};
pub use query_scaling::{visible_counts, PassFactors, QueryScaling, ScalingMode};
pub use sampling::{Sampler, Sampling};
pub use tokenizer::{ChatMessage, TextTokenizer};
pub use transformer::{
    AttentionObserver, AttentionView, ForwardInput, ForwardOutput, LogitRows, Tap, Transformer,
};
