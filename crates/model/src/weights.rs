//! Strict checkpoint loading: every variable the architecture declares must be in the safetensors file(s)
//! with its exact shape, and every tensor in the files must be used. All problems are reported at once.

use crate::error::{ModelError, Result};
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tch::{nn::VarStore, Kind, Tensor};

/// Tensors that some exports carry but no forward pass reads.
const IGNORED_SUFFIXES: [&str; 1] = ["rotary_emb.inv_freq"];

/// What to do with one tensor name found in a checkpoint file.
pub enum Route {
    /// Fill the variable of this name.
    Var(String),
    /// Return it to the caller as is (integer maps such as EAGLE-3's `d2t`).
    Side,
    /// Known and unused.
    Ignore,
}

/// The routing of a plain HF causal LM: names are variable names; a tied model ignores `lm_head.weight`.
pub fn hf_route(tied_lm_head: bool) -> impl Fn(&str) -> Route {
    move |name: &str| {
        if IGNORED_SUFFIXES.iter().any(|s| name.ends_with(s))
            || (tied_lm_head && name == "lm_head.weight")
        {
            Route::Ignore
        } else {
            Route::Var(name.to_string())
        }
    }
}

/// The safetensors files of a checkpoint folder: `model.safetensors`, or the shards listed in
/// `model.safetensors.index.json`.
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index_path = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index_path).map_err(|_| {
        ModelError::io(
            dir,
            "neither model.safetensors nor model.safetensors.index.json found",
        )
    })?;
    let index: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ModelError::io(&index_path, e))?;
    let map = index["weight_map"]
        .as_object()
        .ok_or_else(|| ModelError::io(&index_path, "missing weight_map"))?;
    let shards: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
    Ok(shards.into_iter().map(|s| dir.join(s)).collect())
}

fn kind_of(dtype: Dtype) -> Option<Kind> {
    Some(match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F64 => Kind::Double,
        Dtype::I64 => Kind::Int64,
        Dtype::I32 => Kind::Int,
        Dtype::BOOL => Kind::Bool,
        _ => return None,
    })
}

/// Fills every variable of `vs` from `files`, converting dtypes; `route` maps each file tensor to a
/// variable, a side tensor (returned) or nothing. Anything missing, mis-shaped or unroutable is reported.
pub fn load_strict(
    vs: &mut VarStore,
    files: &[PathBuf],
    route: impl Fn(&str) -> Route,
) -> Result<BTreeMap<String, Tensor>> {
    let mut side = BTreeMap::new();
    let mut variables: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    let mut problems = Vec::new();
    let mut unexpected = Vec::new();
    let mut maps = Vec::new();
    for file in files {
        let handle = std::fs::File::open(file).map_err(|e| ModelError::io(file, e))?;
        // SAFETY: the file is only read, and not expected to change while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&handle) }.map_err(|e| ModelError::io(file, e))?;
        maps.push((file.clone(), map));
    }
    tch::no_grad(|| -> Result<()> {
        for (file, map) in &maps {
            let tensors = SafeTensors::deserialize(map)
                .map_err(|e| ModelError::io(file, format!("not a safetensors file: {e}")))?;
            for (name, view) in tensors.tensors() {
                let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
                let var_name = match route(&name) {
                    Route::Ignore => continue,
                    Route::Side => {
                        let Some(kind) = kind_of(view.dtype()) else {
                            problems.push(format!(
                                "tensor {name}: dtype {:?} is not supported",
                                view.dtype()
                            ));
                            continue;
                        };
                        side.insert(
                            name.clone(),
                            Tensor::f_from_data_size(view.data(), &shape, kind)?,
                        );
                        continue;
                    }
                    Route::Var(var_name) => var_name,
                };
                let Some(var) = variables.remove(&var_name) else {
                    unexpected.push(format!("unexpected tensor {name} {shape:?}"));
                    continue;
                };
                // Weights are floating point: an integer or boolean dtype is a broken or foreign file,
                // never something to convert (I32 bits read as integers change every value).
                let kind = match kind_of(view.dtype()) {
                    Some(kind @ (Kind::Float | Kind::Half | Kind::BFloat16 | Kind::Double)) => kind,
                    _ => {
                        problems.push(format!(
                            "tensor {name}: dtype {:?} in the file, a floating-point weight (F32, F16, BF16, F64) expected",
                            view.dtype()
                        ));
                        continue;
                    }
                };
                if var.size() != shape {
                    problems.push(format!(
                        "tensor {name}: shape {shape:?} in the file, {:?} expected",
                        var.size()
                    ));
                    continue;
                }
                let source = Tensor::f_from_data_size(view.data(), &shape, kind)?;
                let mut target = var;
                target.f_copy_(&source)?;
            }
        }
        Ok(())
    })?;
    problems.extend(
        variables
            .iter()
            .map(|(name, t)| format!("missing tensor {name} {:?}", t.size())),
    );
    problems.extend(unexpected);
    if problems.is_empty() {
        Ok(side)
    } else {
        let path = files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        Err(ModelError::Checkpoint { path, problems })
    }
}
