//! One way to name "this drafter, drafting this way" for every entry point: the command line fills a
//! [`DrafterSpec`] from its flags, configs deserialise it from YAML, and [`build`] (or [`load`], for
//! callers that need the concrete drafter, such as the probe) turns it into a drafter for a target.
//! [`prepare`] adds what every decoding command needs next: the target's context checked, caches sized
//! for the prompt, and the driver's [`SpecOptions`].
//!
//! ```yaml
//! method: eagle3                # vanilla | eagle3 | pard | dflash
//! checkpoint: smollm2-135m-eagle3
//! tree: {depth: 4, top_k: 6, total_tokens: 24}   # EAGLE-3 only; without it a chain of draft_len
//! draft_len: 4                  # chains: vanilla, PARD, EAGLE-3 without a tree (refused by DFlash: block_size - 1)
//! # stop_below: 0.4             # vanilla, DFlash: end a chain at the first draft below this probability
//! scaling: {mode: fixed, schedule: smollm2-eagle3}
//! window: 512                  # optional: the drafter attends to its last 512 keys only
//! gate: goodput                 # optional: each cycle's depth from measured cost, plain steps included
//! retrieval: {chunk: 32, top_chunks: 64, recent: 256, every: 8}   # or: SpecExtend's retrieval
//! adapt: {mode: lora, every: 8, rank: 8}   # online adaptation (sharpdraft_draft::adaptation)
//! ```

use crate::driver::{ensure, Context, DecodeError, Result};
use crate::gate::GateMode;
use crate::scaling::{ScalingMode, ScalingSpec};
use crate::{speculative_generate, speculative_generate_from, SpecOptions, SpecReport};
use serde::{Deserialize, Serialize};
use sharpdraft_draft::adaptation::{
    AdaptOptions, Adaptable, AdaptingDrafter, OnlineObjective, UpdateUnit,
};
use sharpdraft_draft::checkpoint_kind::expect_kind;
use sharpdraft_draft::eagle3::MAX_TREE_TOKENS;
use sharpdraft_draft::retrieval::{RetrievalOptions, RetrievingDrafter, RETRIEVAL_SWITCH};
use sharpdraft_draft::{
    DFlashDrafter, Drafter, DrafterKind, Eagle3Drafter, PardDrafter, TreeShape, VanillaDrafter,
};
use sharpdraft_model::generate::PromptPrefill;
use sharpdraft_model::{
    parse_dtype, CausalLm, KeySelection, ModelDtype, QueryScaling, Sampling, ScaledQueries,
};
use sharpdraft_store::registry;
pub use struct_patch::{Patch, Status};

fn default_draft_len() -> usize {
    DrafterSpec::DEFAULT_DRAFT_LEN
}

