//! PARD training objective (docs/drafters.md §3.1): the window of L real tokens plus copies 1..P of mask
//! tokens. A mask token of copy i at offset p sees the real tokens `0..=p - i`, the masks of its own
//! chain (copy j at offset `p - i + j`, j = 1..=i) and itself: exactly what mask i - 1 sees at inference
//! after the real prefix ending at `p - i`. Every row at offset p predicts token p + 1 (the target's
//! distribution at row p). Conditional drop (COD) keeps `L max(r^i, r_min)` offsets of copy i, drawn
//! among the successors of copy i - 1's kept offsets so that every chain stays whole.
//!
//! The drafter starts as the target's first `layers` layers with its embedding, final norm and LM head
//! (the embedding and head stay the target's and frozen; the final norm trains with the layers): an
//! ordinary causal LM of the target's family with `pard_token` in its config.json, the published layout.

use crate::drafter::{DraftError, Result};
use crate::random_init::{save_trained, write_config, write_f32_safetensors};
use crate::training::{step_rng, weighted_mean, Objective, TrainWindow};
use rand::seq::index::sample;
use serde::{Deserialize, Serialize};
use sharpdraft_model::{AttentionMask, CausalLm, ForwardInput, LogitRows};
use std::borrow::Borrow;
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// The `pard:` block of a training config.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PardOptions {
    /// Drafter depth.
    pub layers: usize,
    /// The target layers the drafter's layers start from, in order; default the first `layers`. Skipping
    /// layers (keeping the first and last ones) starts closer to the target than cutting the stack.
    #[serde(default)]
    pub from_layers: Option<Vec<usize>>,
    /// Drafter layers below this index stay frozen (with the embedding and head): a deep drafter then
    /// back-propagates through its last layers only.
    #[serde(default)]
    pub trainable_from: usize,
    /// The mask token id (`pard_token`; an id of the target's vocabulary that text never uses).
    pub mask_token: i64,
    /// Sequence copies P (copy 0 real, copies 1..P masks): drafts up to P tokens per pass.
    #[serde(default = "default_copies")]
    pub copies: usize,
    /// COD keep ratio r: copy i keeps `max(r^i, min_keep)` of the offsets.
    #[serde(default = "default_keep")]
    pub keep_ratio: f64,
    #[serde(default = "default_min_keep")]
    pub min_keep: f64,
}

fn default_copies() -> usize {
    4
}
fn default_keep() -> f64 {
    0.7
}
fn default_min_keep() -> f64 {
    0.2
}

impl PardOptions {
    /// The target layer each drafter layer starts from.
    pub fn source_layers(&self) -> Vec<usize> {
        self.from_layers
            .clone()
            .unwrap_or_else(|| (0..self.layers).collect())
    }
}

