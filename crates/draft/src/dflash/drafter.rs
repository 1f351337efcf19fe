//! The DFlash drafter: its layers, loading and saving, context K/V injection, and block passes.

use super::config::CheckedConfig;
use super::DFlashConfig;
use crate::draft_vocabulary::DraftVocabulary;
use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::drafter_stats::DrafterStats;
use crate::proposal::Proposal;
use crate::random_init::save_trained;
use sharpdraft_model::attention::attend;
use sharpdraft_model::cpu::few_rows;
use sharpdraft_model::layers::{Linear, QkvProjection, QkvShape, RmsNorm, SwiGlu, Trainable};
use sharpdraft_model::rope::Rope;
use sharpdraft_model::time_split::{self, Step};
use sharpdraft_model::weights::{checkpoint_files, load_strict, Route};
use sharpdraft_model::{
    visible_counts, AttentionObserver, AttentionView, KeySelection, KvCache, QueryScaling, Sampler,
    ScaledQueries, Tap, Transformer, WindowBound,
};
use std::path::Path;
use tch::{nn, Device, Kind, Tensor};

pub(crate) struct Layer {
    pub(crate) input_layernorm: RmsNorm,
    /// q/k/v with Qwen3's per-head q/k norms, RoPE on queries and keys.
    qkv: QkvProjection,
    o_proj: Linear,
    post_attention_layernorm: RmsNorm,
    mlp: SwiGlu,
    /// Sliding window in keys, for `sliding_attention` layers.
    pub(crate) window: Option<i64>,
}

impl Layer {
    /// Queries of block rows `y` `[R, H]` (after input_layernorm) with RoPE: `[heads, R, head_dim]`.
    pub(crate) fn queries(&self, y: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        self.qkv.queries(y, cos, sin).permute([1, 0, 2])
    }

    /// Keys and values of rows `x` `[R, H]` (block rows after input_layernorm, or fused context rows) with
    /// RoPE on the keys: two `[kv_heads, R, head_dim]`.
    pub(crate) fn keys_values(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> (Tensor, Tensor) {
        let (k, v) = self.qkv.keys_values(x, cos, sin);
        (k.permute([1, 0, 2]), v.permute([1, 0, 2]))
    }

    /// The layer's linear maps: projections and MLP.
    pub(crate) fn linears(&self) -> Vec<&Linear> {
        let mut out = self.qkv.linears();
        out.push(&self.o_proj);
        out.extend(self.mlp.linears());
        out
    }

    /// Residual of the attention output `[R, heads * head_dim]`, then the MLP block.
    pub(crate) fn finish(&self, x: &Tensor, attention: &Tensor) -> Tensor {
        let x = x + self.o_proj.forward(attention);
        let h = self.post_attention_layernorm.forward(&x);
        &x + self.mlp.forward(&h)
    }
}

pub struct DFlashDrafter {
    pub config: DFlashConfig,
    /// config.json as read, so that saving keeps every key.
    pub(crate) raw_config: serde_json::Value,
    pub(crate) vars: nn::VarStore,
    pub(crate) fc: Linear,
    pub(crate) hidden_norm: RmsNorm,
    pub(crate) layers: Vec<Layer>,
    pub(crate) norm: RmsNorm,
    pub(crate) rope: Rope,
    pub(crate) heads: i64,
    pub(crate) head_dim: i64,
    pub(crate) block_size: i64,
    pub(crate) mask_token: i64,
    pub(crate) causal: bool,
    /// Each layer's sliding window as the checkpoint declares it (what `set_key_selection(None)` restores).
    checkpoint_windows: Vec<Option<i64>>,
    /// Attention sinks: the first context positions every block row sees beyond its window (0: none).
    sink: i64,
    /// Context positions retrieval chose, which block rows see beyond their window (`None`: none).
    retrieved: Option<Vec<bool>>,
    taps: Vec<Tap>,
    /// SharpDraft scaling of every layer's block queries.
    query_scaling: QueryScaling,
    cache: KvCache,
    /// Target features `[m, n_t * H]` of committed tokens whose context K/V are not cached yet.
    pending: Option<Tensor>,
    /// The kind of the drafter's weights and block rows: the target's unless loaded with its own
    /// ([`DFlashDrafter::load_as`]). Its cache and attention keep the target's kind.
    kind: Kind,
    forward_seconds: f64,
    /// The checkpoint's draft vocabulary and the target's head rows of it `[V, H]` (a copy, in the
    /// drafter's kind); `None` when the drafter drafts over the whole vocabulary.
    draft_head: Option<(DraftVocabulary, Tensor)>,
    /// Bytes of the drafter's linear maps, counted once (each proposal asks whether the kernel pays).
    weight_bytes: std::sync::OnceLock<usize>,
    /// A block's chain ends at the first draft the drafter gives less than this probability (that
    /// draft kept); the whole block without it.
    stop_below: Option<f64>,
}

impl Layer {
    /// Declares one drafter layer's variables under `p` (`layers.N`), zero-filled for the loader.
    fn declare(p: &nn::Path, config: &DFlashConfig, window: Option<i64>) -> Self {
        let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads.unwrap_or(heads);
        let head_dim = config.head_dim.unwrap_or(hidden / heads);
        let attention = p / "self_attn";
        let shape = QkvShape {
            input: hidden,
            heads,
            kv_heads,
            head_dim,
            bias: config.attention_bias,
            qk_norm: Some(eps),
        };
        Layer {
            input_layernorm: RmsNorm::new(p / "input_layernorm", hidden, eps),
            qkv: QkvProjection::new(&attention, shape, Trainable::No),
            // Qwen3's layout, which DFlash checkpoints follow: `attention_bias` gives o_proj a bias too.
            o_proj: Linear::new(
                &attention / "o_proj",
                heads * head_dim,
                hidden,
                config.attention_bias,
            ),
            post_attention_layernorm: RmsNorm::new(p / "post_attention_layernorm", hidden, eps),
            mlp: SwiGlu::new(
                &(p / "mlp"),
                hidden,
                config.intermediate_size,
                Trainable::No,
            ),
            window,
        }
    }
}

impl DFlashDrafter {
    /// `fc` and every layer's projections and MLP.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut out = vec![&self.fc];
        for layer in &self.layers {
            out.extend(layer.linears());
        }
        out
    }