/// A drafter and how it drafts: a drafter block of a config and the drafting flags of a command, one
/// declaration for both (a field's flag is named beside it; [`ScalingSpec`], [`RetrievalOptions`] and
/// [`AdaptOptions`] serve both too). Only the query-scaling mode is named apart on the command line,
/// where `--scaling` is a list that some commands compare.
///
/// A command flattens `Option<DrafterSpec>` where drafting is optional: it is `Some` exactly when
/// `--drafter` is given (the group's one member: clap's derive leaves a group that holds flattened
/// groups empty), and every other drafting flag requires `--drafter` (its own by `requires`, the
/// flattened blocks' by their groups'), so none is silently ignored. `--drafter` itself is required, as
/// `checkpoint:` is; that command makes it optional (`mut_arg`).
///
/// Its partial twin, [`DrafterSpecPatch`] (every field but what the drafter is, each optional), is what
/// an experiment's method sets over each drafter's own specification, merged by `Patch::apply`: a
/// drafting option added here is a method's option too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args, Patch)]
#[serde(deny_unknown_fields)]
#[group(arg = DRAFTER_FLAG)]
#[command(
    mut_group(group_of::<TreeShape>(), require_drafter),
    mut_group(group_of::<ScalingSpec>(), require_drafter),
    mut_group(group_of::<RetrievalOptions>(), require_drafter),
    mut_group(group_of::<AdaptOptions>(), require_drafter),
    mut_arg(RETRIEVAL_SWITCH, |arg| arg.conflicts_with("drafter_window"))
)]
#[patch(attribute(derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)))]
#[patch(attribute(serde(deny_unknown_fields)))]
#[patch(attribute(
    doc = "The drafting options a method of an experiment sets over each drafter's own specification (`scaling:`, `window:`, `adapt:` ... at the method's top level); the kind and the checkpoint stay the drafter's."
))]
pub struct DrafterSpec {
    /// The drafter's architecture: vanilla (a small LM, K passes per chain), eagle3 (an EAGLE-3 / 3.1
    /// head, chain or tree), pard (K tokens in one pass) or dflash (block_size - 1 tokens in one pass).
    /// (`method`, `--method`: its old spelling.)
    #[serde(alias = "method")]
    #[patch(skip)]
    #[arg(
        long,
        alias = "method",
        default_value = "vanilla",
        requires = DRAFTER_FLAG
    )]
    pub kind: DrafterKind,
    /// The drafter's weights: a known model name, a model made here (`$SHARPDRAFT_HOME/models/<name>`),
    /// or a folder; a small LM for `vanilla`, an EAGLE-3 checkpoint for `eagle3`. A command that may
    /// decode without a drafter does so when given none.
    #[arg(id = DRAFTER_FLAG, long = DRAFTER_FLAG, value_name = "DRAFTER")]
    #[patch(skip)]
    pub checkpoint: String,
    /// Chain length K: vanilla, PARD, and EAGLE-3 without a tree. DFlash drafts its block size - 1.
    #[serde(default = "default_draft_len")]
    #[arg(long, default_value_t = DrafterSpec::DEFAULT_DRAFT_LEN, requires = DRAFTER_FLAG)]
    pub draft_len: usize,
    /// Vanilla and DFlash: a chain ends early at the first draft the drafter gives a probability below
    /// this (its top probability when greedy, the sampled token's when sampling; DFlash drafts greedily,
    /// over its draft vocabulary where it has one), that draft included, so easy stretches get whole
    /// chains and hard ones stop paying for drafts the target rejects. Every chain is whole without it
    /// (--draft-len, DFlash's block, is then the longest).
    #[serde(default)]
    #[arg(
        id = "draft_stop_below",
        long = "draft-stop-below",
        requires = DRAFTER_FLAG
    )]
    pub stop_below: Option<f64>,
    /// EAGLE-3's dynamic tree; a chain of `draft_len` without it.
    #[serde(default)]
    #[command(flatten)]
    pub tree: Option<TreeShape>,
    /// SharpDraft query scaling of the drafter's attention.
    #[serde(default)]
    #[command(flatten)]
    pub scaling: ScalingSpec,
    /// A sliding window on the drafter's attention: every drafting row sees at most its last `window`
    /// keys (training-free, as EAGLE 3.1's and DFlash's sliding layers); every key by default.
    #[serde(default)]
    #[arg(id = "drafter_window", long = "drafter-window", requires = DRAFTER_FLAG)]
    pub window: Option<i64>,
    /// Attention sinks beside the window: every drafting row sees the first `window_sink` keys of the
    /// context too (StreamingLLM keeps 4), and a bounded cache keeps them.
    #[serde(default)]
    #[arg(long = "drafter-window-sink", requires = "drafter_window")]
    pub window_sink: Option<i64>,
    /// The one layer left out of the window, which sees every key (a window on every layer but one:
    /// DFlash, which keeps a window per layer; 0-based).
    #[serde(default)]
    #[arg(long = "drafter-window-full-layer", requires = "drafter_window")]
    pub window_full_layer: Option<usize>,
    /// Cross-model retrieval (SpecExtend): the drafter attends to the chunks of context the target's
    /// last layer attended to most in the latest verification, plus a recent window.
    #[serde(default)]
    #[command(flatten)]
    pub retrieval: Option<RetrievalOptions>,
    /// Online adaptation from verification (full or LoRA); none by default.
    #[serde(default)]
    #[command(flatten)]
    pub adapt: Option<AdaptOptions>,
    /// The goodput gate: `goodput` drafts, each cycle, the depth that maximises the expected tokens per
    /// second this request has measured, a plain target step (no drafter work at all) included, and
    /// probes again on a schedule (docs/drafters.md); `closed` steps plainly throughout (what
    /// speculation turned off costs); `off`, the default, drafts every cycle whole.
    #[serde(default)]
    #[arg(long, value_enum, default_value_t = GateMode::Off, requires = DRAFTER_FLAG)]
    pub gate: GateMode,
    /// The dtype of the drafter's own weights: `f32`, `bf16`, `f16`, or `gguf` (a vanilla or PARD
    /// drafter imported from GGUF, as the file stores it); the target's by default (a target run as
    /// stored runs such a drafter as stored too). Vanilla
    /// and PARD drafters are whole models; an EAGLE-3 head and a DFlash drafter keep their layers (and
    /// the draft vocabulary's head rows) in it and take the target's embeddings and features in it,
    /// while a DFlash drafter without a draft vocabulary reads the target's head in the target's dtype.
    /// On a CPU a bf16 drafter reads half the bytes per draft while the target verifies in f32, so the
    /// output stays the f32 target's own.
    #[serde(default)]
    #[arg(id = "drafter_dtype", long = "drafter-dtype", requires = DRAFTER_FLAG)]
    pub dtype: Option<String>,
}

