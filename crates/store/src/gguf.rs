//! `sharpdraft import gguf`: a GGUF file (llama.cpp's format) to an HF-format folder that
//! `sharpdraft_model::CausalLm::load` reads: config.json, model.safetensors (f32), tokenizer.json and
//! tokenizer_config.json; and beside them `model.blocks.safetensors`, every linear weight's blocks as
//! the file stores them ([`BLOCKS`]), which the model runs as they are under the dtype `gguf`.
//!
//! Reading and dequantising use candle-core's GGUF module (F32, F16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K,
//! ...). Two layout conversions live here: tensor names (`blk.3.attn_q.weight` ->
//! `model.layers.3.self_attn.q_proj.weight`) and, for the llama architecture only, llama.cpp's
//! permutation of Q/K rows (see [`unpermute_rows`]).

use crate::error::{Result, StoreError};
use crate::output_folder;
use candle_core::quantized::gguf_file::{Content, Value};
use serde_json::json;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// llama.cpp's converter stores each head's Q/K rows interleaved: HF row `j * half + i` (pair member
/// `j` in {0, 1}, frequency `i`) of head `h` sits at GGUF row `2 i + j`. Calls `f(hf_row, gguf_row)` for
/// every row of a `[rows, _]` matrix of `heads` heads.
fn for_each_row_pair(rows: usize, heads: usize, mut f: impl FnMut(usize, usize)) {
    let head_dim = rows / heads;
    let half = head_dim / 2;
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                f(h * head_dim + j * half + i, h * head_dim + 2 * i + j);
            }
        }
    }
}

/// Copies whole rows of `cols` values from `source` to `target` row indices chosen by `pick(hf, gguf)`.
fn move_rows<T: Copy + Default>(
    source: &[T],
    rows: usize,
    cols: usize,
    heads: usize,
    pick: impl Fn(usize, usize) -> (usize, usize),
) -> Vec<T> {
    let mut out = vec![T::default(); source.len()];
    for_each_row_pair(rows, heads, |hf, gguf| {
        let (from, to) = pick(hf, gguf);
        out[to * cols..(to + 1) * cols].copy_from_slice(&source[from * cols..(from + 1) * cols]);
    });
    out
}

/// Undoes llama.cpp's Q/K row permutation for a `[rows, cols]` row-major matrix (or a bias with
/// `cols = 1`) of `heads` heads.
pub fn unpermute_rows(gguf: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    move_rows(gguf, rows, cols, heads, |hf, gguf| (gguf, hf))
}

/// [`unpermute_rows`] over rows of bytes (a quantized matrix's rows of blocks, `row_bytes` each).
pub fn unpermute_byte_rows(gguf: &[u8], rows: usize, row_bytes: usize, heads: usize) -> Vec<u8> {
    move_rows(gguf, rows, row_bytes, heads, |hf, gguf| (gguf, hf))
}

/// The file beside `model.safetensors` holding the linear weights' blocks as GGUF stores them: one U8
/// tensor `[outputs, bytes of a row]` per weight, its HF name, and in the file's metadata each linear
/// weight's GGUF type (`Q4_K`, `Q6_K`, `F32` ...), those of a type without blocks here included, so a
/// load as stored can name a weight it cannot run.
pub const BLOCKS: &str = "model.blocks.safetensors";

/// Block types the few-row kernel multiplies as stored.
fn kept_as_blocks(dtype: candle_core::quantized::GgmlDType) -> bool {
    use candle_core::quantized::GgmlDType;
    matches!(
        dtype,
        GgmlDType::Q4_0
            | GgmlDType::Q4_1
            | GgmlDType::Q5_0
            | GgmlDType::Q5_1
            | GgmlDType::Q8_0
            | GgmlDType::Q4K
            | GgmlDType::Q6K
    )
}

/// The names (as [`ggml_type_name`] writes them) of the types [`kept_as_blocks`] keeps.
const KEPT_TYPE_NAMES: [&str; 7] = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K"];