    /// Loads a drafter in the published layout (config.json with `dflash_config` + model.safetensors),
    /// in the target's kind.
    pub fn load(dir: &Path, target: &Transformer, capacity: i64) -> Result<Self> {
        Self::load_as(dir, target, capacity, target.kind())
    }

    /// [`DFlashDrafter::load`] with the drafter's own weights and draft-vocabulary head rows in `kind`
    /// (a bf16 drafter beside an f32 target reads half the bytes of its maps a draft). The target's
    /// embeddings and features enter in `kind`; keys, values and queries meet in the target's kind, so
    /// attention over a long context runs where the target's does (the few-row kernel's attention is
    /// f32); without a draft vocabulary the block's last rows go through the target's head in the
    /// target's kind; logits are f32 either way.
    pub fn load_as(dir: &Path, target: &Transformer, capacity: i64, kind: Kind) -> Result<Self> {
        let CheckedConfig {
            config,
            raw,
            mask_token,
            block_size,
            target_layer_ids,
            windows,
        } = CheckedConfig::read(dir, target)?;
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads.unwrap_or(heads);
        let head_dim = config.head_dim.unwrap_or(config.hidden_size / heads);
        let hidden = config.hidden_size;
        let eps = config.rms_norm_eps;
        let device = target.device();
        let mut vars = nn::VarStore::new(device);
        let root = vars.root();
        let layers: Vec<Layer> = windows
            .iter()
            .enumerate()
            .map(|(i, &window)| Layer::declare(&(&root / "layers" / i), &config, window))
            .collect();
        let fc = Linear::new(
            &root / "fc",
            target_layer_ids.len() as i64 * target.config.hidden_size,
            hidden,
            false,
        );
        let hidden_norm = RmsNorm::new(&root / "hidden_norm", hidden, eps);
        let norm = RmsNorm::new(&root / "norm", hidden, eps);
        vars.set_kind(kind);
        // Other exporters: `midlayer.` is layer 0, `encoder.fc.` is fc (docs/drafters.md §4.2).
        let route = |name: &str| -> Route {
            let name = if let Some(rest) = name.strip_prefix("midlayer.") {
                format!("layers.0.{rest}")
            } else if let Some(rest) = name.strip_prefix("encoder.") {
                rest.to_string()
            } else {
                name.to_string()
            };
            match name.as_str() {
                "d2t" => Route::Side,
                "t2d" => Route::Ignore,
                _ => Route::Var(name),
            }
        };
        let side = load_strict(&mut vars, &checkpoint_files(dir)?, route)?;
        let vocab = target.config.vocab_size;
        let vocabulary =
            DraftVocabulary::read(&side, config.draft_vocab_size.unwrap_or(vocab), vocab, dir)?;
        let draft_head = (!vocabulary.is_whole(vocab)).then(|| {
            let rows = (target.lm_head_weight())
                .index_select(0, &vocabulary.target_ids(device))
                .to_kind(kind);
            (vocabulary, rows)
        });
        let rope = Rope::with_base(
            head_dim,
            config.rope_theta.unwrap_or(1_000_000.0),
            None,
            device,
        );
        let cache = KvCache::new(
            layers.len(),
            kv_heads,
            head_dim,
            capacity + block_size,
            target.kind(),
            device,
        );
        Ok(Self {
            causal: config.dflash_config.causal,
            checkpoint_windows: windows,
            sink: 0,
            retrieved: None,
            taps: target_layer_ids.into_iter().map(Tap::LayerOutput).collect(),
            query_scaling: QueryScaling::off(),
            raw_config: raw,
            config,
            vars,
            fc,
            hidden_norm,
            layers,
            norm,
            rope,
            heads,
            head_dim,
            block_size,
            mask_token,
            cache,
            pending: None,
            kind,
            forward_seconds: 0.0,
            draft_head,
            weight_bytes: std::sync::OnceLock::new(),
            stop_below: None,
        })
    }