/// The command line's flag naming the drafter's checkpoint (`--drafter`), and its argument id.
pub const DRAFTER_FLAG: &str = "drafter";

/// The argument group of a block of flags `DrafterSpec` flattens (clap's derive names it for the type).
fn group_of<Block: clap::Args>() -> clap::Id {
    Block::group_id().expect("a derived block of flags has a group")
}

/// A flattened block's flags are given only with a drafter to apply them to.
fn require_drafter(group: clap::ArgGroup) -> clap::ArgGroup {
    group.requires(DRAFTER_FLAG)
}

impl DrafterSpec {
    /// Chains of 4 unless `draft_len` (`--draft-len`) says otherwise.
    pub const DEFAULT_DRAFT_LEN: usize = 4;

    /// Why this drafter takes no chain length, when it takes none: a `draft_len` given to it would be
    /// read and ignored. (Only a length other than the default can be told from one left out.)
    pub fn draft_len_unused(&self) -> Option<&'static str> {
        if self.kind == DrafterKind::Dflash {
            Some("a DFlash drafter drafts its block size - 1 tokens a cycle, whatever the chain length (stop_below, --draft-stop-below, ends its chains early)")
        } else if self.tree.is_some() {
            Some("an EAGLE-3 tree's shape (depth, topk, total_tokens) sets what it drafts, not a chain length")
        } else {
            None
        }
    }

    /// This specification with chains of `len` where its kind drafts chains of a chosen length (a DFlash
    /// drafter drafts its block, an EAGLE-3 tree its shape: [`Self::draft_len_unused`]).
    pub fn chains_of(self, len: usize) -> Self {
        match self.draft_len_unused() {
            Some(_) => self,
            None => Self {
                draft_len: len,
                ..self
            },
        }
    }

    /// The keys the drafter's rows see, as its window options shape them (`None`: every key).
    pub fn key_selection(&self) -> Option<KeySelection> {
        self.window.map(|w| {
            KeySelection::window(w)
                .with_sink(self.window_sink.unwrap_or(0))
                .leaving_full(self.window_full_layer.into_iter().collect())
        })
    }

    /// This specification with query scaling `mode` (one of a command's `--scaling` list).
    pub fn with_scaling_mode(&self, mode: ScalingMode) -> Self {
        let mut spec = self.clone();
        spec.scaling.mode = mode;
        spec
    }

    /// The plain drafter: `kind` from `checkpoint`, chains of 4, no tree, no scaling.
    pub fn new(kind: DrafterKind, checkpoint: impl Into<String>) -> Self {
        Self {
            kind,
            checkpoint: checkpoint.into(),
            draft_len: default_draft_len(),
            stop_below: None,
            tree: None,
            scaling: ScalingSpec::default(),
            window: None,
            window_sink: None,
            window_full_layer: None,
            retrieval: None,
            adapt: None,
            gate: GateMode::Off,
            dtype: None,
        }
    }

    /// Checks the options that do not need the models: chain length and whether a tree fits the method.
    pub fn validate(&self) -> Result<()> {
        self.scaling.validate()?;
        ensure!(
            (1..=MAX_TREE_TOKENS).contains(&self.draft_len),
            "draft_len (--draft-len) {} must lie in 1..={MAX_TREE_TOKENS}",
            self.draft_len
        );
        if let Some(why) = self.draft_len_unused() {
            ensure!(
                self.draft_len == Self::DEFAULT_DRAFT_LEN,
                "draft_len (--draft-len) {}: {why}; leave it out",
                self.draft_len
            );
        }
        if let Some(threshold) = self.stop_below {
            ensure!(
                matches!(self.kind, DrafterKind::Vanilla | DrafterKind::Dflash),
                "stop_below (--draft-stop-below): only vanilla and DFlash chains end early, not {}",
                self.kind.name()
            );
            ensure!(
                threshold > 0.0 && threshold < 1.0,
                "stop_below (--draft-stop-below) {threshold} must lie strictly between 0 and 1"
            );
        }
        if let Some(tree) = &self.tree {
            ensure!(
                self.kind == DrafterKind::Eagle3,
                "tree (--tree-depth, --tree-topk, --tree-tokens): only EAGLE-3 drafts trees, not {}",
                self.kind.name()
            );
            ensure!(
                tree.depth >= 1,
                "tree depth (--tree-depth) 0: a tree needs at least one expansion step (use a chain of draft_len 1 for a single draft)"
            );
        }
        if let Some(window) = self.window {
            ensure!(
                window >= 1,
                "window (--drafter-window) {window}: a window needs at least 1 key"
            );
        }
        ensure!(
            self.window.is_some() || (self.window_sink.is_none() && self.window_full_layer.is_none()),
            "window_sink (--drafter-window-sink) and window_full_layer (--drafter-window-full-layer) shape a window: give window (--drafter-window) too"
        );
        if let Some(sink) = self.window_sink {
            ensure!(
                sink >= 0,
                "window_sink (--drafter-window-sink) {sink}: a count of keys, 0 or more"
            );
        }
        if let Some(layer) = self.window_full_layer {
            ensure!(
                self.kind == DrafterKind::Dflash,
                "window_full_layer (--drafter-window-full-layer) {layer}: only DFlash keeps a window per layer, not {}",
                self.kind.name()
            );
        }
        if let Some(retrieval) = &self.retrieval {
            ensure!(
                self.window.is_none(),
                "window (--drafter-window) and retrieval (--retrieval): give one; retrieval has its own recent window"
            );
            retrieval.validate().map_err(DecodeError::Invalid)?;
        }
        if let Some(adapt) = &self.adapt {
            adapt.validate().map_err(DecodeError::Invalid)?;
        }
        if let Some(dtype) = &self.dtype {
            let parsed = parse_dtype(dtype)
                .map_err(|e| DecodeError::Invalid(format!("dtype (--drafter-dtype): {e}")))?;
            ensure!(
                parsed != ModelDtype::AsStored
                    || matches!(self.kind, DrafterKind::Vanilla | DrafterKind::Pard),
                "dtype (--drafter-dtype) gguf: a {} drafter is no model imported from a GGUF file; only vanilla and PARD drafters (whole models) run as stored",
                self.kind.name()
            );
        }
        Ok(())
    }
}

