//! The objective each method adapts with: its offline training objective over the drafter's own weights,
//! with the settings that suit a buffer of a few hundred verified rows.

use crate::dflash::train::{DFlashObjective, DFlashOptions};
use crate::drafter::{DraftError, Drafter, Result};
use crate::eagle3::train::{Eagle3Objective, Eagle3Options};
use crate::pard::train::{PardObjective, PardOptions};
use crate::training::Objective;
use crate::vanilla::train::NextTokenObjective;
use crate::{DFlashDrafter, DrafterKind, Eagle3Drafter, PardDrafter, VanillaDrafter};
use sharpdraft_model::Transformer;

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
    /// The mismatch error of a drafter asked to adapt with another method's objective.
    fn mismatch(self, drafter: DrafterKind) -> DraftError {
        DraftError::Protocol(format!(
            "the {drafter} drafter cannot adapt with the objective {self:?}"
        ))
    }
}

/// A drafter that online adaptation can train: its method's objective over the drafter's own weights
/// (borrowed, never a second copy), built for each update. `seed` draws the objective's anchors and
/// dropped tokens.
pub trait Adaptable: Drafter {
    fn objective<'a>(
        &'a self,
        settings: OnlineObjective,
        target: &'a Transformer,
        seed: u64,
    ) -> Result<Box<dyn Objective + 'a>>;
}

impl Adaptable for VanillaDrafter {
    fn objective<'a>(
        &'a self,
        settings: OnlineObjective,
        _target: &'a Transformer,
        _seed: u64,
    ) -> Result<Box<dyn Objective + 'a>> {
        match settings {
            OnlineObjective::Vanilla => Ok(Box::new(NextTokenObjective::over(self.model()))),
            _ => Err(settings.mismatch(self.kind())),
        }
    }
}

impl Adaptable for Eagle3Drafter {
    fn objective<'a>(
        &'a self,
        settings: OnlineObjective,
        target: &'a Transformer,
        _seed: u64,
    ) -> Result<Box<dyn Objective + 'a>> {
        let OnlineObjective::Eagle3 { ttt_steps } = settings else {
            return Err(settings.mismatch(self.kind()));
        };
        let options = Eagle3Options {
            ttt_steps: ttt_steps.max(1),
            ttt_decay: 0.8,
            // The draft vocabulary, EAGLE 3.1 and the warm start are the checkpoint's already.
            draft_vocab: 0,
            eagle31: false,
            warm_start: false,
            capture_layers: None,
        };
        Ok(Box::new(Eagle3Objective::over(
            &self.head,
            self.taps.clone(),
            target,
            &options,
        )))
    }
}

impl Adaptable for PardDrafter {
    fn objective<'a>(
        &'a self,
        settings: OnlineObjective,
        _target: &'a Transformer,
        seed: u64,
    ) -> Result<Box<dyn Objective + 'a>> {
        let OnlineObjective::Pard { mask_token, copies } = settings else {
            return Err(settings.mismatch(self.kind()));
        };
        let options = PardOptions {
            layers: 0,
            from_layers: None,
            trainable_from: 0,
            mask_token,
            copies: copies.max(1),
            keep_ratio: 0.7,
            min_keep: 0.2,
        };
        Ok(Box::new(PardObjective::over(self.model(), &options, seed)))
    }
}

impl Adaptable for DFlashDrafter {
    fn objective<'a>(
        &'a self,
        settings: OnlineObjective,
        target: &'a Transformer,
        seed: u64,
    ) -> Result<Box<dyn Objective + 'a>> {
        let OnlineObjective::Dflash { anchors, gamma } = settings else {
            return Err(settings.mismatch(self.kind()));
        };
        let options = DFlashOptions {
            // Layers, block size and mask token are the checkpoint's.
            layers: 0,
            block_size: 0,
            mask_token: 0,
            gamma,
            anchors: anchors.max(1),
            target_layer_ids: None,
            // The draft vocabulary is the checkpoint's.
            draft_vocab: 0,
        };
        Ok(Box::new(DFlashObjective::over(
            self, target, &options, seed,
        )))
    }
}
