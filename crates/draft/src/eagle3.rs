//! EAGLE-3 and EAGLE 3.1 drafters (drafters.md §2): one decoder layer on fused target features.
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

use crate::drafter::{DraftContext, DraftError, Drafter, Feedback, Result};
use crate::proposal::Proposal;
use crate::random_init::{
    random_norm, random_weight, save_trained, write_config, write_f32_safetensors, RawTensor,
};
use serde::Deserialize;
use sharpdraft_model::config::RopeScaling;
use sharpdraft_model::layers::{Linear, RmsNorm};
use sharpdraft_model::rope::{self, Rope};
use sharpdraft_model::transformer::attend;
use sharpdraft_model::weights::{checkpoint_files, load_strict, Route};
use sharpdraft_model::{
    AttentionMask, AttentionObserver, AttentionView, KvCache, QueryScaling, Sampler, Sampling, Tap,
    Transformer,
};
use std::path::Path;
use tch::{nn, Device, Kind, Tensor};

/// `config.json` of an EAGLE-3 head (`LlamaForCausalLMEagle3`), field names verbatim.
#[derive(Debug, Clone, Deserialize)]
pub struct Eagle3Config {
    pub hidden_size: i64,
    pub intermediate_size: i64,
    #[serde(default = "one")]
    pub num_hidden_layers: usize,
    pub num_attention_heads: i64,
    #[serde(default)]
    pub num_key_value_heads: Option<i64>,
    #[serde(default)]
    pub head_dim: Option<i64>,
    pub rms_norm_eps: f64,
    /// Absent in the published Llama-3.1 head: the draft then uses 10000, not the target's base.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: i64,
    pub vocab_size: i64,
    #[serde(default)]
    pub draft_vocab_size: Option<i64>,
    #[serde(default)]
    pub target_hidden_size: Option<i64>,
    /// EAGLE 3.1: an RMSNorm per captured target feature before fc.
    #[serde(default)]
    pub fc_norm: bool,
    /// EAGLE 3.1: feed `norm(h)` instead of `h` to the next draft step.
    #[serde(default)]
    pub norm_output: bool,
    /// vLLM flag: the residual is `hidden_norm(g)` instead of `g`.
    #[serde(default)]
    pub norm_before_residual: bool,
    #[serde(default)]
    pub eagle_config: Option<EagleExtras>,
    /// SharpDraft's record of the drafter's training length n0 (absent in published heads).
    #[serde(default)]
    pub training_length: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EagleExtras {
    #[serde(default)]
    pub eagle_aux_hidden_state_layer_ids: Option<Vec<usize>>,
}

fn one() -> usize {
    1
}

/// Tree (or chain) shape of one proposal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeShape {
    /// Expansion steps after the first layer (a chain of K tokens has depth K - 1).
    pub depth: usize,
    /// Children kept per node and frontier width; 1 means a chain.
    pub top_k: usize,
    /// Draft nodes kept after re-ranking (EAGLE's total_token - 1).
    pub total_tokens: usize,
}

/// The deepest tree a drafter expands: each step is one head pass over the frontier.
pub const MAX_TREE_DEPTH: usize = 64;
/// The most draft tokens one tree may keep (the target verifies them all in one pass).
pub const MAX_TREE_TOKENS: usize = 1024;

impl TreeShape {
    /// Checks the shape against a draft vocabulary of `draft_vocab` tokens: every option at least 1 (depth
    /// at least 0), top-k at most the vocabulary, and bounds that keep one tree's passes and cache rows
    /// small. Errors name the command-line option.
    pub fn validate(&self, draft_vocab: usize) -> Result<()> {
        let invalid = |option: &str, value: usize, reason: String| DraftError::InvalidOption {
            option: option.into(),
            value: value.to_string(),
            reason,
        };
        if self.top_k == 0 || self.top_k > draft_vocab.min(MAX_TREE_TOKENS) {
            return Err(invalid(
                "--tree-topk",
                self.top_k,
                format!(
                    "must lie in 1..={} (the draft vocabulary has {draft_vocab} tokens)",
                    draft_vocab.min(MAX_TREE_TOKENS)
                ),
            ));
        }
        if self.depth > MAX_TREE_DEPTH {
            return Err(invalid(
                "--tree-depth",
                self.depth,
                format!("must lie in 1..={MAX_TREE_DEPTH}"),
            ));
        }
        let reachable = self.top_k + self.depth * self.top_k * self.top_k;
        if self.total_tokens == 0 || self.total_tokens > reachable.min(MAX_TREE_TOKENS) {
            return Err(invalid(
                "--tree-tokens",
                self.total_tokens,
                format!(
                    "must lie in 1..={} (a tree of depth {} and top-k {} holds at most {reachable} nodes; one verification pass at most {MAX_TREE_TOKENS})",
                    reachable.min(MAX_TREE_TOKENS),
                    self.depth,
                    self.top_k
                ),
            ));
        }
        Ok(())
    }

