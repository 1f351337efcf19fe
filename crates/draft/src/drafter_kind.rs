//! The drafter kinds (architectures): the one list every layer names. `--kind`, an experiment drafter's
//! `kind:`, a training config's `kind:`, a drafter probe's `kind:` and the kind of checkpoint a folder holds
//! all take a [`DrafterKind`]. The paper's "method" is what an experiment compares (the unmodified drafter,
//! query scaling, online adaptation ...), never the architecture; `--method` and `method:` stay accepted as
//! the old spellings of `--kind` and `kind:`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrafterKind {
    /// A small LM with the target's tokenizer, K forward passes per chain.
    Vanilla,
    /// An EAGLE-3 / 3.1 head on target features, chain or dynamic tree.
    Eagle3,
    /// A PARD drafter (config carries pard_token): K tokens in one pass.
    Pard,
    /// A DFlash block-diffusion drafter: block_size - 1 tokens in one pass.
    Dflash,
}

impl DrafterKind {
    pub const ALL: [DrafterKind; 4] = [Self::Vanilla, Self::Eagle3, Self::Pard, Self::Dflash];

    /// The name the command line, YAML and tables use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Vanilla => "vanilla",
            Self::Eagle3 => "eagle3",
            Self::Pard => "pard",
            Self::Dflash => "dflash",
        }
    }
}

impl std::fmt::Display for DrafterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DrafterKind {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == text)
            .ok_or_else(|| {
                format!("{text:?} is not a drafter kind (vanilla, eagle3, pard, dflash)")
            })
    }
}
