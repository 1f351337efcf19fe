//! The experiment YAML: a target, drafters (the drafter specification), methods, workloads, seeds. Strict:
//! unknown keys are rejected, and every error names the file, the key path and the line. A list item may
//! be a path to a YAML file holding that block (`configs/`), read with its own file and line numbers:
//!
//! ```yaml
//! name: quickstart
//! target: smollm2-135m-instruct
//! drafters:
//!   - ../configs/drafters/smollm2-dflash.yaml          # a block from configs/
//!   - {name: eagle, spec: {method: eagle3, checkpoint: smollm2-135m-eagle3}}
//! methods:
//!   - {name: ar, target_only: true}                     # the speedup's denominator
//!   - {name: unmodified}
//!   - {name: fixed, scaling: {mode: fixed, beta: 0.3}}
//!   - {name: lora, adapt: {mode: lora, every: 8}}
//! workloads:
//!   - ../configs/workloads/mtbench-long-prompt.yaml
//! ```

use super::prompts::{ExcerptSpacing, FillerSource, PromptSource};
use crate::error::{bail, ensure, Context, LabError, Result};
use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};
use sharpdraft_decode::drafter_spec::{DrafterSpec, DrafterSpecPatch, Patch, Status};
use sharpdraft_decode::scaling::{is_calibration_name, ScalingMode, ScalingSpec};
pub use sharpdraft_report::outline::Setting;
use sharpdraft_report::outline::{
    ExperimentHeader, MethodOutline, Outline, SlopeRole, WorkloadOutline,
};
/// A path as written in a config file: [`sharpdraft_store::paths::beside`].
pub use sharpdraft_store::paths::beside;
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// A list item written in place, or the path of a YAML file that holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Block<T> {
    Inline(T),
    File(PathBuf),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Block<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct BlockVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for BlockVisitor<T> {
            type Value = Block<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a block (a mapping) or the path of a YAML file holding one")
            }
            fn visit_str<E: de::Error>(self, path: &str) -> std::result::Result<Block<T>, E> {
                Ok(Block::File(PathBuf::from(path)))
            }
            // The mapping goes to T through the YAML reader's own map access, so T's errors keep
            // their line numbers.
            fn visit_map<M: MapAccess<'de>>(
                self,
                map: M,
            ) -> std::result::Result<Block<T>, M::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Block::Inline)
            }
        }
        deserializer.deserialize_any(BlockVisitor(PhantomData))
    }
}

impl<T> Block<T> {
    /// The file this block was written in: its own file, or `experiment` for an inline block.
    fn origin(&self, experiment: &Path) -> PathBuf {
        match self {
            Block::File(p) => beside(experiment, p),
            Block::Inline(_) => experiment.to_path_buf(),
        }
    }
}

impl<T: Serialize> Serialize for Block<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Block::Inline(t) => t.serialize(s),
            Block::File(p) => p.serialize(s),
        }
    }
}

/// Reads YAML `text` (from `file`) as `T`; an error names the file, the key path and the line.
pub fn parse_yaml<T: DeserializeOwned>(text: &str, file: &Path) -> Result<T> {
    let deserializer = serde_norway::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." {
            "(top level)".to_string()
        } else {
            key
        };
        // The YAML reader prefixes its own (shorter) path; the full one is already given.
        let message = e.into_inner().to_string();
        let message = match message.split_once(": ") {
            Some((prefix, rest)) if key.starts_with(prefix) && !prefix.contains(' ') => {
                rest.to_string()
            }
            _ => message,
        };
        // `method` is `kind`'s old spelling (one field under two names): a mapping with both reads as
        // `kind` given twice, which names a key the user may not have written twice.
        let message = if message.starts_with("duplicate field `kind`") {
            format!("{message}: `method` is the old spelling of `kind`; give one of them")
        } else {
            message
        };
        LabError::Invalid(format!("{}: key {key}: {message}", file.display()))
    })
}

/// One drafter of the grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrafterEntry {
    /// The drafter's name in results and reports.
    pub name: String,
    /// What it is and how it drafts; each method overlays its own options on this.
    pub spec: DrafterSpec,
    /// A training config (`configs/train/`) run first when the checkpoint is missing.
    #[serde(default)]
    pub train: Option<PathBuf>,
    /// This drafter's calibrated schedule (a path or a calibration's name), used by methods whose
    /// `scaling` names neither a schedule nor a beta.
    #[serde(default)]
    pub schedule: Option<PathBuf>,
    /// A calibrate config (`configs/calibrate/`) run first when `schedule` is missing and needed.
    #[serde(default)]
    pub calibrate: Option<PathBuf>,
    /// The drafting methods this drafter runs, by name; every drafting method when absent. A method that
    /// means nothing for a drafter (query scaling below the length a drafter was trained at) then costs
    /// no hours of decoding that repeat another arm's.
    #[serde(default)]
    pub methods: Option<Vec<String>>,
}

