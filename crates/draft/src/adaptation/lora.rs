//! LoRA on a drafter's projections: each adapted weight `W0 [out, in]` gets `A [r, in]` and
//! `B [out, r]` with scale `s = alpha / r`, B starting at zero (the adapted drafter starts exactly at the
//! checkpoint, bit for bit). Two forms, the same updates:
//!
//! - **Merged** (default): the weight is kept equal to `W0 + s B A` and the drafter's forward passes
//!   are the plain ones. The gradient with respect to the merged weight, G = dL/dW, gives the adapters'
//!   by the chain rule (dL/dB = s G A^T, dL/dA = s B^T G); after each AdamW step on A and B the change
//!   `s (B' A' - B A)` is added to W. Costs one gradient buffer the size of the adapted weights.
//! - **Unmerged**: W stays the checkpoint's, and every adapted linear map (in the drafter and in its
//!   training objective, which share A and B) adds `s (x A^T) B^T` to its output. Autograd reaches A
//!   and B directly: gradient buffers the size of the adapters only, two thin matmuls per adapted map
//!   per forward pass.

use crate::adamw::AdamW;
use crate::drafter::{DraftError, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sharpdraft_model::layers::{Linear, LowRank};
use std::collections::HashMap;
use tch::{Kind, Tensor};

/// Whether the adapters are folded into the weights after each update or kept beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoraForm {
    /// `W = W0 + s B A`, updated after each step; plain forward passes.
    #[default]
    Merged,
    /// `W0` untouched; each adapted map adds `s (x A^T) B^T`.
    Unmerged,
}

/// Groups of projections that can carry adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraTarget {
    /// `q_proj`, `k_proj`, `v_proj`, `o_proj` of every attention layer.
    Attention,
    /// `gate_proj`, `up_proj`, `down_proj` of every MLP.
    Mlp,
    /// EAGLE-3's and DFlash's `fc`, where the target's features enter.
    Fc,
}

impl LoraTarget {
    /// Whether the weight called `name` belongs to this group.
    pub fn matches(self, name: &str) -> bool {
        let Some(module) = name.strip_suffix(".weight") else {
            return false;
        };
        let last = module.rsplit('.').next().unwrap_or(module);
        match self {
            LoraTarget::Attention => {
                module.contains("self_attn.")
                    && ["q_proj", "k_proj", "v_proj", "o_proj"].contains(&last)
            }
            LoraTarget::Mlp => {
                module.contains("mlp.") && ["gate_proj", "up_proj", "down_proj"].contains(&last)
            }
            LoraTarget::Fc => module == "fc",
        }
    }
}

/// One adapted weight.
struct Adapted {
    name: String,
    /// The live weight `[out, in]` (shared with the drafter), which takes gradients.
    weight: Tensor,
    a: Tensor,
    b: Tensor,
}

pub struct LoraAdapters {
    adapted: Vec<Adapted>,
    scale: f64,
    form: LoraForm,
    optimizer: AdamW,
}