    /// Ends each block's chain at the first draft the drafter gives less than `threshold` (over its
    /// draft vocabulary where it has one), that draft kept: a verification then pays for fewer rows
    /// where the drafter is unsure. Lossless: the decision reads only the drafter's distribution.
    pub fn with_stop_below(mut self, threshold: Option<f64>) -> Self {
        self.stop_below = threshold;
        self
    }

    pub fn query_scaling(&self) -> &QueryScaling {
        &self.query_scaling
    }

    pub fn block_size(&self) -> i64 {
        self.block_size
    }

    /// Training length n0 recorded in the checkpoint, else `max_position_embeddings`.
    pub fn training_length(&self) -> i64 {
        self.config
            .training_length
            .unwrap_or(self.config.max_position_embeddings)
    }

    /// Writes the drafter in the published layout (config.json with `dflash_config` + model.safetensors),
    /// recording `training_length`.
    pub fn save(&self, dir: &Path, training_length: i64) -> Result<()> {
        let extra = match &self.draft_head {
            Some((vocabulary, _)) => vocabulary.tensors(self.config.vocab_size),
            None => Vec::new(),
        };
        save_trained(
            dir,
            &self.raw_config,
            "dtype",
            training_length,
            &self.vars,
            &extra,
        )
    }

    /// Projects context features `c` `[m, H]` into every layer's cache at positions `start..start + m`.
    fn write_context(&mut self, c: &Tensor, start: i64) -> Result<()> {
        let rows = c.size()[0];
        let positions = Tensor::arange_start(start, start + rows, (Kind::Int64, c.device()));
        let (cos, sin) = self.rope.tables(&positions, c.kind());
        for (i, layer) in self.layers.iter().enumerate() {
            // The context's keys and values: features entering layer i.
            // The projections' weights are their linear maps', marked there.
            let (k, v) =
                time_split::mark(Step::Features, || 0, || layer.keys_values(c, &cos, &sin));
            let (_keys, _values) = self.cache.write(i, &k, &v)?;
        }
        self.cache.advance(rows);
        Ok(())
    }

