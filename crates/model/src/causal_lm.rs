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
    /// Whether its linear weights run as its GGUF file stores them (dtype `gguf`).
    pub as_stored: bool,
}

/// A model's dtype as configs and flags name it: a libtorch kind, or `gguf`, the weights as the GGUF
/// file they were imported from stores them (passes of a few rows multiply the blocks; passes of more,
/// the f32 weights dequantized from the same blocks: [`crate::weight_blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelDtype {
    Kind(Kind),
    AsStored,
}

impl ModelDtype {
    /// The kind its tensors compute in (f32 for the weights as stored).
    pub fn kind(self) -> Kind {
        match self {
            Self::Kind(kind) => kind,
            Self::AsStored => Kind::Float,
        }
    }
}

impl ModelDtype {
    /// The name configs and flags give it.
    pub fn name(self) -> &'static str {
        match self {
            Self::AsStored => "gguf",
            Self::Kind(Kind::BFloat16) => "bf16",
            Self::Kind(Kind::Half) => "f16",
            Self::Kind(_) => "f32",
        }
    }
}

/// The dtype `auto` picks for the model in `dir` on `device`, and why: the fastest this machine runs
/// it in that computes the same tokens speculating as alone (docs/setup.md, "Which dtype"): as stored
/// for a model imported from GGUF (its blocks file is there), else bf16 where the CPU multiplies bf16
/// pairs (AVX512-BF16), else f32. Off the CPU, f32.
pub fn fastest_dtype(dir: &Path, device: Device) -> (ModelDtype, &'static str) {
    if device != Device::Cpu {
        return (ModelDtype::Kind(Kind::Float), "f32 off the CPU");
    }
    if dir.join(crate::weight_blocks::BLOCKS_FILE).is_file() {
        return (
            ModelDtype::AsStored,
            "as its GGUF file stores it (a decode step reads the file's blocks)",
        );
    }
    if sharpdraft_kernel::products::pair_products_available() {
        return (
            ModelDtype::Kind(Kind::BFloat16),
            "bf16: this CPU multiplies bf16 pairs (AVX512-BF16)",
        );
    }
    (
        ModelDtype::Kind(Kind::Float),
        "f32: no GGUF blocks, and this CPU has no bf16 pair products",
    )
}

/// A dtype as configs and flags name it, `auto` resolved for the model in `dir` on `device`
/// ([`fastest_dtype`]); the reason is `Some` where `auto` chose.
pub fn resolve_dtype(
    name: &str,
    dir: &Path,
    device: Device,
) -> Result<(ModelDtype, Option<&'static str>)> {
    if name == "auto" {
        let (dtype, why) = fastest_dtype(dir, device);
        return Ok((dtype, Some(why)));
    }
    Ok((parse_dtype(name)?, None))
}

/// `f32`, `bf16`, `f16` or `gguf` (`auto` is [`resolve_dtype`]'s).
pub fn parse_dtype(name: &str) -> Result<ModelDtype> {
    match name {
        "gguf" => Ok(ModelDtype::AsStored),
        other => parse_kind(other)
            .map(ModelDtype::Kind)
            .map_err(|_| ModelError::Config {
                field: "dtype".into(),
                reason: format!(
                    "{other:?} is not one of f32, bf16, f16, gguf (the weights as their GGUF file stores them), auto (the fastest of those for the model)"
                ),
            }),
    }
}

/// `f32`, `bf16` or `f16` (a libtorch kind; [`parse_dtype`] takes `gguf` too).
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
            as_stored: false,
        })
    }

    /// [`Self::load`] in `dtype`: as the GGUF file stores the weights (on the CPU, from the folder's
    /// blocks file) or in a libtorch kind.
    pub fn load_dtype(dir: &Path, device: Device, dtype: ModelDtype) -> Result<Self> {
        let mut model = Self::load(dir, device, dtype.kind())?;
        if dtype == ModelDtype::AsStored {
            if device != Device::Cpu {
                return Err(ModelError::Config {
                    field: "dtype".into(),
                    reason: format!(
                        "gguf runs the weights as stored on the CPU's kernel, not on {device:?}: give f32 or bf16"
                    ),
                });
            }
            let blocks = crate::weight_blocks::BlocksFile::open(dir)?;
            model.net.attach_blocks(&blocks)?;
            model.as_stored = true;
        }
        Ok(model)
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
