//! Decoder-only transformer for the llama, qwen2 and qwen3 families (one module with three flags, not
//! three forks): pre-norm blocks of GQA self-attention with RoPE and a SwiGLU MLP. Module paths spell
//! the HF tensor names (`model.layers.3.self_attn.q_proj.weight`).
//!
//! Batch size is one sequence (speculative decoding verifies one sequence at a time); shapes below use
//! `T` for the new rows of a forward pass, `L` for all visible keys, `H`/`Hkv` for query/KV heads, `D` for
//! the head dimension.

use crate::attention::attend_visible;
use crate::config::ModelConfig;
use crate::cpu::few_rows;
use crate::error::{ModelError, Result};
use crate::kv_cache::KvCache;
use crate::layers::{declare_frozen, Linear, QkvProjection, QkvShape, RmsNorm, SwiGlu, Trainable};
use crate::mask::KeySelection;
use crate::mask::{AttentionMask, Visibility};
use crate::query_scaling::{PassFactors, QueryScaling};
use crate::rope::Rope;
use crate::time_split::{self, Step};
use std::ops::Range;
use tch::{nn, Device, Kind, Tensor};

/// A hidden state to return from a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tap {
    /// The residual stream entering layer i (i = num_layers is the input of the final norm).
    LayerInput(usize),
    /// The residual stream leaving layer i (equals `LayerInput(i + 1)`).
    LayerOutput(usize),
}

/// Which rows need logits: verification needs all, prefill only the last, feature extraction none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    All,
    Last,
    None,
}

/// One layer's attention, offered to an observer before the softmax. Nothing is kept: the observer asks
/// for logit tiles and reduces them itself.
pub struct AttentionView<'a> {
    /// `[H, T, D]`, after q_norm, RoPE and any query scale.
    pub queries: &'a Tensor,
    /// `[Hkv, L, D]`.
    pub keys: &'a Tensor,
    /// `[T, L]` visibility, `None` when every row sees every key.
    pub visible: Option<&'a Tensor>,
    pub past: i64,
    pub softmax_scale: f64,
}

impl AttentionView<'_> {
    /// Softmax inputs `q.k * scale` for `rows` x `keys`, `[H, rows, keys]` in f32, `-inf` where invisible.
    pub fn logits(&self, rows: Range<i64>, keys: Range<i64>) -> Tensor {
        let heads = self.queries.size()[0];
        let group = heads / self.keys.size()[0];
        let q = self
            .queries
            .narrow(1, rows.start, rows.end - rows.start)
            .to_kind(Kind::Float);
        let k = self
            .keys
            .narrow(1, keys.start, keys.end - keys.start)
            .to_kind(Kind::Float);
        let k = k.repeat_interleave_self_int(group, 0, None); // [H, keys, D]
        let logits = q.matmul(&k.transpose(1, 2)) * self.softmax_scale;
        match self.visible {
            None => logits,
            Some(mask) => {
                let tile = mask.narrow(0, rows.start, rows.end - rows.start).narrow(
                    1,
                    keys.start,
                    keys.end - keys.start,
                );
                logits.masked_fill(&tile.logical_not().unsqueeze(0), f64::NEG_INFINITY)
            }
        }
    }
}

pub trait AttentionObserver {
    fn wants(&self, layer: usize) -> bool;
    fn observe(&mut self, layer: usize, view: &AttentionView<'_>);
}

/// Everything a forward pass takes besides the cache.
pub struct ForwardInput<'a> {
    /// `[T]` token ids (i64).
    pub ids: &'a Tensor,
    /// `[T]` absolute positions (i64), usually `past..past + T`.
    pub positions: &'a Tensor,
    pub mask: &'a AttentionMask,
    pub logits: LogitRows,
    pub taps: &'a [Tap],
    pub observer: Option<&'a mut dyn AttentionObserver>,
}

impl<'a> ForwardInput<'a> {
    /// Causal rows with logits for all of them, no taps, no hooks.
    pub fn causal(ids: &'a Tensor, positions: &'a Tensor) -> Self {
        Self {
            ids,
            positions,
            mask: &AttentionMask::Causal,
            logits: LogitRows::All,
            taps: &[],
            observer: None,
        }
    }
}

