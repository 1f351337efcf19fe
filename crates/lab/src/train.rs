//! `sharpdraft train CONFIG.yaml`: train a drafter for a target. Every check that can fail runs before
//! any compute is spent; output goes to a model folder that every command can name.
//!
//! ```yaml
//! target: smollm2-135m-instruct
//! method:                             # one of eagle3, pard, dflash, with its options
//!   eagle3: {draft_vocab: 8192, eagle31: true}
//! out: smollm2-135m-eagle3            # a name (under $SHARPDRAFT_HOME/models) or a path
//! n0: 256                             # training length: windows of n0 tokens, recorded in the checkpoint
//! windows: 256                        # at most this many windows
//! steps: 600
//! data:
//!   - text_file: corpus.txt
//!   - target_continuations: {path: prompts.jsonl, field: prompt, prompts: 4, max_new_tokens: 512}
//! ```

use crate::error::{bail, ensure, Context, Result};
use crate::loss_curve;
use crate::target_windows;
use serde::{Deserialize, Serialize};
use sharpdraft_data::datasets::{token_stream, Source};
use sharpdraft_draft::dflash::train::{self as dflash_train, DFlashObjective, DFlashOptions};
use sharpdraft_draft::eagle3::train::{self as eagle3_train, Eagle3Objective, Eagle3Options};
use sharpdraft_draft::pard::train::{self as pard_train, PardObjective, PardOptions};
use sharpdraft_draft::training::{
    extract_windows, train, LoopOptions, LrDecay, OwnedObjective, TrainObserver, TrainState,
    TrainWindow,
};
use sharpdraft_draft::DrafterKind;
use sharpdraft_model::{CausalLm, ModelConfig, Tap};
use sharpdraft_store::paths::shown;
use sharpdraft_store::{output_folder, registry};
use std::path::{Path, PathBuf};
use tch::Kind;

/// The kind of drafter a config trains, with that kind's options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrafterKindOptions {
    Eagle3(Eagle3Options),
    Pard(PardOptions),
    Dflash(DFlashOptions),
}

impl DrafterKindOptions {
    /// The drafter kind this trains.
    pub fn kind(&self) -> DrafterKind {
        match self {
            Self::Eagle3(_) => DrafterKind::Eagle3,
            Self::Pard(_) => DrafterKind::Pard,
            Self::Dflash(_) => DrafterKind::Dflash,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub target: String,
    /// The drafter kind and its options in one block (`kind: {eagle3: {...}}`; `method:` is the old
    /// spelling), so that options of another kind cannot be written.
    #[serde(alias = "method", with = "serde_norway::with::singleton_map")]
    pub kind: DrafterKindOptions,
    pub out: String,
    /// Training length n0.
    pub n0: i64,
    /// At most this many windows of n0 tokens.
    pub windows: usize,
    pub steps: usize,
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    #[serde(default)]
    pub weight_decay: f64,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_every")]
    pub checkpoint_every: usize,
    /// Steps of linear learning-rate warm-up.
    #[serde(default)]
    pub warmup_steps: usize,
    /// `constant` (default) or `cosine` (down to a tenth of `learning_rate` at `steps`).
    #[serde(default)]
    pub lr_decay: LrDecay,
    /// The target distribution kept per row (top-k, renormalised).
    #[serde(default = "default_top_k")]
    pub top_k_targets: i64,
    /// Each source is a one-key map (`- text_file: PATH`), not a YAML tag.
    #[serde(with = "serde_norway::with::singleton_map_recursive")]
    pub data: Vec<Source>,
    /// SharpDraft query scaling in every training pass (`{mode, schedule | beta, n0}`), as when drafting.
    /// Within n0 every factor is 1; it matters for windows longer than the drafter's n0.
    #[serde(default)]
    pub scaling: Option<sharpdraft_decode::scaling::ScalingSpec>,
    /// Start from this drafter (a name or a folder in the method's published layout) instead of the
    /// method's own initialisation.
    #[serde(default)]
    pub init: Option<String>,
    #[serde(default = "sharpdraft_model::default_device")]
    pub device: String,
}

fn default_lr() -> f64 {
    1e-3
}
fn default_every() -> usize {
    100
}
fn default_top_k() -> i64 {
    32
}

/// The record of the config a run was started with, kept beside its checkpoint.
const CONFIG_RECORD: &str = "train_config.yaml";

impl TrainConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut config: Self = serde_norway::from_str(&text)
            .with_context(|| format!("{}: invalid training config", path.display()))?;
        config.data = sharpdraft_data::datasets::expand_includes(&config.data, path)?;
        Ok(config)
    }

