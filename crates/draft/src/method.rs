//! The drafting methods: the one list every layer names. `--method`, an experiment's drafter, a
//! training config, the probe's subject and the kind of checkpoint a folder holds all take a [`Method`].

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// A small LM with the target's tokenizer, K forward passes per chain.
    Vanilla,
    /// An EAGLE-3 / 3.1 head on target features, chain or dynamic tree.
    Eagle3,
    /// A PARD drafter (config carries pard_token): K tokens in one pass.
    Pard,
    /// A DFlash block-diffusion drafter: block_size - 1 tokens in one pass.
    Dflash,
}

impl Method {
    pub const ALL: [Method; 4] = [Self::Vanilla, Self::Eagle3, Self::Pard, Self::Dflash];

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

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Method {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == text)
            .ok_or_else(|| {
                format!("{text:?} is not a drafting method (vanilla, eagle3, pard, dflash)")
            })
    }
}