pub struct ForwardOutput {
    /// `[T, vocab]` (or `[1, vocab]` for `LogitRows::Last`), f32.
    pub logits: Option<Tensor>,
    /// One `[T, hidden]` tensor per requested tap, in request order.
    pub hidden: Vec<Tensor>,
}

struct Attention {
    qkv: QkvProjection,
    o_proj: Linear,
}

struct Layer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: SwiGlu,
}

impl Layer {
    /// The layer's linear maps: attention projections and MLP.
    fn linears(&self) -> Vec<&Linear> {
        let mut out = self.self_attn.qkv.linears();
        out.push(&self.self_attn.o_proj);
        out.extend(self.mlp.linears());
        out
    }
}

pub struct Transformer {
    pub config: ModelConfig,
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    /// `None` when the LM head is tied to the embedding.
    lm_head: Option<Linear>,
    rope: Rope,
    device: Device,
    kind: Kind,
    /// SharpDraft scaling of every query row of every forward pass (drafters only; off by default).
    query_scaling: QueryScaling,
    /// The keys a drafter's rows may see (sliding window, retrieval); `None`: every key their mask allows.
    key_selection: Option<KeySelection>,
    /// [`Self::linear_weight_bytes`], counted at the first pass (after loading fixed the kind).
    linear_weight_bytes: std::sync::OnceLock<usize>,
    /// The tied LM head's blocks (the embedding's, as its GGUF file stores them: dtype `gguf`).
    tied_head_blocks: std::sync::OnceLock<crate::weight_blocks::WeightBlocks>,
}

impl Transformer {
    /// Declares every variable at its HF name under `root` (zero-filled; the loader fills them).
    pub fn new(root: &nn::Path, config: ModelConfig) -> Self {
        let c = &config;
        let model = root / "model";
        let hidden = c.hidden_size;
        let layers = (0..c.num_layers)
            .map(|i| {
                let p = &model / "layers" / i;
                let attn = &p / "self_attn";
                let mlp = &p / "mlp";
                let shape = QkvShape {
                    input: hidden,
                    heads: c.num_heads,
                    kv_heads: c.num_kv_heads,
                    head_dim: c.head_dim,
                    bias: c.qkv_bias,
                    qk_norm: c.qk_norm.then_some(c.rms_norm_eps),
                };
                Layer {
                    input_layernorm: RmsNorm::new(&p / "input_layernorm", hidden, c.rms_norm_eps),
                    self_attn: Attention {
                        qkv: QkvProjection::new(&attn, shape, Trainable::No),
                        o_proj: Linear::new(
                            &attn / "o_proj",
                            c.num_heads * c.head_dim,
                            hidden,
                            false,
                        ),
                    },
                    post_attention_layernorm: RmsNorm::new(
                        &p / "post_attention_layernorm",
                        hidden,
                        c.rms_norm_eps,
                    ),
                    mlp: SwiGlu::new(&mlp, hidden, c.intermediate_size, Trainable::No),
                }
            })
            .collect();
        Self {
            embed_tokens: declare_frozen(
                &(&model / "embed_tokens"),
                "weight",
                &[c.vocab_size, hidden],
            ),
            norm: RmsNorm::new(&model / "norm", hidden, c.rms_norm_eps),
            lm_head: (!c.tie_word_embeddings)
                .then(|| Linear::new(root / "lm_head", hidden, c.vocab_size, false)),
            rope: Rope::new(c, root.device()),
            layers,
            device: root.device(),
            kind: Kind::Float,
            query_scaling: QueryScaling::off(),
            key_selection: None,
            linear_weight_bytes: std::sync::OnceLock::new(),
            tied_head_blocks: std::sync::OnceLock::new(),
            config,
        }
    }

