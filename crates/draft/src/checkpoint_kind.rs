//! What kind of checkpoint a folder holds, told from its `config.json` alone, so that loading a folder
//! with the wrong kind says which kind it is for instead of listing every tensor that does not fit.

use crate::drafter::{DraftError, Result};
use crate::DrafterKind;
use std::path::Path;

/// How a folder of `kind` is described in an error: what its config.json shows.
fn described(kind: DrafterKind) -> &'static str {
    match kind {
        DrafterKind::Eagle3 => "an EAGLE-3 head",
        DrafterKind::Dflash => "a DFlash drafter",
        DrafterKind::Pard => "a PARD drafter",
        DrafterKind::Vanilla => "a plain causal LM (no drafter keys)",
    }
}

/// The drafter kind that loads `config` (a parsed config.json): a plain causal LM (a target, or a vanilla
/// drafter) is `vanilla`.
pub fn kind_of_config(config: &serde_json::Value) -> DrafterKind {
    let architectures: Vec<&str> = config["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let named = |part: &str| architectures.iter().any(|a| a.contains(part));
    if config.get("dflash_config").is_some() || named("DFlash") {
        DrafterKind::Dflash
    } else if config.get("eagle_config").is_some()
        || config.get("draft_vocab_size").is_some()
        || named("Eagle")
    {
        DrafterKind::Eagle3
    } else if config.get("pard_token").is_some() || config.get("ptd_token_id").is_some() {
        DrafterKind::Pard
    } else {
        DrafterKind::Vanilla
    }
}

/// The drafter kind of the checkpoint in `dir`; an unreadable config.json is an error naming it.
pub fn kind_of_folder(dir: &Path) -> Result<DrafterKind> {
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

/// Refuses `dir` unless it holds a checkpoint that a `kind` drafter loads. A vanilla drafter may be any
/// causal LM, a PARD drafter included.
pub fn expect_kind(dir: &Path, kind: DrafterKind) -> Result<()> {
    let found = kind_of_folder(dir)?;
    let fits = match kind {
        DrafterKind::Vanilla => matches!(found, DrafterKind::Vanilla | DrafterKind::Pard),
        other => found == other,
    };
    if fits {
        return Ok(());
    }
    Err(DraftError::Checkpoint {
        path: dir.join("config.json").display().to_string(),
        reason: format!(
            "describes {}, not a checkpoint for --kind {kind}; load it with --kind {}",
            described(found),
            found
        ),
    })
}
