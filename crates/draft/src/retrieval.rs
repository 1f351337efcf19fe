//! Cross-model retrieval (SpecExtend, Cha et al. 2025; training-free): after a verification, the target's
//! last-layer attention of the verified root over the context ranks chunks of `chunk` consecutive keys,
//! and the drafter then attends only to the `top_chunks` best chunks plus its last `recent` keys, until
//! the next retrieval `every` cycles later. What the target found relevant far back stays in the
//! drafter's view; the rest no longer dilutes the drafter's attention. Before the first verification the
//! drafter sees its `recent` window alone. The selection is a mask: every key stays cached.

use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::drafter_stats::DrafterStats;
use crate::proposal::Proposal;
use serde::{Deserialize, Serialize};
use sharpdraft_model::{KeySelection, Sampler, Tap};
use tch::{Kind, Tensor};

/// The `retrieval:` block of a drafter specification, and the `--retrieval-*` flags of the commands that
/// draft: SpecExtend's defaults, chunks of 32, 64 of them, every 8 cycles; one default and one
/// validation for both. On the command line the switch `--retrieval` turns it on, as a `retrieval:` key
/// does in YAML: it is the group's member that a flattened `Option<RetrievalOptions>` is `Some` by, and
/// the `--retrieval-*` flags require it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
#[command(arg(
    clap::Arg::new(RETRIEVAL_SWITCH)
        .long(RETRIEVAL_SWITCH)
        .action(clap::ArgAction::SetTrue)
        .help("Turn on cross-model retrieval (SpecExtend; YAML's `retrieval:` block) with the --retrieval-* options")
))]
#[group(arg = RETRIEVAL_SWITCH, requires = RETRIEVAL_SWITCH)]
pub struct RetrievalOptions {
    /// Retrieval: keys per chunk.
    #[serde(default = "default_chunk")]
    #[arg(id = "retrieval_chunk", value_name = "RETRIEVAL_CHUNK", long = "retrieval-chunk", default_value_t = default_chunk())]
    pub chunk: i64,
    /// Retrieval: chunks kept.
    #[serde(default = "default_top_chunks")]
    #[arg(id = "retrieval_top_chunks", value_name = "RETRIEVAL_TOP_CHUNKS", long = "retrieval-top-chunks", default_value_t = default_top_chunks())]
    pub top_chunks: usize,
    /// Retrieval: the recent window every row also sees.
    #[serde(default = "default_recent")]
    #[arg(id = "retrieval_recent", value_name = "RETRIEVAL_RECENT", long = "retrieval-recent", default_value_t = default_recent())]
    pub recent: i64,
    /// Retrieval: cycles between retrievals.
    #[serde(default = "default_every")]
    #[arg(id = "retrieval_every", value_name = "RETRIEVAL_EVERY", long = "retrieval-every", default_value_t = default_every())]
    pub every: usize,
}

/// The command line's switch for retrieval (`--retrieval`), and its argument id.
pub const RETRIEVAL_SWITCH: &str = "retrieval";

fn default_chunk() -> i64 {
    32
}
fn default_top_chunks() -> usize {
    64
}
fn default_recent() -> i64 {
    256
}
fn default_every() -> usize {
    8
}

impl Default for RetrievalOptions {
    fn default() -> Self {
        Self {
            chunk: default_chunk(),
            top_chunks: default_top_chunks(),
            recent: default_recent(),
            every: default_every(),
        }
    }
}

impl RetrievalOptions {
    /// Checks every option; the error names the key.
    pub fn validate(&self) -> std::result::Result<(), String> {
        // Far beyond any model's context, and small enough that chunk arithmetic cannot overflow.
        let most = MAX_RETRIEVAL_SIZE;
        if self.chunk > most || self.recent > most || self.top_chunks as u64 > most as u64 {
            return Err(format!(
                "retrieval.chunk = {}, top_chunks = {}, recent = {}: each must be at most {most} (they count keys of a context)",
                self.chunk, self.top_chunks, self.recent
            ));
        }
        if self.chunk < 1 {
            return Err(format!(
                "retrieval.chunk = {}: must be at least 1",
                self.chunk
            ));
        }
        if self.top_chunks == 0 {
            return Err("retrieval.top_chunks = 0: must be at least 1".into());
        }
        if self.recent < 1 {
            return Err(format!(
                "retrieval.recent = {}: must be at least 1",
                self.recent
            ));
        }
        if self.every == 0 {
            return Err("retrieval.every = 0: must be at least 1".into());
        }
        Ok(())
    }
}