    /// Scales the queries of every later forward pass by `s(n_i)` (a drafter built on this model).
    pub fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.query_scaling = scaling;
    }

    pub fn query_scaling(&self) -> &QueryScaling {
        &self.query_scaling
    }

    /// Restricts every later pass's rows to their last `window` keys (a training-free long-context
    /// option for drafters; the cache still holds every key).
    pub fn set_key_window(&mut self, window: Option<i64>) {
        self.key_selection = window.map(KeySelection::window);
    }

    /// Restricts every later pass's rows to `selection` (a window and retrieved keys); `None`: all keys.
    pub fn set_key_selection(&mut self, selection: Option<KeySelection>) {
        self.key_selection = selection;
    }

    /// Records the kind the variables were converted to after loading.
    pub fn set_kind(&mut self, kind: Kind) {
        self.kind = kind;
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// An empty cache for this model.
    pub fn new_cache(&self, capacity: i64) -> KvCache {
        let c = &self.config;
        KvCache::new(
            c.num_layers,
            c.num_kv_heads,
            c.head_dim,
            capacity,
            self.kind,
            self.device,
        )
    }

    /// Bytes a pass of a few rows reads from [`Self::linears`] (their kind as loaded, or their blocks
    /// where they run as stored).
    pub fn linear_weight_bytes(&self) -> usize {
        *self.linear_weight_bytes.get_or_init(|| {
            (self.linears().iter())
                .map(|l| match l.blocks() {
                    Some(blocks) => blocks.bytes().len(),
                    None => l.weight.numel() * l.weight.kind().elt_size_in_bytes(),
                })
                .sum()
        })
    }

    /// Bytes a decode step reads of the weights: the linear maps (as their blocks where they run as
    /// stored) and the LM head, tied to the embedding or not.
    pub fn step_weight_bytes(&self) -> usize {
        let tied_head = match (&self.lm_head, self.tied_head_blocks.get()) {
            (Some(_), _) => 0,
            (None, Some(blocks)) => blocks.bytes().len(),
            (None, None) => {
                self.embed_tokens.numel() * self.embed_tokens.kind().elt_size_in_bytes()
            }
        };
        self.linear_weight_bytes() + tied_head
    }

    /// Whether some linear map or the LM head runs as its GGUF file stores it (dtype `gguf`).
    pub fn runs_as_stored(&self) -> bool {
        self.tied_head_blocks.get().is_some() || self.linears().iter().any(|l| l.blocks().is_some())
    }

    /// Runs every linear map, and the LM head, as its GGUF file stores it where `file` holds its
    /// blocks (dtype `gguf`); errors name a weight stored in a block type the kernel does not run.
    pub fn attach_blocks(&self, file: &crate::weight_blocks::BlocksFile) -> Result<()> {
        for linear in self.linears() {
            file.attach(linear)?;
        }
        if self.lm_head.is_none() {
            let size = self.embed_tokens.size();
            let name = "model.embed_tokens.weight";
            if let Some(blocks) = file.blocks(name, size[0] as usize, size[1] as usize)? {
                let _ = self.tied_head_blocks.set(blocks);
            }
        }
        Ok(())
    }

    /// Every linear map of the layers (attention projections and MLP) and the untied LM head, in order.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut out = Vec::new();
        for layer in &self.layers {
            out.extend(layer.linears());
        }
        out.extend(self.lm_head.as_ref());
        out
    }

    /// Token embeddings `[T, hidden]` (drafters that share the target's embedding call this).
    pub fn embed(&self, ids: &Tensor) -> Tensor {
        time_split::mark(
            Step::Embedding,
            || 0,
            || self.embed_tokens.index_select(0, ids),
        )
    }

    /// Final norm + LM head on hidden states `[T, hidden]` -> `[T, vocab]` f32.
    pub fn logits_of(&self, hidden: &Tensor) -> Tensor {
        self.lm_head(&self.norm.forward(hidden))
    }

    /// The LM head's weight `[vocab, hidden]` (the embedding when the head is tied to it).
    pub fn lm_head_weight(&self) -> &Tensor {
        self.lm_head
            .as_ref()
            .map_or(&self.embed_tokens, |h| &h.weight)
    }

    /// The LM head alone on already-normalised states `[T, hidden]` -> `[T, vocab]` f32 (DFlash applies
    /// its own final norm and then the target's head).
    pub fn lm_head(&self, normed: &Tensor) -> Tensor {
        let weight = self.lm_head_weight();
        time_split::mark(
            Step::LmHead,
            || time_split::bytes_of([weight]),
            || {
                // A few rows (a decode step, a drafter's block): the kernel reads the head once, as
                // its GGUF blocks where it runs as stored.
                let blocks = match &self.lm_head {
                    Some(head) => head.blocks(),
                    None => self.tied_head_blocks.get(),
                };
                let plain = self.lm_head.as_ref().is_none_or(|h| h.is_plain());
                let few_rows = match blocks.filter(|_| plain) {
                    Some(blocks) => blocks.product(normed),
                    None => plain.then(|| few_rows::head(normed, weight)).flatten(),
                };
                let logits = match (few_rows, &self.lm_head) {
                    (Some(logits), _) => logits,
                    (None, Some(head)) => head.forward_unmarked(normed),
                    (None, None) => normed.matmul(&self.embed_tokens.transpose(0, 1)),
                };
                logits.to_kind(Kind::Float)
            },
        )
    }

    /// Runs `decode`, a token loop of this model's passes, with libtorch on one thread from its first
    /// pass to its last where those passes take the CPU kernel (`few_rows::decoding` says why).
    pub fn decoding<T>(&self, decode: impl FnOnce() -> T) -> T {
        few_rows::decoding(self.device, self.kind, self.linear_weight_bytes(), decode)
    }

    /// Runs `T` new rows against `cache`, writes their keys and values, and advances the cache.
    pub fn forward(&self, input: ForwardInput<'_>, cache: &mut KvCache) -> Result<ForwardOutput> {
        let rows = input.ids.size().first().copied().unwrap_or(0);
        // Run as stored, a pass of several rows (a verification) attends row by row, so that each
        // row's products see the numbers a decode step at its position would (weight_blocks.rs); a
        // prompt's prefill is shared by every arm and needs no such care.
        let row_by_row = rows > 1 && !crate::weight_blocks::in_prompt() && self.runs_as_stored();
        let pass = || match row_by_row {
            true => crate::attention::row_by_row(|| self.forward_pass(input, cache)),
            false => self.forward_pass(input, cache),
        };
        // A few rows of a frozen CPU model too large for the cache, with whatever streams through it
        // beside (a verification pass; a drafting step, beside the target's weights): the whole pass
        // with the kernel that reads each weight once; any other pass on
        // libtorch's own threads, also inside a decoding loop (few_rows::where_it_pays). Weights being
        // trained keep libtorch's products.
        let frozen = self
            .layers
            .first()
            .is_none_or(|l| !l.mlp.up_proj.weight.requires_grad());
        if frozen {
            let weight_bytes = self.linear_weight_bytes();
            few_rows::where_it_pays(rows, self.device, self.kind, weight_bytes, pass)
        } else {
            few_rows::with_libtorch_threads(pass)
        }
    }

    /// [`Self::forward`] on the threads and products its caller chose.
    fn forward_pass(
        &self,
        mut input: ForwardInput<'_>,
        cache: &mut KvCache,
    ) -> Result<ForwardOutput> {
        let rows = self.check_pass(&input, cache)?;
        cache.reserve(rows)?;
        let past = cache.len();
        let windowed;
        let mask = match &self.key_selection {
            Some(selection) if !selection.covers(past + rows) => {
                windowed = input.mask.selected(past, rows, selection, self.device)?;
                &windowed
            }
            _ => input.mask,
        };
        // Over every position; cut to the keys the cache still holds (a drafter's bounded window).
        let visible = cache
            .held_columns(mask.materialize(past, rows, self.device)?)
            .map(Visibility::new);
        // n_i of every row and the factors of every layer, once per pass, only when the queries are scaled.
        let factors = match self.query_scaling.is_off() {
            true => None,
            false => self.query_scaling.pass_factors(
                &mask.visible_counts(past, rows)?,
                self.device,
                self.kind,
            ),
        };
        let (cos, sin) = self.rope.tables(input.positions, self.kind);
        let mut observer = input.observer.take();
        let mut x = self.embed(input.ids);
        let mut hidden: Vec<Option<Tensor>> = input.taps.iter().map(|_| None).collect();
        for (i, layer) in self.layers.iter().enumerate() {
            record_taps(input.taps, Tap::LayerInput(i), &x, &mut hidden);
            // The layer's weights are its linear maps', which mark their own bytes.
            x = time_split::mark(
                Step::Layer(i),
                || 0,
                || -> Result<Tensor> {
                    let attn_in = layer.input_layernorm.forward(&x);
                    let step = AttentionStep {
                        cache: &mut *cache,
                        layer: i,
                        visible: visible.as_ref(),
                        past,
                        cos: &cos,
                        sin: &sin,
                        factors: factors.as_ref(),
                    };
                    let x = &x
                        + self.attention(
                            &layer.self_attn,
                            &attn_in,
                            step,
                            observer.as_deref_mut(),
                        )?;
                    let mlp_in = layer.post_attention_layernorm.forward(&x);
                    Ok(&x + layer.mlp.forward(&mlp_in))
                },
            )?;
            record_taps(input.taps, Tap::LayerOutput(i), &x, &mut hidden);
        }
        record_taps(
            input.taps,
            Tap::LayerInput(self.layers.len()),
            &x,
            &mut hidden,
        );
        cache.advance(rows);
        let logits = match input.logits {
            LogitRows::All => Some(self.logits_of(&x)),
            LogitRows::Last => Some(self.logits_of(&x.narrow(0, rows - 1, 1))),
            LogitRows::None => None,
        };
        let hidden = hidden
            .into_iter()
            .zip(input.taps)
            .map(|(h, tap)| {
                h.ok_or_else(|| {
                    ModelError::tensor(
                        "tap",
                        format!(
                            "{tap:?} is outside the model's {} layers",
                            self.layers.len()
                        ),
                    )
                })
            })
            .collect::<Result<_>>()?;
        Ok(ForwardOutput { logits, hidden })
    }

    /// The pass's rows T, once its ids and positions are `[T]` each (T > 0) and `cache` has a layer
    /// for each of the model's.
    fn check_pass(&self, input: &ForwardInput<'_>, cache: &KvCache) -> Result<i64> {
        let rows = input.ids.size().first().copied().unwrap_or(0);
        if input.ids.dim() != 1 || rows == 0 || input.positions.size() != [rows] {
            return Err(ModelError::tensor(
                "ids",
                format!(
                    "expected [T] ids and [T] positions, got {:?} and {:?}",
                    input.ids.size(),
                    input.positions.size()
                ),
            ));
        }
        if cache.num_layers() != self.config.num_layers {
            return Err(ModelError::Cache(format!(
                "cache has {} layers, the model {}",
                cache.num_layers(),
                self.config.num_layers
            )));
        }
        Ok(rows)
    }

    fn attention<'o>(
        &self,
        attn: &Attention,
        x: &Tensor,
        step: AttentionStep<'_>,
        observer: Option<&mut (dyn AttentionObserver + 'o)>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let q = attn.qkv.queries(x, step.cos, step.sin); // [T, H, D]
        let (k, v) = attn.qkv.keys_values(x, step.cos, step.sin); // [T, Hkv, D] each
        let mut q = q.permute([1, 0, 2]); // [H, T, D]
        let (keys, values) =
            step.cache
                .write(step.layer, &k.permute([1, 0, 2]), &v.permute([1, 0, 2]))?;
        if let Some(factors) = step.factors {
            factors.apply(&mut q, step.layer)?;
        }
        let softmax_scale = 1.0 / (c.head_dim as f64).sqrt();
        if let Some(observer) = observer {
            if observer.wants(step.layer) {
                let view = AttentionView {
                    queries: &q,
                    keys: &keys,
                    visible: step.visible.map(Visibility::mask),
                    past: step.past,
                    softmax_scale,
                };
                observer.observe(step.layer, &view);
            }
        }
        Ok(attn.o_proj.forward(&attend_visible(
            &q,
            &keys,
            &values,
            step.visible,
            softmax_scale,
        )))
    }
}

struct AttentionStep<'a> {
    cache: &'a mut KvCache,
    layer: usize,
    /// This pass's mask, its scores' bias built once for every layer.
    visible: Option<&'a Visibility>,
    past: i64,
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// This pass's query-scaling factors (`None` when the queries are not scaled).
    factors: Option<&'a PassFactors>,
}

fn record_taps(taps: &[Tap], at: Tap, x: &Tensor, out: &mut [Option<Tensor>]) {
    // `x` is rebound, never mutated in place, so a shallow clone keeps this layer's value.
    for (slot, tap) in out.iter_mut().zip(taps) {
        if *tap == at {
            *slot = Some(x.shallow_clone());
        }
    }
}