    /// Where the drafter goes: `out` as a path when it has a separator, else a model name.
    pub fn out_dir(&self) -> PathBuf {
        if self.out.contains('/') {
            PathBuf::from(&self.out)
        } else {
            registry::model_dir(&self.out)
        }
    }

    fn loop_config(&self) -> LoopOptions {
        LoopOptions {
            n0: self.n0,
            steps: self.steps,
            learning_rate: self.learning_rate,
            weight_decay: self.weight_decay,
            seed: self.seed,
            checkpoint_every: self.checkpoint_every,
            warmup_steps: self.warmup_steps,
            decay: self.lr_decay,
        }
    }

    /// Checks against the target before any compute: exactly the method's block, n0 within the target's
    /// context, sizes that fit, and a starting drafter (if named) whose geometry fits the target.
    pub fn validate(&self, target: &CausalLm) -> Result<()> {
        let t = &target.net.config;
        self.validate_sizes(t)?;
        match &self.kind {
            DrafterKindOptions::Eagle3(e) => validate_eagle3(e, t)?,
            DrafterKindOptions::Pard(p) => self.validate_pard(p, t)?,
            DrafterKindOptions::Dflash(d) => self.validate_dflash(d, t)?,
        }
        if let Some(init) = &self.init {
            self.validate_init(init, t)?;
        }
        Ok(())
    }

    /// The method-independent keys: counts, data, n0, optimiser settings and top-k against the target.
    fn validate_sizes(&self, t: &ModelConfig) -> Result<()> {
        ensure!(
            self.windows >= 1,
            "windows = {} must be at least 1",
            self.windows
        );
        ensure!(self.steps >= 1, "steps = {} must be at least 1", self.steps);
        ensure!(!self.data.is_empty(), "data: at least one source is needed");
        ensure!(
            self.n0 >= 8 && self.n0 <= t.max_position_embeddings,
            "n0 = {} must lie in 8..={} (the target's max_position_embeddings)",
            self.n0,
            t.max_position_embeddings
        );
        ensure!(
            self.learning_rate > 0.0 && self.learning_rate.is_finite(),
            "learning_rate = {} must be > 0",
            self.learning_rate
        );
        ensure!(
            (0.0..1.0).contains(&self.weight_decay),
            "weight_decay = {} must lie in [0, 1)",
            self.weight_decay
        );
        ensure!(
            self.top_k_targets >= 1 && self.top_k_targets <= t.vocab_size,
            "top_k_targets = {} must lie in 1..={}",
            self.top_k_targets,
            t.vocab_size
        );
        Ok(())
    }

    /// The `pard:` block: layer count and sources within the target, mask token, copies below n0.
    fn validate_pard(&self, p: &PardOptions, t: &ModelConfig) -> Result<()> {
        ensure!(
            p.layers >= 1 && p.layers <= t.num_layers,
            "pard.layers = {} must lie in 1..={} (the target's layers)",
            p.layers,
            t.num_layers
        );
        ensure_in_vocab("pard.mask_token", p.mask_token, t)?;
        let sources = p.source_layers();
        ensure!(
            sources.len() == p.layers
                && sources.windows(2).all(|w| w[0] < w[1])
                && sources.iter().all(|&j| j < t.num_layers),
            "pard.from_layers {sources:?} must name {} increasing layers of the {}-layer target",
            p.layers,
            t.num_layers
        );
        ensure!(
            p.trainable_from < p.layers,
            "pard.trainable_from = {} leaves none of the {} layers to train",
            p.trainable_from,
            p.layers
        );
        ensure!(
            p.copies >= 1 && (p.copies as i64) < self.n0,
            "pard.copies = {} must lie in 1..n0",
            p.copies
        );
        ensure!(
            p.keep_ratio > 0.0 && p.keep_ratio <= 1.0 && p.min_keep > 0.0 && p.min_keep <= 1.0,
            "pard.keep_ratio and pard.min_keep must lie in (0, 1]"
        );
        Ok(())
    }

