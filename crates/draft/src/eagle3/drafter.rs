//! The EAGLE-3 drafter: catch-up on committed pairs, then tree expansion under a speculation guard.

use super::tree::{grow, rerank, Child, Node};
use super::*;
use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::drafter_stats::DrafterStats;
use crate::proposal::Proposal;
use sharpdraft_model::cpu::few_rows;
use sharpdraft_model::generate::PREFILL_CHUNK;
use sharpdraft_model::{
    AttentionMask, AttentionObserver, KeySelection, KvCache, LogitRows, QueryScaling, Sampler,
    Sampling, ScaledQueries, Tap, Transformer,
};
use std::path::Path;
use tch::{Device, Kind, Tensor};

pub struct Eagle3Drafter {
    pub head: Eagle3Head,
    pub(crate) taps: Vec<Tap>,
    pub(crate) shape: TreeShape,
    pub(crate) sampling: Sampling,
    pub(crate) cache: KvCache,
    /// Target features `[m, 3 Ht]` of committed tokens whose pairs are not fed yet.
    pub(crate) pending: Option<Tensor>,
    pub(crate) forward_seconds: std::cell::Cell<f64>,
}

impl Eagle3Drafter {
    /// Step 1 of a proposal: feeds the (token, target feature) pairs of newly committed tokens into the
    /// stable cache (a few rows: the prefill took in the prompt's). Returns the stable length and the
    /// last pair's hidden state `[1, H]` and draft log-probabilities `[draft_vocab]`, where expansion
    /// starts.
    fn catch_up(&mut self, ctx: &DraftContext<'_>) -> Result<(i64, Tensor, Tensor)> {
        // Every cached row is committed here: the moment a bounded cache may drop old keys.
        self.cache.slide();
        let features = self.pending.take().ok_or_else(|| {
            DraftError::Protocol(
                "EAGLE-3 has no target features to pair (prefill not called?)".into(),
            )
        })?;
        let tokens = self.tokens_after(ctx, features.size()[0]);
        let (hidden, log_probs) = self.feed_pairs(
            ctx.target,
            tokens,
            &features,
            PREFILL_CHUNK,
            None,
            LogitRows::Last,
        )?;
        Ok((self.cache.len(), hidden, log_probs.get(0)))
    }

    /// The committed tokens of the next `count` pairs: the token after each fed position.
    fn tokens_after<'c>(&self, ctx: &DraftContext<'c>, count: i64) -> &'c [i64] {
        let fed = self.cache.len() as usize;
        &ctx.committed[fed + 1..fed + 1 + count as usize]
    }

    /// Feeds (token, target feature) pairs into the stable cache in passes of at most `chunk` rows (so
    /// no pass over a long prompt builds a mask or scores over all of it at once), offering each pass's
    /// attention to `observer`. `tokens[i]` is the token after the one whose target features are
    /// `features[i]` (`[m, 3 Ht]`); row i sees every fed key and its own. Returns the last pair's
    /// hidden state `[1, H]` and the log-probabilities of `log_prob_rows` of the last pass.
    fn feed_pairs(
        &mut self,
        target: &Transformer,
        tokens: &[i64],
        features: &Tensor,
        chunk: i64,
        mut observer: Option<&mut dyn AttentionObserver>,
        log_prob_rows: LogitRows,
    ) -> Result<(Tensor, Tensor)> {
        let _guard = tch::no_grad_guard();
        let device = target.device();
        let count = tokens.len() as i64;
        if features.size()[0] != count || count == 0 {
            return Err(DraftError::Protocol(format!(
                "EAGLE-3 pairs {count} tokens with {} target feature rows",
                features.size()[0]
            )));
        }
        let mut start = 0;
        loop {
            let rows = chunk.min(count - start);
            let fed = self.cache.len();
            let ids = Tensor::from_slice(&tokens[start as usize..(start + rows) as usize]);
            let embeddings = target.embed(&ids.to_device(device));
            let positions = Tensor::arange_start(fed, fed + rows, (Kind::Int64, device));
            let fused = self.head.fuse(&features.narrow(0, start, rows));
            let last_pass = start + rows == count;
            // A reborrow for this pass (`as_deref_mut` would keep the observer's own lifetime).
            let pass_observer: Option<&mut dyn AttentionObserver> = match observer.as_mut() {
                Some(o) => Some(&mut **o),
                None => None,
            };
            let timer = std::time::Instant::now();
            let (hidden, log_probs) = self.head.forward(
                &embeddings,
                &fused,
                &positions,
                &AttentionMask::Causal,
                &mut self.cache,
                pass_observer,
                if last_pass {
                    log_prob_rows
                } else {
                    LogitRows::None
                },
            )?;
            self.forward_seconds
                .set(self.forward_seconds.get() + timer.elapsed().as_secs_f64());
            if last_pass {
                return Ok((hidden.narrow(0, rows - 1, 1), log_probs));
            }
            start += rows;
        }
    }

    /// Loads a head in the published layout (config.json + model.safetensors; `midlayer.` or `layers.0.`)
    /// for `target`, in the target's kind.
    pub fn load(
        dir: &Path,
        target: &Transformer,
        shape: TreeShape,
        sampling: Sampling,
        capacity: i64,
    ) -> Result<Self> {
        Self::load_as(dir, target, shape, sampling, capacity, target.kind())
    }

    /// [`Eagle3Drafter::load`] with the head's weights in `kind` ([`Eagle3Head::load_as`]); its cache
    /// keeps the target's kind, so attention over a long context runs where the target's does.
    pub fn load_as(
        dir: &Path,
        target: &Transformer,
        shape: TreeShape,
        sampling: Sampling,
        capacity: i64,
        kind: Kind,
    ) -> Result<Self> {
        let (head, taps) = Eagle3Head::load_as(dir, target, false, kind)?;
        shape.validate(head.vocabulary.len())?;
        // The stable context plus one tree's rows: the first step and `top_k` per expansion step.
        let tree_rows = ((shape.depth + 1) * shape.top_k) as i64;
        let cache = KvCache::new(
            1,
            head.kv_heads,
            head.head_dim,
            capacity + tree_rows,
            target.kind(),
            target.device(),
        );
        Ok(Self {
            head,
            taps,
            shape,
            sampling,
            cache,
            pending: None,
            forward_seconds: std::cell::Cell::new(0.0),
        })
    }

    /// Training length n0 recorded in the checkpoint, else `max_position_embeddings`.
    pub fn training_length(&self) -> i64 {
        self.head.training_length()
    }
}