impl DrafterEntry {
    /// Whether this drafter runs `method` (a drafting method).
    pub fn runs(&self, method: &MethodEntry) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| *n == method.name))
    }
}

/// One method: the target alone, or every drafter with this method's drafting options set over its own
/// specification. Those options are a [`DrafterSpecPatch`] (any option of a drafter specification but
/// its kind and checkpoint), written at the method's top level beside `name`:
/// `{name: lora, adapt: {mode: lora}}`, `{name: chains-of-8, draft_len: 8}`. An option the drafter's
/// kind would ignore (`draft_len` on DFlash) is refused, naming the drafter and the method.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct MethodEntry {
    pub name: String,
    /// Autoregressive decoding by the target alone: the baseline speedups are measured against.
    pub target_only: bool,
    /// A sensitivity curve: this entry becomes one method per beta, each `fixed` scaling with that
    /// constant slope (and this entry's `scaling.n0`, if any), named `<name>-<beta>`. The report draws
    /// tau against beta per context with the calibrated schedule marked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta_sweep: Option<Vec<f64>>,
    /// The drafting options this method sets over each drafter's specification.
    #[serde(flatten)]
    pub drafting: DrafterSpecPatch,
}

// By hand rather than `#[serde(flatten)]`: flattening buffers the mapping, so an error in a drafting
// option would lose its line and key path and an unknown key would pass unnoticed. Here the method's
// own keys are taken out of the YAML reader's map as they come and every other key goes on, unbuffered,
// to `DrafterSpecPatch`'s strict deserialiser.
impl<'de> Deserialize<'de> for MethodEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct MethodVisitor;
        impl<'de> Visitor<'de> for MethodVisitor {
            type Value = MethodEntry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a method: a mapping with `name` and its drafting options")
            }
            fn visit_map<M: MapAccess<'de>>(
                self,
                map: M,
            ) -> std::result::Result<MethodEntry, M::Error> {
                let mut own = MethodOwnKeys::default();
                let drafting = DrafterSpecPatch::deserialize(
                    de::value::MapAccessDeserializer::new(MethodKeys { map, own: &mut own }),
                )?;
                Ok(MethodEntry {
                    name: own.name.ok_or_else(|| de::Error::missing_field("name"))?,
                    target_only: own.target_only,
                    beta_sweep: own.beta_sweep,
                    drafting,
                })
            }
        }
        deserializer.deserialize_map(MethodVisitor)
    }
}

/// A key of a method that is not a drafting option: one per field of [`MethodOwnKeys`], so reading one
/// is an exhaustive match.
#[derive(Clone, Copy)]
enum OwnKey {
    Name,
    TargetOnly,
    BetaSweep,
}

impl OwnKey {
    const ALL: [OwnKey; 3] = [OwnKey::Name, OwnKey::TargetOnly, OwnKey::BetaSweep];

    fn key(self) -> &'static str {
        match self {
            OwnKey::Name => "name",
            OwnKey::TargetOnly => "target_only",
            OwnKey::BetaSweep => "beta_sweep",
        }
    }
}

/// A method's keys that are not drafting options.
#[derive(Default)]
struct MethodOwnKeys {
    name: Option<String>,
    target_only: bool,
    beta_sweep: Option<Vec<f64>>,
}

