//! The two building blocks every decoder family shares: a linear map and RMSNorm. Variables are created
//! zero-filled (they are overwritten by the checkpoint) at the checkpoint's own tensor names.

use tch::{nn, Kind, Tensor};

pub struct Linear {
    /// `[out, in]`, as in HF checkpoints.
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    pub fn new(p: nn::Path, inputs: i64, outputs: i64, bias: bool) -> Self {
        Self::with_grad(p, inputs, outputs, bias, false)
    }

    /// `trainable`: the variables take gradients (drafter training); otherwise they are frozen.
    pub fn with_grad(p: nn::Path, inputs: i64, outputs: i64, bias: bool, trainable: bool) -> Self {
        let var = |name: &str, dims: &[i64]| {
            if trainable {
                p.zeros(name, dims)
            } else {
                p.zeros_no_train(name, dims)
            }
        };
        let weight = var("weight", &[outputs, inputs]);
        let bias = bias.then(|| var("bias", &[outputs]));
        Self { weight, bias }
    }

    /// `[.., in] -> [.., out]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

pub struct RmsNorm {
    pub weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(p: nn::Path, size: i64, eps: f64) -> Self {
        Self::with_grad(p, size, eps, false)
    }

    pub fn with_grad(p: nn::Path, size: i64, eps: f64, trainable: bool) -> Self {
        let weight = if trainable {
            p.ones("weight", &[size])
        } else {
            p.zeros_no_train("weight", &[size])
        };
        Self { weight, eps }
    }

    /// Normalises the last dimension in f32 (as HF does) and returns the input's kind.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let x32 = x.to_kind(Kind::Float);
        let variance = x32
            .pow_tensor_scalar(2)
            .mean_dim(&[-1i64][..], true, Kind::Float);
        let normed = x32 * (variance + self.eps).rsqrt();
        normed.to_kind(kind) * &self.weight
    }
}