impl Eagle3Drafter {
    /// The attention-statistics probe's entry: feeds the `(token, target feature)` pairs of a long context
    /// through the stable cache in chunks of `chunk` rows, as drafting's catch-up pass does, and offers
    /// each chunk's attention to `observer`. `tokens[i]` is the token after the one whose target features
    /// are `features[i]` (`[m, 3 Ht]`). Row i sees i + 1 keys.
    pub fn feed_context(
        &mut self,
        target: &Transformer,
        tokens: &[i64],
        features: &Tensor,
        chunk: i64,
        observer: &mut dyn AttentionObserver,
    ) -> Result<()> {
        // The pass's outputs are not needed: the observer took what it wanted.
        let _ = self.feed_pairs(
            target,
            tokens,
            features,
            chunk,
            Some(observer),
            LogitRows::None,
        )?;
        Ok(())
    }
}

/// How an expansion picks a node's children: a sampled chain draws one token from q (over the whole
/// vocabulary, its distribution kept in `probs` for verification); everything else takes the top k.
struct Picker {
    sampled_chain: bool,
    vocab: i64,
    sampling: Sampling,
}

impl Picker {
    /// The children of a node whose next-token log-probabilities are `log_probs` (over the head's
    /// vocabulary): target token ids with their log-probabilities.
    fn pick(
        &self,
        head: &Eagle3Head,
        log_probs: &Tensor,
        k: i64,
        sampler: &mut Sampler,
        probs: &mut Vec<Tensor>,
    ) -> Result<Vec<(i64, f64)>> {
        if self.sampled_chain {
            let q = head.full_vocab_probs(log_probs, self.vocab, &self.sampling);
            let token = sampler.sample_from(&q)?;
            let p = q.f_double_value(&[token])?;
            probs.push(q);
            Ok(vec![(token, p.ln())])
        } else {
            let (values, indices) = log_probs.f_topk(k, -1, true, true)?;
            let values = Vec::<f32>::try_from(values.to_device(Device::Cpu))?;
            let indices = Vec::<i64>::try_from(indices.to_device(Device::Cpu))?;
            Ok(indices
                .into_iter()
                .zip(values)
                .map(|(d, v)| (head.to_target(d), v as f64))
                .collect())
        }
    }
}

