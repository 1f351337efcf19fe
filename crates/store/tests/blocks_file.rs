//! A model folder's blocks file is complete when it keeps the blocks of every weight it records in a
//! type this version keeps; `fetch` imports a folder again otherwise (one imported by a version that
//! kept fewer block types, or none).

use sharpdraft_store::gguf::{blocks_complete, BLOCKS};
use std::collections::HashMap;

/// Writes a blocks file into `dir` recording `types` and holding a block tensor for each of `kept`.
fn write_blocks(dir: &std::path::Path, types: &[(&str, &str)], kept: &[&str]) {
    let bytes = vec![0u8; 22];
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = kept
        .iter()
        .map(|name| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::U8, vec![1, 22], &bytes)
                    .unwrap();
            (name.to_string(), view)
        })
        .collect();
    let types: HashMap<String, String> = types
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    safetensors::serialize_to_file(views, Some(types), &dir.join(BLOCKS)).unwrap();
}

#[test]
fn a_folder_without_a_blocks_file_is_not_complete() {
    let dir = tempfile::tempdir().unwrap();
    assert!(!blocks_complete(dir.path()));
}

#[test]
fn a_blocks_file_missing_a_kept_types_weight_is_not_complete() {
    let dir = tempfile::tempdir().unwrap();
    // An older import recorded the Q5_0 weight's type but kept no blocks for it.
    write_blocks(dir.path(), &[("q", "Q5_0"), ("down", "Q6_K")], &["down"]);
    assert!(!blocks_complete(dir.path()));
}

#[test]
fn a_blocks_file_with_every_kept_weight_is_complete_whatever_it_records_of_other_types() {
    let dir = tempfile::tempdir().unwrap();
    write_blocks(
        dir.path(),
        &[
            ("q", "Q5_0"),
            ("down", "Q6_K"),
            ("norm", "F32"),
            ("odd", "Q2_K"),
        ],
        &["q", "down"],
    );
    assert!(blocks_complete(dir.path()));
}

#[test]
fn a_truncated_blocks_file_is_not_complete() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(BLOCKS), [200u8, 0, 0]).unwrap();
    assert!(!blocks_complete(dir.path()));
}