/// Whether `dir`'s blocks file holds the blocks of every weight it records in a type this version
/// keeps: `false` for a folder without one, or one imported by a version that kept fewer types (its
/// Q5_0 weights, say, recorded but not kept), which `fetch` then imports again.
pub fn blocks_complete(dir: &Path) -> bool {
    let path = dir.join(BLOCKS);
    let Ok(mut file) = File::open(&path) else {
        return false;
    };
    use std::io::Read;
    let mut length = [0u8; 8];
    if file.read_exact(&mut length).is_err() {
        return false;
    }
    let length = u64::from_le_bytes(length);
    if length > 100 << 20 {
        return false;
    }
    // The header alone (the tensors' bytes are not read): JSON of each tensor and `__metadata__`,
    // which maps every linear weight to its stored type.
    let mut header = vec![0u8; length as usize];
    if file.read_exact(&mut header).is_err() {
        return false;
    }
    let Ok(serde_json::Value::Object(header)) = serde_json::from_slice(&header) else {
        return false;
    };
    let Some(types) = header.get("__metadata__").and_then(|m| m.as_object()) else {
        return false;
    };
    types
        .iter()
        .filter(|(_, stored)| {
            stored
                .as_str()
                .is_some_and(|stored| KEPT_TYPE_NAMES.contains(&stored))
        })
        .all(|(name, _)| header.contains_key(name))
}

/// GGUF's name of a type, as the blocks file's metadata records it.
fn ggml_type_name(dtype: candle_core::quantized::GgmlDType) -> String {
    use candle_core::quantized::GgmlDType;
    match dtype {
        GgmlDType::Q4K => "Q4_K".into(),
        GgmlDType::Q5K => "Q5_K".into(),
        GgmlDType::Q6K => "Q6_K".into(),
        GgmlDType::Q2K => "Q2_K".into(),
        GgmlDType::Q3K => "Q3_K".into(),
        GgmlDType::Q8K => "Q8_K".into(),
        other => format!("{other:?}").to_uppercase(),
    }
}

/// Whether an HF tensor is a linear weight a forward pass multiplies rows by (the tied LM head reads
/// the embedding's).
fn is_linear_weight(hf: &str) -> bool {
    hf.ends_with("_proj.weight") || hf == "lm_head.weight" || hf == "model.embed_tokens.weight"
}

/// The inverse of [`unpermute_rows`] (what llama.cpp's converter does); used by tests.
pub fn permute_rows(hf: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    move_rows(hf, rows, cols, heads, |hf, gguf| (hf, gguf))
}

/// HF name of a GGUF tensor name, or `None` for tensors no forward pass reads.
fn hf_name(gguf_name: &str) -> Option<String> {
    let fixed = match gguf_name {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        other => other,
    };
    let rest = fixed.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (part, suffix) = rest.split_once('.')?;
    let module = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return Some(format!("unmapped.{fixed}")),
    };
    Some(format!("model.layers.{layer}.{module}.{suffix}"))
}

struct Metadata<'a> {
    map: &'a HashMap<String, Value>,
    arch: String,
    path: &'a Path,
}

