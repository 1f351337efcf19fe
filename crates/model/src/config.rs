//! HF `config.json` for the decoder families SharpDraft runs (llama, qwen2, qwen3), deserialised with the
//! field names verbatim, then resolved once into [`ModelConfig`], the only form the model code reads.

use crate::error::{ModelError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `eos_token_id` and friends are an integer or a list of integers in HF configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    One(i64),
    Many(Vec<i64>),
}

impl TokenIds {
    pub fn to_vec(&self) -> Vec<i64> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// `rope_scaling` as HF writes it; only `rope_type: llama3` changes the frequencies here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeScaling {
    #[serde(alias = "type")]
    pub rope_type: String,
    pub factor: Option<f64>,
    pub low_freq_factor: Option<f64>,
    pub high_freq_factor: Option<f64>,
    pub original_max_position_embeddings: Option<f64>,
}

/// The subset of an HF decoder config that the forward pass needs. Unknown keys are ignored: HF configs
/// carry many (`use_cache`, `transformers_version`, drafter blocks read by their own structs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    pub model_type: String,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: usize,
    pub num_attention_heads: i64,
    #[serde(default)]
    pub num_key_value_heads: Option<i64>,
    #[serde(default)]
    pub head_dim: Option<i64>,
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// The MLP's activation; the workbench implements SiLU (`silu`, which HF also calls `swish`).
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: i64,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub attention_bias: Option<bool>,
    #[serde(default)]
    pub bos_token_id: Option<TokenIds>,
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    #[serde(default)]
    pub torch_dtype: Option<String>,
    /// PARD drafters: the mask ("pard") token appended for future positions.
    #[serde(default)]
    pub pard_token: Option<i64>,
    /// vLLM's alternative name for the PARD mask token.
    #[serde(default)]
    pub ptd_token_id: Option<i64>,
    /// SharpDraft's record of a drafter's training length n0.
    #[serde(default)]
    pub training_length: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
}

/// llama3-style frequency scaling (Llama 3.1+).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

/// Resolved configuration: every default applied, every field checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub family: Family,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_layers: usize,
    pub num_heads: i64,
    pub num_kv_heads: i64,
    pub head_dim: i64,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3Scaling>,
    pub max_position_embeddings: i64,
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v projections (always on for qwen2, `attention_bias` for llama).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on q and k before RoPE (qwen3).
    pub qk_norm: bool,
    pub bos_token_id: Option<i64>,
    pub eos_token_ids: Vec<i64>,
    pub raw: HfConfig,
}

impl ModelConfig {
    /// The configuration of the model folder `dir`, from its config.json alone (no weights are read).
    pub fn from_folder(dir: &Path) -> Result<Self> {
        HfConfig::load(&dir.join("config.json"))?.resolve()
    }

    /// The positions the model sees, as a count of tokens.
    pub fn positions(&self) -> usize {
        self.max_position_embeddings.max(0) as usize
    }

    /// Refuses a sequence longer than the positions the model was trained for: `prompt` tokens followed
    /// by up to `new_tokens`. The error gives both numbers and how many new tokens would fit.
    pub fn ensure_positions(&self, prompt: usize, new_tokens: usize) -> Result<()> {
        let limit = self.positions() as u64;
        let needed = (prompt as u64).saturating_add(new_tokens as u64);
        if needed <= limit {
            return Ok(());
        }
        let fits = limit.saturating_sub(prompt as u64);
        Err(invalid(
            "max_position_embeddings",
            format!(
                "the model sees at most {limit} positions; a prompt of {prompt} tokens plus {new_tokens} new tokens needs {needed} ({})",
                if fits == 0 {
                    "the prompt alone is too long: shorten it".to_string()
                } else {
                    format!("at most {fits} new tokens fit after this prompt")
                }
            ),
        ))
    }
}

/// The largest size a config.json may give each dimension: above every published decoder (Llama 4
/// Scout's 10M positions, Gemma's 262K vocabulary, 405B's 53K-wide MLP), far below what would make a
/// later allocation inside libtorch abort instead of erring. A size past it is refused at load, naming
/// the key and the bound.
pub const SIZE_BOUNDS: [(&str, i64); 7] = [
    ("vocab_size", 1 << 22),
    ("hidden_size", 1 << 17),
    ("intermediate_size", 1 << 19),
    ("num_hidden_layers", 1 << 12),
    ("num_attention_heads", 1 << 12),
    ("head_dim", 1 << 12),
    ("max_position_embeddings", 1 << 24),
];

/// `value` of `field` if it lies in `1..=` its bound in [`SIZE_BOUNDS`].
fn size(field: &str, value: i64) -> Result<i64> {
    let bound = SIZE_BOUNDS
        .iter()
        .find(|(name, _)| *name == field)
        .map_or(i64::MAX, |(_, bound)| *bound);
    if value <= 0 {
        return Err(invalid(field, format!("{value} must be > 0")));
    }
    if value > bound {
        return Err(invalid(
            field,
            format!("{value} is above {bound}, larger than any model this workbench runs"),
        ));
    }
    Ok(value)
}

