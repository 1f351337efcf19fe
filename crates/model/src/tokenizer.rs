//! Text <-> ids through the `tokenizers` crate (`tokenizer.json`), plus the chat template from
//! `tokenizer_config.json` rendered with minijinja (Python string methods through minijinja-contrib).

use crate::error::{ModelError, Result};
use serde::Serialize;
use std::path::Path;

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<String>,
    /// The tokenizer_config.json the template came from (or would have), named in its errors.
    config_file: std::path::PathBuf,
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

/// What is wrong with a tokenizer.json that the tokenizers crate refused: its own message names a JSON
/// line and column of an "untagged enum"; this names the key instead, where a structural check finds it.
fn describe_tokenizer_problem(path: &Path, original: &str) -> String {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return e.to_string(),
    };
    let json: serde_json::Value = match serde_json::from_str(&text) {
        Ok(json) => json,
        Err(e) => return format!("not JSON: {e}"),
    };
    let Some(top) = json.as_object() else {
        return "the top level is not a JSON object".into();
    };
    let object_or_null = |key: &str| -> Option<String> {
        match top.get(key) {
            None | Some(serde_json::Value::Null) => None,
            Some(v) if v.get("type").and_then(|t| t.as_str()).is_some() => None,
            Some(_) => Some(format!(
                "key `{key}` must be null or an object with a string `type`"
            )),
        }
    };
    for key in ["normalizer", "pre_tokenizer", "post_processor", "decoder"] {
        if let Some(problem) = object_or_null(key) {
            return problem;
        }
    }
    if let Some(added) = top.get("added_tokens") {
        match added.as_array() {
            None => return "key `added_tokens` must be a list".into(),
            Some(list) => {
                if let Some(i) = list.iter().position(|t| {
                    t.get("id").and_then(|v| v.as_u64()).is_none()
                        || t.get("content").and_then(|v| v.as_str()).is_none()
                }) {
                    return format!(
                        "added_tokens[{i}] needs an integer `id` and a string `content`"
                    );
                }
            }
        }
    }
    let Some(model) = top.get("model").and_then(|m| m.as_object()) else {
        return "key `model` is missing or not an object".into();
    };
    let kind = model.get("type").and_then(|t| t.as_str()).unwrap_or("BPE");
    let vocab = model.get("vocab");
    let problem = match kind {
        "BPE" | "WordPiece" | "WordLevel" => match vocab.and_then(|v| v.as_object()) {
            None => Some(format!(
                "model.vocab must be an object of token -> id for a {kind} model"
            )),
            Some(v) => v
                .iter()
                .find(|(_, id)| id.as_u64().is_none())
                .map(|(token, id)| format!("model.vocab[{token:?}] = {id} is not a token id")),
        },
        "Unigram" => vocab.and_then(|v| v.as_array()).is_none().then(|| {
            "model.vocab must be a list of [token, score] for a Unigram model".to_string()
        }),
        other => Some(format!(
            "model.type {other:?} is not one of BPE, WordPiece, WordLevel, Unigram"
        )),
    };
    if let Some(problem) = problem {
        return problem;
    }
    if kind == "BPE" {
        if let Some(merges) = model.get("merges") {
            if merges.as_array().is_none() {
                return "model.merges must be a list".into();
            }
        }
    }
    format!("not in the tokenizers format ({original})")
}

impl TextTokenizer {
    /// Loads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| {
            ModelError::io(&path, describe_tokenizer_problem(&path, &e.to_string()))
        })?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ModelError::io(&config_path, e))?,
            Err(_) => serde_json::Value::Null,
        };
        Ok(Self {
            inner,
            chat_template: config["chat_template"].as_str().map(str::to_string),
            config_file: config_path,
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
        let broken = |e: &dyn std::fmt::Display| {
            ModelError::Tokenizer(format!(
                "{}: chat_template: {e}",
                self.config_file.display()
            ))
        };
        let template = self
            .chat_template
            .as_deref()
            .ok_or_else(|| broken(&"missing (a chat model's tokenizer_config.json has one)"))?;
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
        env.add_template("chat", template).map_err(|e| broken(&e))?;
        let context = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.clone().unwrap_or_default(),
            eos_token => self.eos_token.clone().unwrap_or_default(),
        };
        env.get_template("chat")
            .and_then(|t| t.render(context))
            .map_err(|e| broken(&e))
    }
}