impl Metadata<'_> {
    fn get(&self, key: &str) -> Result<&Value> {
        self.map
            .get(key)
            .ok_or_else(|| StoreError::io(self.path, format!("GGUF metadata key {key} is missing")))
    }

    fn arch_u64(&self, key: &str) -> Result<u64> {
        let full = format!("{}.{key}", self.arch);
        self.get(&full)?
            .to_u64()
            .map_err(|e| StoreError::io(self.path, format!("GGUF key {full}: {e}")))
    }

    fn arch_f64(&self, key: &str) -> Result<Option<f64>> {
        let full = format!("{}.{key}", self.arch);
        match self.map.get(&full) {
            None => Ok(None),
            // f32 in the file: print its shortest form so 1e-5 stays 1e-5, not 9.99999974e-6.
            Some(v) => v
                .to_f32()
                .map(|x| Some(format!("{x}").parse::<f64>().unwrap_or(x as f64)))
                .map_err(|e| StoreError::io(self.path, format!("GGUF key {full}: {e}"))),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>> {
        let values = self
            .get(key)?
            .to_vec()
            .map_err(|e| StoreError::io(self.path, format!("GGUF key {key}: {e}")))?;
        values
            .iter()
            .map(|v| {
                v.to_string()
                    .cloned()
                    .map_err(|e| StoreError::io(self.path, format!("GGUF key {key}: {e}")))
            })
            .collect()
    }

    fn optional_u32(&self, key: &str) -> Option<u32> {
        self.map.get(key).and_then(|v| v.to_u32().ok())
    }
}

/// Imports `gguf_path` into `out_dir`: a new folder, an empty one, or this command's own earlier import
/// (see [`crate::output_folder`]); never the current folder, one above it, or the folder holding the
/// input. The result is staged beside `out_dir` and renamed into place when complete.
pub fn import(gguf_path: &Path, out_dir: &Path) -> Result<()> {
    output_folder::claim(out_dir, "import", &[gguf_path])?;
    let staging = output_folder::Staging::new(out_dir)?;
    import_into(gguf_path, staging.path())?;
    let mut marker = output_folder::Marker::new(
        "import",
        true,
        format!("imported from {}", gguf_path.display()),
    );
    staging.commit(&mut marker, true)?;
    Ok(())
}

/// Converts `gguf_path` into the files of an HF-format folder written into `dir` (which exists and is
/// the caller's own: a staging folder).
pub fn import_into(gguf_path: &Path, dir: &Path) -> Result<()> {
    crate::gguf_check::check_gguf(gguf_path)?;
    let file = File::open(gguf_path).map_err(|e| StoreError::io(gguf_path, e))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader)
        .map_err(|e| StoreError::io(gguf_path, format!("not a readable GGUF file: {e}")))?;
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| {
            StoreError::io(
                gguf_path,
                "GGUF metadata key general.architecture is missing",
            )
        })?;
    if !matches!(arch.as_str(), "llama" | "qwen2" | "qwen3") {
        return Err(StoreError::io(
            gguf_path,
            format!("architecture {arch:?} is not supported (llama, qwen2, qwen3)"),
        ));
    }
    let meta = Metadata {
        map: &content.metadata,
        arch: arch.clone(),
        path: gguf_path,
    };
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let heads = meta.arch_u64("attention.head_count")? as usize;
    let kv_heads = meta
        .map
        .get(&format!("{arch}.attention.head_count_kv"))
        .and_then(|v| v.to_u64().ok())
        .unwrap_or(heads as u64) as usize;
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(StoreError::io(
            gguf_path,
            format!(
                "{arch}.attention.head_count = {heads} and head_count_kv = {kv_heads}: both must be positive and the first a multiple of the second"
            ),
        ));
    }
    let tied = !content.tensor_infos.contains_key("output.weight");
    let config = config_json(&meta, tokens.len(), heads, kv_heads, tied)?;
    check_tensor_table(&content, &config, gguf_path)?;

    if content.tensor_infos.contains_key("rope_freqs.weight") {
        // llama.cpp stores Llama 3.1's frequency scaling as a tensor; importing without it would be wrong.
        return Err(StoreError::io(
            gguf_path,
            "rope_freqs.weight (llama3 rope scaling) is not supported by this importer",
        ));
    }
    write_folder(
        &content,
        &mut reader,
        &meta,
        &tokens,
        &config,
        heads,
        kv_heads,
        dir,
    )
}

