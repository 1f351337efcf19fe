//! The building blocks every decoder here shares (the target, EAGLE-3 heads, DFlash drafters): a linear
//! map (with an optional low-rank branch, for unmerged LoRA), RMSNorm, the per-head Q/K/V projection
//! with RoPE, and the SwiGLU MLP. Variables are created at the checkpoint's own tensor names: trainable
//! ones zero-filled, frozen ones uninitialised ([`declare_frozen`]; the checkpoint fills them).

use crate::rope;
use std::sync::OnceLock;
use tch::{nn, Kind, Tensor};

/// A frozen variable a checkpoint fills: allocated, not initialised, so that its memory is committed
/// only when the load writes it, or never, when the load maps the file in place (loading never holds a
/// zero-filled model beside the real one). Strict loading fails on any variable the file lacks.
pub fn declare_frozen(p: &nn::Path, name: &str, dims: &[i64]) -> Tensor {
    p.add(name, Tensor::empty(dims, (Kind::Float, p.device())), false)
}

/// A low-rank branch added to a linear map's output, `y += scale * (x A^T) B^T`: LoRA kept apart from
/// the weight ("unmerged"). The tensors are shared with whoever trains them (updated in place).
pub struct LowRank {
    /// `[r, in]`.
    pub a: Tensor,
    /// `[out, r]`.
    pub b: Tensor,
    /// alpha / r.
    pub scale: f64,
}

pub struct Linear {
    /// The checkpoint name of the weight (`model.layers.0.self_attn.q_proj.weight`).
    name: String,
    /// `[out, in]`, as in HF checkpoints.
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// Set at most once, by online adaptation with unmerged LoRA.
    low_rank: OnceLock<LowRank>,
    /// The weight's blocks as its GGUF file stores them (dtype `gguf`), which passes of a few rows
    /// multiply instead of `weight`.
    blocks: OnceLock<crate::weight_blocks::WeightBlocks>,
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
                declare_frozen(&p, name, dims)
            }
        };
        let weight = var("weight", &[outputs, inputs]);
        let bias = bias.then(|| var("bias", &[outputs]));
        Self {
            name: p.path("weight"),
            weight,
            bias,
            low_rank: OnceLock::new(),
            blocks: OnceLock::new(),
        }
    }

    /// The checkpoint name of the weight.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds `branch` to every later forward pass. Fails (naming the weight) on a wrong shape or when a
    /// branch is already there.
    pub fn attach_low_rank(&self, branch: LowRank) -> std::result::Result<(), String> {
        let (out, inputs) = (self.weight.size()[0], self.weight.size()[1]);
        let (a, b) = (branch.a.size(), branch.b.size());
        if a.len() != 2 || b.len() != 2 || a[1] != inputs || b[0] != out || a[0] != b[1] {
            return Err(format!(
                "{}: a low-rank branch A {a:?}, B {b:?} does not fit the weight [{out}, {inputs}]",
                self.name
            ));
        }
        self.low_rank
            .set(branch)
            .map_err(|_| format!("{} already carries a low-rank branch", self.name))
    }

    /// Multiplies passes of a few rows by `blocks` (the weight as its GGUF file stores them) from now
    /// on. Fails on blocks of another shape or when blocks are already there.
    pub fn attach_blocks(
        &self,
        blocks: crate::weight_blocks::WeightBlocks,
    ) -> std::result::Result<(), String> {
        let (out, inputs) = (self.weight.size()[0], self.weight.size()[1]);
        if (blocks.outputs as i64, blocks.inputs as i64) != (out, inputs) {
            return Err(format!(
                "blocks of [{}, {}] for a weight of [{out}, {inputs}]",
                blocks.outputs, blocks.inputs
            ));
        }
        self.blocks
            .set(blocks)
            .map_err(|_| format!("{} already has its blocks", self.name))
    }

    /// The weight's blocks, where it runs as stored.
    pub fn blocks(&self) -> Option<&crate::weight_blocks::WeightBlocks> {
        self.blocks.get()
    }

    /// `[.., in] -> [.., out]`.
    /// Whether the map is its weight alone: no bias, no low-rank branch.
    pub fn is_plain(&self) -> bool {
        self.bias.is_none() && self.low_rank.get().is_none()
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        crate::time_split::mark(
            crate::time_split::Step::LinearMaps,
            || match self.blocks.get() {
                Some(blocks) => blocks.bytes().len(),
                None => crate::time_split::bytes_of([&self.weight]),
            },
            || self.forward_unmarked(x),
        )
    }

    /// `x W^T (+ bias) (+ the low-rank branch)`: [`Self::forward`] without its time-split mark, for a
    /// step that is not a linear map's (an LM head).
    pub fn forward_unmarked(&self, x: &Tensor) -> Tensor {
        // A few rows on a CPU (a verification pass): a kernel that reads the weight once (few_rows.rs),
        // as its GGUF blocks where it runs as stored (every such pass, whatever else runs: weight_blocks.rs).
        let few_rows = match self.blocks.get() {
            Some(blocks) => blocks.product(x).map(|y| y.to_kind(x.kind())),
            None => crate::cpu::few_rows::kernel_threads()
                .and_then(|threads| crate::cpu::few_rows::linear(x, &self.weight, threads)),
        };
        let y = match few_rows {
            Some(y) => match &self.bias {
                Some(bias) => y + bias,
                None => y,
            },
            None => x.linear(&self.weight, self.bias.as_ref()),
        };
        match self.low_rank.get() {
            None => y,
            Some(branch) => {
                // A and B stay f32 (their optimizer's kind); the rows' kind is what the layer computes in.
                let kind = x.kind();
                let low = x
                    .linear::<Tensor>(&branch.a.to_kind(kind), None)
                    .linear::<Tensor>(&branch.b.to_kind(kind), None);
                y + low * branch.scale
            }
        }
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
            declare_frozen(&p, "weight", &[size])
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

/// Whether a layer's variables take gradients (drafter training) or are frozen (inference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trainable {
    Yes,
    No,
}