    /// The `dflash:` block: layers within the target, a block shorter than n0, mask token, layer ids.
    fn validate_dflash(&self, d: &DFlashOptions, t: &ModelConfig) -> Result<()> {
        ensure!(
            d.layers >= 1 && d.layers <= t.num_layers,
            "dflash.layers = {} must lie in 1..={} (the target's layers)",
            d.layers,
            t.num_layers
        );
        ensure!(
            d.block_size >= 2 && d.block_size < self.n0,
            "dflash.block_size = {} must lie in 2..n0",
            d.block_size
        );
        ensure_in_vocab("dflash.mask_token", d.mask_token, t)?;
        ensure!(
            d.gamma > 0.0 && d.anchors >= 1,
            "dflash.gamma must be > 0 and dflash.anchors at least 1"
        );
        let ids = d.target_layers(t.num_layers);
        ensure!(
            ids.iter().all(|&i| i < t.num_layers),
            "dflash.target_layer_ids {ids:?} do not fit a {}-layer target",
            t.num_layers
        );
        Ok(())
    }

    /// The `init:` drafter's config.json: its hidden size (except for PARD) and vocabulary must be the
    /// target's.
    fn validate_init(&self, init: &str, t: &ModelConfig) -> Result<()> {
        let dir = registry::resolve(init).with_context(|| format!("init: {init}"))?;
        let path = dir.join("config.json");
        let raw: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("{}: not JSON", path.display()))?;
        let hidden = raw["hidden_size"]
            .as_i64()
            .with_context(|| format!("{}: no hidden_size", path.display()))?;
        if self.kind.kind() != DrafterKind::Pard {
            ensure!(
                hidden == t.hidden_size,
                "init {}: hidden_size {hidden} does not fit the target's {}",
                path.display(),
                t.hidden_size
            );
        }
        let vocab = raw["vocab_size"]
            .as_i64()
            .with_context(|| format!("{}: no vocab_size", path.display()))?;
        ensure!(
            vocab == t.vocab_size,
            "init {}: vocab_size {vocab} differs from the target's {}",
            path.display(),
            t.vocab_size
        );
        Ok(())
    }
}

/// A token id named by `key` must lie in the target's vocabulary.
fn ensure_in_vocab(key: &str, id: i64, t: &ModelConfig) -> Result<()> {
    ensure!(
        id >= 0 && id < t.vocab_size,
        "{key} = {id} lies outside the target's vocabulary of {}",
        t.vocab_size
    );
    Ok(())
}

/// The `eagle3:` block: draft vocabulary within the target's, TTT steps, and capture layers.
fn validate_eagle3(e: &Eagle3Options, t: &ModelConfig) -> Result<()> {
    ensure!(
        e.draft_vocab >= 2 && e.draft_vocab <= t.vocab_size,
        "eagle3.draft_vocab = {} must lie in 2..={}",
        e.draft_vocab,
        t.vocab_size
    );
    ensure!(e.ttt_steps >= 1, "eagle3.ttt_steps must be at least 1");
    match &e.capture_layers {
        Some(layers) => ensure!(
            layers.len() == 3 && layers.iter().all(|&i| i <= t.num_layers),
            "eagle3.capture_layers {layers:?} must name 3 layers of the {}-layer target (0..={})",
            t.num_layers,
            t.num_layers
        ),
        None => ensure!(
            t.num_layers >= 4,
            "EAGLE-3 captures layers 2, L/2 and L-3 by default: the target needs at least 4 layers (or give eagle3.capture_layers)"
        ),
    }
    Ok(())
}

