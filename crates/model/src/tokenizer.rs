//! Text <-> ids through the `tokenizers` crate (`tokenizer.json`), plus the chat template from
//! `tokenizer_config.json` rendered with minijinja (Python string methods through minijinja-contrib).

use crate::error::{ModelError, Result};
use serde::Serialize;
use std::path::Path;

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// `bos_token` and friends are a string or `{"content": ...}` in tokenizer_config.json.
fn token_text(value: &serde_json::Value) -> Option<String> {
    value
        .as_str()
        .map(str::to_string)
        .or_else(|| value["content"].as_str().map(str::to_string))
}

impl TextTokenizer {
    /// Loads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let inner =
            tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::io(&path, e))?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ModelError::io(&config_path, e))?,
            Err(_) => serde_json::Value::Null,
        };
        Ok(Self {
            inner,
            chat_template: config["chat_template"].as_str().map(str::to_string),
            bos_token: token_text(&config["bos_token"]),
            eos_token: token_text(&config["eos_token"]),
        })
    }

    /// Ids of `text`; `add_special` adds what the tokenizer's post-processor adds (e.g. BOS).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<i64>> {
        let encoding = self
            .inner
            .encode(text, add_special)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().iter().map(|&id| id as i64).collect())
    }

    pub fn decode(&self, ids: &[i64]) -> Result<String> {
        let ids: Vec<u32> = ids.iter().map(|&id| id as u32).collect();
        self.inner
            .decode(&ids, true)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token -> id for the whole vocabulary, added tokens included.
    pub fn vocabulary(&self) -> std::collections::HashMap<String, u32> {
        self.inner.get_vocab(true)
    }

    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    pub fn eos_token_id(&self) -> Option<i64> {
        self.eos_token.as_deref().and_then(|t| self.token_id(t))
    }

    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
    }

    /// Renders the chat template; `add_generation_prompt` opens the assistant turn.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            ModelError::Tokenizer("tokenizer_config.json has no chat_template".into())
        })?;
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    message,
                ))
            },
        );
        env.add_template("chat", template)
            .map_err(|e| ModelError::Tokenizer(format!("chat template: {e}")))?;
        let context = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.clone().unwrap_or_default(),
            eos_token => self.eos_token.clone().unwrap_or_default(),
        };
        env.get_template("chat")
            .and_then(|t| t.render(context))
            .map_err(|e| ModelError::Tokenizer(format!("chat template: {e}")))
    }
}
