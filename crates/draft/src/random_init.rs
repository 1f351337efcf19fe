//! Random initialisation in the published checkpoint layouts (`init eagle3`, `init dflash`, tests): the
//! weight and norm initialisers, the writers of config.json and f32 safetensors, and the target weights
//! that warm starts copy.

use std::path::Path;
use tch::{Device, Kind, Tensor};

/// `N(0, scale^2)` weights.
pub(crate) fn random_weight(shape: &[i64], scale: f64) -> Tensor {
    Tensor::randn(shape, (Kind::Float, Device::Cpu)) * scale
}

/// RMSNorm weights near 1, so that a misplaced norm does not hide behind an identity.
pub(crate) fn random_norm(size: i64) -> Tensor {
    Tensor::ones([size], (Kind::Float, Device::Cpu))
        + Tensor::randn([size], (Kind::Float, Device::Cpu)) * 0.1
}

pub(crate) fn write_config(
    dir: &Path,
    config: &serde_json::Value,
) -> std::result::Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("config.json"), config.to_string()).map_err(|e| e.to_string())
}

/// Raw tensors of other dtypes (EAGLE-3's `d2t` i64 and `t2d` bool): name, dtype, shape, bytes.
pub(crate) type RawTensor = (String, safetensors::Dtype, Vec<usize>, Vec<u8>);

/// Writes f32 tensors (plus raw extras) to one safetensors file.
pub(crate) fn write_f32_safetensors(
    path: &Path,
    tensors: &[(String, Tensor)],
    extra: &[RawTensor],
) -> std::result::Result<(), String> {
    let mut buffers: Vec<RawTensor> = Vec::with_capacity(tensors.len() + extra.len());
    for (name, t) in tensors {
        let data = Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1))
            .map_err(|e| format!("{name}: {e}"))?;
        let shape = t.size().iter().map(|&d| d as usize).collect();
        buffers.push((
            name.clone(),
            safetensors::Dtype::F32,
            shape,
            data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
    }
    buffers.extend(extra.iter().cloned());
    let views = buffers
        .iter()
        .map(|(name, dtype, shape, data)| {
            safetensors::tensor::TensorView::new(*dtype, shape.clone(), data)
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("{name}: {e}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // Written beside and renamed over: a reader never sees half a file, and a process that maps the
    // old file (a CPU model loads in place) keeps reading the old bytes.
    let partial = path.with_extension("safetensors.partial");
    safetensors::serialize_to_file(views, None, &partial).map_err(|e| e.to_string())?;
    std::fs::rename(&partial, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes a trained drafter in its published layout: `config` with `training_length` recorded and the
/// dtype key set to float32, and the variables of `vars` (detached, f32) plus raw extras.
pub(crate) fn save_trained(
    dir: &Path,
    config: &serde_json::Value,
    dtype_key: &str,
    training_length: i64,
    vars: &tch::nn::VarStore,
    extra: &[RawTensor],
) -> crate::drafter::Result<()> {
    let error = |reason: String| crate::drafter::DraftError::Checkpoint {
        path: dir.display().to_string(),
        reason,
    };
    let mut config = config.clone();
    config["training_length"] = training_length.into();
    config[dtype_key] = "float32".into();
    write_config(dir, &config).map_err(error)?;
    let mut tensors: Vec<(String, Tensor)> = vars
        .variables()
        .into_iter()
        .map(|(name, t)| (name, t.detach()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    write_f32_safetensors(&dir.join("model.safetensors"), &tensors, extra).map_err(error)
}

/// The target's weights by name, read as f32 on the CPU: what a warm start copies from.
pub struct TargetWeights(std::collections::HashMap<String, Tensor>);

impl TargetWeights {
    pub fn of(target: &sharpdraft_model::CausalLm) -> Self {
        Self(target.vars.variables())
    }

    /// The tensor `name`, or an error naming it.
    pub fn get(&self, name: &str) -> crate::drafter::Result<Tensor> {
        self.0
            .get(name)
            .map(|t| t.to_kind(Kind::Float).to_device(Device::Cpu))
            .ok_or_else(|| {
                crate::drafter::DraftError::Mismatch(format!("the target has no tensor {name}"))
            })
    }
}
