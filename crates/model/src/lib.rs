//! The model layer of SharpDraft on libtorch: HF-format llama/qwen2/qwen3 checkpoints, an explicit KV
//! cache, attention masks for chains, trees and blocks, hidden-state taps, SharpDraft query scaling, an
//! attention observer, tokenizers and generation. Beside the model, [`cpu`] (the few-row kernel and its
//! instruction-set forms). Where checkpoints come from and live (registry, GGUF import, output folders)
//! is the libtorch-free `sharpdraft-store` crate.

pub mod attention;
pub mod causal_lm;
pub mod config;
pub mod cpu;
pub mod device;
pub mod error;
pub mod generate;
pub mod kv_cache;
pub mod layers;
pub mod mask;
pub mod packed_generate;
pub mod query_scaling;
pub mod rope;
pub mod sampling;
pub mod scaled_queries;
pub mod time_split;
pub mod tokenizer;
pub mod transformer;
pub mod weight_blocks;
pub mod weights;

pub use causal_lm::{
    fastest_dtype, parse_dtype, parse_kind, resolve_dtype, CausalLm, ModelDtype, WeightLoading,
};
pub use config::{HfConfig, ModelConfig};
pub use device::{cuda_available, default_device, parse_device, DEFAULT_DEVICE};
pub use error::{ModelError, Result};
pub use kv_cache::KvCache;
pub use mask::{AttentionMask, KeySelection, Visibility, WindowBound};
pub use query_scaling::{visible_counts, PassFactors, QueryScaling, ScalingMode};
pub use sampling::{is_valid_temperature, Sampler, Sampling, MAX_TEMPERATURE};
pub use scaled_queries::ScaledQueries;
pub use tokenizer::{ChatMessage, TextTokenizer};
pub use transformer::{
    AttentionObserver, AttentionView, ForwardInput, ForwardOutput, LogitRows, Tap, Transformer,
};