/// A built drafter of a concrete type, for callers that need more than the [`Drafter`] trait.
pub enum LoadedDrafter {
    Vanilla(VanillaDrafter),
    Eagle3(Eagle3Drafter),
    Pard(PardDrafter),
    Dflash(DFlashDrafter),
}

impl LoadedDrafter {
    /// The drafter behind the trait online adaptation needs (every method can adapt).
    pub fn boxed(self) -> Box<dyn Adaptable> {
        match self {
            Self::Vanilla(d) => Box::new(d),
            Self::Eagle3(d) => Box::new(d),
            Self::Pard(d) => Box::new(d),
            Self::Dflash(d) => Box::new(d),
        }
    }

    fn as_drafter_mut(&mut self) -> &mut dyn Drafter {
        match self {
            Self::Vanilla(d) => d,
            Self::Eagle3(d) => d,
            Self::Pard(d) => d,
            Self::Dflash(d) => d,
        }
    }

    /// The drafter as query scaling sees it: its attention layout, training length, scaling.
    pub fn scaled(&self) -> &dyn ScaledQueries {
        match self {
            Self::Vanilla(d) => d,
            Self::Eagle3(d) => d,
            Self::Pard(d) => d,
            Self::Dflash(d) => d,
        }
    }

    fn scaled_mut(&mut self) -> &mut dyn ScaledQueries {
        match self {
            Self::Vanilla(d) => d,
            Self::Eagle3(d) => d,
            Self::Pard(d) => d,
            Self::Dflash(d) => d,
        }
    }

