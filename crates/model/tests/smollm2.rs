//! The real default target, SmolLM2-135M-Instruct imported from its GGUF: chat template, tokenizer and
//! greedy generation agree with HF transformers run on the same imported folder (fixture written by
//! tests/fixtures/make_smollm2_greedy.py). `make test` fetches the model first; a bare `cargo test` on a
//! machine without it skips with a message.
use sharpdraft_model::generate::generate;
use sharpdraft_model::{CausalLm, ChatMessage, Sampler, Sampling};
use sharpdraft_store::registry;
use tch::{Device, Kind};

fn smollm2() -> Option<CausalLm> {
    match registry::resolve("smollm2-135m-instruct") {
        Ok(dir) => Some(CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()),
        Err(e) => {
            sharpdraft_testing::skip(e);
            None
        }
    }
}

fn fixture() -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2_greedy.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[test]
fn smollm2_chat_template_and_tokenizer_match_hf() {
    let Some(model) = smollm2() else { return };
    let tokenizer = model.tokenizer().unwrap();
    for case in fixture()["cases"].as_array().unwrap() {
        let message = ChatMessage {
            role: "user".into(),
            content: case["prompt"].as_str().unwrap().into(),
        };
        let text = tokenizer.apply_chat_template(&[message], true).unwrap();
        assert_eq!(text, case["chat_text"].as_str().unwrap());
        assert_eq!(
            tokenizer.encode(&text, false).unwrap(),
            ids(&case["prompt_ids"])
        );
    }
}

#[test]
fn smollm2_greedy_generation_matches_hf_token_for_token() {
    let Some(model) = smollm2() else { return };
    let fixture = fixture();
    let new_tokens = fixture["new_tokens"].as_u64().unwrap() as usize;
    for case in fixture["cases"].as_array().unwrap() {
        let out = generate(
            &model.net,
            &ids(&case["prompt_ids"]),
            new_tokens,
            &mut Sampler::new(Sampling::greedy()),
            &[],
        )
        .unwrap();
        assert_eq!(
            out.ids,
            ids(&case["greedy_ids"]),
            "prompt {:?}",
            case["prompt"]
        );
    }
}

#[test]
fn digits_are_split_one_by_one_as_in_smollms_tokenizer() {
    let Some(model) = smollm2() else { return };
    let tokenizer = model.tokenizer().unwrap();
    let ids = tokenizer.encode("2024", false).unwrap();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!(tokenizer.decode(&ids).unwrap(), "2024");
}