/// Progress bar (or a log line every 50 steps without a terminal) and the loss curve at checkpoints.
struct Progress {
    bar: indicatif::ProgressBar,
    tokens_per_step: f64,
    title: String,
}

impl Progress {
    /// A bar of `steps` positions titled with the method, target and n0 (the loss curve's title).
    fn new(config: &TrainConfig) -> Self {
        let bar = indicatif::ProgressBar::new(config.steps as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} steps, loss {msg} [{elapsed_precise} < {eta}]",
            )
            .expect("valid template"),
        );
        let title = format!(
            "{} drafter for {} (n0 = {})",
            config.kind.kind(),
            config.target,
            config.n0
        );
        Progress {
            bar,
            tokens_per_step: config.n0 as f64,
            title,
        }
    }
}

impl TrainObserver for Progress {
    fn step(&mut self, state: &TrainState) {
        let rate = state.step as f64 * self.tokens_per_step
            / state.seconds.last().copied().unwrap_or(1.0).max(1e-9);
        let loss = state.losses.last().copied().unwrap_or(f64::NAN);
        self.bar.set_position(state.step as u64);
        self.bar
            .set_message(format!("{loss:.3}, {rate:.0} tokens/s"));
        if self.bar.is_hidden()
            && (state.step % 50 == 0 || state.step as u64 == self.bar.length().unwrap_or(0))
        {
            eprintln!(
                "step {}/{}: loss {loss:.3}, {rate:.0} tokens/s",
                state.step,
                self.bar.length().unwrap_or(0)
            );
        }
    }

    fn checkpoint(
        &mut self,
        state: &TrainState,
        dir: &Path,
    ) -> sharpdraft_draft::drafter::Result<()> {
        loss_curve::write(state, dir, &self.title).map_err(|e| {
            sharpdraft_draft::DraftError::Checkpoint {
                path: dir.display().to_string(),
                reason: format!("{e:#}"),
            }
        })
    }
}

/// Runs a training config; returns the drafter's folder.
pub fn run(config_path: &Path) -> Result<PathBuf> {
    let config = TrainConfig::load(config_path)?;
    let device = sharpdraft_model::parse_device(&config.device)?;
    let out_dir = config.out_dir();
    // The folder must be new, empty, or this config's own run, before any compute is spent.
    let target_dir = registry::resolve(&config.target)?;
    let init_dir = match &config.init {
        Some(init) => Some(registry::resolve(init).with_context(|| format!("init: {init}"))?),
        None => None,
    };
    let mut inputs = vec![target_dir.as_path(), config_path];
    inputs.extend(init_dir.as_deref());
    // One command at a time per folder, as `run` holds its own: two trainings of one config would
    // swap the folder under each other.
    let _lock = sharpdraft_store::folder_lock::FolderLock::acquire(&out_dir, "train")?;
    let claim = output_folder::claim(&out_dir, "train", &inputs)
        .with_context(|| format!("{}: out", config_path.display()))?;
    let target = CausalLm::load(&target_dir, device, Kind::Float)
        .with_context(|| format!("loading target {}", config.target))?;
    config.validate(&target)?;
    let record = out_dir.join(CONFIG_RECORD);
    let about = format!("training run of {}", config_path.display());
    let resuming = prepare_out_folder(&config, claim, &out_dir, &record)?;
    // Unfinished until the last step is saved: a run killed before then is refused by every loader.
    output_folder::Marker::new("train", false, about.clone()).write(&out_dir)?;
    if resuming {
        eprintln!("resuming the run in {}", shown(&out_dir));
    }
    eprintln!("building the training text ({} sources)", config.data.len());
    let stream = token_stream(
        &config.data,
        config_path.parent().unwrap_or(Path::new(".")),
        &target,
    )?;
    ensure_same_training_text(&out_dir, &stream, resuming)?;
    // The drafter's checkpoint decides which target layers it reads. A run that resumes, or starts from
    // an `init:` drafter, loads that checkpoint first and extracts features at its layers; a fresh run
    // writes a drafter with the configured (or default) layers and checks that it reads those.
    let starts_from_checkpoint = resuming || init_dir.is_some();
    let (mut objective, windows) = if starts_from_checkpoint {
        start_from_checkpoint(
            &config,
            resuming,
            init_dir.as_deref(),
            &out_dir,
            &target,
            &stream,
            device,
        )?
    } else {
        start_fresh(&config, &out_dir, &target, &stream, device)?
    };
    write_config_record(&config, &record)?;
    if let Some(spec) = &config.scaling {
        apply_query_scaling(&config, spec, config_path, objective.as_mut())?;
    }
    let mut progress = Progress::new(&config);
    let state = train(
        objective.as_ref(),
        &windows,
        &out_dir,
        &config.loop_config(),
        &mut progress,
    )?;
    progress.bar.finish();
    if state.losses.is_empty() {
        bail!("no training step was run");
    }
    // The target's windows were kept for a resume; a finished run has none left to make.
    if let Err(e) = target_windows::remove(&out_dir) {
        eprintln!("{e:#}: delete it by hand; the drafter does not need it");
    }
    output_folder::Marker::new("train", true, about).write(&out_dir)?;
    Ok(out_dir)
}

