//! A loaded checkpoint folder: config, weights (strictly matched), tokenizer and chat template.

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::tokenizer::TextTokenizer;
use crate::transformer::Transformer;
use crate::weights::{checkpoint_files, hf_route, load_mapped, load_strict, MappedCheckpoint};
use std::path::{Path, PathBuf};
use tch::{nn::VarStore, Device, Kind};

pub struct CausalLm {
    /// Owns the weights; kept apart from any drafter's store so freezing and optimizers stay separate.
    pub vars: VarStore,
    pub net: Transformer,
    pub tokenizer: Option<TextTokenizer>,
    pub dir: PathBuf,
    /// The checkpoint file, when variables use it in place (a CPU model in the file's dtype); declared
    /// after `vars` and `net` so that it is dropped after them.
    mapped: MappedCheckpoint,
}

/// `f32`, `bf16` or `f16`.
pub fn parse_kind(name: &str) -> Result<Kind> {
    match name {
        "f32" | "float32" => Ok(Kind::Float),
        "bf16" | "bfloat16" => Ok(Kind::BFloat16),
        "f16" | "float16" => Ok(Kind::Half),
        other => Err(ModelError::Config {
            field: "dtype".into(),
            reason: format!("{other:?} is not one of f32, bf16, f16"),
        }),
    }
}

/// How the weights get from the checkpoint file into the model's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLoading {
    /// Each variable is allocated and filled with a converted copy (any dtype, any device).
    Copy,
    /// CPU variables in the file's own dtype use the mapped file as their storage (no copy; the rest
    /// are copied).
    InPlace,
}

impl CausalLm {
    /// Loads `dir` (config.json, model.safetensors or shards, optional tokenizer files) in `kind` on `device`,
    /// in place where it can ([`WeightLoading::InPlace`]).
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        Self::load_as(dir, device, kind, WeightLoading::InPlace)
    }

    /// [`Self::load`] with the weights loaded as `loading` says (the load benchmark compares both).
    pub fn load_as(dir: &Path, device: Device, kind: Kind, loading: WeightLoading) -> Result<Self> {
        if !dir.is_dir() {
            return Err(ModelError::io(dir, "not a model folder"));
        }
        let config = ModelConfig::from_folder(dir)?;
        let tied = config.tie_word_embeddings;
        let mut vars = VarStore::new(device);
        let mut net = Transformer::new(&vars.root(), config);
        // Convert before filling, so that copies cast straight into the final kind.
        vars.set_kind(kind);
        net.set_kind(kind);
        let files = checkpoint_files(dir)?;
        let mapped = match loading {
            // SAFETY: the mapping is stored in `mapped`, declared after `vars` and `net`, so it is
            // dropped after them; drafters read the target's weights through a borrow of this model
            // (`&'t CausalLm`), which cannot outlive it.
            WeightLoading::InPlace => unsafe { load_mapped(&mut vars, &files, hf_route(tied))? }.1,
            WeightLoading::Copy => {
                load_strict(&mut vars, &files, hf_route(tied))?;
                MappedCheckpoint::none()
            }
        };
        let tokenizer = if dir.join("tokenizer.json").exists() {
            Some(TextTokenizer::load(dir)?)
        } else {
            None
        };
        if let Some(t) = &tokenizer {
            if t.vocab_size() as i64 > net.config.vocab_size {
                return Err(ModelError::Config {
                    field: "vocab_size".into(),
                    reason: format!(
                        "{} is smaller than the tokenizer's {} tokens",
                        net.config.vocab_size,
                        t.vocab_size()
                    ),
                });
            }
        }
        Ok(Self {
            vars,
            net,
            tokenizer,
            dir: dir.to_path_buf(),
            mapped,
        })
    }

    /// Bytes of weights that are the mapped checkpoint file itself (no copy was made).
    pub fn mapped_weight_bytes(&self) -> usize {
        self.mapped.in_place_bytes()
    }

    pub fn tokenizer(&self) -> Result<&TextTokenizer> {
        self.tokenizer
            .as_ref()
            .ok_or_else(|| ModelError::io(&self.dir, "no tokenizer.json in the model folder"))
    }

    /// Stop tokens: the config's eos ids plus the tokenizer's eos token.
    pub fn stop_tokens(&self) -> Vec<i64> {
        let mut ids = self.net.config.eos_token_ids.clone();
        if let Some(eos) = self
            .tokenizer
            .as_ref()
            .and_then(TextTokenizer::eos_token_id)
        {
            if !ids.contains(&eos) {
                ids.push(eos);
            }
        }
        ids
    }
}
