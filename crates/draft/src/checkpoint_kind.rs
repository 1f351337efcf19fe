//! What kind of checkpoint a folder holds, told from its `config.json` alone, so that loading a folder
//! with the wrong method says which method it is for instead of listing every tensor that does not fit.

use crate::drafter::{DraftError, Result};
use crate::Method;
use std::path::Path;

/// How a folder of `method` is described in an error: what its config.json shows.
fn described(method: Method) -> &'static str {
    match method {
        Method::Eagle3 => "an EAGLE-3 head",
        Method::Dflash => "a DFlash drafter",
        Method::Pard => "a PARD drafter",
        Method::Vanilla => "a plain causal LM (no drafter keys)",
    }
}

/// The method that loads `config` (a parsed config.json): a plain causal LM (a target, or a vanilla
/// drafter) is `vanilla`.
pub fn method_of_config(config: &serde_json::Value) -> Method {
    let architectures: Vec<&str> = config["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let named = |part: &str| architectures.iter().any(|a| a.contains(part));
    if config.get("dflash_config").is_some() || named("DFlash") {
        Method::Dflash
    } else if config.get("eagle_config").is_some()
        || config.get("draft_vocab_size").is_some()
        || named("Eagle")
    {
        Method::Eagle3
    } else if config.get("pard_token").is_some() || config.get("ptd_token_id").is_some() {
        Method::Pard
    } else {
        Method::Vanilla
    }
}

/// The method of the checkpoint in `dir`; an unreadable config.json is an error naming it.
pub fn method_of_folder(dir: &Path) -> Result<Method> {
    let path = dir.join("config.json");
    let checkpoint_error = |reason: String| DraftError::Checkpoint {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| checkpoint_error(e.to_string()))?;
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| checkpoint_error(format!("not JSON: {e}")))?;
    Ok(method_of_config(&config))
}

/// Refuses `dir` unless it holds a checkpoint that `method` loads. A vanilla drafter may be any causal
/// LM, a PARD drafter included.
pub fn expect_kind(dir: &Path, method: Method) -> Result<()> {
    let found = method_of_folder(dir)?;
    let fits = match method {
        Method::Vanilla => matches!(found, Method::Vanilla | Method::Pard),
        other => found == other,
    };
    if fits {
        return Ok(());
    }
    Err(DraftError::Checkpoint {
        path: dir.join("config.json").display().to_string(),
        reason: format!(
            "describes {}, not a checkpoint for --method {method}; load it with --method {}",
            described(found),
            found
        ),
    })
}
