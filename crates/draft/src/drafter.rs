//! The one interface every drafting method implements. The decoder drives it:
//!
//! 1. `prefill` once per request, after the target has processed the prompt (it forgets any earlier
//!    request, so one drafter can serve many in turn, as online adaptation across requests needs);
//! 2. per cycle, `propose` a tree (or chain) after the root, then `observe` what verification kept.
//!
//! The drafter owns its own cache and state; it never touches the target's cache. What is set once before
//! decoding (query scaling: [`sharpdraft_model::ScaledQueries`], which every concrete drafter implements)
//! is not part of this interface: wrappers (retrieval, online adaptation) take a drafter already set up.

use crate::drafter_stats::DrafterStats;
use crate::proposal::Proposal;
use sharpdraft_model::{KeySelection, Sampler, Tap, Transformer};
use tch::Tensor;

pub type Result<T> = std::result::Result<T, DraftError>;

#[derive(Debug, thiserror::Error)]
pub enum DraftError {
    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// A drafter that does not fit the target (vocabulary, hidden size, layers).
    #[error("drafter does not fit the target: {0}")]
    Mismatch(String),
    /// The decoder and a drafter out of step: a call before `prefill`, feedback without the target
    /// features the drafter asked for, a tree that breaks its own invariant. A bug, not bad input.
    #[error("drafting protocol: {0}")]
    Protocol(String),
    /// A drafting option (tree shape, chain length, layer count, block size) outside what the drafter
    /// or its target allows; names the option and the allowed range.
    #[error("{option} = {value}: {reason}")]
    InvalidOption {
        option: String,
        value: String,
        reason: String,
    },
    /// A drafter checkpoint that does not match the published layout; names the tensor or key.
    #[error("drafter checkpoint {path}: {reason}")]
    Checkpoint { path: String, reason: String },
}

/// What a drafter may read about the sequence being decoded.
pub struct DraftContext<'a> {
    /// Every committed token; the last one is the root (the target has not computed its KV yet).
    pub committed: &'a [i64],
    /// The target, for drafters that share its embedding or LM head.
    pub target: &'a Transformer,
    /// Whether verification is greedy; a drafter then proposes argmax tokens.
    pub greedy: bool,
    /// The deepest draft the target will verify this cycle (the goodput gate's choice); a drafter that
    /// drafts position by position stops there, and the decoder drops deeper nodes of any proposal.
    /// `None`: the drafter's own depth.
    pub max_depth: Option<usize>,
}

/// What verification kept in one cycle.
pub struct Feedback<'a> {
    /// Proposal node indices on the accepted path, root to leaf.
    pub accepted: &'a [usize],
    /// The token the target emitted after the accepted path (now the root).
    pub bonus: i64,
    /// Target hidden states (the drafter's taps, concatenated on features) of the verified root and the
    /// accepted nodes, `[1 + accepted, features]`; `None` when the drafter asked for no taps.
    pub target_hidden: Option<&'a Tensor>,
    /// The target's logits at every row of the verification pass, `[1 + proposal nodes, vocab]` (row 0 the
    /// root, row i + 1 node i): row r is its distribution for the token after row r (the free labels
    /// online adaptation learns from). Not copied: a drafter selects the rows it needs.
    pub verified_logits: &'a Tensor,
    /// `[root + 1]` f32: the target's last-layer attention of the verified root over the committed keys
    /// (cache indices `0..=root`), averaged over heads; only for drafters that want it (retrieval).
    pub target_attention: Option<&'a Tensor>,
}

/// Target features waiting to be taken in, with `rows` appended after them (a drafter that sat out plain
/// steps receives their rows after the last verification's): `[pending + rows, features]`.
pub fn append_rows(pending: Option<Tensor>, rows: &Tensor) -> Tensor {
    match pending {
        Some(earlier) => Tensor::cat(&[earlier, rows.shallow_clone()], 0),
        None => rows.shallow_clone(),
    }
}

pub trait Drafter {
    /// The drafter's kind (a wrapper reports the drafter it wraps).
    fn kind(&self) -> crate::DrafterKind;

    /// Target hidden states this drafter needs from every target pass (EAGLE-3, DFlash), in order.
    fn target_taps(&self) -> Vec<Tap> {
        Vec::new()
    }

    /// The target has processed `ctx.committed[..n - 1]` (all but the root); `target_hidden` holds its taps
    /// for those rows, `[n - 1, features]`.
    fn prefill(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()>;

    /// Proposes tokens after the root. `sampler` draws sampled drafts when `ctx.greedy` is false.
    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal>;

    /// Called after verification, with `ctx.committed` already extended by the accepted tokens and bonus.
    fn observe(&mut self, ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()>;

    /// The target committed tokens in plain steps this drafter sat out (the goodput gate's depth 0,
    /// during which the drafter is never called): `target_hidden` holds its taps' rows of those steps,
    /// `[n, features]`, in order after what it last observed (`None` when it asked for no taps), and
    /// `ctx.committed` ends with the latest root. Called once, before the next `propose`: the drafter's
    /// state becomes what observing each step would have left. The default does nothing: a drafter
    /// over token ids alone takes in the tokens it has not seen when it next proposes.
    fn catch_up(&mut self, _ctx: &DraftContext<'_>, _target_hidden: Option<&Tensor>) -> Result<()> {
        Ok(())
    }

    /// Restricts the drafter's attention over the context to `selection` from the next pass on (a
    /// sliding window, retrieval's chosen keys); `None` lets it see every key its mask allows again.
    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()>;

    /// Whether the drafter wants the target's attention over the context after every verification
    /// ([`Feedback::target_attention`]); retrieval does.
    fn wants_target_attention(&self) -> bool {
        false
    }

    /// The drafter's own weights by checkpoint name (shallow handles on the live tensors); tensors it
    /// borrows from the target (embedding, LM head) are not among them.
    fn variables(&self) -> Vec<(String, Tensor)>;

    /// The drafter's linear maps, each named by its checkpoint weight (online adaptation attaches
    /// unmerged LoRA branches to them). Empty for drafters that hold none of their own.
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        Vec::new()
    }

    /// What the drafter holds and has spent so far: caches, forward time, weights, adaptation.
    fn stats(&self) -> DrafterStats;
}

/// A boxed drafter drafts as the one it holds: every call forwarded, the defaults' included.
impl<D: Drafter + ?Sized> Drafter for Box<D> {
    fn kind(&self) -> crate::DrafterKind {
        (**self).kind()
    }
    fn target_taps(&self) -> Vec<Tap> {
        (**self).target_taps()
    }
    fn prefill(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        (**self).prefill(ctx, target_hidden)
    }
    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        (**self).propose(ctx, sampler)
    }
    fn observe(&mut self, ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        (**self).observe(ctx, feedback)
    }
    fn catch_up(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        (**self).catch_up(ctx, target_hidden)
    }
    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        (**self).set_key_selection(selection)
    }
    fn wants_target_attention(&self) -> bool {
        (**self).wants_target_attention()
    }
    fn variables(&self) -> Vec<(String, Tensor)> {
        (**self).variables()
    }
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        (**self).linears()
    }
    fn stats(&self) -> DrafterStats {
        (**self).stats()
    }
}