impl Eagle3Drafter {
    /// Catches up on committed tokens, then expands the chain or tree from the last one.
    fn expand(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        let _guard = tch::no_grad_guard();
        let device = ctx.target.device();
        let (stable, last_hidden, last_log_probs) = self.catch_up(ctx)?;
        let head = &self.head;

        // 2. Expand. Chains with sampling draw from q; everything else is deterministic top-k.
        let vocab = ctx.target.config.vocab_size;
        let sampled_chain = !ctx.greedy && self.shape.top_k == 1;
        let mut nodes: Vec<Node> = Vec::new();
        let mut probs = Vec::new();
        let mut frontier: Vec<usize> = Vec::new();
        let picker = Picker {
            sampled_chain,
            vocab,
            sampling: self.sampling,
        };
        let k = self.shape.top_k as i64;
        for (token, score) in picker.pick(head, &last_log_probs, k, sampler, &mut probs)? {
            frontier.push(nodes.len());
            nodes.push(Node {
                token,
                parent: None,
                score,
                row: None,
            });
        }
        let mut frontier_hidden = last_hidden.repeat([frontier.len() as i64, 1]);
        let mut speculation = self.cache.speculate();
        for depth in 0..self.shape.depth {
            let rows = frontier.len() as i64;
            let first_row = speculation.len();
            let mask = frontier_mask(&nodes, &frontier, stable, first_row, device);
            let tokens: Vec<i64> = frontier.iter().map(|&n| nodes[n].token).collect();
            let embeddings = ctx
                .target
                .embed(&Tensor::from_slice(&tokens).to_device(device));
            let positions = Tensor::full([rows], stable + depth as i64, (Kind::Int64, device));
            let timer = std::time::Instant::now();
            let (hidden, log_probs) = head.forward(
                &embeddings,
                &frontier_hidden,
                &positions,
                &mask,
                &mut speculation,
                None,
                LogitRows::All,
            )?;
            self.forward_seconds
                .set(self.forward_seconds.get() + timer.elapsed().as_secs_f64());
            for (r, &node) in frontier.iter().enumerate() {
                nodes[node].row = Some(first_row + r as i64);
            }
            // Children of every frontier node; the best `top_k` by cumulative score form the next frontier.
            let mut children: Vec<Child> = Vec::new();
            if sampled_chain {
                for (r, &node) in frontier.iter().enumerate() {
                    for (token, logp) in
                        picker.pick(head, &log_probs.get(r as i64), k, sampler, &mut probs)?
                    {
                        children.push(Child {
                            parent: node,
                            token,
                            score: nodes[node].score + logp,
                            row: r,
                        });
                    }
                }
            } else {
                children = top_k_children(head, &log_probs, &frontier, &nodes, k)?;
            }
            let (next, next_rows) = grow(&mut nodes, children, self.shape.top_k);
            frontier_hidden =
                hidden.index_select(0, &Tensor::from_slice(&next_rows).to_device(device));
            frontier = next;
        }
        drop(speculation);

        // 3. Re-rank: the `total_tokens` best nodes, closed under ancestors, parents first.
        let (kept_nodes, parents) = rerank(&nodes, self.shape.total_tokens)?;
        let proposal = Proposal {
            tokens: kept_nodes.iter().map(|&i| nodes[i].token).collect(),
            parents,
            draft_probs: if sampled_chain {
                Some(Tensor::stack(&probs[..kept_nodes.len()], 0))
            } else {
                None
            },
        };
        Ok(proposal)
    }
}