/// A method's mapping as its drafting options see it: its own keys (`name`, `target_only`,
/// `beta_sweep`) are read into `own` on the way.
struct MethodKeys<'a, M> {
    map: M,
    own: &'a mut MethodOwnKeys,
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for MethodKeys<'_, M> {
    type Error = M::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> std::result::Result<Option<K::Value>, M::Error> {
        let mut seed = seed;
        loop {
            match self.map.next_key_seed(MethodKey(seed))? {
                None => return Ok(None),
                Some(Key::Drafting(key)) => return Ok(Some(key)),
                Some(Key::Own(own_key, unused)) => {
                    seed = unused;
                    match own_key {
                        OwnKey::Name => self.own.name = Some(self.map.next_value()?),
                        OwnKey::TargetOnly => self.own.target_only = self.map.next_value()?,
                        OwnKey::BetaSweep => self.own.beta_sweep = self.map.next_value()?,
                    }
                }
            }
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> std::result::Result<V::Value, M::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A key of a method's mapping: one of the method's own (with the drafting options' key reader, unused),
/// or a drafting option's, as that reader read it.
enum Key<K, V> {
    Own(OwnKey, K),
    Drafting(V),
}

/// Reads a key of a method's mapping inside the YAML reader's own key, so a drafting option's unknown
/// key is reported at its line.
struct MethodKey<K>(K);

impl<'de, K: de::DeserializeSeed<'de>> de::DeserializeSeed<'de> for MethodKey<K> {
    type Value = Key<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, K: de::DeserializeSeed<'de>> Visitor<'de> for MethodKey<K> {
    type Value = Key<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key of a method")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> std::result::Result<Self::Value, E> {
        match OwnKey::ALL.into_iter().find(|own| own.key() == key) {
            Some(own) => Ok(Key::Own(own, self.0)),
            // Read with serde's plain error so an unknown key's message, which lists the drafting
            // options, can name the method's own keys too.
            None => self
                .0
                .deserialize(de::value::StrDeserializer::<de::value::Error>::new(key))
                .map(Key::Drafting)
                .map_err(|e| {
                    let own = OwnKey::ALL.map(|k| format!("`{}`", k.key())).join(", ");
                    E::custom(format!("{e}, or one of a method's own: {own}"))
                }),
        }
    }
}

/// The most betas one sweep may list.
pub const MAX_SWEEP: usize = 64;

/// A sweep beta as its method's name gives it: as written when short (`0.3`), else in exponent form
/// (`1e-300`, not three hundred digits).
fn beta_label(beta: f64) -> String {
    let plain = beta.to_string();
    if plain.len() <= 12 {
        plain
    } else {
        format!("{beta:e}")
    }
}

impl MethodEntry {
    /// The methods this entry stands for: itself, or one `fixed` method per beta of its sweep.
    fn expand(self, file: &Path) -> Result<Vec<MethodEntry>> {
        let Some(betas) = self.beta_sweep.clone() else {
            return Ok(vec![self]);
        };
        let f = file.display();
        let name = &self.name;
        ensure!(
            !self.target_only,
            "{f}: method {name:?}: beta_sweep with target_only: the target alone has no drafter to scale"
        );
        ensure!(
            (1..=MAX_SWEEP).contains(&betas.len()),
            "{f}: method {name:?}: beta_sweep lists {} betas; give 1 to {MAX_SWEEP}",
            betas.len()
        );
        let scaling = self
            .drafting
            .scaling
            .clone()
            .unwrap_or_else(|| ScalingSpec {
                mode: ScalingMode::Fixed,
                ..ScalingSpec::default()
            });
        ensure!(
            matches!(scaling.mode, ScalingMode::Fixed | ScalingMode::Off)
                && scaling.schedule.is_none()
                && scaling.beta.is_none(),
            "{f}: method {name:?}: beta_sweep sets fixed scaling with each beta; its scaling may give n0 alone (not a mode other than fixed, a schedule or a beta)"
        );
        let mut seen = Vec::with_capacity(betas.len());
        betas
            .iter()
            .map(|&beta| {
                ensure!(
                    beta.is_finite() && beta >= 0.0,
                    "{f}: method {name:?}: beta_sweep value {beta} must be finite and >= 0"
                );
                // -0.0 is the slope 0: one method, one name.
                let beta = if beta == 0.0 { 0.0 } else { beta };
                ensure!(
                    !seen.contains(&beta),
                    "{f}: method {name:?}: beta_sweep lists beta {beta} twice (-0 is 0): each beta is one method"
                );
                seen.push(beta);
                Ok(MethodEntry {
                    name: format!("{name}-{}", beta_label(beta)),
                    beta_sweep: None,
                    drafting: DrafterSpecPatch {
                        scaling: Some(ScalingSpec {
                            mode: ScalingMode::Fixed,
                            beta: Some(beta),
                            ..scaling.clone()
                        }),
                        ..self.drafting.clone()
                    },
                    ..self.clone()
                })
            })
            .collect()
    }

    /// This method as a report tells methods apart.
    fn outline(&self) -> MethodOutline {
        MethodOutline {
            name: self.name.clone(),
            target_only: self.target_only,
            slope: self.slope_role(),
            reads_target_attention: self.drafting.retrieval.is_some(),
        }
    }

    /// Where its scaling places this method on the slope chart: a constant beta (none, off, or a fixed
    /// beta), a calibrated schedule (fixed or exact from a schedule), or apart (the literature's
    /// rules, the target alone, and any drafting option besides scaling: adaptation, a window,
    /// retrieval, another chain or tree).
    fn slope_role(&self) -> SlopeRole {
        let besides_scaling = DrafterSpecPatch {
            scaling: None,
            ..self.drafting.clone()
        };
        if self.target_only || !besides_scaling.is_empty() {
            return SlopeRole::Apart;
        }
        match &self.drafting.scaling {
            None => SlopeRole::Constant,
            Some(s) => match s.mode {
                ScalingMode::Off => SlopeRole::Constant,
                ScalingMode::Fixed if s.beta.is_some() => SlopeRole::Constant,
                ScalingMode::Fixed | ScalingMode::Exact => SlopeRole::Calibrated,
                _ => SlopeRole::Apart,
            },
        }
    }

    /// Whether this method scales with each drafter's own calibrated schedule: fixed or exact scaling
    /// that names neither a schedule nor a beta.
    pub fn scales_with_drafter_schedule(&self) -> bool {
        self.drafting.scaling.as_ref().is_some_and(|s| {
            matches!(s.mode, ScalingMode::Fixed | ScalingMode::Exact)
                && s.schedule.is_none()
                && s.beta.is_none()
        })
    }
}

/// A set of prompts and how they are run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    pub setting: Setting,
    #[serde(with = "serde_norway::with::singleton_map_recursive")]
    pub prompts: PromptSource,
    /// Prompts to skip (those the drafters were trained on).
    #[serde(default)]
    pub skip: usize,
    pub count: usize,
    pub max_new_tokens: usize,
    /// Long prompt: context lengths in tokens when drafting starts (0: the prompt alone).
    #[serde(default)]
    pub contexts: Vec<usize>,
    /// Long prompt: the long text excerpts come from.
    #[serde(default, with = "serde_norway::with::singleton_map_recursive")]
    pub filler: Option<FillerSource>,
    /// Tokens of the filler to skip (keep excerpts clear of text a drafter was trained on).
    #[serde(default)]
    pub filler_offset: usize,
    /// Long prompt: how the prompts' excerpts are placed past `filler_offset` (`stepped`, 1009 tokens
    /// apart, or `spread` over the whole filler).
    #[serde(default)]
    pub excerpts: ExcerptSpacing,
    /// Keep generating past end-of-sequence tokens (long generation at a fixed length, as vLLM's
    /// `ignore_eos`); lossless verification is unaffected.
    #[serde(default)]
    pub ignore_eos: bool,
}

/// The fastest dtype of the target on the machine that runs it (`sharpdraft_model::fastest_dtype`),
/// resolved when a run starts and recorded as resolved.
fn default_dtype() -> String {
    "auto".into()
}
fn default_seeds() -> Vec<u64> {
    vec![0]
}
fn default_repeats() -> usize {
    1
}
fn default_bins_n0() -> Vec<f64> {
    vec![0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
}

/// How a unit keeps other processes' load out of its timings: an arm whose decode of a request ran while
/// other processes took more than a tenth of the cores is decoded again once the machine is quiet, up
/// to `retries` times, keeping the least loaded attempt. Waiting for quiet lasts at most
/// `max_wait_seconds` each time and `unit_wait_seconds` in all over a unit's requests; an attempt that
/// still ran under load is kept and flagged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    #[serde(default = "default_retries")]
    pub retries: usize,
    #[serde(default = "default_max_wait_seconds")]
    pub max_wait_seconds: f64,
    /// The most a unit spends waiting for quiet over all its measurements: a machine that never goes
    /// quiet costs a unit at most this, its measurements kept under load and flagged.
    #[serde(default = "default_unit_wait_seconds")]
    pub unit_wait_seconds: f64,
    /// The target's prefill of a request made once and handed to every arm, each decoding from its
    /// own copy of the cache and counting the prefill's measured seconds as its own (default); `false`
    /// makes every arm run the prefill itself, as before (the comparison of the two is
    /// `experiments/shared-prefill-16n0.yaml`).
    #[serde(default = "default_shared_prefill")]
    pub shared_prefill: bool,
}

fn default_shared_prefill() -> bool {
    true
}

fn default_retries() -> usize {
    3
}
fn default_max_wait_seconds() -> f64 {
    120.0
}
fn default_unit_wait_seconds() -> f64 {
    600.0
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            retries: default_retries(),
            max_wait_seconds: default_max_wait_seconds(),
            unit_wait_seconds: default_unit_wait_seconds(),
            shared_prefill: default_shared_prefill(),
        }
    }
}