/// Makes a fresh folder, or checks that an own folder holds a run of this config; returns whether a
/// checkpoint is there to resume.
fn prepare_out_folder(
    config: &TrainConfig,
    claim: output_folder::Claim,
    out_dir: &Path,
    record: &Path,
) -> Result<bool> {
    Ok(match claim {
        output_folder::Claim::Fresh => {
            std::fs::create_dir_all(out_dir)
                .with_context(|| format!("creating {}", out_dir.display()))?;
            false
        }
        output_folder::Claim::Own(_) => {
            if record.exists() {
                let previous: TrainConfig = serde_norway::from_str(
                    &std::fs::read_to_string(record)
                        .with_context(|| format!("reading {}", record.display()))?,
                )
                .with_context(|| format!("{}: unreadable", record.display()))?;
                // More steps (or another checkpoint interval) continue the run; anything else is
                // another run.
                let comparable = |c: &TrainConfig| TrainConfig {
                    steps: 0,
                    checkpoint_every: 0,
                    ..c.clone()
                };
                ensure!(
                    comparable(&previous) == comparable(config),
                    "{} holds a run of another config ({}); give this one another `out` or delete that folder",
                    out_dir.display(),
                    record.display()
                );
            }
            TrainState::load(out_dir)?.is_some()
        }
    })
}

/// Target windows of `n0` tokens with the features at `taps` (`[n0, taps * H]` each) and top-k targets:
/// the ones this run kept in `out_dir` when their key matches, else extracted and kept there until the
/// run's last step ([`target_windows`]).
fn extract_target_windows(
    config: &TrainConfig,
    target: &CausalLm,
    stream: &[i64],
    taps: &[Tap],
    out_dir: &Path,
) -> Result<Vec<TrainWindow>> {
    let key = target_windows::WindowsKey {
        target: &config.target,
        stream,
        taps,
        n0: config.n0,
        max_windows: config.windows,
        top_k: config.top_k_targets,
    }
    .digest();
    if let Some(windows) = target_windows::load(out_dir, &key, target.net.device())? {
        eprintln!(
            "read the target's {} windows this run kept in {}",
            windows.len(),
            shown(&out_dir.join(target_windows::FILE))
        );
        return Ok(windows);
    }
    eprintln!(
        "extracting target features: {} tokens, up to {} windows of {}",
        stream.len(),
        config.windows,
        config.n0
    );
    let windows = extract_windows(
        &target.net,
        taps,
        stream,
        config.n0,
        config.windows,
        config.top_k_targets,
    )?;
    eprintln!(
        "{} windows ({} tokens)",
        windows.len(),
        windows.len() as i64 * config.n0
    );
    // Keeping them only spares a resume the extraction: a failed write (a full disk) costs no run.
    if let Err(e) = target_windows::save(out_dir, &key, &windows) {
        eprintln!("the target's windows are not kept ({e:#}); a resumed run extracts them again");
    }
    Ok(windows)
}