impl Trainable {
    fn yes(self) -> bool {
        self == Trainable::Yes
    }
}

/// The shape of one attention layer's projection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QkvShape {
    /// Width of the rows projected (H, or 2H for an EAGLE-3 layer).
    pub input: i64,
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
    /// q/k/v biases (Qwen2).
    pub bias: bool,
    /// Per-head RMSNorm of queries and keys (Qwen3), with this epsilon.
    pub qk_norm: Option<f64>,
}

/// Q, K and V projections of one attention layer (`q_proj`, `k_proj`, `v_proj` and the optional
/// `q_norm` / `k_norm` under the path given), per head, with RoPE on queries and keys.
pub struct QkvProjection {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    pub shape: QkvShape,
}

impl QkvProjection {
    pub fn new(p: &nn::Path, shape: QkvShape, trainable: Trainable) -> Self {
        let t = trainable.yes();
        let (q_out, kv_out) = (
            shape.heads * shape.head_dim,
            shape.kv_heads * shape.head_dim,
        );
        let norm = |name: &str| {
            shape
                .qk_norm
                .map(|eps| RmsNorm::with_grad(p / name, shape.head_dim, eps, t))
        };
        Self {
            q_proj: Linear::with_grad(p / "q_proj", shape.input, q_out, shape.bias, t),
            k_proj: Linear::with_grad(p / "k_proj", shape.input, kv_out, shape.bias, t),
            v_proj: Linear::with_grad(p / "v_proj", shape.input, kv_out, shape.bias, t),
            q_norm: norm("q_norm"),
            k_norm: norm("k_norm"),
            shape,
        }
    }

    /// Queries of rows `x` `[R, input]`: `[R, heads, head_dim]`, normed (when the layer has q_norm),
    /// with RoPE from `cos`/`sin`.
    pub fn queries(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let rows = x.size()[0];
        let q = self
            .q_proj
            .forward(x)
            .view([rows, self.shape.heads, self.shape.head_dim]);
        let q = match &self.q_norm {
            Some(norm) => norm.forward(&q),
            None => q,
        };
        rope::apply(&q, cos, sin)
    }

    /// `q_proj`, `k_proj`, `v_proj`.
    pub fn linears(&self) -> Vec<&Linear> {
        vec![&self.q_proj, &self.k_proj, &self.v_proj]
    }

    /// Keys (normed when the layer has k_norm, with RoPE) and values of rows `x` `[R, input]`: two
    /// `[R, kv_heads, head_dim]`.
    pub fn keys_values(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> (Tensor, Tensor) {
        let rows = x.size()[0];
        let per_head = [rows, self.shape.kv_heads, self.shape.head_dim];
        let k = self.k_proj.forward(x).view(per_head);
        let k = match &self.k_norm {
            Some(norm) => norm.forward(&k),
            None => k,
        };
        let v = self.v_proj.forward(x).view(per_head);
        (rope::apply(&k, cos, sin), v)
    }
}

/// The SwiGLU MLP of llama-family layers, `down_proj(silu(gate_proj(x)) * up_proj(x))`, under the path
/// given.
pub struct SwiGlu {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl SwiGlu {
    pub fn new(p: &nn::Path, hidden: i64, intermediate: i64, trainable: Trainable) -> Self {
        let t = trainable.yes();
        Self {
            gate_proj: Linear::with_grad(p / "gate_proj", hidden, intermediate, false, t),
            up_proj: Linear::with_grad(p / "up_proj", hidden, intermediate, false, t),
            down_proj: Linear::with_grad(p / "down_proj", intermediate, hidden, false, t),
        }
    }

    /// `gate_proj`, `up_proj`, `down_proj`.
    pub fn linears(&self) -> Vec<&Linear> {
        vec![&self.gate_proj, &self.up_proj, &self.down_proj]
    }

    /// `[.., hidden] -> [.., hidden]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.down_proj
            .forward(&(self.gate_proj.forward(x).silu() * self.up_proj.forward(x)))
    }
}
