//! The chat template: an error in it, or its absence, names the tokenizer_config.json it comes from.

use sharpdraft_model::{ChatMessage, TextTokenizer};
use std::path::Path;

/// A word-level tokenizer of 8 words in `dir`, with `config` as its tokenizer_config.json.
fn tokenizer_folder(dir: &Path, config: Option<serde_json::Value>) {
    let vocab: serde_json::Map<String, serde_json::Value> =
        (0..8).map(|i| (format!("w{i}"), i.into())).collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    }
}

fn render(dir: &Path) -> Result<String, String> {
    let hello = [ChatMessage {
        role: "user".into(),
        content: "w1".into(),
    }];
    TextTokenizer::load(dir)
        .unwrap()
        .apply_chat_template(&hello, true)
        .map_err(|e| e.to_string())
}

#[test]
fn a_working_template_renders_the_messages() {
    let dir = tempfile::tempdir().unwrap();
    let template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    tokenizer_folder(
        dir.path(),
        Some(serde_json::json!({"chat_template": template})),
    );
    assert_eq!(render(dir.path()).unwrap(), "<user>w1");
}

#[test]
fn a_broken_or_missing_template_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokenizer_config.json");
    for template in [
        "{% for m in messages %}",
        "{{ raise_exception('no system role') }}",
    ] {
        tokenizer_folder(
            dir.path(),
            Some(serde_json::json!({"chat_template": template})),
        );
        let err = render(dir.path()).unwrap_err();
        assert!(
            err.contains(&config.display().to_string()) && err.contains("chat_template"),
            "{err}"
        );
    }
    std::fs::remove_file(&config).unwrap();
    tokenizer_folder(dir.path(), None);
    let err = render(dir.path()).unwrap_err();
    assert!(
        err.contains(&config.display().to_string()) && err.contains("missing"),
        "{err}"
    );
}