    pub fn chain(len: usize) -> Self {
        Self {
            depth: len.saturating_sub(1),
            top_k: 1,
            total_tokens: len,
        }
    }
}

struct Layer {
    hidden_norm: RmsNorm,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// The trained part: weights and the forward pass of one EAGLE-3 layer.
pub struct Eagle3Head {
    pub config: Eagle3Config,
    /// config.json as read, so that saving keeps every key (published or not).
    raw_config: serde_json::Value,
    /// The head's weights (trainable when loaded for training).
    pub vars: nn::VarStore,
    fc: Linear,
    fc_norm: Vec<RmsNorm>,
    layer: Layer,
    norm: RmsNorm,
    lm_head: Linear,
    /// `[draft_vocab]` on the CPU: target id = draft id + d2t[draft id].
    d2t: Vec<i64>,
    rope: Rope,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    /// SharpDraft scaling of the layer's queries while drafting (training runs within n0, unscaled).
    query_scaling: QueryScaling,
}

pub struct Eagle3Drafter {
    pub head: Eagle3Head,
    taps: Vec<Tap>,
    shape: TreeShape,
    sampling: Sampling,
    cache: KvCache,
    /// Target features `[m, 3 Ht]` of committed tokens whose pairs are not fed yet.
    pending: Option<Tensor>,
    forward_seconds: std::cell::Cell<f64>,
}

fn checkpoint_error(path: &Path, reason: impl Into<String>) -> DraftError {
    DraftError::Checkpoint {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

impl Eagle3Drafter {
    /// Loads a head in the published layout (config.json + model.safetensors; `midlayer.` or `layers.0.`)
    /// for `target`.
    pub fn load(
        dir: &Path,
        target: &Transformer,
        shape: TreeShape,
        sampling: Sampling,
        capacity: i64,
    ) -> Result<Self> {
        let (head, taps) = Eagle3Head::load(dir, target, false)?;
        shape.validate(head.d2t.len())?;
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
        self.head
            .config
            .training_length
            .unwrap_or(self.head.config.max_position_embeddings)
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
        let _guard = tch::no_grad_guard();
        let device = target.device();
        let count = tokens.len() as i64;
        if features.size()[0] != count {
            return Err(DraftError::Mismatch(format!(
                "{count} tokens for {} feature rows",
                features.size()[0]
            )));
        }
        let mut start = 0;
        while start < count {
            let rows = chunk.min(count - start);
            let fed = self.cache.len();
            let ids = Tensor::from_slice(&tokens[start as usize..(start + rows) as usize]);
            let embeddings = target.embed(&ids.to_device(device));
            let positions = Tensor::arange_start(fed, fed + rows, (Kind::Int64, device));
            let fused = self
                .head
                .fuse(&features.narrow(0, start, rows).to_kind(target.kind()));
            let _ = self.head.forward(
                &embeddings,
                &fused,
                &positions,
                &AttentionMask::Causal,
                &mut self.cache,
                Some(&mut *observer),
            )?;
            start += rows;
        }
        Ok(())
    }
}

impl Eagle3Head {
    /// Loads the head's weights; `trainable` makes every weight take gradients (training). Returns the
    /// target taps the head reads.
    pub fn load(dir: &Path, target: &Transformer, trainable: bool) -> Result<(Self, Vec<Tap>)> {
        crate::checkpoint_kind::expect_kind(dir, "eagle3")?;
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .map_err(|e| checkpoint_error(&config_path, e.to_string()))?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let config: Eagle3Config = serde_path_to_error::deserialize(de)
            .map_err(|e| checkpoint_error(&config_path, format!("{}: {}", e.path(), e.inner())))?;
        let t = &target.config;
        if config.num_hidden_layers != 1 {
            return Err(checkpoint_error(
                &config_path,
                format!(
                    "num_hidden_layers = {}: an EAGLE-3 head has one layer",
                    config.num_hidden_layers
                ),
            ));
        }
        let target_hidden = config.target_hidden_size.unwrap_or(config.hidden_size);
        if target_hidden != t.hidden_size {
            return Err(DraftError::Mismatch(format!(
                "EAGLE-3 target_hidden_size {target_hidden} but the target's hidden_size is {}",
                t.hidden_size
            )));
        }
        if config.hidden_size != t.hidden_size {
            return Err(DraftError::Mismatch(format!(
                "EAGLE-3 hidden_size {} must equal the target's {} (it shares the embedding)",
                config.hidden_size, t.hidden_size
            )));
        }
        if config.vocab_size != t.vocab_size {
            return Err(DraftError::Mismatch(format!(
                "EAGLE-3 vocab_size {} differs from the target's {}",
                config.vocab_size, t.vocab_size
            )));
        }
        let layers = t.num_layers;
        let ids = config
            .eagle_config
            .as_ref()
            .and_then(|e| e.eagle_aux_hidden_state_layer_ids.clone())
            .unwrap_or_else(|| vec![2.min(layers), layers / 2, layers.saturating_sub(3)]);
        if ids.len() != 3 || ids.iter().any(|&i| i > layers) {
            return Err(DraftError::Mismatch(format!(
                "EAGLE-3 capture layers {ids:?} do not fit a {layers}-layer target"
            )));
        }
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads.unwrap_or(heads);
        let head_dim = config.head_dim.unwrap_or(config.hidden_size / heads);
        let hidden = config.hidden_size;
        let draft_vocab = config.draft_vocab_size.unwrap_or(config.vocab_size);
        let device = target.device();
        let mut vars = nn::VarStore::new(device);
        let root = vars.root();
        let m = &root / "midlayer";
        let a = &m / "self_attn";
        let mlp = &m / "mlp";
        let eps = config.rms_norm_eps;
        let t = trainable;
        let layer = Layer {
            hidden_norm: RmsNorm::with_grad(&m / "hidden_norm", hidden, eps, t),
            input_layernorm: RmsNorm::with_grad(&m / "input_layernorm", hidden, eps, t),
            post_attention_layernorm: RmsNorm::with_grad(
                &m / "post_attention_layernorm",
                hidden,
                eps,
                t,
            ),
            q_proj: Linear::with_grad(&a / "q_proj", 2 * hidden, heads * head_dim, false, t),
            k_proj: Linear::with_grad(&a / "k_proj", 2 * hidden, kv_heads * head_dim, false, t),
            v_proj: Linear::with_grad(&a / "v_proj", 2 * hidden, kv_heads * head_dim, false, t),
            o_proj: Linear::with_grad(&a / "o_proj", heads * head_dim, hidden, false, t),
            gate_proj: Linear::with_grad(
                &mlp / "gate_proj",
                hidden,
                config.intermediate_size,
                false,
                t,
            ),
            up_proj: Linear::with_grad(
                &mlp / "up_proj",
                hidden,
                config.intermediate_size,
                false,
                t,
            ),
            down_proj: Linear::with_grad(
                &mlp / "down_proj",
                config.intermediate_size,
                hidden,
                false,
                t,
            ),
        };
        let fc = Linear::with_grad(&root / "fc", 3 * target_hidden, hidden, false, t);
        let fc_norm = if config.fc_norm {
            (0..3)
                .map(|i| RmsNorm::with_grad(&root / "fc_norm" / i, target_hidden, eps, t))
                .collect()
        } else {
            Vec::new()
        };
        let norm = RmsNorm::with_grad(&root / "norm", hidden, eps, t);
        let lm_head = Linear::with_grad(&root / "lm_head", hidden, draft_vocab, false, t);
        vars.set_kind(target.kind());
        let route = |name: &str| -> Route {
            let name = name
                .strip_prefix("layers.0.")
                .map(|rest| format!("midlayer.{rest}"))
                .unwrap_or_else(|| name.to_string());
            match name.as_str() {
                "d2t" => Route::Side,
                // t2d only masks training targets; the embedding is the target's.
                "t2d" | "embed_tokens.weight" => Route::Ignore,
                _ => Route::Var(name),
            }
        };
        let files = checkpoint_files(dir)?;
        let side = load_strict(&mut vars, &files, route)?;
        let d2t = match side.get("d2t") {
            Some(d2t) if d2t.size() == [draft_vocab] => Vec::<i64>::try_from(d2t.to_kind(Kind::Int64))?,
            Some(d2t) => return Err(checkpoint_error(dir, format!("tensor d2t has shape {:?}, [{draft_vocab}] expected", d2t.size()))),
            None if draft_vocab == config.vocab_size => vec![0; draft_vocab as usize],
            None => return Err(checkpoint_error(dir, format!("missing tensor d2t [{draft_vocab}] (draft_vocab_size {draft_vocab} < vocab_size {})", config.vocab_size))),
        };
        if let Some((i, _)) = d2t
            .iter()
            .enumerate()
            .find(|(i, off)| *i as i64 + **off < 0 || *i as i64 + **off >= config.vocab_size)
        {
            return Err(checkpoint_error(
                dir,
                format!("d2t[{i}] maps outside the target vocabulary"),
            ));
        }
        let scaling = config
            .rope_scaling
            .as_ref()
            .filter(|s| s.rope_type == "llama3")
            .map(|s| sharpdraft_model::config::Llama3Scaling {
                factor: s.factor.unwrap_or(1.0),
                low_freq_factor: s.low_freq_factor.unwrap_or(1.0),
                high_freq_factor: s.high_freq_factor.unwrap_or(4.0),
                original_max_position_embeddings: s
                    .original_max_position_embeddings
                    .unwrap_or(config.max_position_embeddings as f64),
            });
        let rope = Rope::with_base(
            head_dim,
            config.rope_theta.unwrap_or(10_000.0),
            scaling,
            device,
        );
        let raw_config: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| checkpoint_error(&config_path, e.to_string()))?;
        let head = Eagle3Head {
            config,
            raw_config,
            vars,
            fc,
            fc_norm,
            layer,
            norm,
            lm_head,
            d2t,
            rope,
            heads,
            kv_heads,
            head_dim,
            query_scaling: QueryScaling::off(),
        };
        Ok((head, ids.into_iter().map(Tap::LayerInput).collect()))
    }

    /// `[T, 3 Ht]` target features -> `[T, H]`.
    fn fuse(&self, features: &Tensor) -> Tensor {
        if self.fc_norm.is_empty() {
            return self.fc.forward(features);
        }
        let parts = features.chunk(3, -1);
        let normed: Vec<Tensor> = parts
            .iter()
            .zip(&self.fc_norm)
            .map(|(p, n)| n.forward(p))
            .collect();
        self.fc.forward(&Tensor::cat(&normed, -1))
    }

    /// First half of the layer, shared by drafting and training: the residual, and RoPE'd queries
    /// `[H, T, D]`, keys and values `[Hkv, T, D]` of `T` (embedding, hidden) pairs at `positions`.
    fn project(
        &self,
        embeddings: &Tensor,
        hidden: &Tensor,
        positions: &Tensor,
    ) -> (Tensor, Tensor, Tensor, Tensor) {
        let l = &self.layer;
        let rows = embeddings.size()[0];
        let residual = if self.config.norm_before_residual {
            l.hidden_norm.forward(hidden)
        } else {
            hidden.shallow_clone()
        };
        let x = Tensor::cat(
            &[
                l.input_layernorm.forward(embeddings),
                l.hidden_norm.forward(hidden),
            ],
            -1,
        );
        let (cos, sin) = self.rope.tables(positions, x.kind());
        let q = rope::apply(
            &l.q_proj.forward(&x).view([rows, self.heads, self.head_dim]),
            &cos,
            &sin,
        )
        .permute([1, 0, 2]);
        let k = rope::apply(
            &l.k_proj
                .forward(&x)
                .view([rows, self.kv_heads, self.head_dim]),
            &cos,
            &sin,
        )
        .permute([1, 0, 2]);
        let v = l
            .v_proj
            .forward(&x)
            .view([rows, self.kv_heads, self.head_dim])
            .permute([1, 0, 2]);
        (residual, q, k, v)
    }

    /// Second half: attention over `keys`/`values` (`[Hkv, L, D]`, `visible` `[T, L]`), MLP, head. Returns the
    /// next-step hidden `[T, H]` and draft-vocab log-probabilities `[T, draft_vocab]` (f32).
    fn finish(
        &self,
        residual: Tensor,
        q: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        visible: Option<&Tensor>,
    ) -> (Tensor, Tensor) {
        let l = &self.layer;
        let attn = l.o_proj.forward(&attend(
            q,
            keys,
            values,
            visible,
            1.0 / (self.head_dim as f64).sqrt(),
        ));
        let h = residual + attn;
        let post = l.post_attention_layernorm.forward(&h);
        let h = &h
            + l.down_proj
                .forward(&(l.gate_proj.forward(&post).silu() * l.up_proj.forward(&post)));
        let normed = self.norm.forward(&h);
        let log_probs = self
            .lm_head
            .forward(&normed)
            .to_kind(Kind::Float)
            .log_softmax(-1, Kind::Float);
        (if self.config.norm_output { normed } else { h }, log_probs)
    }

    /// One pass of the layer over `T` rows against the drafter's cache; the attention (after any query
    /// scaling) is offered to `observer`.
    fn forward(
        &self,
        embeddings: &Tensor,
        hidden: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
        cache: &mut KvCache,
        observer: Option<&mut dyn AttentionObserver>,
    ) -> Result<(Tensor, Tensor)> {
        let rows = embeddings.size()[0];
        cache.reserve(rows)?;
        let past = cache.len();
        let (residual, q, k, v) = self.project(embeddings, hidden, positions);
        let (keys, values) = cache.write(0, &k, &v)?;
        let visible = mask.materialize(past, rows, embeddings.device())?;
        // n_i = stable context + depth + 1 in a tree: the row-sum of its mask (derivation.md §7).
        let mut q = q;
        if !self.query_scaling.is_off() {
            self.query_scaling
                .apply(&mut q, 0, &mask.visible_counts(past, rows)?)?;
        }
        if let Some(observer) = observer.filter(|o| o.wants(0)) {
            let softmax_scale = 1.0 / (self.head_dim as f64).sqrt();
            let view = AttentionView {
                queries: &q,
                keys: &keys,
                visible: visible.as_ref(),
                past,
                softmax_scale,
            };
            observer.observe(0, &view);
        }
        let out = self.finish(residual, &q, &keys, &values, visible.as_ref());
        cache.advance(rows);
        Ok(out)
    }

    fn to_target(&self, draft_id: i64) -> i64 {
        draft_id + self.d2t[draft_id as usize]
    }

    /// EAGLE-3's training-time test (drafters.md §2.4) on one window, as a differentiable scalar.
    ///
    /// `embeddings` `[T, H]` (the target's embedding of `tokens`), `features` `[T, 3 Ht]` (the target's taps
    /// at the same rows), `targets`: per target row r, the target's distribution over the draft vocabulary
    /// for token r + 1 as `(draft ids [T, K], probabilities [T, K])` (zero probability = unused slot).
    ///
    /// Step 0 feeds pairs i = (fc(h_i), e(x_{i+1})) at position i. Step j > 0 feeds, for the same i, the
    /// draft's own step j - 1 output with e(x_{i+1+j}) at position i + j: exactly what depth j of a draft
    /// tree sees. Its query attends to step 0's keys of pairs 0..=i (causal) and to its own keys of steps
    /// 1..=j (the diagonal), as a tree node attends to the stable context and its ancestors. Step j's loss
    /// is the soft cross-entropy against the target at row i + 1 + j, weighted `decay^j`.
    pub fn ttt_loss(
        &self,
        embeddings: &Tensor,
        features: &Tensor,
        targets: (&Tensor, &Tensor),
        steps: usize,
        decay: f64,
    ) -> Tensor {
        let t = embeddings.size()[0];
        let device = embeddings.device();
        let pairs = t - 1;
        let mut hidden = self.fuse(&features.narrow(0, 0, pairs));
        let (mut keys, mut values): (Vec<Tensor>, Vec<Tensor>) = (Vec::new(), Vec::new());
        let mut total = Tensor::zeros([], (Kind::Float, device));
        let mut weight_sum = 0.0;
        for j in 0..steps.min(pairs as usize - 1) as i64 {
            let n = pairs - j;
            let hidden_j = hidden.narrow(0, 0, n);
            let emb = embeddings.narrow(0, 1 + j, n);
            let positions = Tensor::arange_start(j, j + n, (Kind::Int64, device));
            let (residual, mut q, k, v) = self.project(&emb, &hidden_j, &positions);
            if !self.query_scaling.is_off() {
                // Row r of step j sees the r + 1 causal pairs and its j earlier steps.
                let counts: Vec<i64> = (0..n).map(|r| r + 1 + j).collect();
                q = self
                    .query_scaling
                    .scaled(&q, 0, &counts)
                    .expect("one row count per query row");
            }
            keys.push(k);
            values.push(v);
            // [causal over step 0 | identity for each later step], every block cut to the n live pairs.
            let rows = Tensor::arange(n, (Kind::Int64, device));
            let causal = rows.unsqueeze(1).ge_tensor(&rows.unsqueeze(0));
            let eye = rows.unsqueeze(1).eq_tensor(&rows.unsqueeze(0));
            let mut blocks = vec![causal];
            blocks.extend((1..=j).map(|_| eye.shallow_clone()));
            let mask = Tensor::cat(&blocks, 1);
            let all_keys = Tensor::cat(
                &keys.iter().map(|k| k.narrow(1, 0, n)).collect::<Vec<_>>(),
                1,
            );
            let all_values = Tensor::cat(
                &values.iter().map(|v| v.narrow(1, 0, n)).collect::<Vec<_>>(),
                1,
            );
            let (next_hidden, log_q) =
                self.finish(residual, &q, &all_keys, &all_values, Some(&mask)); // log_q [n, dv]
            let (ids, probs) = (targets.0.narrow(0, 1 + j, n), targets.1.narrow(0, 1 + j, n));
            let step_loss = -(log_q.gather(1, &ids, false) * probs)
                .sum_dim_intlist(&[1i64][..], false, Kind::Float)
                .mean(Kind::Float);
            let w = decay.powi(j as i32);
            total = total + step_loss * w;
            weight_sum += w;
            hidden = next_hidden;
        }
        total / weight_sum.max(1e-9)
    }

    pub fn query_heads(&self) -> usize {
        self.heads as usize
    }

    pub fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.query_scaling = scaling;
    }

    /// Target id -> draft id (or -1 when the draft vocabulary does not hold it), `[vocab]` i64.
    pub fn target_to_draft(&self, vocab: i64) -> Tensor {
        let mut map = vec![-1i64; vocab as usize];
        for (draft_id, offset) in self.d2t.iter().enumerate() {
            map[(draft_id as i64 + offset) as usize] = draft_id as i64;
        }
        Tensor::from_slice(&map)
    }

    /// Writes this head in the published layout (config.json + model.safetensors with d2t and t2d),
    /// recording `training_length`.
    pub fn save(&self, dir: &Path, training_length: i64) -> Result<()> {
        let vocab = self.config.vocab_size;
        let t2d: Vec<u8> = Vec::<i64>::try_from(self.target_to_draft(vocab))
            .unwrap_or_default()
            .iter()
            .map(|&d| u8::from(d >= 0))
            .collect();
        let extra: Vec<RawTensor> = vec![
            (
                "d2t".into(),
                safetensors::Dtype::I64,
                vec![self.d2t.len()],
                self.d2t.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            ("t2d".into(), safetensors::Dtype::BOOL, vec![t2d.len()], t2d),
        ];
        save_trained(
            dir,
            &self.raw_config,
            "torch_dtype",
            training_length,
            &self.vars,
            &extra,
        )
    }

    /// Full-vocabulary probabilities from draft log-probabilities `[draft_vocab]`, with the sampling
    /// filters applied (zero outside the draft vocabulary).
    fn full_vocab_probs(&self, log_probs: &Tensor, vocab: i64, sampling: &Sampling) -> Tensor {
        let device = log_probs.device();
        let index = Tensor::from_slice(&self.d2t).to_device(device)
            + Tensor::arange(self.d2t.len() as i64, (Kind::Int64, device));
        let full = Tensor::full([vocab], f64::NEG_INFINITY, (Kind::Float, device))
            .scatter(0, &index, log_probs);
        sampling.probabilities(&full)
    }
}

/// One node of the growing draft tree.
struct Node {
    token: i64,
    parent: Option<usize>,
    score: f64,
    /// Cache row of this node once it has been fed (frontier nodes only).
    row: Option<i64>,
}

impl Drafter for Eagle3Drafter {
    fn method(&self) -> &'static str {
        "eagle3"
    }

    fn target_taps(&self) -> Vec<Tap> {
        self.taps.clone()
    }

    fn prefill(&mut self, _ctx: &DraftContext<'_>, target_hidden: Option<&Tensor>) -> Result<()> {
        self.pending = target_hidden.map(Tensor::shallow_clone);
        Ok(())
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, sampler: &mut Sampler) -> Result<Proposal> {
        let _guard = tch::no_grad_guard();
        let device = ctx.target.device();
        // 1. Catch up: feed the pairs of newly committed tokens into the stable cache.
        let features = self.pending.take().ok_or_else(|| {
            DraftError::Mismatch(
                "EAGLE-3 has no target features to pair (prefill not called?)".into(),
            )
        })?;
        let fed = self.cache.len();
        let count = features.size()[0];
        let tokens = &ctx.committed[fed as usize + 1..fed as usize + 1 + count as usize];
        let embeddings = ctx
            .target
            .embed(&Tensor::from_slice(tokens).to_device(device));
        let positions = Tensor::arange_start(fed, fed + count, (Kind::Int64, device));
        let head = &self.head;
        let fused = head.fuse(&features.to_kind(ctx.target.kind()));
        let timer = std::time::Instant::now();
        let (hidden, log_probs) = head.forward(
            &embeddings,
            &fused,
            &positions,
            &AttentionMask::Causal,
            &mut self.cache,
            None,
        )?;
        self.forward_seconds
            .set(self.forward_seconds.get() + timer.elapsed().as_secs_f64());
        let stable = self.cache.len();
        let last_hidden = hidden.narrow(0, count - 1, 1);
        let last_log_probs = log_probs.get(count - 1);

        // 2. Expand. Chains with sampling draw from q; everything else is deterministic top-k.
        let vocab = ctx.target.config.vocab_size;
        let sampled_chain = !ctx.greedy && self.shape.top_k == 1;
        let mut nodes: Vec<Node> = Vec::new();
        let mut probs = Vec::new();
        let mut frontier: Vec<usize> = Vec::new();
        let sampling = self.sampling;
        let pick = |this: &Eagle3Head,
                    log_probs: &Tensor,
                    k: i64,
                    sampler: &mut Sampler,
                    probs: &mut Vec<Tensor>|
         -> Vec<(i64, f64)> {
            if sampled_chain {
                let q = this.full_vocab_probs(log_probs, vocab, &sampling);
                let token = sampler.sample_from(&q);
                let p = q.double_value(&[token]);
                probs.push(q);
                vec![(token, p.ln())]
            } else {
                let (values, indices) = log_probs.topk(k, -1, true, true);
                let values =
                    Vec::<f32>::try_from(values.to_device(Device::Cpu)).unwrap_or_default();
                let indices =
                    Vec::<i64>::try_from(indices.to_device(Device::Cpu)).unwrap_or_default();
                indices
                    .into_iter()
                    .zip(values)
                    .map(|(d, v)| (this.to_target(d), v as f64))
                    .collect()
            }
        };
        let k = self.shape.top_k as i64;
        for (token, score) in pick(head, &last_log_probs, k, sampler, &mut probs) {
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
            // Each frontier node sees the stable context, its fed ancestors and itself.
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
            let mask = AttentionMask::Rows(
                Tensor::from_slice(&visible)
                    .view([rows, first_row + rows])
                    .to_device(device),
            );
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
            )?;
            self.forward_seconds
                .set(self.forward_seconds.get() + timer.elapsed().as_secs_f64());
            for (r, &node) in frontier.iter().enumerate() {
                nodes[node].row = Some(first_row + r as i64);
            }
            // Children of every frontier node; the best `top_k` by cumulative score form the next frontier.
            let mut children: Vec<(usize, i64, f64, usize)> = Vec::new();
            if sampled_chain {
                for (r, &node) in frontier.iter().enumerate() {
                    for (token, logp) in
                        pick(head, &log_probs.get(r as i64), k, sampler, &mut probs)
                    {
                        children.push((node, token, nodes[node].score + logp, r));
                    }
                }
            } else {
                // One top-k over all frontier rows and one copy to the host: [rows, k] each.
                let (values, indices) = log_probs.topk(k, -1, true, true);
                let values = Vec::<f32>::try_from(values.flatten(0, -1).to_device(Device::Cpu))?;
                let indices = Vec::<i64>::try_from(indices.flatten(0, -1).to_device(Device::Cpu))?;
                for (r, &node) in frontier.iter().enumerate() {
                    for c in 0..k as usize {
                        let i = r * k as usize + c;
                        children.push((
                            node,
                            head.to_target(indices[i]),
                            nodes[node].score + values[i] as f64,
                            r,
                        ));
                    }
                }
            }
            children.sort_by(|a, b| b.2.total_cmp(&a.2));
            let mut next = Vec::new();
            let mut next_rows = Vec::new();
            for (i, (parent, token, score, r)) in children.into_iter().enumerate() {
                nodes.push(Node {
                    token,
                    parent: Some(parent),
                    score,
                    row: None,
                });
                if i < self.shape.top_k {
                    next.push(nodes.len() - 1);
                    next_rows.push(r as i64);
                }
            }
            frontier_hidden =
                hidden.index_select(0, &Tensor::from_slice(&next_rows).to_device(device));
            frontier = next;
        }
        drop(speculation);

        // 3. Re-rank: the `total_tokens` best nodes, closed under ancestors, in creation (parents-first) order.
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| nodes[b].score.total_cmp(&nodes[a].score));
        let mut keep = vec![false; nodes.len()];
        let mut kept = 0;
        for &n in &order {
            if kept >= self.shape.total_tokens {
                break;
            }
            let mut chain = vec![n];
            let mut ancestor = nodes[n].parent;
            while let Some(a) = ancestor {
                chain.push(a);
                ancestor = nodes[a].parent;
            }
            let new: Vec<usize> = chain.into_iter().filter(|&c| !keep[c]).collect();
            if kept + new.len() > self.shape.total_tokens {
                continue;
            }
            kept += new.len();
            new.into_iter().for_each(|c| keep[c] = true);
        }
        let index_of: Vec<Option<usize>> = keep
            .iter()
            .scan(0, |next, &k| {
                Some(k.then(|| {
                    *next += 1;
                    *next - 1
                }))
            })
            .collect();
        let kept_nodes: Vec<usize> = (0..nodes.len()).filter(|&i| keep[i]).collect();
        let proposal = Proposal {
            tokens: kept_nodes.iter().map(|&i| nodes[i].token).collect(),
            parents: kept_nodes
                .iter()
                .map(|&i| nodes[i].parent.and_then(|p| index_of[p]))
                .collect(),
            draft_probs: if sampled_chain {
                Some(Tensor::stack(&probs[..kept_nodes.len()], 0))
            } else {
                None
            },
        };
        Ok(proposal)
    }

    fn observe(&mut self, _ctx: &DraftContext<'_>, feedback: &Feedback<'_>) -> Result<()> {
        let hidden = feedback.target_hidden.ok_or_else(|| {
            DraftError::Mismatch("EAGLE-3 needs the target's hidden states of verified rows".into())
        })?;
        self.pending = Some(hidden.shallow_clone());
        Ok(())
    }

    fn query_layout(&self) -> (usize, usize) {
        (1, self.head.heads as usize)
    }

    fn training_length(&self) -> Option<i64> {
        Some(Eagle3Drafter::training_length(self))
    }

    fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.head.query_scaling = scaling;
    }

    fn cache_bytes(&self) -> usize {
        self.cache.bytes_allocated()
    }

    fn forward_seconds(&self) -> f64 {
        self.forward_seconds.get()
    }
}

