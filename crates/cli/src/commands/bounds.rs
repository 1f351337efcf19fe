//! Upper and lower bounds of the benchmarks' numeric flags, checked before any work starts: every value
//! a flag takes either fits what it applies to or is refused with the flag, the value and the range.

use anyhow::{ensure, Context, Result};
use sharpdraft_model::config::ModelConfig;
use sharpdraft_store::registry;
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

/// A context of `prompt` tokens (the value of `--flag`, any integer a flag parses to) followed by
/// `new_tokens` more: at least one token, and all of them within the target's positions.
pub fn ensure_context(
    config: &ModelConfig,
    flag: &str,
    prompt: i128,
    new_tokens: usize,
) -> Result<()> {
    ensure_within(flag, prompt, 1, config.positions() as i128)?;
    config
        .ensure_positions(prompt as usize, new_tokens)
        .with_context(|| format!("--{flag} {prompt} with {new_tokens} new tokens"))
}

/// The configuration of the target `name` (a known name or a folder), from its config.json alone, so
/// that flags are checked against it before a benchmark loads or measures anything.
pub fn target_config(name: &str) -> Result<ModelConfig> {
    Ok(ModelConfig::from_folder(&registry::resolve(name)?)?)
}
