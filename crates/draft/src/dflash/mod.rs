//! DFlash (block diffusion drafting, arXiv 2602.06036; docs/drafters.md §4): a Qwen3-style stack of n layers
//! on fused target features. Context features `c = hidden_norm(fc(cat(h_l1 .. h_ln)))` (outputs of the
//! target's `target_layer_ids`) are projected by every layer's own k/v into context K/V ("KV
//! injection"); the block `[root, MASK x (B - 1)]`, embedded with the target's embedding, attends over
//! the context and itself without a causal mask (unless the layer is sliding-window or the config says
//! causal), in ONE pass; `target.lm_head(norm(x))[1:]` gives B - 1 argmax drafts.
//!
//! Cache invariant: every layer's cache holds the context K/V of the committed tokens that have target
//! features (all but the root), at their own positions; block K/V are appended under a speculation guard
//! and dropped before `propose` returns.

mod checkpoint;
mod config;
mod drafter;
pub mod train;

pub use checkpoint::{write_random_dflash, RandomDFlashOptions};
pub use config::{default_target_layers, DFlashConfig, DFlashExtras, MAX_BLOCK_SIZE};
pub use drafter::DFlashDrafter;
