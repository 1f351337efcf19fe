//! A model run as its GGUF file stores its weights (dtype `gguf`): passes of a few rows multiply the
//! blocks, a row's logits do not depend on the rows beside it (a decode step and a verification
//! agree exactly), a prompt of many rows takes the f32 weights, a weight in a block type the kernel
//! does not run is refused by name, and the blocks dequantize as candle (llama.cpp's layouts) does.
mod common;

use common::fixture;
use sharpdraft_kernel::quantized::{dequantize_block, BlockFormat};
use sharpdraft_model::weight_blocks::{write_q8_0_blocks, BLOCKS_FILE};
use sharpdraft_model::{AttentionMask, CausalLm, ForwardInput, LogitRows, ModelDtype};
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// A copy of fixture `family` with Q8_0 blocks quantized from its weights.
fn as_stored_copy(family: &str, into: &Path) -> CausalLm {
    std::fs::create_dir_all(into).unwrap();
    for entry in std::fs::read_dir(fixture(family)).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, into.join(path.file_name().unwrap())).unwrap();
        }
    }
    write_q8_0_blocks(into).unwrap();
    CausalLm::load_dtype(into, Device::Cpu, ModelDtype::AsStored).unwrap()
}

fn logits(model: &CausalLm, ids: &[i64], first: i64) -> Tensor {
    let mut cache = model.net.new_cache(64);
    let ids_t = Tensor::from_slice(ids);
    let positions =
        Tensor::arange_start(first, first + ids.len() as i64, (Kind::Int64, Device::Cpu));
    // Rows first..: a cache of `first` positions ahead of them.
    if first > 0 {
        let lead: Vec<i64> = (0..first).map(|i| 3 + i % 50).collect();
        let _ = sharpdraft_model::generate::prefill(&model.net, &lead, &mut cache).unwrap();
    }
    let input = ForwardInput {
        mask: &AttentionMask::Causal,
        logits: LogitRows::All,
        ..ForwardInput::causal(&ids_t, &positions)
    };
    model
        .net
        .forward(input, &mut cache)
        .unwrap()
        .logits
        .unwrap()
}

#[test]
fn a_rows_logits_as_stored_do_not_depend_on_the_rows_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    for family in ["llama", "qwen2"] {
        let model = as_stored_copy(family, &dir.path().join(family));
        assert!(model.as_stored);
        let ids = [5i64, 17, 42, 3, 3, 60, 21];
        let seven = logits(&model, &ids, 8);
        // Each row alone, after the same cache: what a decode step computes.
        for r in 0..ids.len() {
            let mut cache = model.net.new_cache(64);
            let lead: Vec<i64> = (0..8)
                .map(|i| 3 + i % 50)
                .chain(ids[..r].iter().copied())
                .collect();
            let _ = sharpdraft_model::generate::prefill(&model.net, &lead, &mut cache).unwrap();
            let one = Tensor::from_slice(&ids[r..=r]);
            let at = Tensor::from_slice(&[8 + r as i64]);
            let alone = model
                .net
                .forward(ForwardInput::causal(&one, &at), &mut cache)
                .unwrap()
                .logits
                .unwrap();
            let diff = (alone.get(0) - seven.get(r as i64))
                .abs()
                .max()
                .double_value(&[]);
            assert!(diff < 1e-4, "{family}: row {r} alone differs by {diff}");
        }
        // And they are close to the f32 model's (Q8_0 weights, 8-bit rows).
        let f32_model = CausalLm::load(&fixture(family), Device::Cpu, Kind::Float).unwrap();
        let full = logits(&f32_model, &ids, 8);
        let scale = full.abs().max().double_value(&[]);
        let diff = (&full - &seven).abs().max().double_value(&[]);
        assert!(
            diff < 0.1 * scale.max(1.0),
            "{family}: {diff} off the f32 logits (scale {scale})"
        );
    }
}

#[test]
fn a_weight_stored_in_a_block_type_the_kernel_does_not_run_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("llama");
    let _ = as_stored_copy("llama", &folder);
    // Rewrite the blocks file's metadata: one weight now says Q5_K.
    let path = folder.join(BLOCKS_FILE);
    let bytes = std::fs::read(&path).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut types = metadata.metadata().clone().unwrap();
    let victim = "model.layers.0.mlp.down_proj.weight".to_string();
    types.insert(victim.clone(), "Q5_K".into());
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors.tensors();
    let out = safetensors::serialize(views, Some(types)).unwrap();
    std::fs::write(&path, out).unwrap();
    let err = CausalLm::load_dtype(&folder, Device::Cpu, ModelDtype::AsStored)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains(&victim) && err.contains("Q5_K"), "{err}");
}

#[test]
fn a_folder_without_blocks_is_refused_as_stored_naming_what_makes_them() {
    let err = CausalLm::load_dtype(&fixture("llama"), Device::Cpu, ModelDtype::AsStored)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains(BLOCKS_FILE) && err.contains("import gguf"),
        "{err}"
    );
}

#[test]
fn the_blocks_dequantize_as_candle_dequantizes_llama_cpps_layouts() {
    use candle_core::quantized::{GgmlDType, QTensor};
    let values: Vec<f32> = (0..4 * 512)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let tensor =
        candle_core::Tensor::from_vec(values, (4, 512), &candle_core::Device::Cpu).unwrap();
    for (dtype, format) in [
        (GgmlDType::Q8_0, BlockFormat::Q8_0),
        (GgmlDType::Q4_0, BlockFormat::Q4_0),
        (GgmlDType::Q4_1, BlockFormat::Q4_1),
        (GgmlDType::Q5_0, BlockFormat::Q5_0),
        (GgmlDType::Q5_1, BlockFormat::Q5_1),
        (GgmlDType::Q4K, BlockFormat::Q4K),
        (GgmlDType::Q6K, BlockFormat::Q6K),
    ] {
        let q = QTensor::quantize(&tensor, dtype).unwrap();
        let candle: Vec<f32> = q
            .dequantize(&candle_core::Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let raw = q.data().unwrap();
        let mut ours = vec![0f32; candle.len()];
        for (block, out) in raw
            .chunks_exact(format.bytes())
            .zip(ours.chunks_exact_mut(format.values()))
        {
            dequantize_block(format, block, out);
        }
        for (i, (a, b)) in ours.iter().zip(&candle).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                "{}: value {i}: {a} against candle's {b}",
                format.name()
            );
        }
    }
}