impl Drafter for Eagle3Drafter {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.head.linears()
    }

    fn kind(&self) -> crate::DrafterKind {
        crate::DrafterKind::Eagle3
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.taps.clone()
    }

    fn prefill(&mut self, ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        // A new request: nothing of an earlier one stays in the cache.
        self.cache.truncate(0)?;
        self.pending = None;
        let Some(features) = target_hidden else {
            return Ok(());
        };
        // The prompt's pairs, many rows: here, with the target's prefill and timed as part of it, on
        // all of libtorch's threads (a decoding loop holds it to one). The last pair waits for the
        // first proposal, which starts from its hidden state and log-probabilities.
        let rows = features.size()[0];
        if rows > 1 {
            let tokens = self.tokens_after(ctx, rows - 1);
            let prompt = features.narrow(0, 0, rows - 1);
            let _ = self.feed_pairs(
                ctx.target,
                tokens,
                &prompt,
                PREFILL_CHUNK,
                None,
                LogitRows::None,
            )?;
        }
        self.pending = Some(features.narrow(0, rows - 1, 1));
        Ok(())
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        // Tree levels of a few rows through the head: the few-row kernel where its weights stream from
        // memory (with the target's, between two proposals: few_rows::beside). Not while many pairs
        // wait to be fed: libtorch, single-threaded in a kernel pass, would run them on one core.
        let bytes = self.head.weight_bytes();
        let (device, kind) = (ctx.target.device(), self.head.kind());
        let rows = self.shape.top_k.max(1) as i64;
        match self.pending.as_ref().map_or(0, |p| p.size()[0]) {
            0..=few_rows::HEAD_ROWS => {
                few_rows::where_it_pays(rows, device, kind, bytes, || self.expand(ctx, sampler))
            }
            _ => self.expand(ctx, sampler),
        }
    }

    fn observe(&mut self, _ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        let hidden = feedback.target_hidden.ok_or_else(|| {
            DraftError::Protocol("EAGLE-3 needs the target's hidden states of verified rows".into())
        })?;
        self.pending = Some(hidden.shallow_clone());
        Ok(())
    }

    /// The plain steps' features join those of the last verification, to be paired at the next
    /// proposal.
    fn catch_up(&mut self, _ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        let rows = target_hidden.ok_or_else(|| {
            DraftError::Protocol("EAGLE-3 needs the target's hidden states of plain steps".into())
        })?;
        self.pending = Some(crate::drafter::append_rows(self.pending.take(), rows));
        Ok(())
    }

    fn stats(&self) -> DrafterStats {
        DrafterStats::of(
            self.cache.bytes_allocated(),
            self.forward_seconds.get(),
            &self.variables(),
        )
    }

    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        crate::causal_drafting::refuse_full_layers(selection.as_ref())?;
        self.cache
            .bound_to_window(KeySelection::cache_bound(selection.as_ref()))?;
        self.head.set_key_selection(selection);
        Ok(())
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        self.head.vars.variables().into_iter().collect()
    }
}

/// The draft-tree rows of one expansion step, `[rows, first_row + rows]`: each frontier node sees the
/// stable context (`stable` keys), its fed ancestors and itself.
fn frontier_mask(
    nodes: &[Node],
    frontier: &[usize],
    stable: i64,
    first_row: i64,
    device: Device,
) -> AttentionMask {
    let rows = frontier.len() as i64;
    let mut visible = vec![false; (rows * (first_row + rows)) as usize];
    for (r, &node) in frontier.iter().enumerate() {
        let row_mask = &mut visible[(r as i64 * (first_row + rows)) as usize
            ..((r as i64 + 1) * (first_row + rows)) as usize];
        row_mask[..stable as usize]
            .iter_mut()
            .for_each(|v| *v = true);
        let mut ancestor = nodes[node].parent;
        while let Some(a) = ancestor {
            if let Some(row) = nodes[a].row {
                row_mask[row as usize] = true;
            }
            ancestor = nodes[a].parent;
        }
        row_mask[(first_row + r as i64) as usize] = true;
    }
    AttentionMask::Rows(
        Tensor::from_slice(&visible)
            .view([rows, first_row + rows])
            .to_device(device),
    )
}

/// The `k` best children of every frontier node by cumulative score, from the step's draft
/// log-probabilities `[rows, draft_vocab]`: one top-k over all rows and one copy to the host.
fn top_k_children(
    head: &Eagle3Head,
    log_probs: &Tensor,
    frontier: &[usize],
    nodes: &[Node],
    k: i64,
) -> Result<Vec<Child>> {
    let (values, indices) = log_probs.f_topk(k, -1, true, true)?; // [rows, k] each
    let values = Vec::<f32>::try_from(values.flatten(0, -1).to_device(Device::Cpu))?;
    let indices = Vec::<i64>::try_from(indices.flatten(0, -1).to_device(Device::Cpu))?;
    let mut children = Vec::with_capacity(frontier.len() * k as usize);
    for (r, &node) in frontier.iter().enumerate() {
        for c in 0..k as usize {
            let i = r * k as usize + c;
            children.push(Child {
                parent: node,
                token: head.to_target(indices[i]),
                score: nodes[node].score + values[i] as f64,
                row: r,
            });
        }
    }
    Ok(children)
}

impl ScaledQueries for Eagle3Drafter {
    fn query_layout(&self) -> (usize, usize) {
        (1, self.head.heads as usize)
    }

    fn training_length(&self) -> Option<i64> {
        Some(Eagle3Drafter::training_length(self))
    }

    fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.head.query_scaling = scaling;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eagle3::{write_random_head, RandomHeadOptions};
    use sharpdraft_model::CausalLm;