/// The tensor table agrees with the metadata: as many `blk.N` layers as `block_count`, an embedding of
/// `[vocab, hidden]`, and Q/K weights of whole heads (their rows are permuted per head).
fn check_tensor_table(content: &Content, config: &serde_json::Value, path: &Path) -> Result<()> {
    let number = |key: &str| config[key].as_u64().unwrap_or(0);
    let (layers, hidden, vocab) = (
        number("num_hidden_layers"),
        number("hidden_size"),
        number("vocab_size"),
    );
    let mut seen_layers = std::collections::BTreeSet::new();
    for (name, info) in &content.tensor_infos {
        if let Some(index) = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
        {
            let index: u64 = index.parse().map_err(|_| {
                StoreError::io(
                    path,
                    format!("tensor {name}: {index:?} is not a layer number"),
                )
            })?;
            seen_layers.insert(index);
        }
        let dims = info.shape.dims();
        if (name.contains(".attn_q.") || name.contains(".attn_k.")) && dims.len() > 2 {
            return Err(StoreError::io(
                path,
                format!("tensor {name}: shape {dims:?}, a matrix or vector expected"),
            ));
        }
    }
    // The tensors hold layers 0..layers exactly: as many distinct numbers as layers, the last layers - 1.
    // (Not by building 0..layers: block_count is the file's word, and 2^32 layers is 2^32 set entries.)
    let whole = seen_layers.len() as u64 == layers
        && seen_layers
            .last()
            .map_or(layers == 0, |&last| last + 1 == layers);
    if !whole {
        return Err(StoreError::io(
            path,
            format!(
                "block_count says {layers} layers, the tensors hold layers {:?}",
                seen_layers.iter().take(8).collect::<Vec<_>>()
            ),
        ));
    }
    match content.tensor_infos.get("token_embd.weight") {
        Some(info) if info.shape.dims() == [vocab as usize, hidden as usize] => {}
        Some(info) => {
            return Err(StoreError::io(
                path,
                format!(
                    "tensor token_embd.weight: shape {:?}, [{vocab}, {hidden}] expected from the vocabulary and embedding_length",
                    info.shape.dims()
                ),
            ))
        }
        None => return Err(StoreError::io(path, "tensor token_embd.weight is missing")),
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_folder(
    content: &Content,
    reader: &mut BufReader<File>,
    meta: &Metadata<'_>,
    tokens: &[String],
    config: &serde_json::Value,
    heads: usize,
    kv_heads: usize,
    partial: &Path,
) -> Result<()> {
    let gguf_path = meta.path;
    let arch = meta.arch.as_str();
    write_json(&partial.join("config.json"), config)?;
    write_tokenizer(meta, tokens, partial)?;

    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::with_capacity(names.len());
    // The linear weights' blocks as stored, and every linear weight's stored type.
    let mut blocks: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut stored_types: HashMap<String, String> = HashMap::new();
    for gguf_name in names {
        let Some(name) = hf_name(gguf_name) else {
            continue;
        };
        if name.starts_with("unmapped.") {
            return Err(StoreError::io(
                gguf_path,
                format!("tensor {gguf_name} has no HF counterpart in this importer"),
            ));
        }
        let qtensor = content
            .tensor(reader, gguf_name, &candle_core::Device::Cpu)
            .map_err(|e| {
                StoreError::io(
                    gguf_path,
                    format!("tensor {gguf_name}: {e} (truncated or corrupt file?)"),
                )
            })?;
        let shape = qtensor.shape().dims().to_vec();
        let permuted_heads = (arch == "llama"
            && gguf_name.starts_with("blk.")
            && (gguf_name.contains(".attn_q.") || gguf_name.contains(".attn_k.")))
        .then(|| {
            if gguf_name.contains(".attn_q.") {
                heads
            } else {
                kv_heads
            }
        });
        if is_linear_weight(&name) && shape.len() == 2 {
            stored_types.insert(name.clone(), ggml_type_name(qtensor.dtype()));
            if kept_as_blocks(qtensor.dtype()) {
                let raw = qtensor
                    .data()
                    .map_err(|e| StoreError::io(gguf_path, format!("tensor {gguf_name}: {e}")))?;
                let (rows, row_bytes) = (shape[0], raw.len() / shape[0].max(1));
                let raw = match permuted_heads {
                    Some(group) if rows % group == 0 && (rows / group) % 2 == 0 => {
                        unpermute_byte_rows(&raw, rows, row_bytes, group)
                    }
                    _ => raw.into_owned(),
                };
                blocks.push((name.clone(), vec![rows, row_bytes], raw));
            }
        }
        let values = qtensor
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(candle_core::DType::F32))
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| StoreError::io(gguf_path, format!("tensor {gguf_name}: {e}")))?;
        let values = if arch == "llama"
            && (gguf_name.starts_with("blk.")
                && (gguf_name.contains(".attn_q.") || gguf_name.contains(".attn_k.")))
        {
            let group = if gguf_name.contains(".attn_q.") {
                heads
            } else {
                kv_heads
            };
            let rows = shape.first().copied().unwrap_or(0);
            let cols = shape.get(1).copied().unwrap_or(1);
            if rows == 0
                || rows % group != 0
                || (rows / group) % 2 != 0
                || rows * cols != values.len()
            {
                return Err(StoreError::io(
                    gguf_path,
                    format!("tensor {gguf_name}: shape {shape:?} is not whole heads of even size ({group} heads)"),
                ));
            }
            unpermute_rows(&values, rows, cols, group)
        } else {
            values
        };
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push((name, shape, bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|view| (name.clone(), view))
                .map_err(|e| StoreError::tensor(name.clone(), e.to_string()))
        })
        .collect::<Result<_>>()?;
    let weights = partial.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &weights)
        .map_err(|e| StoreError::io(&weights, e))?;
    drop(tensors);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = blocks
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::U8, shape.clone(), bytes)
                .map(|view| (name.clone(), view))
                .map_err(|e| StoreError::tensor(name.clone(), e.to_string()))
        })
        .collect::<Result<_>>()?;
    let blocks_path = partial.join(BLOCKS);
    safetensors::serialize_to_file(views, Some(stored_types), &blocks_path)
        .map_err(|e| StoreError::io(&blocks_path, e))
}

