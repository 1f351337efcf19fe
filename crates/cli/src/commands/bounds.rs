//! Upper and lower bounds of the benchmarks' numeric flags, checked before any work starts: every value
//! a flag takes either fits what it applies to or is refused with the flag, the value and the range.

use anyhow::{ensure, Context, Result};
use sharpdraft_model::config::ModelConfig;
use std::fmt::Display;

/// Repeats of one measurement: the median of up to this many is all a benchmark needs, and more would
/// run for days.
pub const MAX_REPEATS: usize = 10_000;

/// libtorch worker threads: far more than any machine has cores.
pub const MAX_THREADS: i32 = 4096;

/// Refuses `--flag value` outside `lowest..=highest`.
pub fn ensure_within<T: PartialOrd + Display>(
    flag: &str,
    value: T,
    lowest: T,
    highest: T,
) -> Result<()> {
    ensure!(
        value >= lowest && value <= highest,
        "--{flag} {value} must lie in {lowest}..={highest}"
    );
    Ok(())
}

/// `--repeats`: 1..=[`MAX_REPEATS`].
pub fn ensure_repeats(repeats: usize) -> Result<()> {
    ensure_within("repeats", repeats, 1, MAX_REPEATS)
}

/// A context of `prompt` tokens (the value of `--flag`) followed by `new_tokens` more must fit the
/// target's positions, and hold at least one token.
pub fn ensure_context(
    config: &ModelConfig,
    flag: &str,
    prompt: usize,
    new_tokens: usize,
) -> Result<()> {
    ensure!(prompt >= 1, "--{flag} {prompt}: a context holds at least 1 token");
    config
        .ensure_positions(prompt, new_tokens)
        .with_context(|| format!("--{flag} {prompt} with {new_tokens} new tokens"))
}

/// The configuration of the model in `dir`, read from its config.json alone (no weights), so that
/// flags are checked against it before a benchmark loads or measures anything.
pub fn model_config(dir: &std::path::Path) -> Result<ModelConfig> {
    Ok(sharpdraft_model::HfConfig::load(&dir.join("config.json"))?.resolve()?)
}

/// The model's positions, as a count.
pub fn positions(config: &ModelConfig) -> usize {
    config.max_position_embeddings.max(0) as usize
}
