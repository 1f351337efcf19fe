//! The objective each method adapts with: its offline training objective, loaded from the drafter's own
//! checkpoint, with the settings that suit a buffer of a few hundred verified rows.

use crate::dflash_train::{DFlashObjective, DFlashOptions};
use crate::drafter::Result;
use crate::eagle3_train::{Eagle3Objective, Eagle3Options};
use crate::pard_train::{PardObjective, PardOptions};
use crate::training::Objective;
use crate::vanilla_train::NextTokenObjective;
use sharpdraft_model::Transformer;
use std::path::Path;

/// A method and what its objective needs to know of the drafter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnlineObjective {
    /// Next-token distillation of the small LM.
    Vanilla,
    /// The training-time test over `ttt_steps` unrolled steps (the chain or tree depth drafted).
    Eagle3 { ttt_steps: usize },
    /// PARD's mask copies: `copies` drafts per pass, COD as in training.
    Pard { mask_token: i64, copies: usize },
    /// DFlash blocks at `anchors` random anchors of the buffer, rows decaying with `gamma`.
    Dflash { anchors: usize, gamma: f64 },
}

impl OnlineObjective {
    /// Loads the objective from the drafter checkpoint `dir` for `target`; `seed` draws its anchors
    /// and dropped tokens.
    pub fn load<'t>(
        self,
        dir: &Path,
        target: &'t Transformer,
        seed: u64,
    ) -> Result<Box<dyn Objective + 't>> {
        Ok(match self {
            OnlineObjective::Vanilla => Box::new(NextTokenObjective::load(dir, target.device())?),
            OnlineObjective::Eagle3 { ttt_steps } => {
                let options = Eagle3Options {
                    ttt_steps: ttt_steps.max(1),
                    ttt_decay: 0.8,
                    // The draft vocabulary, EAGLE 3.1 and the warm start are the checkpoint's already.
                    draft_vocab: 0,
                    eagle31: false,
                    warm_start: false,
                    capture_layers: None,
                };
                Box::new(Eagle3Objective::load(dir, target, &options)?)
            }
            OnlineObjective::Pard { mask_token, copies } => {
                let options = PardOptions {
                    layers: 0,
                    from_layers: None,
                    trainable_from: 0,
                    mask_token,
                    copies: copies.max(1),
                    keep_ratio: 0.7,
                    min_keep: 0.2,
                };
                Box::new(PardObjective::load(dir, target.device(), &options, seed)?)
            }
            OnlineObjective::Dflash { anchors, gamma } => {
                let options = DFlashOptions {
                    // Layers, block size and mask token are the checkpoint's.
                    layers: 0,
                    block_size: 0,
                    mask_token: 0,
                    gamma,
                    anchors: anchors.max(1),
                    target_layer_ids: None,
                };
                Box::new(DFlashObjective::load(dir, target, &options, seed)?)
            }
        })
    }
}