    /// The objective online adaptation trains this drafter with, as `spec` drafts it.
    pub fn online_objective(&self, spec: &DrafterSpec) -> OnlineObjective {
        match self {
            Self::Vanilla(_) => OnlineObjective::Vanilla,
            Self::Eagle3(_) => OnlineObjective::Eagle3 {
                ttt_steps: spec.tree.map_or(spec.draft_len, |tree| tree.depth + 1),
            },
            Self::Pard(d) => OnlineObjective::Pard {
                mask_token: d.mask_token(),
                copies: spec.draft_len,
            },
            // DFlash's public recipes: gamma 7 for blocks of 16, 4 for blocks of 8.
            Self::Dflash(d) => OnlineObjective::Dflash {
                anchors: 8,
                gamma: if d.block_size() >= 16 { 7.0 } else { 4.0 },
            },
        }
    }

    /// The most draft tokens one proposal holds (the target verifies them in one pass).
    pub fn max_proposal(&self, spec: &DrafterSpec) -> usize {
        match self {
            Self::Eagle3(_) => spec.tree.map_or(spec.draft_len, |tree| tree.total_tokens),
            Self::Dflash(d) => d.block_size() as usize,
            Self::Vanilla(_) | Self::Pard(_) => spec.draft_len,
        }
    }
}

/// Loads the drafter of `spec` for `target`, with its query scaling set. `positions` counts the
/// committed positions its caches must hold (prompt and new tokens); each drafter adds room for its own
/// drafts. Drafters load on the target's device, in the target's dtype unless the specification names
/// their own.
pub fn load(
    spec: &DrafterSpec,
    target: &CausalLm,
    sampling: Sampling,
    positions: i64,
) -> Result<LoadedDrafter> {
    let (mut loaded, scaling) = load_unscaled(spec, target, sampling, positions)?;
    loaded.scaled_mut().set_query_scaling(scaling);
    Ok(loaded)
}

/// The drafter of `spec` without its query scaling, and that scaling, built (and checked against the
/// drafter's attention layout) once: [`load`] sets it on the drafter, [`build`] on whatever wraps it.
fn load_unscaled(
    spec: &DrafterSpec,
    target: &CausalLm,
    sampling: Sampling,
    positions: i64,
) -> Result<(LoadedDrafter, QueryScaling)> {
    spec.validate()?;
    let name = &spec.checkpoint;
    let dir = registry::resolve(name)?;
    expect_kind(&dir, spec.kind).with_context(|| format!("drafter {name}"))?;
    let capacity = positions + spec.draft_len as i64 + 1;
    // The target's dtype unless the specification names one; a target run as stored has a whole-model
    // drafter imported from GGUF run as stored too, any other in f32.
    let dtype = match &spec.dtype {
        Some(dtype) => parse_dtype(dtype)?,
        None if target.as_stored => match spec.kind {
            DrafterKind::Vanilla | DrafterKind::Pard
                if dir
                    .join(sharpdraft_model::weight_blocks::BLOCKS_FILE)
                    .is_file() =>
            {
                ModelDtype::AsStored
            }
            _ => ModelDtype::Kind(target.net.kind()),
        },
        None => ModelDtype::Kind(target.net.kind()),
    };
    let kind = dtype.kind();
    let small_lm = || -> Result<CausalLm> {
        CausalLm::load_dtype(&dir, target.net.device(), dtype)
            .with_context(|| format!("loading drafter {name}"))
    };
    let mut loaded = match spec.kind {
        DrafterKind::Vanilla => LoadedDrafter::Vanilla(
            VanillaDrafter::new(small_lm()?, target, spec.draft_len, capacity, sampling)?
                .with_stop_below(spec.stop_below),
        ),
        DrafterKind::Eagle3 => {
            let shape = spec
                .tree
                .unwrap_or_else(|| TreeShape::chain(spec.draft_len));
            LoadedDrafter::Eagle3(Eagle3Drafter::load_as(
                &dir,
                &target.net,
                shape,
                sampling,
                capacity,
                kind,
            )?)
        }
        DrafterKind::Pard => LoadedDrafter::Pard(PardDrafter::new(
            small_lm()?,
            target,
            spec.draft_len,
            capacity,
        )?),
        DrafterKind::Dflash => LoadedDrafter::Dflash(
            DFlashDrafter::load_as(&dir, &target.net, capacity, kind)?
                .with_stop_below(spec.stop_below),
        ),
    };
    loaded
        .as_drafter_mut()
        .set_key_selection(spec.key_selection())?;
    let scaling = spec.scaling.build_for(
        loaded.scaled(),
        None,
        &format!("the {} drafter {name}", spec.kind.name()),
    )?;
    Ok((loaded, scaling))
}