    /// One block pass `[root, MASK x (B - 1)]` at position `start` over the cached context (which must hold
    /// exactly `start` positions), offering each layer's attention to `observer`; returns the block's last
    /// hidden states `[B, H]`. Block K/V are never kept.
    fn block_pass(
        &mut self,
        target: &Transformer,
        root: i64,
        start: i64,
        mut observer: Option<&mut dyn AttentionObserver>,
    ) -> Result<Tensor> {
        let (device, kind) = (target.device(), self.kind);
        let context = self.cache.len();
        if context != start {
            return Err(DraftError::Protocol(format!(
                "DFlash context holds {context} positions, the root sits at {start}"
            )));
        }
        let b = self.block_size;
        let mut block = vec![self.mask_token; b as usize];
        block[0] = root;
        let mut x = (target.embed(&Tensor::from_slice(&block).to_device(device))).to_kind(kind);
        let positions = Tensor::arange_start(start, start + b, (Kind::Int64, device));
        let (cos, sin) = self.rope.tables(&positions, kind);
        let softmax_scale = 1.0 / (self.head_dim as f64).sqrt();
        // Over every position; cut to the context keys the cache still holds (a bounded window).
        let masks: Vec<Option<Tensor>> = (self.layers.iter())
            .map(|l| {
                self.cache
                    .held_columns(self.block_mask(l, context, start))
                    .map(|m| m.to_device(device))
            })
            .collect();
        let mut speculation = self.cache.speculate();
        for ((i, layer), mask) in self.layers.iter().enumerate().zip(&masks) {
            x = time_split::mark(
                Step::Layer(i),
                || 0,
                || -> Result<Tensor> {
                    let y = layer.input_layernorm.forward(&x);
                    let (k, v) = layer.keys_values(&y, &cos, &sin);
                    // The cache converts the block's keys and values to its (the target's) kind; the
                    // queries follow, and the attention's output comes back to the drafter's kind.
                    let (keys, values) = speculation.write(i, &k, &v)?;
                    let mut q = layer.queries(&y, &cos, &sin).to_kind(keys.kind());
                    // Every row of a non-causal block sees context + B keys: one scalar per pass (derivations/top-k-mass-scaling.md §6).
                    if !self.query_scaling.is_off() {
                        let counts = visible_counts(mask.as_ref(), b, keys.size()[1])?;
                        self.query_scaling.apply(&mut q, i, &counts)?;
                    }
                    if let Some(observer) = observer.as_deref_mut().filter(|o| o.wants(i)) {
                        let view = AttentionView {
                            queries: &q,
                            keys: &keys,
                            visible: mask.as_ref(),
                            past: context,
                            softmax_scale,
                        };
                        observer.observe(i, &view);
                    }
                    let attention = attend(&q, &keys, &values, mask.as_ref(), softmax_scale);
                    Ok(layer.finish(&x, &attention.to_kind(kind)))
                },
            )?;
        }
        Ok(x)
    }