/// Shape options of [`write_random_head`].
pub struct RandomHeadOptions {
    /// EAGLE 3.1 flags.
    pub eagle31: bool,
    /// Name the block `layers.0.` instead of `midlayer.`.
    pub layers0_prefix: bool,
    /// Reduced draft vocabulary (target ids 0..vocab with every 4th id dropped) or the full one.
    pub reduced_vocab: bool,
    /// An explicit draft vocabulary (sorted target ids), overriding `reduced_vocab` (training picks the
    /// most frequent tokens).
    pub used_tokens: Option<Vec<i64>>,
    /// Target layers whose inputs are captured; default (2, L/2, L - 3), or (0, L/2, L) for targets of
    /// fewer than 4 layers.
    pub aux_layers: Option<Vec<usize>>,
    /// Width of the head's MLP; default 2H.
    pub intermediate_size: Option<i64>,
    /// Tensors that replace the random ones of the same name (a warm start); shapes must match.
    pub initial: Vec<(String, Tensor)>,
    pub seed: i64,
}

impl Default for RandomHeadOptions {
    fn default() -> Self {
        Self {
            eagle31: false,
            layers0_prefix: false,
            reduced_vocab: true,
            used_tokens: None,
            aux_layers: None,
            intermediate_size: None,
            initial: Vec::new(),
            seed: 0,
        }
    }
}