/// A drafter built from its specification, set up and ready to decode.
pub struct BuiltDrafter<'t> {
    pub drafter: Box<dyn Drafter + 't>,
    /// The most draft tokens one proposal holds (the target verifies them in one pass).
    pub max_proposal: usize,
    /// The training length n0 the drafter's checkpoint records.
    pub training_length: Option<i64>,
    /// The slope of its query scaling ([`sharpdraft_model::QueryScaling::slope`]).
    pub scaling_slope: Option<f64>,
}

/// [`load`], boxed: wrapped in online adaptation and retrieval when `spec` says so. The query scaling
/// is built once and set on the drafter (the objective that adapts it trains through the same weights
/// and the same scaling).
pub fn build<'t>(
    spec: &DrafterSpec,
    target: &'t CausalLm,
    sampling: Sampling,
    positions: i64,
) -> Result<BuiltDrafter<'t>> {
    let (mut loaded, scaling) = load_unscaled(spec, target, sampling, positions)?;
    let scaling_slope = scaling.slope();
    let max_proposal = loaded.max_proposal(spec);
    let training_length = loaded.scaled().training_length();
    let online_objective = loaded.online_objective(spec);
    loaded.scaled_mut().set_query_scaling(scaling.clone());
    // Adaptation wraps the drafter itself (its objective trains the drafter's own weights, with the
    // drafter's query scaling); retrieval wraps whatever drafts.
    let mut drafter: Box<dyn Drafter + 't> = match &spec.adapt {
        Some(adapt) => Box::new(
            AdaptingDrafter::new(loaded.boxed(), &target.net, online_objective, adapt.clone())
                .with_context(|| format!("adapting drafter {}", spec.checkpoint))?,
        ),
        None => loaded.boxed(),
    };
    if let Some(retrieval) = &spec.retrieval {
        drafter = Box::new(RetrievingDrafter::new(drafter, retrieval.clone())?);
    }
    Ok(BuiltDrafter {
        drafter,
        max_proposal,
        training_length,
        scaling_slope,
    })
}

/// Everything a speculative decode of `prompt_len` prompt tokens and up to `max_new_tokens` needs: the
/// target's context checked (an error gives the numbers), the drafter built with caches for exactly
/// that, and the driver's configuration.
pub fn prepare<'t>(
    spec: &DrafterSpec,
    target: &'t CausalLm,
    sampling: Sampling,
    prompt_len: usize,
    max_new_tokens: usize,
) -> Result<(BuiltDrafter<'t>, SpecOptions)> {
    target
        .net
        .config
        .ensure_positions(prompt_len, max_new_tokens)
        .with_context(|| format!("max_new_tokens {max_new_tokens}"))?;
    let built = build(
        spec,
        target,
        sampling,
        prompt_len as i64 + max_new_tokens as i64,
    )?;
    let config = SpecOptions {
        max_new_tokens,
        sampling,
        stop_tokens: target.stop_tokens(),
        max_proposal: built.max_proposal,
        gate: spec.gate,
    };
    Ok((built, config))
}

/// One request decoded by [`decode_requests`], with the online updates made during it.
pub struct DecodedRequest {
    pub report: SpecReport,
    /// Updates, and their seconds, made while this request was decoded (or, adapting every N
    /// requests, when it started).
    pub updates: usize,
    pub update_seconds: f64,
    /// The drafter's recorded training length n0.
    pub training_length: Option<i64>,
    /// The slope of the drafter's query scaling.
    pub scaling_slope: Option<f64>,
}

/// Decodes the requests of one arm, one at a time and in order, with the drafter of `spec`: one drafter
/// for all of them when it adapts every N requests (OSD's protocol; caches sized for `longest` prompt
/// tokens), else a fresh drafter from the checkpoint for each. Between two requests the caller may run
/// other arms: a shared drafter keeps what it learned.
pub struct RequestDecoder<'t> {
    spec: DrafterSpec,
    target: &'t CausalLm,
    longest: usize,
    max_new_tokens: usize,
    shared: Option<(BuiltDrafter<'t>, SpecOptions)>,
}

