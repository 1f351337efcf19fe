//! GGUF import: a GGUF written the way llama.cpp's converter writes it (permuted Q/K rows, GGUF names)
//! imports back to the HF checkpoint it came from; broken files are clear errors.
mod common;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use common::{expected, fixture, forward, max_abs_diff};
use safetensors::SafeTensors;
use sharpdraft_model::gguf::{import, permute_rows, unpermute_rows};
use sharpdraft_model::CausalLm;
use std::path::Path;
use tch::{Device, Kind};

#[test]
fn unpermuting_undoes_llama_cpps_row_permutation() {
    let rows = 16;
    let cols = 3;
    let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
    let gguf = permute_rows(&hf, rows, cols, 2);
    assert_ne!(gguf, hf);
    // Head 0, frequency 1, second member of the pair: HF row 4 + 1 = 5 sits at GGUF row 2 * 1 + 1 = 3.
    assert_eq!(gguf[3 * cols], hf[5 * cols]);
    assert_eq!(unpermute_rows(&gguf, rows, cols, 2), hf);
}

fn gguf_name(hf: &str) -> String {
    let renamed = hf
        .replace("model.embed_tokens", "token_embd")
        .replace("model.norm", "output_norm")
        .replace("model.layers.", "blk.")
        .replace("input_layernorm", "attn_norm")
        .replace("post_attention_layernorm", "ffn_norm")
        .replace("self_attn.q_proj", "attn_q")
        .replace("self_attn.k_proj", "attn_k")
        .replace("self_attn.v_proj", "attn_v")
        .replace("self_attn.o_proj", "attn_output")
        .replace("mlp.gate_proj", "ffn_gate")
        .replace("mlp.up_proj", "ffn_up")
        .replace("mlp.down_proj", "ffn_down");
    renamed
}

/// The llama fixture as llama.cpp would write it (F32 tensors), with a 64-symbol byte-level vocabulary.
fn write_llama_gguf(path: &Path) {
    let bytes = std::fs::read(fixture("llama").join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors = Vec::new();
    for (name, view) in file.tensors() {
        let shape = view.shape().to_vec();
        let mut values: Vec<f32> = view
            .data()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        if name.ends_with("q_proj.weight") {
            values = permute_rows(&values, shape[0], shape[1], 4);
        } else if name.ends_with("k_proj.weight") {
            values = permute_rows(&values, shape[0], shape[1], 2);
        }
        let tensor =
            candle_core::Tensor::from_vec(values, shape.as_slice(), &candle_core::Device::Cpu)
                .unwrap();
        tensors.push((
            gguf_name(&name),
            QTensor::quantize(&tensor, GgmlDType::F32).unwrap(),
        ));
    }
    let symbols: Vec<String> = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .map(String::from)
        .chain(["Ġ".into(), "<|end|>".into()])
        .collect();
    let mut types = vec![gguf_file::Value::I32(1); 63];
    types.push(gguf_file::Value::I32(3));
    use gguf_file::Value;
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(2)),
        ("llama.context_length", Value::U32(128)),
        ("llama.embedding_length", Value::U32(32)),
        ("llama.feed_forward_length", Value::U32(48)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.attention.head_count_kv", Value::U32(2)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(symbols.into_iter().map(Value::String).collect()),
        ),
        ("tokenizer.ggml.token_type", Value::Array(types)),
        ("tokenizer.ggml.merges", Value::Array(vec![])),
        ("tokenizer.ggml.eos_token_id", Value::U32(63)),
    ];
    let metadata_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut out, &metadata_refs, &tensor_refs).unwrap();
}

#[test]
fn an_imported_gguf_reproduces_the_hf_checkpoint_it_was_converted_from() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("tiny.gguf");
    write_llama_gguf(&gguf);
    let out = dir.path().join("imported");
    import(&gguf, &out).unwrap();
    // llama.cpp keeps llama3 frequency scaling outside the metadata we import; restore the fixture's.
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    let original: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("llama").join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["tie_word_embeddings"], true,
        "no output.weight means tied"
    );
    assert_eq!(config["rms_norm_eps"], 1e-5);
    config["rope_scaling"] = original["rope_scaling"].clone();
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    let model = CausalLm::load(&out, Device::Cpu, Kind::Float).unwrap();
    let want = expected("llama");
    let got = forward(&model.net, &want.ids, &mut model.net.new_cache(32));
    assert!(max_abs_diff(&got, &want.logits) < 1e-4);
    let tokenizer = model.tokenizer().unwrap();
    assert_eq!(
        tokenizer.encode("ab 12<|end|>", false).unwrap(),
        vec![0, 1, 62, 53, 54, 63]
    );
    assert_eq!(model.stop_tokens(), vec![63]);
}

#[test]
fn a_truncated_gguf_is_a_clear_error_and_leaves_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("tiny.gguf");
    write_llama_gguf(&gguf);
    let bytes = std::fs::read(&gguf).unwrap();
    std::fs::write(&gguf, &bytes[..bytes.len() - 4000]).unwrap();
    let out = dir.path().join("imported");
    let err = import(&gguf, &out).unwrap_err().to_string();
    assert!(
        err.contains("tiny.gguf") && err.contains("truncated or corrupt"),
        "{err}"
    );
    assert!(
        !out.exists() && !dir.path().join("imported.partial").exists(),
        "nothing half-written is left"
    );
    std::fs::write(&gguf, b"GGUF but not really").unwrap();
    let err = import(&gguf, &out).unwrap_err().to_string();
    assert!(err.contains("not a readable GGUF file"), "{err}");
}