/// Writes a randomly initialised EAGLE-3 head for `target` in the published checkpoint layout
/// (config.json + model.safetensors with `fc`, `midlayer.*`, `norm`, `lm_head`, `d2t`, `t2d`). It drafts
/// badly but exercises every code path; tests and smoke runs use it, and `train` starts from it.
pub fn write_random_head(
    dir: &Path,
    target: &Transformer,
    options: &RandomHeadOptions,
) -> Result<()> {
    let c = &target.config;
    let (h, vocab) = (c.hidden_size, c.vocab_size);
    let (heads, kv_heads, head_dim) = (c.num_heads, c.num_kv_heads, c.head_dim);
    let inter = options.intermediate_size.unwrap_or(2 * c.hidden_size);
    let mut used: Vec<i64> = match &options.used_tokens {
        Some(used) => used.clone(),
        None if options.reduced_vocab => (0..vocab).filter(|i| i % 4 != 3).collect(),
        None => (0..vocab).collect(),
    };
    used.sort_unstable();
    used.dedup();
    let draft_vocab = used.len() as i64;
    let layers = c.num_layers;
    let aux = options.aux_layers.clone().unwrap_or_else(|| {
        if layers >= 4 {
            vec![2, layers / 2, layers - 3]
        } else {
            vec![0, layers / 2, layers]
        }
    });
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": 1,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": false, "torch_dtype": "float32",
        "vocab_size": vocab, "draft_vocab_size": draft_vocab,
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
        "fc_norm": options.eagle31, "norm_output": options.eagle31,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux},
    });
    write_config(dir, &config).map_err(|e| checkpoint_error(dir, e))?;
    tch::manual_seed(options.seed);
    let block = if options.layers0_prefix {
        "layers.0"
    } else {
        "midlayer"
    };
    let (random, norm) = (random_weight, random_norm);
    let mut tensors: Vec<(String, Tensor)> = vec![
        ("fc.weight".into(), random(&[h, 3 * h], 0.1)),
        (format!("{block}.hidden_norm.weight"), norm(h)),
        (format!("{block}.input_layernorm.weight"), norm(h)),
        (format!("{block}.post_attention_layernorm.weight"), norm(h)),
        (
            format!("{block}.self_attn.q_proj.weight"),
            random(&[heads * head_dim, 2 * h], 0.1),
        ),
        (
            format!("{block}.self_attn.k_proj.weight"),
            random(&[kv_heads * head_dim, 2 * h], 0.1),
        ),
        (
            format!("{block}.self_attn.v_proj.weight"),
            random(&[kv_heads * head_dim, 2 * h], 0.1),
        ),
        (
            format!("{block}.self_attn.o_proj.weight"),
            random(&[h, heads * head_dim], 0.1),
        ),
        (
            format!("{block}.mlp.gate_proj.weight"),
            random(&[inter, h], 0.1),
        ),
        (
            format!("{block}.mlp.up_proj.weight"),
            random(&[inter, h], 0.1),
        ),
        (
            format!("{block}.mlp.down_proj.weight"),
            random(&[h, inter], 0.1),
        ),
        ("norm.weight".into(), norm(h)),
        ("lm_head.weight".into(), random(&[draft_vocab, h], 0.3)),
    ];
    if options.eagle31 {
        for i in 0..3 {
            tensors.push((format!("fc_norm.{i}.weight"), norm(h)));
        }
    }
    for (name, initial) in &options.initial {
        let slot = tensors
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| checkpoint_error(dir, format!("no head tensor {name} to initialise")))?;
        if slot.1.size() != initial.size() {
            return Err(checkpoint_error(
                dir,
                format!(
                    "{name}: initial shape {:?}, the head needs {:?}",
                    initial.size(),
                    slot.1.size()
                ),
            ));
        }
        slot.1 = initial.to_kind(Kind::Float).to_device(tch::Device::Cpu);
    }
    let d2t: Vec<i64> = used
        .iter()
        .enumerate()
        .map(|(i, &t)| t - i as i64)
        .collect();
    let t2d: Vec<u8> = (0..vocab)
        .map(|t| u8::from(used.binary_search(&t).is_ok()))
        .collect();
    let mut extra: Vec<RawTensor> = Vec::new();
    if options.reduced_vocab || options.used_tokens.is_some() {
        extra.push((
            "d2t".into(),
            safetensors::Dtype::I64,
            vec![d2t.len()],
            d2t.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
        extra.push(("t2d".into(), safetensors::Dtype::BOOL, vec![t2d.len()], t2d));
    }
    write_f32_safetensors(&dir.join("model.safetensors"), &tensors, &extra)
        .map_err(|e| checkpoint_error(dir, e))
}
