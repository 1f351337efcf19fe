//! What a drafter reports about itself once decoding has run: its memory, its time inside forward
//! passes, and what online adaptation did. Kept apart from the drafting interface, which decoding
//! drives, so that reports read one value.

use serde::Serialize;
use tch::Tensor;

/// A drafter's figures for memory and time reports ([`crate::Drafter::stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DrafterStats {
    /// Bytes held by the drafter's caches.
    pub cache_bytes: usize,
    /// Cumulative seconds inside the drafter's model forward passes (the engine-overhead figure).
    pub forward_seconds: f64,
    /// Bytes of the drafter's own weights ([`crate::Drafter::variables`]); tensors it borrows from the
    /// target (embedding, LM head) are not counted.
    pub weight_bytes: usize,
    /// What online adaptation did so far; `None` for a drafter that does not adapt.
    pub adaptation: Option<AdaptationReport>,
}

impl DrafterStats {
    /// The figures of a drafter that does not adapt: its cache, its forward time, its weights.
    pub fn of(cache_bytes: usize, forward_seconds: f64, weights: &[(String, Tensor)]) -> Self {
        DrafterStats {
            cache_bytes,
            forward_seconds,
            weight_bytes: weights
                .iter()
                .map(|(_, t)| t.numel() * t.kind().elt_size_in_bytes())
                .sum(),
            adaptation: None,
        }
    }
}

/// What adaptation cost and did, for reports next to the unmodified drafter's figures.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AdaptationReport {
    /// `full`, `lora` (merged) or `lora_unmerged`.
    pub mode: String,
    pub updates: usize,
    /// Wall-clock seconds inside updates (also part of the cycles' draft time and of the total).
    pub update_seconds: f64,
    /// The loss on the buffer at each update, before its first step.
    pub losses: Vec<f64>,
    /// Elements trained (every drafter weight the objective trains, or the adapters').
    pub trained_elements: usize,
    /// LoRA A and B matrices (0 for full: it updates the weights in place).
    pub adapter_bytes: usize,
    /// AdamW's two moments per trained element.
    pub optimizer_bytes: usize,
    /// Gradient buffers kept between updates (full: the trained weights'; merged LoRA: the adapted
    /// weights'; unmerged LoRA: the adapters').
    pub gradient_bytes: usize,
    /// The verification buffer at its largest.
    pub buffer_bytes: usize,
}