impl LoraAdapters {
    /// Adapters of rank `rank` on every 2-D weight of `weights` (name, live tensor) that one of
    /// `targets` matches; A is drawn Kaiming-uniform (bound 1/sqrt(in)) from `seed`, B is zero. Every
    /// other weight stops taking gradients.
    pub fn new(
        weights: Vec<(String, Tensor)>,
        targets: &[LoraTarget],
        rank: i64,
        scale: f64,
        learning_rate: f64,
        seed: u64,
    ) -> Result<Self> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut adapted = Vec::new();
        let mut weights = weights;
        weights.sort_by(|x, y| x.0.cmp(&y.0));
        for (name, mut weight) in weights {
            let wanted = weight.dim() == 2 && targets.iter().any(|t| t.matches(&name));
            let _ = weight.requires_grad_(wanted);
            if !wanted {
                continue;
            }
            let (out, inputs) = (weight.size()[0], weight.size()[1]);
            if rank < 1 || rank > out.min(inputs) {
                return Err(DraftError::InvalidOption {
                    option: "adapt.rank".into(),
                    value: rank.to_string(),
                    reason: format!(
                        "weight {name} is {out} x {inputs}: a rank must lie in 1..={}",
                        out.min(inputs)
                    ),
                });
            }
            let bound = 1.0 / (inputs as f64).sqrt();
            let a: Vec<f32> = (0..rank * inputs)
                .map(|_| rng.random_range(-bound..bound) as f32)
                .collect();
            let options = (Kind::Float, weight.device());
            let a = Tensor::from_slice(&a)
                .view([rank, inputs])
                .to_device(options.1);
            let b = Tensor::zeros([out, rank], options);
            adapted.push(Adapted { name, weight, a, b });
        }
        if adapted.is_empty() {
            return Err(DraftError::InvalidOption {
                option: "adapt.lora_on".into(),
                value: format!("{targets:?}"),
                reason: "matches no weight of this drafter".into(),
            });
        }
        let params = adapted
            .iter()
            .flat_map(|x| {
                [
                    (format!("{}.lora_A", x.name), x.a.shallow_clone()),
                    (format!("{}.lora_B", x.name), x.b.shallow_clone()),
                ]
            })
            .collect();
        Ok(Self {
            adapted,
            scale,
            form: LoraForm::Merged,
            optimizer: AdamW::new(params, learning_rate, 0.0),
        })
    }

    /// Switches to the unmerged form: the weights stop taking gradients and stay as they are, and A
    /// and B are attached as low-rank branches to the drafter's linear map of each adapted weight (what
    /// drafts, and what the objective's loss runs through). Fails, naming the weight, where the drafter
    /// has no such map.
    pub fn unmerge(&mut self, drafter: &[&Linear]) -> Result<()> {
        for x in &self.adapted {
            if !drafter.iter().any(|l| l.name() == x.name) {
                return Err(DraftError::InvalidOption {
                    option: "adapt.lora_form".into(),
                    value: "unmerged".into(),
                    reason: format!(
                        "the drafter has no linear map for {} to carry the adapter",
                        x.name
                    ),
                });
            }
        }
        for x in &mut self.adapted {
            let _ = x.weight.requires_grad_(false);
            let _ = x.a.requires_grad_(true);
            let _ = x.b.requires_grad_(true);
            for linear in drafter.iter().filter(|l| l.name() == x.name) {
                linear
                    .attach_low_rank(LowRank {
                        a: x.a.shallow_clone(),
                        b: x.b.shallow_clone(),
                        scale: self.scale,
                    })
                    .map_err(DraftError::Protocol)?;
            }
        }
        self.form = LoraForm::Unmerged;
        Ok(())
    }

    pub fn form(&self) -> LoraForm {
        self.form
    }

    /// Backward pass of `loss` and one AdamW step on the adapters (merged: then the change is merged into
    /// the weights).
    pub fn step(&mut self, loss: &Tensor, max_norm: f64) -> Result<()> {
        if self.form == LoraForm::Unmerged {
            for x in &mut self.adapted {
                x.a.zero_grad();
                x.b.zero_grad();
            }
            loss.backward();
            let mut by_name = HashMap::new();
            for x in &self.adapted {
                for (suffix, tensor) in [("lora_A", &x.a), ("lora_B", &x.b)] {
                    let g = tensor.grad();
                    if g.defined() {
                        by_name.insert(format!("{}.{suffix}", x.name), g);
                    }
                }
            }
            self.apply_by_name(by_name, max_norm);
            return Ok(());
        }
        for x in &mut self.adapted {
            x.weight.zero_grad();
        }
        loss.backward();
        let _guard = tch::no_grad_guard();
        let s = self.scale;
        let mut by_name = HashMap::new();
        let mut before = Vec::with_capacity(self.adapted.len());
        for x in &self.adapted {
            let g = x.weight.grad();
            if g.defined() {
                let g = g.to_kind(Kind::Float);
                by_name.insert(
                    format!("{}.lora_A", x.name),
                    x.b.transpose(0, 1).matmul(&g) * s,
                );
                by_name.insert(
                    format!("{}.lora_B", x.name),
                    g.matmul(&x.a.transpose(0, 1)) * s,
                );
            }
            before.push(x.b.matmul(&x.a));
        }
        self.apply_by_name(by_name, max_norm);
        for (x, old) in self.adapted.iter_mut().zip(before) {
            let delta = (x.b.matmul(&x.a) - old) * s;
            let _ = x.weight.g_add_(&delta.to_kind(x.weight.kind()));
        }
        Ok(())
    }

    /// One AdamW step with the adapters' gradients keyed `<weight>.lora_A` / `.lora_B`, handed over in
    /// the optimizer's (sorted) order.
    fn apply_by_name(&mut self, mut by_name: HashMap<String, Tensor>, max_norm: f64) {
        let grads = (self.optimizer.parameters().iter())
            .map(|(name, _)| by_name.remove(name))
            .collect();
        self.optimizer.apply(grads, max_norm);
    }

    /// Names of the adapted weights.
    pub fn adapted(&self) -> Vec<&str> {
        self.adapted.iter().map(|x| x.name.as_str()).collect()
    }

    /// A and B elements.
    pub fn elements(&self) -> usize {
        self.adapted.iter().map(|x| x.a.numel() + x.b.numel()).sum()
    }

    /// Bytes of A and B (f32).
    pub fn adapter_bytes(&self) -> usize {
        self.elements() * 4
    }

    pub fn optimizer_bytes(&self) -> usize {
        self.optimizer.state_bytes()
    }

    /// The gradient buffers kept between updates: the adapted weights' (merged) or A's and B's
    /// (unmerged).
    pub fn gradient_bytes(&self) -> usize {
        match self.form {
            LoraForm::Merged => self
                .adapted
                .iter()
                .map(|x| x.weight.numel() * x.weight.kind().elt_size_in_bytes())
                .sum(),
            LoraForm::Unmerged => self.adapter_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_matches_only_its_projections() {
        let attention = "model.layers.3.self_attn.k_proj.weight";
        let eagle_attention = "midlayer.self_attn.o_proj.weight";
        let mlp = "layers.0.mlp.down_proj.weight";
        assert!(LoraTarget::Attention.matches(attention));
        assert!(LoraTarget::Attention.matches(eagle_attention));
        assert!(!LoraTarget::Attention.matches(mlp));
        assert!(!LoraTarget::Attention.matches("model.layers.3.self_attn.q_norm.weight"));
        assert!(LoraTarget::Mlp.matches(mlp));
        assert!(LoraTarget::Fc.matches("fc.weight"));
        assert!(!LoraTarget::Fc.matches("midlayer.fc.weight.bias"));
        assert!(!LoraTarget::Mlp.matches("model.embed_tokens.weight"));
    }

    #[test]
    fn a_step_whose_gradient_is_zero_leaves_the_merged_weight_bit_identical() {
        tch::manual_seed(0);
        let weight = Tensor::randn([6, 5], (Kind::Float, tch::Device::Cpu));
        let original = weight.copy();
        let mut adapters = LoraAdapters::new(
            vec![("l.self_attn.q_proj.weight".into(), weight.shallow_clone())],
            &[LoraTarget::Attention],
            2,
            2.0,
            1e-2,
            0,
        )
        .unwrap();
        assert_eq!(adapters.elements(), 2 * 5 + 6 * 2);
        let loss = (&weight * 0.0).sum(Kind::Float);
        adapters.step(&loss, 1.0).unwrap();
        assert!(weight.equal(&original));
        // A real gradient moves B off zero, and the weight with it.
        let loss = weight.square().sum(Kind::Float);
        adapters.step(&loss, 1.0).unwrap();
        assert!(!weight.equal(&original));
    }

    #[test]
    fn a_rank_wider_than_the_layer_is_an_error_naming_the_weight_not_an_allocation() {
        let weight = Tensor::zeros([6, 5], (Kind::Float, tch::Device::Cpu));
        for rank in [0, 6, 1_000_000, i64::MAX] {
            let err = LoraAdapters::new(
                vec![("l.self_attn.q_proj.weight".into(), weight.shallow_clone())],
                &[LoraTarget::Attention],
                rank,
                2.0,
                1e-2,
                0,
            )
            .err()
            .unwrap_or_else(|| panic!("rank {rank} was accepted"))
            .to_string();
            assert!(err.contains("q_proj") && err.contains("1..=5"), "{err}");
        }
    }
}