impl<'t> RequestDecoder<'t> {
    pub fn new(
        spec: &DrafterSpec,
        target: &'t CausalLm,
        longest: usize,
        max_new_tokens: usize,
    ) -> Self {
        Self {
            spec: spec.clone(),
            target,
            longest,
            max_new_tokens,
            shared: None,
        }
    }

    /// Whether one drafter carries what it learned from request to request: decoding a request again
    /// would teach it twice.
    pub fn keeps_state_across_requests(&self) -> bool {
        self.spec
            .adapt
            .as_ref()
            .is_some_and(|a| a.unit == UpdateUnit::Requests)
    }

    /// Decodes `ids` under `sampling`; `stop` replaces the target's stop tokens when given (an empty
    /// list ignores end-of-sequence). Building a fresh drafter is not timed; the report's seconds are
    /// the decode's own.
    pub fn decode(
        &mut self,
        ids: &[i64],
        stop: Option<&[i64]>,
        sampling: Sampling,
    ) -> Result<DecodedRequest> {
        self.decode_after(ids, None, stop, sampling)
    }

    /// [`Self::decode`] from the target's prefill of the prompt made once for every arm of a request:
    /// the report counts that prefill's seconds as this arm's ([`speculative_generate_from`]).
    pub fn decode_prefilled(
        &mut self,
        prefilled: &PromptPrefill,
        stop: Option<&[i64]>,
        sampling: Sampling,
    ) -> Result<DecodedRequest> {
        self.decode_after(prefilled.prompt(), Some(prefilled), stop, sampling)
    }

    fn decode_after(
        &mut self,
        ids: &[i64],
        prefilled: Option<&PromptPrefill>,
        stop: Option<&[i64]>,
        sampling: Sampling,
    ) -> Result<DecodedRequest> {
        let adapts_across_requests = self.keeps_state_across_requests();
        let mut own = None;
        let (built, config) = if adapts_across_requests {
            if self.shared.is_none() {
                let longest = self.longest.max(ids.len());
                self.shared = Some(prepare(
                    &self.spec,
                    self.target,
                    sampling,
                    longest,
                    self.max_new_tokens,
                )?);
            }
            let (built, config) = self.shared.as_mut().expect("set above");
            (built, config)
        } else {
            let (built, config) = own.insert(prepare(
                &self.spec,
                self.target,
                sampling,
                ids.len(),
                self.max_new_tokens,
            )?);
            (built, config)
        };
        if let Some(stop) = stop {
            config.stop_tokens = stop.to_vec();
        }
        config.sampling = sampling;
        let before = built
            .drafter
            .stats()
            .adaptation
            .map_or((0, 0.0), |a| (a.updates, a.update_seconds));
        let report = match prefilled {
            Some(prefilled) => speculative_generate_from(
                &self.target.net,
                built.drafter.as_mut(),
                prefilled,
                config,
            )?,
            None => speculative_generate(&self.target.net, built.drafter.as_mut(), ids, config)?,
        };
        let (updates, update_seconds) = report.adaptation.as_ref().map_or((0, 0.0), |a| {
            (a.updates - before.0, a.update_seconds - before.1)
        });
        Ok(DecodedRequest {
            report,
            updates,
            update_seconds,
            training_length: built.training_length,
            scaling_slope: built.scaling_slope,
        })
    }
}

/// Decodes `requests` (prompt ids) in order with the drafter of `spec` ([`RequestDecoder`]).
/// `sampling(i)` is request i's sampling; `stop` replaces the target's stop tokens when given.
pub fn decode_requests(
    spec: &DrafterSpec,
    target: &CausalLm,
    requests: &[&[i64]],
    max_new_tokens: usize,
    stop: Option<&[i64]>,
    sampling: impl Fn(usize) -> Sampling,
) -> Result<Vec<DecodedRequest>> {
    let longest = requests.iter().map(|ids| ids.len()).max().unwrap_or(0);
    let mut decoder = RequestDecoder::new(spec, target, longest, max_new_tokens);
    requests
        .iter()
        .enumerate()
        .map(|(i, ids)| {
            decoder
                .decode(ids, stop, sampling(i))
                .with_context(|| format!("request {i}"))
        })
        .collect()
}