fn config_json(
    meta: &Metadata<'_>,
    vocab: usize,
    heads: usize,
    kv_heads: usize,
    tied: bool,
) -> Result<serde_json::Value> {
    let arch = meta.arch.as_str();
    let hidden = meta.arch_u64("embedding_length")?;
    let head_dim = meta
        .map
        .get(&format!("{arch}.attention.key_length"))
        .and_then(|v| v.to_u64().ok())
        .unwrap_or(hidden / heads as u64);
    let architecture = match arch {
        "llama" => "LlamaForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        _ => "Qwen3ForCausalLM",
    };
    Ok(json!({
        "architectures": [architecture],
        "model_type": arch,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": meta.arch_u64("feed_forward_length")?,
        "num_hidden_layers": meta.arch_u64("block_count")?,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": meta.arch_f64("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-6),
        "rope_theta": meta.arch_f64("rope.freq_base")?.unwrap_or(10000.0),
        "max_position_embeddings": meta.arch_u64("context_length")?,
        "tie_word_embeddings": tied,
        "attention_bias": arch == "qwen2",
        "bos_token_id": meta.optional_u32("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.optional_u32("tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }))
}

/// The pre-tokenizer of the architecture's original tokenizer.json, by llama.cpp's `tokenizer.ggml.pre`.
fn pre_tokenizer(pre: &str, path: &Path) -> Result<serde_json::Value> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    Ok(match pre {
        // SmolLM: every digit on its own, then GPT-2's byte-level split.
        "smollm" => {
            json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]})
        }
        "qwen2" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}, "behavior": "Isolated", "invert": false},
            byte_level(false)]}),
        "gpt2" | "default" => byte_level(true),
        other => {
            return Err(StoreError::io(
                path,
                format!("tokenizer.ggml.pre {other:?} is not supported (smollm, qwen2, gpt2)"),
            ))
        }
    })
}

fn write_tokenizer(meta: &Metadata<'_>, tokens: &[String], dir: &Path) -> Result<()> {
    let model = meta
        .get("tokenizer.ggml.model")?
        .to_string()
        .map_err(|e| StoreError::io(meta.path, e))?;
    if model != "gpt2" {
        return Err(StoreError::io(
            meta.path,
            format!("tokenizer.ggml.model {model:?} is not supported (byte-level BPE, gpt2)"),
        ));
    }
    let pre = meta
        .map
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map_or("default", String::as_str);
    let types: Vec<i64> = match meta.map.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|e| StoreError::io(meta.path, e))?
            .iter()
            .map(|t| t.to_i32().map(i64::from).unwrap_or(1))
            .collect(),
        None => vec![1; tokens.len()],
    };
    let merges = meta.strings("tokenizer.ggml.merges")?;
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    // token_type 3 = control (special), 4 = user-defined: both must match before BPE runs.
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, ty))| **ty == 3 || **ty == 4)
        .map(|(i, (t, ty))| json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": *ty == 4, "special": *ty == 3}))
        .collect();
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer(pre, meta.path)?,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges},
    });
    write_json(&dir.join("tokenizer.json"), &tokenizer)?;
    let token_at = |key: &str| {
        meta.optional_u32(key)
            .and_then(|id| tokens.get(id as usize))
            .cloned()
    };
    let config = json!({
        "chat_template": meta.map.get("tokenizer.chat_template").and_then(|v| v.to_string().ok()),
        "bos_token": token_at("tokenizer.ggml.bos_token_id"),
        "eos_token": token_at("tokenizer.ggml.eos_token_id"),
        "add_bos_token": meta.map.get("tokenizer.ggml.add_bos_token").and_then(|v| v.to_bool().ok()).unwrap_or(false),
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    write_json(&dir.join("tokenizer_config.json"), &config)
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| StoreError::io(path, e))?;
    std::fs::write(path, text).map_err(|e| StoreError::io(path, e))
}
