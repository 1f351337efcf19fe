//! Choosing where tensors live: `cpu`, `cuda` (device 0) or `cuda:N`.

use crate::error::{ModelError, Result};
use tch::{Cuda, Device};

/// The device a config or command uses unless told otherwise.
pub const DEFAULT_DEVICE: &str = "cpu";

/// [`DEFAULT_DEVICE`] as serde's default for a config's `device:` key.
pub fn default_device() -> String {
    DEFAULT_DEVICE.to_string()
}

/// Parses a device name and checks that libtorch can use it. A CUDA device needs a GPU at run time and
/// a binary built with the `cuda` feature (which links libtorch_cuda).
pub fn parse_device(name: &str) -> Result<Device> {
    let fail = |reason: String| ModelError::Device {
        device: name.to_string(),
        reason,
    };
    let device = match name.trim() {
        "cpu" => return Ok(Device::Cpu),
        "cuda" => Device::Cuda(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(index)) => Device::Cuda(index),
            _ => return Err(fail("expected cpu, cuda or cuda:N".to_string())),
        },
    };
    let available = Cuda::device_count() as usize;
    if let Device::Cuda(index) = device {
        if index >= available {
            return Err(fail(format!(
                "libtorch sees {available} CUDA device(s){}",
                if cfg!(feature = "cuda") {
                    ""
                } else {
                    "; this binary was built without the `cuda` feature"
                }
            )));
        }
    }
    Ok(device)
}

/// Whether a CUDA device is usable from this binary (the GPU tests skip, with a message, when not).
pub fn cuda_available() -> bool {
    Cuda::is_available()
}