/// Resuming, or starting from `init:`: loads that checkpoint (copied in first for `init:`) and extracts
/// features at the layers it reads.
fn start_from_checkpoint<'t>(
    config: &TrainConfig,
    resuming: bool,
    init_dir: Option<&Path>,
    out_dir: &Path,
    target: &'t CausalLm,
    stream: &[i64],
    device: tch::Device,
) -> Result<(Box<dyn OwnedObjective + 't>, Vec<TrainWindow>)> {
    if let (false, Some(init)) = (resuming, init_dir) {
        copy_checkpoint(init, out_dir)?;
    }
    let objective = load_objective(config, out_dir, target, device)?;
    let taps = objective.target_taps();
    let source = if resuming {
        format!("this run's checkpoint in {}", out_dir.display())
    } else {
        format!(
            "the init: checkpoint {}",
            config.init.as_deref().unwrap_or_default()
        )
    };
    ensure_configured_layers_match(config, &taps, &source)?;
    Ok((
        objective,
        extract_target_windows(config, target, stream, &taps, out_dir)?,
    ))
}

/// A fresh run: extracts features at the configured layers, writes the method's initial drafter and
/// checks that it reads those layers.
fn start_fresh<'t>(
    config: &TrainConfig,
    out_dir: &Path,
    target: &'t CausalLm,
    stream: &[i64],
    device: tch::Device,
) -> Result<(Box<dyn OwnedObjective + 't>, Vec<TrainWindow>)> {
    let taps = configured_taps(config, target.net.config.num_layers);
    let windows = extract_target_windows(config, target, stream, &taps, out_dir)?;
    match &config.kind {
        DrafterKindOptions::Eagle3(e) => {
            eagle3_train::init(out_dir, target, &windows, e, config.seed)?
        }
        DrafterKindOptions::Pard(p) => pard_train::init(out_dir, target, p)?,
        DrafterKindOptions::Dflash(d) => dflash_train::init(out_dir, target, &windows, d)?,
    }
    let objective = load_objective(config, out_dir, target, device)?;
    ensure!(
        objective.target_taps() == taps,
        "the drafter written in {} reads target features {:?}, not the {:?} extracted for it",
        out_dir.display(),
        objective.target_taps(),
        taps
    );
    Ok((objective, windows))
}

/// The file beside the checkpoint holding the sha256 of the training text's token ids.
const TEXT_RECORD: &str = "training_text.sha256";

/// Records the digest of the training text's tokens (`stream`) in `out_dir`, or, when `resuming`,
/// refuses a text other than the one the run's earlier steps learned from: a config's data sources can
/// name the same files while their content changed.
fn ensure_same_training_text(out_dir: &Path, stream: &[i64], resuming: bool) -> Result<()> {
    let digest = sharpdraft_data::datasets::ids_digest(stream);
    let record = out_dir.join(TEXT_RECORD);
    if resuming {
        // A run whose text was never recorded (the record deleted, or the folder older than it)
        // cannot be shown to have learned from this text: resuming it could continue over any text.
        let Ok(recorded) = std::fs::read_to_string(&record) else {
            bail!(
                "{} holds an unfinished run without {TEXT_RECORD}, the digest of the text its steps learned from: it cannot be resumed over this text; give this run another `out`, or move that folder away to train anew",
                out_dir.display()
            );
        };
        ensure!(
            recorded.trim() == digest,
            "{} holds a run that learned from another training text ({} records sha256 {}, the text is {} now): its data files changed; restore them, or give this run another `out`",
            out_dir.display(),
            record.display(),
            recorded.trim().chars().take(12).collect::<String>(),
            &digest[..12]
        );
        return Ok(());
    }
    sharpdraft_store::atomic_write::write_whole(&record, format!("{digest}\n"))?;
    Ok(())
}

