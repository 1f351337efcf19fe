//! The online-adaptation flags shared by `generate` and `tau`: `--adapt` names the mode, and the
//! options are the drafter specification's `adapt:` block itself ([`AdaptOptions`] derives its flags),
//! with the same names, defaults and validation as in YAML.

use clap::Args;
use sharpdraft_draft::adaptation::{AdaptMode, AdaptOptions};
use sharpdraft_draft::option_value::yaml_value;

#[derive(Args, Debug, Clone)]
pub struct AdaptArgs {
    /// Adapt the drafter online from verification: full (AdamW on every drafter weight) or lora.
    #[arg(long, value_parser = yaml_value::<AdaptMode>, requires = "drafter")]
    pub adapt: Option<AdaptMode>,
    #[command(flatten)]
    pub options: AdaptOptions,
}

impl AdaptArgs {
    /// The `adapt:` block these flags name; `None` without `--adapt`.
    pub fn config(&self) -> Option<AdaptOptions> {
        self.adapt.map(|mode| AdaptOptions {
            mode,
            ..self.options.clone()
        })
    }
}
