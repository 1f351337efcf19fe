//! The online-adaptation flags shared by `generate` and `tau`: they fill a drafter specification's
//! `adapt:` block (sharpdraft_draft::adaptation::AdaptConfig), with the same names and defaults.

use clap::Args;
use serde::de::DeserializeOwned;
use sharpdraft_draft::adaptation::{
    AdaptConfig, AdaptMode, LearnFrom, LoraForm, LoraTarget, UpdateUnit,
};
use sharpdraft_draft::training::Divergence;

/// Parses a flag value with the YAML spelling of the same option (`forward_kl`, `lora`, ...).
fn yaml_value<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.replace('-', "_")))
        .map_err(|e| e.to_string())
}

#[derive(Args, Debug, Clone)]
pub struct AdaptArgs {
    /// Adapt the drafter online from verification: full (AdamW on every drafter weight) or lora.
    #[arg(long, value_parser = yaml_value::<AdaptMode>, requires = "drafter")]
    pub adapt: Option<AdaptMode>,
    /// Update every N cycles (or requests, with --adapt-unit requests).
    #[arg(long, default_value_t = 8)]
    pub adapt_every: usize,
    /// cycles (within a request: test-time speculation) or requests (OSD).
    #[arg(long, value_parser = yaml_value::<UpdateUnit>, default_value = "cycles")]
    pub adapt_unit: UpdateUnit,
    #[arg(long, default_value_t = 1e-4)]
    pub adapt_lr: f64,
    /// Optimizer steps per update.
    #[arg(long, default_value_t = 1)]
    pub adapt_steps: usize,
    /// Verified rows kept for updates (the most recent).
    #[arg(long, default_value_t = 256)]
    pub adapt_buffer: usize,
    /// all (every verified row) or rejected (only where the draft was wrong, as OSD).
    #[arg(long, value_parser = yaml_value::<LearnFrom>, default_value = "all")]
    pub adapt_learn_from: LearnFrom,
    /// forward-kl (soft cross-entropy, OSD's default), reverse-kl or jsd.
    #[arg(long, value_parser = yaml_value::<Divergence>, default_value = "forward-kl")]
    pub adapt_loss: Divergence,
    #[arg(long, default_value_t = 0)]
    pub adapt_seed: u64,
    /// LoRA rank.
    #[arg(long, default_value_t = 8)]
    pub lora_rank: i64,
    /// LoRA alpha (scale alpha / rank); default 2 x rank.
    #[arg(long)]
    pub lora_alpha: Option<f64>,
    /// Projections with adapters, comma-separated: attention, mlp, fc.
    #[arg(long, value_parser = yaml_value::<LoraTarget>, value_delimiter = ',', default_value = "attention")]
    pub lora_on: Vec<LoraTarget>,
    /// merged (adapters folded into the weights after each update) or unmerged (kept as branches of
    /// the drafter's linear maps).
    #[arg(long, value_parser = yaml_value::<LoraForm>, default_value = "merged")]
    pub lora_form: LoraForm,
}

impl AdaptArgs {
    /// The `adapt:` block these flags name; `None` without `--adapt`.
    pub fn config(&self) -> Option<AdaptConfig> {
        self.adapt.map(|mode| AdaptConfig {
            mode,
            every: self.adapt_every,
            unit: self.adapt_unit,
            lr: self.adapt_lr,
            steps: self.adapt_steps,
            buffer: self.adapt_buffer,
            learn_from: self.adapt_learn_from,
            loss: self.adapt_loss,
            rank: self.lora_rank,
            alpha: self.lora_alpha,
            lora_on: self.lora_on.clone(),
            lora_form: self.lora_form,
            seed: self.adapt_seed,
            ..AdaptConfig::new(mode)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_spelt_as_in_yaml_with_dashes_allowed() {
        assert_eq!(
            yaml_value::<Divergence>("reverse-kl"),
            Ok(Divergence::ReverseKl)
        );
        assert_eq!(yaml_value::<AdaptMode>("lora"), Ok(AdaptMode::Lora));
        assert!(yaml_value::<AdaptMode>("partial").is_err());
    }
}