/// The most prompts one workload may run (prompts are built in memory before the grid starts).
pub const MAX_PROMPTS: usize = 100_000;

/// The most `skip + count` may be, refused when the experiment is loaded, before any work: a prompt
/// file is read whole before its prompts are taken and none holds 2^32 lines, and a generated source's
/// prompts past it are drawn no differently from those before it.
pub const MAX_PROMPT_INDEX: usize = 1 << 32;

/// An experiment as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    pub name: String,
    /// A known model name or a model folder.
    pub target: String,
    #[serde(default = "sharpdraft_model::default_device")]
    pub device: String,
    #[serde(default = "default_dtype")]
    pub dtype: String,
    /// 0 is greedy.
    #[serde(default)]
    pub temperature: f64,
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Runs of every unit (timing noise; greedy tokens repeat exactly).
    #[serde(default = "default_repeats")]
    pub repeats: usize,
    pub drafters: Vec<Block<DrafterEntry>>,
    pub methods: Vec<Block<MethodEntry>>,
    pub workloads: Vec<Block<Workload>>,
    /// Edges of the context-length bins of the cycle table, in multiples of the drafter's n0
    /// (default 0.5, 1, 2, 4, 8, 16, 32, 64).
    #[serde(default)]
    pub bins_n0: Option<Vec<f64>>,
    /// Decoding again what ran under other processes' load (default: 3 retries, 120 s of waiting).
    #[serde(default)]
    pub timing: Timing,
    /// Drafting methods the report pairs with every other drafting method of their drafter, prompt by
    /// prompt (`head_to_head: [calibrated, window]`); the calibrated schedule's method by default.
    #[serde(default)]
    pub head_to_head: Vec<String>,
}