/// Writes the config beside the checkpoint (through a temporary file) so that a rerun can tell its own
/// run from another.
fn write_config_record(config: &TrainConfig, record: &Path) -> Result<()> {
    let tmp = record.with_extension("tmp");
    let writing = || format!("writing the resume record {}", record.display());
    std::fs::write(&tmp, serde_norway::to_string(config)?).with_context(writing)?;
    std::fs::rename(&tmp, record).with_context(writing)?;
    Ok(())
}

/// Sets the configured query scaling on the objective; a schedule path with a separator is read
/// relative to the config's folder.
fn apply_query_scaling(
    config: &TrainConfig,
    spec: &sharpdraft_decode::scaling::ScalingSpec,
    config_path: &Path,
    objective: &mut dyn OwnedObjective,
) -> Result<()> {
    let mut spec = spec.clone();
    if let Some(schedule) = spec
        .schedule
        .as_ref()
        .filter(|s| s.to_string_lossy().contains('/'))
    {
        spec.schedule = Some(
            config_path
                .parent()
                .unwrap_or(Path::new("."))
                .join(schedule),
        );
    }
    let what = format!("the {} drafter in training", config.kind.kind());
    let scaling = spec.build_for(objective, Some(config.n0), &what)?;
    objective.set_query_scaling(scaling);
    Ok(())
}

/// The method's objective over the drafter in `dir`.
fn load_objective<'t>(
    config: &TrainConfig,
    dir: &Path,
    target: &'t CausalLm,
    device: tch::Device,
) -> Result<Box<dyn OwnedObjective + 't>> {
    Ok(match &config.kind {
        DrafterKindOptions::Eagle3(e) => Box::new(Eagle3Objective::load(dir, &target.net, e)?),
        DrafterKindOptions::Pard(p) => Box::new(PardObjective::load(dir, device, p, config.seed)?),
        DrafterKindOptions::Dflash(d) => {
            Box::new(DFlashObjective::load(dir, &target.net, d, config.seed)?)
        }
    })
}

/// The target features a fresh drafter of this config reads: EAGLE-3's capture layers (inputs of
/// `eagle3.capture_layers`, default `[2, L/2, L-3]`), DFlash's `target_layer_ids` outputs, none for PARD.
pub fn configured_taps(config: &TrainConfig, target_layers: usize) -> Vec<Tap> {
    match &config.kind {
        DrafterKindOptions::Eagle3(e) => e
            .capture_layers
            .clone()
            .unwrap_or_else(|| sharpdraft_draft::eagle3::default_capture_layers(target_layers))
            .into_iter()
            .map(Tap::LayerInput)
            .collect(),
        DrafterKindOptions::Pard(_) => Vec::new(),
        DrafterKindOptions::Dflash(d) => d.taps(target_layers),
    }
}

/// The layers a config names explicitly (`eagle3.capture_layers`, `dflash.target_layer_ids`) must be
/// the ones its starting checkpoint reads: an error names both lists.
fn ensure_configured_layers_match(
    config: &TrainConfig,
    checkpoint_taps: &[Tap],
    source: &str,
) -> Result<()> {
    let layer = |tap: &Tap| match tap {
        Tap::LayerInput(i) | Tap::LayerOutput(i) => *i,
    };
    let checkpoint: Vec<usize> = checkpoint_taps.iter().map(layer).collect();
    let (key, configured) = match &config.kind {
        DrafterKindOptions::Eagle3(e) => ("eagle3.capture_layers", e.capture_layers.clone()),
        DrafterKindOptions::Dflash(d) => ("dflash.target_layer_ids", d.target_layer_ids.clone()),
        DrafterKindOptions::Pard(_) => return Ok(()),
    };
    if let Some(configured) = configured {
        ensure!(
            configured == checkpoint,
            "{key} {configured:?} differs from the layers {checkpoint:?} that {source} reads; drop the key or make it match"
        );
    }
    Ok(())
}

/// Copies a starting drafter's config.json, weights and tokenizer files into `out`.
fn copy_checkpoint(from: &Path, out: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if name == "config.json"
            || name.ends_with(".safetensors")
            || name.starts_with("tokenizer")
            || name == "special_tokens_map.json"
        {
            std::fs::copy(&path, out.join(&name))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}