    /// The attention-statistics probe's entry: writes the context features `features` (`[m, features]`,
    /// the target's taps of `tokens`) up to each position of `positions` (increasing) and runs one block
    /// pass rooted at `tokens[p]` there, offering each layer's attention to `observer`. Every block row at
    /// position p sees p + B keys.
    pub fn probe_blocks(
        &mut self,
        target: &Transformer,
        tokens: &[i64],
        features: &Tensor,
        positions: &[i64],
        observer: &mut dyn AttentionObserver,
    ) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let kind = self.kind;
        for &p in positions {
            let written = self.cache.len();
            if p < written || p as usize >= tokens.len() {
                return Err(DraftError::Protocol(format!(
                    "probe position {p} is before the written context ({written}) or past the {} tokens",
                    tokens.len()
                )));
            }
            if p > written {
                let rows = features.narrow(0, written, p - written).to_kind(kind);
                let c = self.hidden_norm.forward(&self.fc.forward(&rows));
                self.write_context(&c, written)?;
            }
            let _ = self.block_pass(target, tokens[p as usize], p, Some(&mut *observer))?;
        }
        Ok(())
    }

    /// Projects the target features of newly committed tokens into the context (in `kind`).
    fn write_pending(&mut self, kind: Kind) -> Result<()> {
        if let Some(features) = self.pending.take() {
            let c = time_split::mark(
                Step::Features,
                || 0,
                || {
                    self.hidden_norm
                        .forward(&self.fc.forward(&features.to_kind(kind)))
                },
            );
            let start = self.cache.len();
            self.write_context(&c, start)?;
        }
        Ok(())
    }

    /// Drafts one block after the root over the written context: the drafts `[B - 1]`, greedy.
    fn draft_block(&mut self, ctx: &DraftContext<'_>) -> Result<Vec<i64>> {
        // Every cached position is committed context: the moment a bounded cache may drop old keys.
        self.cache.slide();
        let root = *ctx.committed.last().expect("a root");
        let x = self.block_pass(ctx.target, root, ctx.committed.len() as i64 - 1, None)?;
        let b = self.block_size;
        let logits = self.draft_logits(ctx.target, &self.norm.forward(&x.narrow(0, 1, b - 1)));
        let drafts = time_split::mark(
            Step::Sampling,
            || 0,
            || -> Result<Vec<i64>> {
                let mut drafts =
                    Vec::<i64>::try_from(logits.argmax(-1, false).to_device(Device::Cpu))?;
                if let Some(threshold) = self.stop_below {
                    // The probability of each draft, its logit row's largest: [B - 1].
                    let confidence = Vec::<f64>::try_from(
                        logits
                            .softmax(-1, Kind::Float)
                            .amax([-1i64].as_slice(), false)
                            .to_kind(Kind::Double)
                            .to_device(Device::Cpu),
                    )?;
                    if let Some(unsure) = confidence.iter().position(|&p| p < threshold) {
                        drafts.truncate(unsure + 1);
                    }
                }
                Ok(drafts)
            },
        )?;
        Ok(match &self.draft_head {
            Some((vocabulary, _)) => drafts
                .into_iter()
                .map(|d| vocabulary.to_target(d))
                .collect(),
            None => drafts,
        })
    }

    /// Logits `[R, V]` f32 of normalised block rows `[R, H]` over the draft vocabulary (the target's
    /// head rows of it), or `[R, vocab]` through the target's head when the drafter has none.
    pub(crate) fn draft_logits(&self, target: &Transformer, normed: &Tensor) -> Tensor {
        let Some((_, rows)) = &self.draft_head else {
            return target.lm_head(&normed.to_kind(target.kind()));
        };
        time_split::mark(
            Step::LmHead,
            || time_split::bytes_of([rows]),
            || {
                let few_rows = few_rows::head(normed, rows);
                few_rows
                    .unwrap_or_else(|| normed.to_kind(rows.kind()).matmul(&rows.transpose(0, 1)))
                    .to_kind(Kind::Float)
            },
        )
    }

    /// The draft vocabulary, `None` for the whole vocabulary.
    pub fn draft_vocabulary(&self) -> Option<&DraftVocabulary> {
        self.draft_head.as_ref().map(|(v, _)| v)
    }

    /// Visibility of the block's rows over `[context | block]` for one layer, or `None` for all-visible.
    fn block_mask(&self, layer: &Layer, context: i64, start: i64) -> Option<Tensor> {
        let b = self.block_size;
        if layer.window.is_none() && !self.causal {
            return None;
        }
        let retrieved = |key: i64| {
            self.retrieved
                .as_ref()
                .is_some_and(|r| r.get(key as usize).copied().unwrap_or(false))
        };
        let mut visible = vec![true; (b * (context + b)) as usize];
        for r in 0..b {
            let row_position = start + r;
            for key in 0..context + b {
                let key_position = if key < context {
                    key
                } else {
                    start + key - context
                };
                let in_window = layer.window.is_none_or(|w| key_position > row_position - w)
                    || (key < context && (key < self.sink || retrieved(key)));
                let causal_ok = !self.causal || key < context || key_position <= row_position;
                visible[(r * (context + b) + key) as usize] = in_window && causal_ok;
            }
        }
        Some(Tensor::from_slice(&visible).view([b, context + b]))
    }
}