/// The largest chunk, chunk count or recent window a retrieval configuration may name (2^24 keys).
pub const MAX_RETRIEVAL_SIZE: i64 = 1 << 24;

/// The `top` chunks of `chunk` consecutive keys with the largest summed `scores` `[L]` (ties to the
/// earlier chunk), as a key mask `[L]` (bool).
pub fn top_chunks(scores: &Tensor, chunk: i64, top: usize) -> Tensor {
    let keys = scores.size()[0];
    let chunks = (keys + chunk - 1) / chunk;
    let padded = Tensor::cat(
        &[
            scores.to_kind(Kind::Float),
            Tensor::zeros([chunks * chunk - keys], (Kind::Float, scores.device())),
        ],
        0,
    );
    let per_chunk = padded
        .view([chunks, chunk])
        .sum_dim_intlist(&[1i64][..], false, Kind::Float);
    let (_, best) = per_chunk.topk((top as i64).min(chunks), 0, true, true);
    let chosen = Tensor::zeros([chunks], (Kind::Bool, scores.device())).index_fill(0, &best, 1);
    chosen
        .unsqueeze(1)
        .expand([chunks, chunk], false)
        .reshape([chunks * chunk])
        .narrow(0, 0, keys)
}

pub struct RetrievingDrafter<'t> {
    inner: Box<dyn Drafter + 't>,
    config: RetrievalOptions,
    cycles_in_request: usize,
    retrievals: usize,
}

impl<'t> RetrievingDrafter<'t> {
    pub fn new(inner: Box<dyn Drafter + 't>, config: RetrievalOptions) -> Result<Self> {
        config
            .validate()
            .map_err(|reason| DraftError::InvalidOption {
                option: "retrieval".into(),
                value: format!("{config:?}"),
                reason,
            })?;
        Ok(Self {
            inner,
            config,
            cycles_in_request: 0,
            retrievals: 0,
        })
    }

    /// Retrievals so far, over every request.
    pub fn retrievals(&self) -> usize {
        self.retrievals
    }
}

impl Drafter for RetrievingDrafter<'_> {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.inner.linears()
    }

    fn kind(&self) -> crate::DrafterKind {
        self.inner.kind()
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.inner.target_taps()
    }

    fn wants_target_attention(&self) -> bool {
        true
    }

    fn prefill(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        self.cycles_in_request = 0;
        self.inner
            .set_key_selection(Some(KeySelection::recent_only(self.config.recent)))?;
        self.inner.prefill(ctx, target_hidden)
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        self.inner.propose(ctx, sampler)
    }

    fn catch_up(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        self.inner.catch_up(ctx, target_hidden)
    }

    /// Every `every` cycles, starting with the first: the keys the target attended to most.
    fn observe(&mut self, ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        self.inner.observe(ctx, feedback)?;
        if self.cycles_in_request.is_multiple_of(self.config.every) {
            let scores = feedback.target_attention.ok_or_else(|| {
                DraftError::Protocol(
                    "retrieval asked for the target's attention and got none".into(),
                )
            })?;
            let retrieved = top_chunks(scores, self.config.chunk, self.config.top_chunks);
            self.inner.set_key_selection(Some(KeySelection {
                retrieved: Some(retrieved),
                ..KeySelection::recent_only(self.config.recent)
            }))?;
            self.retrievals += 1;
        }
        self.cycles_in_request += 1;
        Ok(())
    }

    /// Retrieval owns the selection; another one is a protocol error.
    fn set_key_selection(&mut self, _selection: Option<KeySelection>) -> Result<()> {
        Err(DraftError::Protocol(
            "a retrieving drafter chooses its own keys; give a window or retrieval, not both"
                .into(),
        ))
    }

    fn stats(&self) -> DrafterStats {
        self.inner.stats()
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        self.inner.variables()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunks_with_the_most_attention_are_kept_whole_and_the_last_chunk_may_be_short() {
        // 10 keys in chunks of 3: [0.1 0 0 | 0 0.5 0 | 0 0 0 | 0.4]
        let scores = Tensor::from_slice(&[0.1f32, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.4]);
        let kept = Vec::<bool>::try_from(top_chunks(&scores, 3, 2)).unwrap();
        let want = [
            false, false, false, true, true, true, false, false, false, true,
        ];
        assert_eq!(kept, want);
        let all = Vec::<bool>::try_from(top_chunks(&scores, 3, 99)).unwrap();
        assert!(all.iter().all(|&k| k));
    }
}