/// Writes the starting drafter into `dir`: the target's config with `num_hidden_layers = layers` and
/// `pard_token`, the chosen target layers (renumbered), embedding, final norm and head, and its tokenizer
/// files.
pub fn init(dir: &Path, target: &CausalLm, options: &PardOptions) -> Result<()> {
    let io = |e: std::io::Error| DraftError::Checkpoint {
        path: dir.display().to_string(),
        reason: e.to_string(),
    };
    let config_path = target.dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| DraftError::Checkpoint {
        path: config_path.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| DraftError::Checkpoint {
            path: config_path.display().to_string(),
            reason: e.to_string(),
        })?;
    config["num_hidden_layers"] = options.layers.into();
    config["pard_token"] = options.mask_token.into();
    config["spd_type"] = "pard".into();
    config["torch_dtype"] = "float32".into();
    write_config(dir, &config).map_err(|e| DraftError::Checkpoint {
        path: dir.display().to_string(),
        reason: e,
    })?;
    let sources = options.source_layers();
    // "model.layers.{j}.rest" of target layer j = sources[i] becomes "model.layers.{i}.rest".
    let rename = |name: &str| -> Option<String> {
        let Some(rest) = name.strip_prefix("model.layers.") else {
            return Some(name.to_string());
        };
        let (index, tail) = rest.split_once('.')?;
        let position = sources.iter().position(|&j| index.parse() == Ok(j))?;
        Some(format!("model.layers.{position}.{tail}"))
    };
    let mut tensors: Vec<(String, Tensor)> = target
        .vars
        .variables()
        .into_iter()
        .filter_map(|(name, t)| {
            rename(&name).map(|n| (n, t.to_kind(Kind::Float).to_device(Device::Cpu)))
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    write_f32_safetensors(&dir.join("model.safetensors"), &tensors, &[]).map_err(|e| {
        DraftError::Checkpoint {
            path: dir.display().to_string(),
            reason: e,
        }
    })?;
    for entry in std::fs::read_dir(&target.dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("tokenizer")
            || name == "special_tokens_map.json"
            || name == "chat_template.jinja"
        {
            std::fs::copy(&path, dir.join(name)).map_err(io)?;
        }
    }
    Ok(())
}

/// The kept offsets of every copy: copy 0 all of `0..len`; copy i a COD subset of the successors of copy
/// i - 1's offsets.
pub fn kept_offsets(
    len: usize,
    options: &PardOptions,
    rng: &mut impl rand::Rng,
) -> Vec<Vec<usize>> {
    let mut copies = vec![(0..len).collect::<Vec<_>>()];
    for i in 1..options.copies {
        let candidates: Vec<usize> = copies[i - 1]
            .iter()
            .map(|p| p + 1)
            .filter(|&p| p < len)
            .collect();
        let size = ((len as f64 * options.keep_ratio.powi(i as i32).max(options.min_keep)).round()
            as usize)
            .min(candidates.len());
        let mut kept: Vec<usize> = sample(rng, candidates.len(), size)
            .into_iter()
            .map(|k| candidates[k])
            .collect();
        kept.sort_unstable();
        copies.push(kept);
    }
    copies
}

/// Row order, positions and the `[N, N]` visibility of the copies (see the module comment).
pub fn copy_layout(copies: &[Vec<usize>]) -> (Vec<(usize, usize)>, Tensor) {
    let rows: Vec<(usize, usize)> = copies
        .iter()
        .enumerate()
        .flat_map(|(i, offsets)| offsets.iter().map(move |&p| (i, p)))
        .collect();
    let n = rows.len();
    let len = copies[0].len();
    // row_of[i][p]: the row of copy i at offset p.
    let mut row_of = vec![vec![usize::MAX; len]; copies.len()];
    for (row, &(i, p)) in rows.iter().enumerate() {
        row_of[i][p] = row;
    }
    let mut visible = vec![false; n * n];
    for (row, &(i, p)) in rows.iter().enumerate() {
        let line = &mut visible[row * n..(row + 1) * n];
        for real in 0..=p - i {
            line[row_of[0][real]] = true;
        }
        for j in 1..=i {
            line[row_of[j][p - i + j]] = true;
        }
    }
    (
        rows,
        Tensor::from_slice(&visible).view([n as i64, n as i64]),
    )
}

/// The objective over a PARD drafter's LM `M`: owned when training offline, borrowed from the drafting
/// [`crate::PardDrafter`] when adapting online (one set of weights).
pub struct PardObjective<M: Borrow<CausalLm> = CausalLm> {
    drafter: M,
    options: PardOptions,
    seed: u64,
}

impl PardObjective {
    /// Loads the drafter in `dir` in f32 for training.
    pub fn load(dir: &Path, device: Device, options: &PardOptions, seed: u64) -> Result<Self> {
        let drafter = CausalLm::load(dir, device, Kind::Float)?;
        Ok(Self::over(drafter, options, seed))
    }
}

impl<M: Borrow<CausalLm>> PardObjective<M> {
    /// The objective over `drafter`'s own weights; `seed` draws the dropped offsets.
    pub fn over(drafter: M, options: &PardOptions, seed: u64) -> Self {
        Self {
            drafter,
            options: options.clone(),
            seed,
        }
    }

    fn lm(&self) -> &CausalLm {
        self.drafter.borrow()
    }
}

sharpdraft_model::scaled_through!(PardObjective, drafter);

impl<M: Borrow<CausalLm>> Objective for PardObjective<M> {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.lm().net.linears()
    }

    /// A PARD drafter reads tokens only.
    fn target_taps(&self) -> Vec<sharpdraft_model::Tap> {
        Vec::new()
    }

    /// The final norm and the layers from `trainable_from` on; embedding and head stay the target's.
    fn parameters(&self) -> Vec<(String, Tensor)> {
        let trainable = |name: &str| match name.strip_prefix("model.layers.") {
            Some(rest) => rest
                .split('.')
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= self.options.trainable_from),
            None => name == "model.norm.weight",
        };
        self.lm()
            .vars
            .variables()
            .into_iter()
            .filter(|(name, _)| trainable(name))
            .collect()
    }

    fn loss(&self, window: &TrainWindow, step: usize) -> Result<Tensor> {
        let device = self.lm().net.device();
        let copies = kept_offsets(
            window.tokens.len(),
            &self.options,
            &mut step_rng(self.seed, step),
        );
        let (rows, visible) = copy_layout(&copies);
        let ids: Vec<i64> = rows
            .iter()
            .map(|&(i, p)| {
                if i == 0 {
                    window.tokens[p]
                } else {
                    self.options.mask_token
                }
            })
            .collect();
        let positions: Vec<i64> = rows.iter().map(|&(_, p)| p as i64).collect();
        let target_rows: Vec<i64> = positions.clone();
        let ids = Tensor::from_slice(&ids).to_device(device);
        let positions = Tensor::from_slice(&positions).to_device(device);
        let mut cache = self.lm().net.new_cache(rows.len() as i64);
        let mask = AttentionMask::Rows(visible.to_device(device));
        let input = ForwardInput {
            mask: &mask,
            logits: LogitRows::All,
            ..ForwardInput::causal(&ids, &positions)
        };
        let logits = self
            .lm()
            .net
            .forward(input, &mut cache)?
            .logits
            .expect("logits requested");
        let target_rows = Tensor::from_slice(&target_rows).to_device(device);
        let top_ids = window
            .top_ids
            .to_device(device)
            .index_select(0, &target_rows);
        let top_probs = window
            .top_probs
            .to_device(device)
            .index_select(0, &target_rows);
        let losses =
            window
                .divergence
                .rows(&logits.log_softmax(-1, Kind::Float), &top_ids, &top_probs);
        Ok(weighted_mean(&losses, &window.weights_of(&target_rows)))
    }

    fn save(&self, dir: &Path, n0: i64) -> Result<()> {
        let config_path = self.lm().dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| DraftError::Checkpoint {
            path: config_path.display().to_string(),
            reason: e.to_string(),
        })?;
        let config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| DraftError::Checkpoint {
                path: config_path.display().to_string(),
                reason: e.to_string(),
            })?;
        save_trained(dir, &config, "torch_dtype", n0, &self.lm().vars, &[])
    }
}
