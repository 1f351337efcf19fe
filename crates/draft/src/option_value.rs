//! Options that are both YAML keys and command-line flags. Their structs derive both (serde for the
//! YAML, clap for the flags) from one field each, so an option has one default and one validation. A
//! flag's value is spelt as in YAML (`forward_kl`, `lora`), dashes allowed for underscores, and a
//! default prints in `--help` as YAML spells it.

use serde::de::DeserializeOwned;

/// Parses a flag value with the YAML spelling of the same option.
pub fn yaml_value<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.replace('-', "_")))
        .map_err(|e| e.to_string())
}

/// `Display` as the YAML name of a unit enum (what clap prints for a default value).
macro_rules! display_as_yaml {
    ($($kind:ty),+) => {$(
        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match serde_json::to_value(self) {
                    Ok(serde_json::Value::String(name)) => f.write_str(&name),
                    _ => Err(std::fmt::Error),
                }
            }
        }
    )+};
}
pub(crate) use display_as_yaml;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Divergence {
        ForwardKl,
        ReverseKl,
    }
    display_as_yaml!(Divergence);

    #[test]
    fn flag_values_are_spelt_as_in_yaml_with_dashes_allowed() {
        assert_eq!(
            yaml_value::<Divergence>("reverse-kl"),
            Ok(Divergence::ReverseKl)
        );
        assert_eq!(
            yaml_value::<Divergence>("forward_kl"),
            Ok(Divergence::ForwardKl)
        );
        assert!(yaml_value::<Divergence>("partial").is_err());
    }

    #[test]
    fn defaults_print_as_their_yaml_names() {
        assert_eq!(Divergence::ForwardKl.to_string(), "forward_kl");
    }
}
