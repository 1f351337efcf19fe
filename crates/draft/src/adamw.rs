//! AdamW (decoupled weight decay) whose moments can be saved and restored, so that a resumed training
//! run continues with the optimizer state it stopped with. tch's built-in optimizers keep their state
//! inside libtorch where it cannot be written out.

use crate::drafter::{DraftError, Result};
use std::path::Path;
use tch::{Kind, Tensor};

pub struct AdamW {
    /// `(name, parameter)`: the parameters take gradients; names key the saved moments.
    params: Vec<(String, Tensor)>,
    /// First and second moments, one pair per parameter (same shapes, f32).
    moments: Vec<(Tensor, Tensor)>,
    /// Updates applied so far (bias correction).
    pub updates: i64,
    pub learning_rate: f64,
    pub weight_decay: f64,
    betas: (f64, f64),
    eps: f64,
}

impl AdamW {
    /// Marks every parameter as taking gradients.
    pub fn new(mut params: Vec<(String, Tensor)>, learning_rate: f64, weight_decay: f64) -> Self {
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let moments = params
            .iter_mut()
            .map(|(_, p)| {
                let _ = p.requires_grad_(true);
                (
                    p.zeros_like().to_kind(Kind::Float),
                    p.zeros_like().to_kind(Kind::Float),
                )
            })
            .collect();
        Self {
            params,
            moments,
            updates: 0,
            learning_rate,
            weight_decay,
            betas: (0.9, 0.999),
            eps: 1e-8,
        }
    }

    /// Backward pass of `loss`, gradient clipping to a global L2 norm of `max_norm`, one update.
    pub fn backward_step(&mut self, loss: &Tensor, max_norm: f64) {
        for (_, p) in &mut self.params {
            p.zero_grad();
        }
        loss.backward();
        let _guard = tch::no_grad_guard();
        let grads: Vec<Option<Tensor>> = self
            .params
            .iter()
            .map(|(_, p)| Some(p.grad()).filter(Tensor::defined))
            .collect();
        self.apply(grads, max_norm);
    }

    /// The parameters by name, in the order [`Self::apply`] takes their gradients.
    pub fn parameters(&self) -> &[(String, Tensor)] {
        &self.params
    }

    /// Bytes of the optimizer state (two f32 moments per parameter element).
    pub fn state_bytes(&self) -> usize {
        self.moments
            .iter()
            .map(|(m, v)| (m.numel() + v.numel()) * 4)
            .sum()
    }

    /// One update from gradients computed elsewhere (LoRA derives its own from the weights'), one per
    /// parameter in [`Self::parameters`] order (`None`: no gradient), clipped to a global L2 norm of
    /// `max_norm`.
    pub fn apply(&mut self, grads: Vec<Option<Tensor>>, max_norm: f64) {
        let _guard = tch::no_grad_guard();
        let squares: f64 = grads
            .iter()
            .flatten()
            .map(|g| {
                g.to_kind(Kind::Float)
                    .square()
                    .sum(Kind::Float)
                    .double_value(&[])
            })
            .sum();
        let clip = (max_norm / (squares.sqrt() + 1e-6)).min(1.0);
        self.updates += 1;
        let (b1, b2) = self.betas;
        let correction1 = 1.0 - b1.powi(self.updates as i32);
        let correction2 = 1.0 - b2.powi(self.updates as i32);
        for (((_, p), (m, v)), grad) in self.params.iter_mut().zip(&mut self.moments).zip(grads) {
            let Some(grad) = grad else { continue };
            let g = grad.to_kind(Kind::Float) * clip;
            let _ = m.g_mul_scalar_(b1).g_add_(&(&g * (1.0 - b1)));
            let _ = v.g_mul_scalar_(b2).g_add_(&(g.square() * (1.0 - b2)));
            let step =
                (&*m / correction1) / ((&*v / correction2).sqrt() + self.eps) * self.learning_rate;
            let _ = p.g_mul_scalar_(1.0 - self.learning_rate * self.weight_decay);
            let _ = p.g_sub_(&step.to_kind(p.kind()));
        }
    }

    /// Writes the moments and the update count to one safetensors file.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut named: Vec<(String, Tensor)> =
            vec![("updates".into(), Tensor::from_slice(&[self.updates]))];
        for ((name, _), (m, v)) in self.params.iter().zip(&self.moments) {
            named.push((format!("m.{name}"), m.shallow_clone()));
            named.push((format!("v.{name}"), v.shallow_clone()));
        }
        Tensor::write_safetensors(&named, path).map_err(|e| DraftError::Checkpoint {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Restores what [`Self::save`] wrote; every parameter must find moments of its own shape.
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let error = |reason: String| DraftError::Checkpoint {
            path: path.display().to_string(),
            reason,
        };
        let stored: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(path)
            .map_err(|e| error(e.to_string()))?
            .into_iter()
            .collect();
        let _guard = tch::no_grad_guard();
        for ((name, p), (m, v)) in self.params.iter().zip(&mut self.moments) {
            for (prefix, moment) in [("m", m), ("v", v)] {
                let key = format!("{prefix}.{name}");
                let saved = stored
                    .get(&key)
                    .ok_or_else(|| error(format!("no optimizer moment {key}")))?;
                if saved.size() != p.size() {
                    return Err(error(format!(
                        "moment {key} has shape {:?}, the parameter {:?}",
                        saved.size(),
                        p.size()
                    )));
                }
                moment.copy_(saved);
            }
        }
        self.updates = stored
            .get("updates")
            .map(|t| t.int64_value(&[0]))
            .ok_or_else(|| error("no update count".into()))?;
        Ok(())
    }
}
