//! Strict checkpoint loading: every variable the architecture declares must be in the safetensors file(s)
//! with its exact shape, and every tensor in the files must be used. All problems are reported at once.
//!
//! Two ways to fill a variable. Copying (any dtype or device): the file is mapped and each tensor is
//! converted into the variable, after which its pages are released, so memory never holds the model
//! twice. In place ([`load_mapped`], a CPU target whose file already holds its dtype): the variable's
//! storage becomes the mapped file itself (copy-on-write, so a write never reaches the file), which
//! costs no copy and no second set of pages; the mapping must then outlive the variables.

use crate::error::{ModelError, Result};
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tch::{nn::VarStore, Device, Kind, Tensor};

/// The page size the released ranges are aligned to (4 KiB; a larger page only releases less).
const PAGE: usize = 4096;

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

/// Checkpoint files mapped copy-on-write whose bytes variables use as their storage (see
/// [`load_mapped`]). Dropping it while those variables live would leave them pointing at nothing: keep
/// it beside the VarStore, declared after it (fields drop in order).
pub struct MappedCheckpoint {
    /// Held, never read: the variables' storage lives in these mappings.
    _maps: Vec<memmap2::MmapMut>,
    /// Bytes of the variables that use the mapping in place.
    in_place_bytes: usize,
}

impl MappedCheckpoint {
    /// Nothing mapped (every variable holds its own copy).
    pub fn none() -> Self {
        Self {
            _maps: Vec::new(),
            in_place_bytes: 0,
        }
    }

    /// Bytes of variables whose storage is the mapped file.
    pub fn in_place_bytes(&self) -> usize {
        self.in_place_bytes
    }
}

/// Fills every variable of `vs` from `files`, converting dtypes; `route` maps each file tensor to a
/// variable, a side tensor (returned) or nothing. Anything missing, mis-shaped or unroutable is reported.
pub fn load_strict(
    vs: &mut VarStore,
    files: &[PathBuf],
    route: impl Fn(&str) -> Route,
) -> Result<BTreeMap<String, Tensor>> {
    fill(vs, files, route, false).map(|(side, _)| side)
}

/// [`load_strict`], with every CPU variable whose dtype the file already holds (and whose bytes are
/// aligned for it) using the mapped file as its storage instead of a copy.
///
/// # Safety
/// Those variables' storage is the returned [`MappedCheckpoint`]: it must be dropped after every
/// tensor that shares their storage (the variables of `vs`, and any shallow clone or view of them).
/// libtorch cannot hold the mapping alive on its own, so a tensor used after the mapping is dropped
/// reads unmapped memory. [`crate::CausalLm`] keeps the mapping in a field declared after its store.
pub unsafe fn load_mapped(
    vs: &mut VarStore,
    files: &[PathBuf],
    route: impl Fn(&str) -> Route,
) -> Result<(BTreeMap<String, Tensor>, MappedCheckpoint)> {
    fill(vs, files, route, true)
}

/// Row-major strides of `shape`.
fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

fn fill(
    vs: &mut VarStore,
    files: &[PathBuf],
    route: impl Fn(&str) -> Route,
    in_place: bool,
) -> Result<(BTreeMap<String, Tensor>, MappedCheckpoint)> {
    let mut side = BTreeMap::new();
    let mut variables: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    let mut problems = Vec::new();
    let mut unexpected = Vec::new();
    let maps = map_files(files)?;
    let mut in_place_bytes = 0;
    tch::no_grad(|| -> Result<()> {
        for (file, map) in &maps {
            let base = map.as_ptr() as usize;
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
                in_place_bytes +=
                    set_variable(var, view.data(), &shape, kind, in_place, map, base)?;
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
    if !problems.is_empty() {
        let path = files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ModelError::Checkpoint { path, problems });
    }
    // The mappings stay alive only when some variable reads from them.
    let maps = if in_place_bytes > 0 {
        maps.into_iter().map(|(_, map)| map).collect()
    } else {
        Vec::new()
    };
    Ok((
        side,
        MappedCheckpoint {
            _maps: maps,
            in_place_bytes,
        },
    ))
}

/// Fills variable `var` from `data`, a tensor's bytes of `shape` and `kind` inside `map` (which starts at
/// address `base`): in place (the variable reads the mapping) when `in_place` and the bytes allow it,
/// else converted into the variable's own storage and the pages given back. Returns the bytes read in
/// place.
fn set_variable(
    mut target: Tensor,
    data: &[u8],
    shape: &[i64],
    kind: Kind,
    in_place: bool,
    map: &memmap2::MmapMut,
    base: usize,
) -> Result<usize> {
    let aligned = (data.as_ptr() as usize).is_multiple_of(kind.elt_size_in_bytes());
    // SAFETY: `data` lies inside `map`, which the caller keeps alive past this call; the shape matches
    // its length. A view, not a copy: the bytes are read once, by whatever uses it.
    let file_view = || unsafe {
        Tensor::f_from_blob(
            data.as_ptr(),
            shape,
            &contiguous_strides(shape),
            kind,
            Device::Cpu,
        )
    };
    if in_place && aligned && target.kind() == kind && target.device() == Device::Cpu {
        // The returned MappedCheckpoint keeps `map` alive as long as the caller keeps the variables.
        target.set_data(&file_view()?);
        return Ok(data.len());
    }
    // Converted straight from the mapped bytes (an unaligned tensor via one copy).
    let source = match aligned {
        true => file_view()?,
        false => Tensor::f_from_data_size(data, shape, kind)?,
    };
    target.f_copy_(&source)?;
    drop(source);
    // The pages read for this tensor are in the variable now: give them back, so that the model is
    // never resident twice.
    release_pages(map, base, data);
    Ok(0)
}

/// Maps every checkpoint file privately (copy-on-write), in order.
fn map_files(files: &[PathBuf]) -> Result<Vec<(PathBuf, memmap2::MmapMut)>> {
    let mut maps = Vec::with_capacity(files.len());
    for file in files {
        let handle = std::fs::File::open(file).map_err(|e| ModelError::io(file, e))?;
        // SAFETY: the file is not expected to change while it is mapped; the mapping is private
        // (copy-on-write), so writes through a variable stay in this process.
        let map = unsafe { memmap2::MmapOptions::new().map_copy(&handle) }
            .map_err(|e| ModelError::io(file, e))?;
        maps.push((file.clone(), map));
    }
    Ok(maps)
}

/// Gives back the pages of `data` (bytes inside `map`, which starts at address `base`) once they have
/// been copied: page-aligned inside the tensor's bytes, so a neighbour's pages stay.
fn release_pages(map: &memmap2::MmapMut, base: usize, data: &[u8]) {
    let start = (data.as_ptr() as usize - base).next_multiple_of(PAGE);
    let end = (data.as_ptr() as usize - base + data.len()) / PAGE * PAGE;
    if end > start {
        // SAFETY: a private file mapping; DONTNEED drops this process's clean copies (nothing was
        // written), and the bytes are re-read from the file if touched.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        };
    }
}