/// An experiment with every block read and every path made absolute: what a run records and hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// What it decodes with and how often; in the record, its fields in place.
    #[serde(flatten)]
    pub header: ExperimentHeader,
    pub drafters: Vec<DrafterEntry>,
    pub methods: Vec<MethodEntry>,
    pub workloads: Vec<Workload>,
    pub bins_n0: Vec<f64>,
    #[serde(default)]
    pub timing: Timing,
    /// Drafting methods the report pairs with every other one (empty: the calibrated schedule's).
    #[serde(default)]
    pub head_to_head: Vec<String>,
    /// sha256 over the text of the experiment file and of every block file it reads, in order: the
    /// same experiment has the same hash wherever its checkout lies (shards on other machines merge).
    #[serde(skip)]
    pub yaml_hash: String,
    /// What a run folder belongs to: the YAML's hash and, once [`Self::seal`]ed, the digest of every
    /// input the run reads (`super::requests::inputs_digest`). Until then, the YAML's hash alone.
    #[serde(skip)]
    pub config_hash: String,
}

fn read_block<T: DeserializeOwned + Clone>(
    block: &Block<T>,
    file: &Path,
    what: &str,
    hasher: &mut Sha256,
) -> Result<T> {
    match block {
        Block::Inline(t) => Ok(t.clone()),
        Block::File(path) => {
            let path = beside(file, path);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("{}: {what} block {}", file.display(), path.display()))?;
            hasher.update(text.as_bytes());
            parse_yaml(&text, &path)
        }
    }
}

/// Names become parts of file names (`units/<workload>.c<context>...json`, `runs/<name>`): letters,
/// digits, `-`, `_` and `.`, not starting with `.`, at most 100 characters.
fn file_name_safe(name: &str, what: &str, file: &Path) -> Result<()> {
    ensure!(
        !name.is_empty()
            && name.len() <= 100
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
        "{}: {what} name {name:?} must be 1 to 100 letters, digits, '-', '_' or '.', not starting with '.' (it names files)",
        file.display()
    );
    Ok(())
}

/// Refuses a list that holds a value twice (a grid would run and pool the copies).
fn no_duplicates<T: Ord + fmt::Debug>(values: &[T], what: &str, file: &Path) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for v in values {
        ensure!(
            seen.insert(v),
            "{}: {what} lists {v:?} twice: give each once",
            file.display()
        );
    }
    Ok(())
}

fn names_unique<'a>(names: impl Iterator<Item = &'a str>, what: &str, file: &Path) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        file_name_safe(name, what, file)?;
        ensure!(
            seen.insert(name),
            "{}: two {what}s are named {name:?}",
            file.display()
        );
    }
    Ok(())
}