impl Drafter for DFlashDrafter {
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        DFlashDrafter::linears(self)
    }

    fn kind(&self) -> crate::DrafterKind {
        crate::DrafterKind::Dflash
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.taps.clone()
    }

    fn prefill(&mut self, _ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let started = std::time::Instant::now();
        // A new request: nothing of an earlier one stays in the cache.
        self.cache.truncate(0)?;
        // The prompt's context features, many rows: here, with the target's prefill, on all of
        // libtorch's threads (a decoding loop holds it to one).
        self.pending = target_hidden.map(Tensor::shallow_clone);
        self.write_pending(self.kind)?;
        self.forward_seconds += started.elapsed().as_secs_f64();
        Ok(())
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, _sampler: &mut Sampler) -> Result<Proposal> {
        let _guard = tch::no_grad_guard();
        let started = std::time::Instant::now();
        // The last cycle's verified rows into the context, then a block of a few rows through the
        // drafter's maps and the target's head: the few-row kernel where the drafter's weights stream
        // from memory (with the target's, between two proposals: few_rows::beside).
        let bytes = *(self.weight_bytes)
            .get_or_init(|| time_split::bytes_of(self.linears().iter().map(|l| &l.weight)));
        let (device, kind) = (ctx.target.device(), self.kind);
        let drafts = few_rows::where_it_pays(self.block_size, device, kind, bytes, || {
            self.write_pending(kind)?;
            self.draft_block(ctx)
        })?;
        self.forward_seconds += started.elapsed().as_secs_f64();
        Ok(Proposal::chain(drafts, None))
    }

    fn observe(&mut self, _ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        let hidden = feedback.target_hidden.ok_or_else(|| {
            DraftError::Protocol("DFlash needs the target's hidden states of verified rows".into())
        })?;
        self.pending = Some(hidden.shallow_clone());
        Ok(())
    }

    /// The plain steps' features join those of the last verification, to be written into the
    /// context at the next proposal.
    fn catch_up(&mut self, _ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        let rows = target_hidden.ok_or_else(|| {
            DraftError::Protocol("DFlash needs the target's hidden states of plain steps".into())
        })?;
        self.pending = Some(crate::drafter::append_rows(self.pending.take(), rows));
        Ok(())
    }

    fn stats(&self) -> DrafterStats {
        DrafterStats::of(
            self.cache.bytes_allocated(),
            self.forward_seconds,
            &self.variables(),
        )
    }

    /// The selection's window on every layer (the narrower one where a layer has its own) but the
    /// layers it leaves full, which see every key, its sinks and its retrieved context positions;
    /// `None` restores the checkpoint's windows.
    fn set_key_selection(&mut self, selection: Option<KeySelection>) -> Result<()> {
        let window = selection.as_ref().map(|s| s.recent);
        let full = selection.as_ref().map_or(&[][..], |s| &s.full_layers[..]);
        if let Some(&beyond) = full.iter().find(|&&l| l >= self.layers.len()) {
            return Err(DraftError::InvalidOption {
                option: "window_full_layer".into(),
                value: beyond.to_string(),
                reason: format!("the DFlash drafter has layers 0..{}", self.layers.len()),
            });
        }
        for (i, (layer, own)) in self
            .layers
            .iter_mut()
            .zip(&self.checkpoint_windows)
            .enumerate()
        {
            layer.window = match (window, *own) {
                _ if full.contains(&i) => None,
                (Some(w), Some(o)) => Some(w.min(o)),
                (w, o) => w.or(o),
            };
        }
        self.sink = selection.as_ref().map_or(0, |s| s.sink);
        // Bounded only where every layer slides and no key outside the windows is ever seen again.
        let widest = self
            .layers
            .iter()
            .map(|l| l.window)
            .collect::<Option<Vec<_>>>();
        let bound = match (&selection, widest) {
            (Some(s), Some(windows)) if KeySelection::cache_bound(Some(s)).is_some() => {
                windows.into_iter().max().map(|recent| WindowBound {
                    recent,
                    sink: s.sink,
                })
            }
            _ => None,
        };
        self.cache.bound_to_window(bound)?;
        self.retrieved = match selection.and_then(|s| s.retrieved) {
            Some(r) => Some(Vec::<bool>::try_from(r.to_device(Device::Cpu))?),
            None => None,
        };
        Ok(())
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        self.vars.variables().into_iter().collect()
    }
}

impl ScaledQueries for DFlashDrafter {
    fn query_layout(&self) -> (usize, usize) {
        (self.layers.len(), self.heads as usize)
    }

    fn training_length(&self) -> Option<i64> {
        Some(DFlashDrafter::training_length(self))
    }

    fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.query_scaling = scaling;
    }
}
