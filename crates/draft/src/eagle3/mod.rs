//! EAGLE-3 and EAGLE 3.1 drafters (docs/drafters.md §2): one decoder layer on fused target features.
//!
//! Per draft position: `g = fc(cat(h_low, h_mid, h_high))` (EAGLE 3.1 `fc_norm`: an RMSNorm per feature
//! first), `x = cat(input_layernorm(embed(token)), hidden_norm(g))` (width 2H), attention + MLP with the
//! residual `g`, `logits = lm_head(norm(h))` over the reduced draft vocabulary, `target = draft + d2t[draft]`.
//! The next step's hidden is `h` (or `norm(h)` with EAGLE 3.1's `norm_output`).
//!
//! Pairing ("shift by one"): pair i is (target hidden of committed token i, embedding of token i + 1), at
//! draft position i, and predicts token i + 2. Cache invariant: the drafter's cache holds exactly the
//! pairs fed so far ("stable" KV); tree expansion rows are appended under a speculation guard and rolled
//! back before `propose` returns.
//!
//! One file per job: `config` (the published config.json), `head` (loading and layer math), `loss`
//! (training-time test), `tree` (tree shape and the pure expansion and re-ranking steps), `drafter` (the
//! [`crate::Drafter`] implementation), `checkpoint` (writing a head).

mod checkpoint;
mod config;
mod drafter;
mod head;
mod loss;
pub mod train;
pub mod tree;

pub use checkpoint::{write_random_head, RandomHeadOptions};
pub use config::{default_capture_layers, Eagle3Config, EagleExtras};
pub use drafter::Eagle3Drafter;
pub use head::Eagle3Head;
pub use tree::{TreeShape, MAX_TREE_DEPTH, MAX_TREE_TOKENS};