    /// The llama fixture of crates/model/tests (2 layers, hidden 32, vocabulary 64, 128 positions).
    fn fixture_target() -> CausalLm {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../model/tests/fixtures/llama");
        CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()
    }

    /// A random head for the target, empty, as a request finds it.
    fn fresh_head(dir: &Path, target: &CausalLm) -> Eagle3Drafter {
        Eagle3Drafter::load(
            dir,
            &target.net,
            TreeShape::chain(3),
            Sampling::greedy(),
            64,
        )
        .unwrap()
    }

    /// 21 committed tokens (the 20 of a prompt, then the root) and the prompt's target features.
    fn prompt_of_20(target: &CausalLm) -> (Vec<i64>, Tensor) {
        let committed: Vec<i64> = (0..21).map(|i| (i * 7 + 3) % 64).collect();
        let hidden = target.net.config.hidden_size;
        (
            committed,
            Tensor::randn([20, 3 * hidden], (Kind::Float, Device::Cpu)),
        )
    }

    /// Asserts two heads hold the same keys and values.
    fn assert_same_cache(a: &Eagle3Drafter, b: &Eagle3Drafter) {
        let ((a_keys, a_values), (b_keys, b_values)) = (a.cache.layer(0), b.cache.layer(0));
        assert_eq!(a_keys.size(), b_keys.size());
        assert!(a_keys.allclose(&b_keys, 1e-5, 1e-5, false));
        assert!(a_values.allclose(&b_values, 1e-5, 1e-5, false));
    }

    #[test]
    fn pairs_fed_in_chunks_give_the_one_pass_hidden_state_log_probs_and_cache() {
        let _guard = tch::no_grad_guard();
        tch::manual_seed(7);
        let target = fixture_target();
        let dir = tempfile::tempdir().unwrap();
        write_random_head(dir.path(), &target.net, &RandomHeadOptions::default()).unwrap();
        let (committed, features) = prompt_of_20(&target);
        let tokens = &committed[1..];

        let mut whole = fresh_head(dir.path(), &target);
        let (one_pass_hidden, one_pass_log_probs) = whole
            .feed_pairs(&target.net, tokens, &features, 20, None, LogitRows::Last)
            .unwrap();
        let mut chunked = fresh_head(dir.path(), &target);
        // 8 + 8 + 4 rows: the last chunk is shorter, as a prompt's usually is.
        let (chunked_hidden, chunked_log_probs) = chunked
            .feed_pairs(&target.net, tokens, &features, 8, None, LogitRows::Last)
            .unwrap();

        assert_eq!((whole.cache.len(), chunked.cache.len()), (20, 20));
        assert_eq!(one_pass_log_probs.size(), chunked_log_probs.size());
        assert!(one_pass_hidden.allclose(&chunked_hidden, 1e-5, 1e-5, false));
        assert!(one_pass_log_probs.allclose(&chunked_log_probs, 1e-5, 1e-5, false));
        assert_same_cache(&whole, &chunked);
    }

    #[test]
    fn the_prefill_takes_in_all_but_the_last_pair_and_the_first_catch_up_starts_where_one_pass_would(
    ) {
        let _guard = tch::no_grad_guard();
        tch::manual_seed(11);
        let target = fixture_target();
        let dir = tempfile::tempdir().unwrap();
        write_random_head(dir.path(), &target.net, &RandomHeadOptions::default()).unwrap();
        let (committed, features) = prompt_of_20(&target);
        let ctx = DraftContext {
            committed: &committed,
            target: &target.net,
            greedy: true,
            max_depth: None,
        };

        let mut one_pass = fresh_head(dir.path(), &target);
        let (one_pass_hidden, one_pass_log_probs) = one_pass
            .feed_pairs(
                &target.net,
                &committed[1..],
                &features,
                20,
                None,
                LogitRows::Last,
            )
            .unwrap();
        let mut drafter = fresh_head(dir.path(), &target);
        drafter.prefill(&ctx, Some(&features)).unwrap();
        assert_eq!(drafter.cache.len(), 19, "the prompt's pairs but the last");
        let (stable, hidden, log_probs) = drafter.catch_up(&ctx).unwrap();

        assert_eq!(stable, 20);
        assert!(hidden.allclose(&one_pass_hidden, 1e-5, 1e-5, false));
        assert!(log_probs.allclose(&one_pass_log_probs.get(0), 1e-5, 1e-5, false));
        assert_same_cache(&one_pass, &drafter);
    }
}