/// `value` of `field` if it is a finite number > 0 (a norm's epsilon, RoPE's base).
fn finite_positive(field: &str, value: f64) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(invalid(
            field,
            format!("{value} must be a finite number > 0 (no model has it; the forward pass would give NaN)"),
        ))
    }
}

fn invalid(field: &str, reason: String) -> ModelError {
    ModelError::Config {
        field: field.to_string(),
        reason,
    }
}

impl HfConfig {
    /// Reads `config.json`; a field of the wrong type is an error naming the field.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        Self::from_json(&text).map_err(|e| match e {
            ModelError::Config { field, reason } => ModelError::Config {
                field: format!("{}: {field}", path.display()),
                reason,
            },
            other => other,
        })
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            invalid(&field, e.into_inner().to_string())
        })
    }

    /// `rope_scaling` resolved: llama3-style frequency scaling, or none (`default`, or absent).
    fn llama3_scaling(&self) -> Result<Option<Llama3Scaling>> {
        Ok(match &self.rope_scaling {
            None => None,
            Some(s) if s.rope_type == "llama3" => {
                let get = |name: &str, v: Option<f64>| {
                    v.ok_or_else(|| {
                        invalid(
                            &format!("rope_scaling.{name}"),
                            "missing for rope_type llama3".into(),
                        )
                    })
                };
                Some(Llama3Scaling {
                    factor: get("factor", s.factor)?,
                    low_freq_factor: get("low_freq_factor", s.low_freq_factor)?,
                    high_freq_factor: get("high_freq_factor", s.high_freq_factor)?,
                    original_max_position_embeddings: get(
                        "original_max_position_embeddings",
                        s.original_max_position_embeddings,
                    )?,
                })
            }
            Some(s) if s.rope_type == "default" => None,
            Some(s) => {
                return Err(invalid(
                    "rope_scaling.rope_type",
                    format!("{:?} is not supported (llama3, default)", s.rope_type),
                ))
            }
        })
    }

    /// Refuses an MLP activation the forward pass does not implement (it computes SiLU).
    fn check_activation(&self) -> Result<()> {
        match self.hidden_act.as_deref() {
            None | Some("silu") | Some("swish") => Ok(()),
            Some(act) => Err(invalid(
                "hidden_act",
                format!("{act:?} is not implemented here (silu)"),
            )),
        }
    }

    pub fn resolve(self) -> Result<ModelConfig> {
        let family = match self.model_type.as_str() {
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            other => {
                return Err(invalid(
                    "model_type",
                    format!("{other:?} is not supported (llama, qwen2, qwen3)"),
                ))
            }
        };
        let positive = size;
        self.check_activation()?;
        // No layers is allowed (a head alone); too many is not.
        let num_layers = match self.num_hidden_layers {
            0 => 0,
            n => size("num_hidden_layers", i64::try_from(n).unwrap_or(i64::MAX))? as usize,
        };
        let num_heads = positive("num_attention_heads", self.num_attention_heads)?;
        let hidden_size = positive("hidden_size", self.hidden_size)?;
        let num_kv_heads = positive(
            "num_key_value_heads",
            self.num_key_value_heads.unwrap_or(num_heads),
        )?;
        if num_heads % num_kv_heads != 0 {
            return Err(invalid(
                "num_key_value_heads",
                format!("{num_kv_heads} does not divide num_attention_heads = {num_heads}"),
            ));
        }
        let head_dim = match self.head_dim {
            Some(d) => positive("head_dim", d)?,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(invalid(
                    "head_dim",
                    format!(
                    "missing, and hidden_size {hidden_size} is not divisible by {num_heads} heads"
                ),
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err(invalid(
                "head_dim",
                format!("{head_dim} must be even for RoPE"),
            ));
        }
        let rope_scaling = self.llama3_scaling()?;
        Ok(ModelConfig {
            family,
            vocab_size: positive("vocab_size", self.vocab_size)?,
            hidden_size,
            intermediate_size: positive("intermediate_size", self.intermediate_size)?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: finite_positive("rms_norm_eps", self.rms_norm_eps)?,
            rope_theta: finite_positive("rope_theta", self.rope_theta.unwrap_or(10_000.0))?,
            rope_scaling,
            max_position_embeddings: positive(
                "max_position_embeddings",
                self.max_position_embeddings,
            )?,
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            qkv_bias: family == Family::Qwen2 || self.attention_bias.unwrap_or(false),
            qk_norm: family == Family::Qwen3,
            bos_token_id: self
                .bos_token_id
                .as_ref()
                .and_then(|t| t.to_vec().first().copied()),
            eos_token_ids: self
                .eos_token_id
                .as_ref()
                .map(TokenIds::to_vec)
                .unwrap_or_default(),
            raw: self,
        })
    }
}
