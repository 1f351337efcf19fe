//! What kind of checkpoint a folder holds, told from its `config.json` alone, so that loading a folder
//! with the wrong method says which method it is for instead of listing every tensor that does not fit.

use crate::drafter::{DraftError, Result};
use std::path::Path;

/// The kinds of folder a drafter option can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointKind {
    /// An EAGLE-3 / 3.1 head (`LlamaForCausalLMEagle3`, `eagle_config`, `draft_vocab_size`).
    Eagle3,
    /// A DFlash block-diffusion drafter (`dflash_config`, `DFlashDraftModel`).
    Dflash,
    /// A causal LM with a PARD mask token (`pard_token` or `ptd_token_id`).
    Pard,
    /// A plain causal LM: a target, or a vanilla drafter.
    CausalLm,
}

impl CheckpointKind {
    /// The `--method` that loads this kind.
    pub fn method(self) -> &'static str {
        match self {
            Self::Eagle3 => "eagle3",
            Self::Dflash => "dflash",
            Self::Pard => "pard",
            Self::CausalLm => "vanilla",
        }
    }

    fn described(self) -> &'static str {
        match self {
            Self::Eagle3 => "an EAGLE-3 head",
            Self::Dflash => "a DFlash drafter",
            Self::Pard => "a PARD drafter",
            Self::CausalLm => "a plain causal LM (no drafter keys)",
        }
    }
}

/// The kind of `config` (a parsed config.json).
pub fn kind_of_config(config: &serde_json::Value) -> CheckpointKind {
    let architectures: Vec<&str> = config["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let named = |part: &str| architectures.iter().any(|a| a.contains(part));
    if config.get("dflash_config").is_some() || named("DFlash") {
        CheckpointKind::Dflash
    } else if config.get("eagle_config").is_some()
        || config.get("draft_vocab_size").is_some()
        || named("Eagle")
    {
        CheckpointKind::Eagle3
    } else if config.get("pard_token").is_some() || config.get("ptd_token_id").is_some() {
        CheckpointKind::Pard
    } else {
        CheckpointKind::CausalLm
    }
}

/// The kind of the checkpoint in `dir`; an unreadable config.json is an error naming it.
pub fn kind_of_folder(dir: &Path) -> Result<CheckpointKind> {
    let path = dir.join("config.json");
    let checkpoint_error = |reason: String| DraftError::Checkpoint {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| checkpoint_error(e.to_string()))?;
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| checkpoint_error(format!("not JSON: {e}")))?;
    Ok(kind_of_config(&config))
}

/// Refuses `dir` unless it holds a checkpoint that `method` loads. A vanilla drafter may be any causal
/// LM, a PARD drafter included.
pub fn expect_kind(dir: &Path, method: &str) -> Result<()> {
    let found = kind_of_folder(dir)?;
    let fits = match method {
        "vanilla" => matches!(found, CheckpointKind::CausalLm | CheckpointKind::Pard),
        other => found.method() == other,
    };
    if fits {
        return Ok(());
    }
    Err(DraftError::Checkpoint {
        path: dir.join("config.json").display().to_string(),
        reason: format!(
            "describes {}, not a checkpoint for --method {method}; load it with --method {}",
            found.described(),
            found.method()
        ),
    })
}