impl Experiment {
    /// Reads `path` and its blocks and checks what can be checked without models.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading experiment {}", path.display()))?;
        let raw: ExperimentFile = parse_yaml(&text, path)?;
        let file =
            std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))?;
        let mut hasher = Sha256::new();
        hasher.update(text.as_bytes());
        let mut drafters = raw
            .drafters
            .iter()
            .map(|b| read_block(b, &file, "drafter", &mut hasher))
            .collect::<Result<Vec<DrafterEntry>>>()?;
        // A method's schedule path resolves against the file it was written in, as every path does.
        let written = raw
            .methods
            .iter()
            .map(|b| {
                let mut method = read_block(b, &file, "method", &mut hasher)?;
                if let Some(scaling) = &mut method.drafting.scaling {
                    let origin = b.origin(&file);
                    scaling.schedule = scaling.schedule.as_ref().map(|p| local_or_name(&origin, p));
                }
                Ok(method)
            })
            .collect::<Result<Vec<MethodEntry>>>()?;
        // A beta sweep stands for one method per beta, and a drafter's `methods:` naming the sweep
        // names them all.
        let mut methods = Vec::new();
        let mut swept: Vec<(String, Vec<String>)> = Vec::new();
        for method in written {
            let name = method.name.clone();
            let expanded = method.expand(&file)?;
            if expanded.len() != 1 || expanded[0].name != name {
                swept.push((name, expanded.iter().map(|m| m.name.clone()).collect()));
            }
            methods.extend(expanded);
        }
        let mut workloads = raw
            .workloads
            .iter()
            .map(|b| read_block(b, &file, "workload", &mut hasher))
            .collect::<Result<Vec<Workload>>>()?;
        // Paths inside blocks read from files resolve against those files.
        for (block, entry) in raw.drafters.iter().zip(&mut drafters) {
            if let Some(names) = &mut entry.methods {
                *names = names
                    .iter()
                    .flat_map(|n| match swept.iter().find(|(sweep, _)| sweep == n) {
                        Some((_, expanded)) => expanded.clone(),
                        None => vec![n.clone()],
                    })
                    .collect();
            }
            let origin = block.origin(&file);
            entry.train = entry.train.as_ref().map(|p| beside(&origin, p));
            entry.calibrate = entry.calibrate.as_ref().map(|p| beside(&origin, p));
            entry.schedule = entry.schedule.as_ref().map(|p| local_or_name(&origin, p));
            let schedule = entry.spec.scaling.schedule.as_ref();
            entry.spec.scaling.schedule = schedule.map(|p| local_or_name(&origin, p));
        }
        for (block, workload) in raw.workloads.iter().zip(&mut workloads) {
            let origin = block.origin(&file);
            workload.prompts.resolve_paths(&origin);
            if let Some(filler) = &mut workload.filler {
                filler.resolve_paths(&origin);
            }
        }
        let experiment = Self {
            header: ExperimentHeader {
                file,
                name: raw.name,
                target: raw.target,
                device: raw.device,
                dtype: raw.dtype,
                temperature: raw.temperature,
                seeds: raw.seeds,
                repeats: raw.repeats,
            },
            drafters,
            methods,
            workloads,
            bins_n0: raw.bins_n0.unwrap_or_else(default_bins_n0),
            timing: raw.timing,
            head_to_head: raw.head_to_head,
            yaml_hash: format!("{:x}", hasher.finalize()),
            config_hash: String::new(),
        };
        let mut experiment = experiment;
        experiment.config_hash = experiment.yaml_hash.clone();
        experiment.validate()?;
        Ok(experiment)
    }

    /// Checks that need no model: names, counts, lengths, options that fit their drafter's method.
    pub fn validate(&self) -> Result<()> {
        file_name_safe(&self.header.name, "experiment", &self.header.file)?;
        self.validate_run_settings()?;
        self.validate_names()?;
        self.validate_method_specs()?;
        for w in &self.workloads {
            self.validate_workload(w)?;
        }
        Ok(())
    }

    /// Temperature, seeds, repeats, non-empty methods and workloads, timing and bins_n0.
    fn validate_run_settings(&self) -> Result<()> {
        let file = &self.header.file;
        let f = file.display();
        ensure!(
            sharpdraft_model::is_valid_temperature(self.header.temperature),
            "{f}: temperature {} must lie in 0..={}",
            self.header.temperature,
            sharpdraft_model::MAX_TEMPERATURE
        );
        ensure!(
            !self.header.seeds.is_empty(),
            "{f}: seeds: give at least one"
        );
        no_duplicates(&self.header.seeds, "seeds", file)?;
        if let Some(seed) = self.header.seeds.iter().find(|&&s| s > i64::MAX as u64) {
            bail!(
                "{f}: seed {seed} is above {} (the tables store seeds as 64-bit signed integers)",
                i64::MAX
            );
        }
        ensure!(
            self.header.repeats >= 1,
            "{f}: repeats {} must be >= 1",
            self.header.repeats
        );
        ensure!(!self.methods.is_empty(), "{f}: methods: give at least one");
        ensure!(
            !self.workloads.is_empty(),
            "{f}: workloads: give at least one"
        );
        ensure!(
            self.timing.retries <= 100,
            "{f}: timing.retries {} must be at most 100",
            self.timing.retries
        );
        ensure!(
            self.timing.max_wait_seconds.is_finite()
                && (0.0..=86_400.0).contains(&self.timing.max_wait_seconds),
            "{f}: timing.max_wait_seconds {} must lie in 0..=86400",
            self.timing.max_wait_seconds
        );
        ensure!(
            self.timing.unit_wait_seconds.is_finite()
                && (0.0..=604_800.0).contains(&self.timing.unit_wait_seconds),
            "{f}: timing.unit_wait_seconds {} must lie in 0..=604800 (a week)",
            self.timing.unit_wait_seconds
        );
        ensure!(
            self.bins_n0.windows(2).all(|w| w[0] < w[1])
                && self.bins_n0.iter().all(|b| b.is_finite() && *b > 0.0),
            "{f}: bins_n0 {:?} must be positive and increasing",
            self.bins_n0
        );
        Ok(())
    }

    /// Drafter, method and workload names are unique within their list.
    fn validate_names(&self) -> Result<()> {
        let file = &self.header.file;
        names_unique(
            self.drafters.iter().map(|d| d.name.as_str()),
            "drafter",
            file,
        )?;
        names_unique(self.methods.iter().map(|m| m.name.as_str()), "method", file)?;
        names_unique(
            self.workloads.iter().map(|w| w.name.as_str()),
            "workload",
            file,
        )?;
        no_duplicates(&self.head_to_head, "head_to_head", file)?;
        for name in &self.head_to_head {
            ensure!(
                self.methods.iter().any(|m| m.name == *name && !m.target_only),
                "{}: head_to_head names {name:?}, which is no drafting method of the experiment (its methods: {})",
                file.display(),
                self.methods
                    .iter()
                    .filter(|m| !m.target_only)
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(())
    }

    /// Drafting methods have a drafter, target_only methods take no drafting options, and every
    /// drafter-method pair makes a valid drafter specification.
    fn validate_method_specs(&self) -> Result<()> {
        let file = &self.header.file;
        let f = file.display();
        let drafting = self.methods.iter().any(|m| !m.target_only);
        ensure!(
            !drafting || !self.drafters.is_empty(),
            "{f}: methods other than target_only need at least one drafter"
        );
        for method in &self.methods {
            if method.target_only {
                ensure!(
                    method.drafting.is_empty(),
                    "{f}: method {:?} is target_only: it takes no drafting options (scaling, window, retrieval, adapt ...)",
                    method.name
                );
            }
        }
        for drafter in &self.drafters {
            ensure!(
                drafter.methods.as_ref().is_none_or(|m| !m.is_empty()),
                "{f}: drafter {:?}: methods is empty; name at least one drafting method, or drop the key to run them all",
                drafter.name
            );
            if let Some(names) = &drafter.methods {
                no_duplicates(names, &format!("drafter {:?}: methods", drafter.name), file)?;
            }
            for name in drafter.methods.iter().flatten() {
                let method = self.methods.iter().find(|m| m.name == *name);
                ensure!(
                    method.is_some_and(|m| !m.target_only),
                    "{f}: drafter {:?}: methods names {name:?}, which is not a drafting method of this experiment",
                    drafter.name
                );
            }
        }
        for (drafter, method) in self.drafting_pairs() {
            let spec = self.spec(drafter, method)?;
            let pair = || {
                format!(
                    "{f}: drafter {:?} with method {:?}",
                    drafter.name, method.name
                )
            };
            spec.validate().with_context(pair)?;
            // The method's own draft_len, even at the default, is refused where the drafter ignores it.
            if let (Some(len), Some(why)) = (method.drafting.draft_len, spec.draft_len_unused()) {
                bail!("{}: method's draft_len {len}: {why}", pair());
            }
        }
        Ok(())
    }

    /// One workload: prompt count and indices, contexts, max_new_tokens, and what its setting needs.
    fn validate_workload(&self, w: &Workload) -> Result<()> {
        let file = &self.header.file;
        let f = file.display();
        let at = |key: &str| format!("{f}: workload {:?}: {key}", w.name);
        ensure!(
            (1..=MAX_PROMPTS).contains(&w.count),
            "{} {} must lie in 1..={MAX_PROMPTS}",
            at("count"),
            w.count
        );
        ensure!(
            w.skip
                .checked_add(w.count)
                .is_some_and(|end| end <= MAX_PROMPT_INDEX),
            "{} {} with count {}: prompt indices must stay below {MAX_PROMPT_INDEX} (2^32: no prompt file holds more lines, and a generated source's later prompts are no different from its first)",
            at("skip"),
            w.skip,
            w.count,
        );
        no_duplicates(
            &w.contexts,
            &format!("workload {:?}: contexts", w.name),
            file,
        )?;
        if let Some(c) = w.contexts.iter().find(|&&c| c > i64::MAX as usize) {
            bail!("{} {c} is above {}", at("contexts"), i64::MAX);
        }
        ensure!(
            w.max_new_tokens >= 1,
            "{} {} must be >= 1",
            at("max_new_tokens"),
            w.max_new_tokens
        );
        match w.setting {
            Setting::LongPrompt => {
                ensure!(
                    !w.contexts.is_empty(),
                    "{}: a long_prompt workload needs at least one context length",
                    at("contexts")
                );
                if w.contexts.iter().any(|&c| c > 0) {
                    ensure!(
                        w.filler.is_some(),
                        "{}: contexts beyond the prompt need a filler text",
                        at("filler")
                    );
                }
            }
            Setting::LongGeneration => ensure!(
                w.contexts.is_empty() && w.filler.is_none(),
                "{}: a long_generation workload starts from the prompt alone (no contexts, no filler)",
                at("contexts")
            ),
        }
        Ok(())
    }

    /// Every drafter with every drafting method it runs, drafters in the order written and each
    /// drafter's methods in the experiment's order.
    pub fn drafting_pairs(&self) -> impl Iterator<Item = (&DrafterEntry, &MethodEntry)> {
        self.drafters.iter().flat_map(move |drafter| {
            self.methods
                .iter()
                .filter(move |m| !m.target_only && drafter.runs(m))
                .map(move |m| (drafter, m))
        })
    }

    /// The drafter specification `method` runs `drafter` with.
    pub fn spec(&self, drafter: &DrafterEntry, method: &MethodEntry) -> Result<DrafterSpec> {
        let mut drafting = method.drafting.clone();
        if method.scales_with_drafter_schedule() {
            let Some(schedule) = drafter.schedule.clone() else {
                bail!(
                    "{}: method {:?} scales with the drafter's schedule, and drafter {:?} names none (give it `schedule:` or the method a `beta:`)",
                    self.header.file.display(),
                    method.name,
                    drafter.name
                );
            };
            if let Some(scaling) = &mut drafting.scaling {
                scaling.schedule = Some(schedule);
            }
        }
        let mut spec = drafter.spec.clone();
        spec.apply(drafting);
        Ok(spec)
    }

    /// What a run folder belongs to: [`Self::config_hash`].
    pub fn hash(&self) -> &str {
        &self.config_hash
    }

    /// The experiment as its run folder's records, tables and report see it: names in order, what
    /// each method is to a reader, the grid's extent and the config hash (sealed or not, as it is now).
    pub fn outline(&self) -> Outline {
        Outline {
            header: self.header.clone(),
            config_hash: self.config_hash.clone(),
            drafters: self.drafters.iter().map(|d| d.name.clone()).collect(),
            methods: self.methods.iter().map(MethodEntry::outline).collect(),
            workloads: self
                .workloads
                .iter()
                .map(|w| WorkloadOutline {
                    name: w.name.clone(),
                    setting: w.setting,
                    contexts: w.contexts.clone(),
                })
                .collect(),
            drafting: self
                .drafting_pairs()
                .map(|(d, m)| (d.name.clone(), m.name.clone()))
                .collect(),
            bins_n0: self.bins_n0.clone(),
            shared_prefill: self.timing.shared_prefill,
            head_to_head: self.head_to_head.clone(),
        }
    }

    /// Ties the experiment to the digest of the inputs its units read: the config hash becomes the
    /// sha256 of the YAML's hash and `inputs_digest`.
    pub fn seal(&mut self, inputs_digest: &str) {
        let mut hasher = Sha256::new();
        hasher.update(self.yaml_hash.as_bytes());
        hasher.update(b"\0inputs\0");
        hasher.update(inputs_digest.as_bytes());
        self.config_hash = format!("{:x}", hasher.finalize());
    }
}

/// A schedule as written: a path (resolved against `file`) or a calibration's bare name, kept as is.
fn local_or_name(file: &Path, path: &Path) -> PathBuf {
    if is_calibration_name(path) {
        path.to_path_buf()
    } else {
        beside(file, path)
    }
}
