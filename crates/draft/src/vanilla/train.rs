//! Next-token distillation of a vanilla drafter (a small causal LM of the target's tokenizer): row r of a
//! window predicts the target's distribution for token r + 1, under the ordinary causal mask. What
//! online adaptation trains a vanilla drafter with; offline, a vanilla drafter is any small LM.

use crate::drafter::{DraftError, Result};
use crate::random_init::save_trained;
use crate::training::{weighted_mean, Objective, TrainWindow};
use sharpdraft_model::{CausalLm, ForwardInput, LogitRows, Tap};
use std::borrow::Borrow;
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// The objective over a small LM `M`: owned when training it offline, borrowed from the drafting
/// [`crate::VanillaDrafter`] when adapting online (one set of weights: an update is what the next
/// proposal drafts with).
pub struct NextTokenObjective<M: Borrow<CausalLm> = CausalLm> {
    drafter: M,
}

impl NextTokenObjective {
    /// Loads the drafter in `dir` in f32 for training.
    pub fn load(dir: &Path, device: Device) -> Result<Self> {
        Ok(Self::over(CausalLm::load(dir, device, Kind::Float)?))
    }
}

impl<M: Borrow<CausalLm>> NextTokenObjective<M> {
    /// The objective over `drafter`'s own weights.
    pub fn over(drafter: M) -> Self {
        Self { drafter }
    }

    fn lm(&self) -> &CausalLm {
        self.drafter.borrow()
    }
}

sharpdraft_model::scaled_through!(NextTokenObjective, drafter);

impl<M: Borrow<CausalLm>> Objective for NextTokenObjective<M> {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.lm().net.linears()
    }

    /// A vanilla drafter reads tokens only.
    fn target_taps(&self) -> Vec<Tap> {
        Vec::new()
    }

    /// Every weight of the drafter: it owns its embedding and head (nothing is the target's).
    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.lm().vars.variables().into_iter().collect()
    }

    fn loss(&self, window: &TrainWindow, _step: usize) -> Result<Tensor> {
        let device = self.lm().net.device();
        let t = window.tokens.len() as i64;
        let ids = Tensor::from_slice(&window.tokens).to_device(device);
        let positions = Tensor::arange(t, (Kind::Int64, device));
        let mut cache = self.lm().net.new_cache(t);
        let logits = self
            .lm()
            .net
            .forward(
                ForwardInput {
                    logits: LogitRows::All,
                    ..ForwardInput::causal(&ids, &positions)
                },
                &mut cache,
            )?
            .logits
            .ok_or_else(|| DraftError::Protocol("the drafter returned no logits".into()))?;
        let losses = window.divergence.rows(
            &logits.log_softmax(-1, Kind::Float),
            &window.top_ids.to_device(device),
            &window.top_probs.to_device(device),
        );
        Ok(weighted_mean(&losses, &window.weights_of(&positions)))
    }

    fn save(&self, dir: &Path, n0: i64) -> Result<()> {
        let config_path = self.lm().dir.join("config.json");
        let checkpoint = |reason: String| DraftError::Checkpoint {
            path: config_path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(&config_path).map_err(|e| checkpoint(e.to_string()))?;
        let config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| checkpoint(e.to_string()))?;
        save_trained(dir, &config, "torch_dtype", n0, &self.lm().vars, &[])
    }
}
