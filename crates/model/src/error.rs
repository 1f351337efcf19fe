//! Errors of the model layer; each names the device, tensor or value at fault.

pub type Result<T> = std::result::Result<T, ModelError>;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("device {device:?}: {reason}")]
    Device { device: String, reason: String },

    #[error("tensor {name}: {reason}")]
    Tensor { name: &'static str, reason: String },

    #[error(transparent)]
    Torch(#[from] tch::TchError),
}
