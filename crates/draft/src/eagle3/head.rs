//! The trained part of an EAGLE-3 head: loading the published layout and the layer math
//! (feature fusion, projection, attention and MLP, the draft-vocabulary LM head).

use super::*;
use crate::draft_vocabulary::DraftVocabulary;
use crate::drafter::{DraftError, Result};
use crate::random_init::save_trained;
use sharpdraft_model::attention::attend;
use sharpdraft_model::layers::{Linear, QkvProjection, QkvShape, RmsNorm, SwiGlu, Trainable};
use sharpdraft_model::rope::Rope;
use sharpdraft_model::time_split::{self, Step};
use sharpdraft_model::weights::{checkpoint_files, load_strict, Route};
use sharpdraft_model::{
    AttentionMask, AttentionObserver, AttentionView, KeySelection, KvCache, LogitRows,
    QueryScaling, Sampling, Tap, Transformer,
};
use std::path::Path;
use tch::{nn, Kind, Tensor};

pub(crate) struct Layer {
    pub(crate) hidden_norm: RmsNorm,
    pub(crate) input_layernorm: RmsNorm,
    pub(crate) post_attention_layernorm: RmsNorm,
    /// q/k/v over the 2H input `cat(embedding, feature)`, no q/k norms; biases on q/k/v/o only with
    /// `attention_bias`.
    pub(crate) qkv: QkvProjection,
    pub(crate) o_proj: Linear,
    pub(crate) mlp: SwiGlu,
}

/// The trained part: weights and the forward pass of one EAGLE-3 layer.
pub struct Eagle3Head {
    pub config: Eagle3Config,
    /// config.json as read, so that saving keeps every key (published or not).
    pub(crate) raw_config: serde_json::Value,
    /// The head's weights (trainable when loaded for training).
    pub vars: nn::VarStore,
    pub(crate) fc: Linear,
    pub(crate) fc_norm: Vec<RmsNorm>,
    pub(crate) layer: Layer,
    pub(crate) norm: RmsNorm,
    pub(crate) lm_head: Linear,
    /// The tokens the head drafts over.
    pub(crate) vocabulary: DraftVocabulary,
    /// Bytes of its linear maps, counted on first use.
    weight_bytes: std::sync::OnceLock<usize>,
    pub(crate) rope: Rope,
    pub(crate) heads: i64,
    pub(crate) kv_heads: i64,
    pub(crate) head_dim: i64,
    /// SharpDraft scaling of the layer's queries while drafting (training runs within n0, unscaled).
    pub(crate) query_scaling: QueryScaling,
    /// The keys drafting rows may see (sliding window, retrieval); `None`: all their mask allows.
    pub(crate) key_selection: Option<KeySelection>,
    /// The kind of the head's weights, which its inputs (the target's embeddings and features) take on
    /// entry: the target's unless loaded with its own ([`Eagle3Head::load_as`]).
    pub(crate) kind: Kind,
}

pub(crate) fn checkpoint_error(path: &Path, reason: impl Into<String>) -> DraftError {
    DraftError::Checkpoint {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

impl Eagle3Head {
    /// `fc`, the layer's projections and MLP, and the LM head.
    pub fn linears(&self) -> Vec<&Linear> {
        let layer = &self.layer;
        let mut out = vec![&self.fc];
        out.extend(layer.qkv.linears());
        out.push(&layer.o_proj);
        out.extend(layer.mlp.linears());
        out.push(&self.lm_head);
        out
    }

    /// Bytes of every linear map of the head, counted once (each proposal asks whether the kernel pays).
    pub fn weight_bytes(&self) -> usize {
        *(self.weight_bytes)
            .get_or_init(|| time_split::bytes_of(self.linears().iter().map(|l| &l.weight)))
    }

    /// Loads the head's weights in the target's kind; `trainable` makes every weight take gradients
    /// (training). Returns the target taps the head reads.
    pub fn load(dir: &Path, target: &Transformer, trainable: bool) -> Result<(Self, Vec<Tap>)> {
        Self::load_as(dir, target, trainable, target.kind())
    }

    /// [`Eagle3Head::load`] with the head's weights in `kind` (a bf16 head beside an f32 target reads
    /// half the bytes of its maps a draft); the target's embeddings and features are cast to it on
    /// entry, attention runs in its keys' kind (the drafter's cache keeps the target's), and its
    /// log-probabilities are f32 either way.
    pub fn load_as(
        dir: &Path,
        target: &Transformer,
        trainable: bool,
        kind: Kind,
    ) -> Result<(Self, Vec<Tap>)> {
        crate::checkpoint_kind::expect_kind(dir, crate::DrafterKind::Eagle3)?;
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .map_err(|e| checkpoint_error(&config_path, e.to_string()))?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let config: Eagle3Config = serde_path_to_error::deserialize(de)
            .map_err(|e| checkpoint_error(&config_path, format!("{}: {}", e.path(), e.inner())))?;
        let ids = check_fits_target(&config, &target.config, &config_path)?;
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads.unwrap_or(heads);
        let head_dim = config.head_dim.unwrap_or(config.hidden_size / heads);
        let draft_vocab = config.draft_vocab_size.unwrap_or(config.vocab_size);
        let device = target.device();
        let mut vars = nn::VarStore::new(device);
        let weights = HeadWeights::new(&vars.root(), &config, trainable);
        vars.set_kind(kind);
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
        let vocabulary = DraftVocabulary::read(&side, draft_vocab, config.vocab_size, dir)?;
        let rope = rope_of(&config, head_dim, device);
        let raw_config: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| checkpoint_error(&config_path, e.to_string()))?;
        let HeadWeights {
            layer,
            fc,
            fc_norm,
            norm,
            lm_head,
        } = weights;
        let head = Eagle3Head {
            config,
            raw_config,
            vars,
            fc,
            fc_norm,
            layer,
            norm,
            lm_head,
            vocabulary,
            weight_bytes: std::sync::OnceLock::new(),
            rope,
            heads,
            kv_heads,
            head_dim,
            query_scaling: QueryScaling::off(),
            key_selection: None,
            kind,
        };
        Ok((head, ids.into_iter().map(Tap::LayerInput).collect()))
    }

    /// The kind of the head's weights and of its hidden states.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// `[T, 3 Ht]` target features (any kind) -> `[T, H]` in the head's kind.
    pub(crate) fn fuse(&self, features: &Tensor) -> Tensor {
        let features = &features.to_kind(self.kind);
        // `fc`'s weights are its own linear map's, marked there.
        time_split::mark(
            Step::Features,
            || 0,
            || {
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
            },
        )
    }

    /// First half of the layer, shared by drafting and training: the residual, and RoPE'd queries
    /// `[H, T, D]`, keys and values `[Hkv, T, D]` of `T` (embedding, hidden) pairs at `positions`.
    pub(crate) fn project(
        &self,
        embeddings: &Tensor,
        hidden: &Tensor,
        positions: &Tensor,
    ) -> (Tensor, Tensor, Tensor, Tensor) {
        time_split::mark(
            Step::Layer(0),
            || 0,
            || self.project_rows(embeddings, hidden, positions),
        )
    }

    fn project_rows(
        &self,
        embeddings: &Tensor,
        hidden: &Tensor,
        positions: &Tensor,
    ) -> (Tensor, Tensor, Tensor, Tensor) {
        let l = &self.layer;
        // The target's embeddings (and, fed back, the head's own hidden states) in the head's kind.
        let (embeddings, hidden) = (&embeddings.to_kind(self.kind), &hidden.to_kind(self.kind));
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
        let q = l.qkv.queries(&x, &cos, &sin).permute([1, 0, 2]); // [H, T, D]
        let (k, v) = l.qkv.keys_values(&x, &cos, &sin);
        (residual, q, k.permute([1, 0, 2]), v.permute([1, 0, 2]))
    }

    /// Second half: attention over `keys`/`values` (`[Hkv, L, D]`, `visible` `[T, L]`), MLP, head. Returns the
    /// next-step hidden `[T, H]` and draft-vocab log-probabilities `[R, draft_vocab]` (f32) of the
    /// `log_prob_rows` (all `T`, the last, or none): a prompt's catch-up needs only its last row's, and
    /// the head over every row of a long prompt would cost more than the layer.
    pub(crate) fn finish(
        &self,
        residual: Tensor,
        q: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        visible: Option<&Tensor>,
        log_prob_rows: LogitRows,
    ) -> (Tensor, Tensor) {
        let l = &self.layer;
        let h = time_split::mark(
            Step::Layer(0),
            || 0,
            || {
                let attended = attend(
                    q,
                    keys,
                    values,
                    visible,
                    1.0 / (self.head_dim as f64).sqrt(),
                );
                let attn = l.o_proj.forward(&attended.to_kind(self.kind));
                let h = residual + attn;
                let post = l.post_attention_layernorm.forward(&h);
                &h + l.mlp.forward(&post)
            },
        );
        let normed = self.norm.forward(&h);
        let rows = normed.size()[0];
        let headed = match log_prob_rows {
            LogitRows::All => normed.shallow_clone(),
            LogitRows::Last => normed.narrow(0, rows - 1, 1),
            LogitRows::None => normed.narrow(0, rows, 0),
        };
        let logits = time_split::mark(
            Step::LmHead,
            || time_split::bytes_of([&self.lm_head.weight]),
            || self.lm_head.forward_unmarked(&headed),
        );
        let log_probs = time_split::mark(
            Step::Sampling,
            || 0,
            || logits.to_kind(Kind::Float).log_softmax(-1, Kind::Float),
        );
        (if self.config.norm_output { normed } else { h }, log_probs)
    }

    /// One pass of the layer over `T` rows against the drafter's cache; the attention (after any query
    /// scaling) is offered to `observer`. Returns the next-step hidden `[T, H]` and the log-probabilities
    /// of the `log_prob_rows` (see [`Self::finish`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        embeddings: &Tensor,
        hidden: &Tensor,
        positions: &Tensor,
        mask: &AttentionMask,
        cache: &mut KvCache,
        observer: Option<&mut dyn AttentionObserver>,
        log_prob_rows: LogitRows,
    ) -> Result<(Tensor, Tensor)> {
        let rows = embeddings.size()[0];
        cache.reserve(rows)?;
        let past = cache.len();
        let (residual, q, k, v) = self.project(embeddings, hidden, positions);
        let (keys, values) = cache.write(0, &k, &v)?;
        let windowed;
        let mask = match &self.key_selection {
            Some(selection) if !selection.covers(past + rows) => {
                windowed = mask.selected(past, rows, selection, embeddings.device())?;
                &windowed
            }
            _ => mask,
        };
        // Over every position; cut to the keys the cache still holds (a bounded window).
        let visible = cache.held_columns(mask.materialize(past, rows, embeddings.device())?);
        // n_i = stable context + depth + 1 in a tree: the row-sum of its mask (derivations/top-k-mass-scaling.md §6).
        // The cache holds the target's kind (its write converts the head's keys and values); the
        // queries meet them there, and `finish` brings the attention back to the head's kind.
        let mut q = q.to_kind(keys.kind());
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
        let out = self.finish(
            residual,
            &q,
            &keys,
            &values,
            visible.as_ref(),
            log_prob_rows,
        );
        cache.advance(rows);
        Ok(out)
    }

    pub(crate) fn to_target(&self, draft_id: i64) -> i64 {
        self.vocabulary.to_target(draft_id)
    }

    pub fn query_heads(&self) -> usize {
        self.heads as usize
    }

    /// Training length n0 recorded in the checkpoint, else `max_position_embeddings`.
    pub fn training_length(&self) -> i64 {
        self.config
            .training_length
            .unwrap_or(self.config.max_position_embeddings)
    }

    pub fn set_query_scaling(&mut self, scaling: QueryScaling) {
        self.query_scaling = scaling;
    }

    /// Restricts every later drafting pass to `selection` (training is not restricted).
    pub fn set_key_selection(&mut self, selection: Option<KeySelection>) {
        self.key_selection = selection;
    }

    /// Target id -> draft id (or -1 when the draft vocabulary does not hold it), `[vocab]` i64.
    pub fn target_to_draft(&self, vocab: i64) -> Tensor {
        self.vocabulary.target_to_draft(vocab)
    }

    /// Writes this head in the published layout (config.json + model.safetensors with d2t and t2d),
    /// recording `training_length`.
    pub fn save(&self, dir: &Path, training_length: i64) -> Result<()> {
        let extra = self.vocabulary.tensors(self.config.vocab_size);
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
    pub(crate) fn full_vocab_probs(
        &self,
        log_probs: &Tensor,
        vocab: i64,
        sampling: &Sampling,
    ) -> Tensor {
        let device = log_probs.device();
        let index = self.vocabulary.target_ids(device);
        let full = Tensor::full([vocab], f64::NEG_INFINITY, (Kind::Float, device))
            .scatter(0, &index, log_probs);
        sampling.probabilities(&full)
    }
}

/// Checks that an EAGLE-3 config fits its target (one layer, the target's hidden size and vocabulary,
/// three capture layers inside the target) and returns the capture layers.
fn check_fits_target(
    config: &Eagle3Config,
    t: &sharpdraft_model::ModelConfig,
    config_path: &Path,
) -> Result<Vec<usize>> {
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
        .unwrap_or_else(|| default_capture_layers(layers));
    if ids.len() != 3 || ids.iter().any(|&i| i > layers) {
        return Err(DraftError::Mismatch(format!(
            "EAGLE-3 capture layers {ids:?} do not fit a {layers}-layer target"
        )));
    }
    Ok(ids)
}

/// The head's variables, created (untrained) under `root` with the checkpoint's names: the layer,
/// the feature fusion `fc` (and its optional norms), the final norm and the draft LM head.
struct HeadWeights {
    layer: Layer,
    fc: Linear,
    fc_norm: Vec<RmsNorm>,
    norm: RmsNorm,
    lm_head: Linear,
}

impl HeadWeights {
    fn new(root: &nn::Path<'_>, config: &Eagle3Config, trainable: bool) -> Self {
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads.unwrap_or(heads);
        let head_dim = config.head_dim.unwrap_or(config.hidden_size / heads);
        let hidden = config.hidden_size;
        let target_hidden = config.target_hidden_size.unwrap_or(config.hidden_size);
        let draft_vocab = config.draft_vocab_size.unwrap_or(config.vocab_size);
        let m = root / "midlayer";
        let a = &m / "self_attn";
        let mlp = &m / "mlp";
        let eps = config.rms_norm_eps;
        let t = trainable;
        let trainable_layer = if t { Trainable::Yes } else { Trainable::No };
        let layer = Layer {
            hidden_norm: RmsNorm::with_grad(&m / "hidden_norm", hidden, eps, t),
            input_layernorm: RmsNorm::with_grad(&m / "input_layernorm", hidden, eps, t),
            post_attention_layernorm: RmsNorm::with_grad(
                &m / "post_attention_layernorm",
                hidden,
                eps,
                t,
            ),
            qkv: QkvProjection::new(
                &a,
                QkvShape {
                    input: 2 * hidden,
                    heads,
                    kv_heads,
                    head_dim,
                    bias: config.attention_bias,
                    qk_norm: None,
                },
                trainable_layer,
            ),
            o_proj: Linear::with_grad(
                &a / "o_proj",
                heads * head_dim,
                hidden,
                config.attention_bias,
                t,
            ),
            mlp: SwiGlu::new(&mlp, hidden, config.intermediate_size, trainable_layer),
        };
        let fc = Linear::with_grad(root / "fc", 3 * target_hidden, hidden, false, t);
        let fc_norm = if config.fc_norm {
            (0..3)
                .map(|i| RmsNorm::with_grad(root / "fc_norm" / i, target_hidden, eps, t))
                .collect()
        } else {
            Vec::new()
        };
        let norm = RmsNorm::with_grad(root / "norm", hidden, eps, t);
        let lm_head = Linear::with_grad(root / "lm_head", hidden, draft_vocab, false, t);
        HeadWeights {
            layer,
            fc,
            fc_norm,
            norm,
            lm_head,
        }
    }
}

/// The head's rotary embedding: the config's theta, and llama3 scaling when it names it.
fn rope_of(config: &Eagle3Config, head_dim: i64, device: tch::Device) -> Rope {
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
    Rope::with_base(
        head_dim,
        config.rope_theta.unwrap_or(10_000.0),
        scaling,
        device,
    )
}
