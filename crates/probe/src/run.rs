//! `sharpdraft probe CONFIG.yaml`: the attention-statistics probe over long real texts.
//!
//! ```yaml
//! target: smollm2-135m-instruct
//! drafter: smollm2-135m-eagle3   # omit with method: target
//! method: eagle3                 # target | vanilla | pard | eagle3 | dflash
//! out: smollm2-eagle3            # $SHARPDRAFT_HOME/probes/<out>, or a path when it has a '/'
//! bins: {lowest: -2, highest: 5} # n from 0.25 n0 to 32 n0
//! rows_per_bin: 8                # query rows per bin and sequence
//! sequences: 2                   # long token sequences, each probed from a fresh cache
//! text: [...]                    # data sources, as in training configs
//! skip_tokens: 60000             # start past text a drafter was trained on
//! ks: [1, 4, 8, 16]
//! scaling: {mode: fixed, schedule: ...}   # optional: probe with a schedule applied
//! ```
//!
//! Output in the out folder: `stats.parquet` (one row per layer, head, bin, k), `mass_curves.parquet`
//! (`M_k` per scale s, for estimator (iii)) and `probe.json` (the config, peak memory, time). A finished
//! probe with the same config is reused, not rerun.

use crate::error::{bail, ensure, Context, Result};
use crate::{
    probe_sequence, BinRecord, CurveRecord, LengthBins, ProbeRecorder, ProbeSettings, RowFilter,
    Subject,
};
use serde::{Deserialize, Serialize};
use sharpdraft_data::datasets::{ids_digest, token_stream, Source};
use sharpdraft_decode::drafter_spec::{self, DrafterSpec, LoadedDrafter};
use sharpdraft_decode::scaling::ScalingSpec;
use sharpdraft_draft::DrafterKind;
use sharpdraft_draft::{DFlashDrafter, Eagle3Drafter};
use sharpdraft_model::{CausalLm, Sampling, ScaledQueries};
use sharpdraft_report::columns::{rows_of, table_of};
use sharpdraft_report::table::Table;
use sharpdraft_store::output_folder;
use sharpdraft_store::paths::{shown, under};
use sharpdraft_store::registry;
use std::path::{Path, PathBuf};
use tch::Kind;

/// What a probe runs: the target itself, or the drafter (of the config's `kind:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeSubject {
    Target,
    Drafter,
}

/// `method:`, the old spelling of `subject:` and `kind:` together: `target` or a drafter kind.
mod old_method {
    use serde::{de::Error, Deserialize, Deserializer};
    use sharpdraft_draft::DrafterKind;

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<DrafterKind>>, D::Error> {
        let text = String::deserialize(d)?;
        if text == "target" {
            return Ok(Some(None));
        }
        text.parse()
            .map(|kind| Some(Some(kind)))
            .map_err(|e: String| D::Error::custom(format!("{e}, or target")))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinRange {
    pub lowest: i32,
    pub highest: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleGrid {
    pub max: f64,
    pub step: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    pub target: String,
    #[serde(default)]
    pub drafter: Option<String>,
    /// What the probe runs: `target` or `drafter`.
    #[serde(default)]
    pub subject: Option<ProbeSubject>,
    /// The drafter's kind (`subject: drafter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DrafterKind>,
    /// The old spelling: `method: target` is `subject: target`, `method: <kind>` is `subject: drafter`
    /// with `kind: <kind>`. Read, folded into those two by [`ProbeConfig::fold_old_spelling`], never
    /// written.
    #[serde(default, with = "old_method", skip_serializing)]
    method: Option<Option<DrafterKind>>,
    pub out: String,
    /// Defaults to the drafter's recorded training length (required for `target`).
    #[serde(default)]
    pub n0: Option<f64>,
    #[serde(default = "default_bins")]
    pub bins: BinRange,
    #[serde(default = "default_rows_per_bin")]
    pub rows_per_bin: usize,
    #[serde(default = "default_sequences")]
    pub sequences: usize,
    /// Each source is a one-key map (`- pypi_texts: {...}`), as in training configs.
    #[serde(with = "serde_norway::with::singleton_map_recursive")]
    pub text: Vec<Source>,
    #[serde(default)]
    pub skip_tokens: usize,
    #[serde(default = "default_ks")]
    pub ks: Vec<i64>,
    #[serde(default = "default_scales")]
    pub scales: ScaleGrid,
    /// Rows of one forward pass (bounds memory next to the probe's own `8 x H x n` tiles).
    #[serde(default = "default_chunk")]
    pub chunk: i64,
    /// Layers to record (all when absent).
    #[serde(default)]
    pub layers: Option<Vec<usize>>,
    #[serde(default)]
    pub scaling: Option<ScalingSpec>,
    #[serde(default = "sharpdraft_model::default_device")]
    pub device: String,
}

fn default_bins() -> BinRange {
    BinRange {
        lowest: -2,
        highest: 5,
    }
}
fn default_rows_per_bin() -> usize {
    8
}
fn default_sequences() -> usize {
    1
}
fn default_ks() -> Vec<i64> {
    vec![1, 4, 8, 16]
}
fn default_scales() -> ScaleGrid {
    ScaleGrid {
        max: 3.0,
        step: 0.05,
    }
}
fn default_chunk() -> i64 {
    512
}

/// What a finished probe leaves next to its tables.
#[derive(Debug, Serialize, Deserialize)]
pub struct ProbeSummary {
    pub config: ProbeConfig,
    pub n0: f64,
    pub sequence_tokens: usize,
    pub rows: usize,
    pub seconds: f64,
    /// Peak resident memory of the process (VmHWM), after the longest context.
    pub peak_resident_mib: f64,
    /// The probed model's weight files (name, size, modification time): a retrained drafter under the
    /// same name is probed again, not read back.
    #[serde(default)]
    pub model_fingerprint: String,
    /// What computed the statistics: "libtorch" or "cuda kernel" (kernels/attention_stats.cu).
    #[serde(default)]
    pub statistics: String,
    /// What the probe read ([`crate::held_out`]): a calibration from it keeps test prompts apart.
    /// Absent in probes written before it was recorded.
    #[serde(default)]
    pub read: Option<sharpdraft_math::DataFingerprint>,
    /// The sha256 of the token ids the probe read: a probe is reused only over the same text.
    /// Empty in probes written before it was recorded (probed again when asked for).
    #[serde(default)]
    pub text_digest: String,
}

pub struct ProbeOutput {
    pub dir: PathBuf,
    pub n0: f64,
    /// What the probe read (none for probes written before it was recorded).
    pub read: Option<sharpdraft_math::DataFingerprint>,
    pub bins: Vec<BinRecord>,
    pub curves: Vec<CurveRecord>,
}

impl ProbeConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut config: Self = serde_norway::from_str(&text)
            .with_context(|| format!("{}: invalid probe config", path.display()))?;
        config
            .fold_old_spelling()
            .with_context(|| format!("{}", path.display()))?;
        config.text = sharpdraft_data::datasets::expand_includes(&config.text, path)?;
        config
            .validate()
            .with_context(|| format!("{}", path.display()))?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            self.bins.lowest <= self.bins.highest,
            "bins: lowest {} is above highest {}",
            self.bins.lowest,
            self.bins.highest
        );
        ensure!(
            self.rows_per_bin >= 1 && self.sequences >= 1,
            "rows_per_bin and sequences must be at least 1"
        );
        ensure!(
            !self.ks.is_empty() && self.ks.iter().all(|&k| k >= 1),
            "ks: {:?} must be positive",
            self.ks
        );
        ensure!(
            self.scales.step > 0.0 && self.scales.max >= 1.0,
            "scales: step {} must be > 0 and max {} >= 1",
            self.scales.step,
            self.scales.max
        );
        ensure!(self.chunk >= 1, "chunk: {} must be at least 1", self.chunk);
        match (self.subject, self.kind, &self.drafter) {
            (None, ..) => bail!("subject: missing (target or drafter)"),
            (Some(ProbeSubject::Target), _, Some(d)) => {
                bail!("drafter: {d} given with subject: target")
            }
            (Some(ProbeSubject::Target), Some(kind), None) => {
                bail!("kind: {kind} given with subject: target")
            }
            (Some(ProbeSubject::Target), None, None) if self.n0.is_none() => {
                bail!("n0: subject target has no training length; give n0")
            }
            (Some(ProbeSubject::Drafter), _, None) => bail!("drafter: subject drafter needs one"),
            (Some(ProbeSubject::Drafter), None, _) => {
                bail!("kind: subject drafter needs the drafter's kind (vanilla, eagle3, pard, dflash)")
            }
            _ => Ok(()),
        }
    }

    /// Turns the old `method:` into `subject:` and `kind:`; refuses both spellings at once.
    pub fn fold_old_spelling(&mut self) -> Result<()> {
        let Some(old) = self.method.take() else {
            return Ok(());
        };
        ensure!(
            self.subject.is_none() && self.kind.is_none(),
            "method: is the old spelling of subject: and kind:; give one or the other"
        );
        self.subject = Some(match old {
            None => ProbeSubject::Target,
            Some(_) => ProbeSubject::Drafter,
        });
        self.kind = old;
        Ok(())
    }

    /// The drafter kind the probe runs, `None` for the target.
    pub fn drafter_kind(&self) -> Option<DrafterKind> {
        match self.subject {
            Some(ProbeSubject::Drafter) => self.kind,
            _ => None,
        }
    }

    pub fn out_dir(&self) -> PathBuf {
        if self.out.contains('/') {
            PathBuf::from(&self.out)
        } else {
            registry::home().join("probes").join(&self.out)
        }
    }

    fn scale_grid(&self) -> Vec<f64> {
        let steps = ((self.scales.max - 1.0) / self.scales.step).round() as usize;
        (0..=steps)
            .map(|i| 1.0 + i as f64 * self.scales.step)
            .collect()
    }
}

/// Prints the probe by length bin, averaged over layers and heads: `M_k` per k, entropy, sink share,
/// background variance (of the first k) and the mean visible-key count.
pub fn print_summary(out: &ProbeOutput) {
    let ks: std::collections::BTreeSet<i64> = out.bins.iter().map(|b| b.k).collect();
    let mut by_bin: std::collections::BTreeMap<i32, Vec<&BinRecord>> =
        std::collections::BTreeMap::new();
    for b in &out.bins {
        by_bin.entry(b.bin).or_default().push(b);
    }
    let first_k = *ks.iter().next().unwrap_or(&1);
    print!("{:>8} {:>7}", "n", "n/n0");
    for k in &ks {
        print!(" {:>8}", format!("M_{k}"));
    }
    println!(
        " {:>8} {:>8} {:>10} {:>7}",
        "entropy",
        "sink",
        format!("sigma2_{first_k}"),
        "rows"
    );
    for records in by_bin.values() {
        let mean = |f: &dyn Fn(&BinRecord) -> f64, k: i64| {
            let chosen: Vec<f64> = records.iter().filter(|b| b.k == k).map(|b| f(b)).collect();
            chosen.iter().sum::<f64>() / chosen.len() as f64
        };
        let n = mean(&|b| b.n, first_k);
        print!("{:>8.0} {:>7.2}", n, n / out.n0);
        for &k in &ks {
            print!(" {:>8.4}", mean(&|b| b.mass, k));
        }
        let rows: usize = records
            .iter()
            .filter(|b| b.k == first_k)
            .map(|b| b.rows)
            .sum();
        println!(
            " {:>8.3} {:>8.4} {:>10.3} {:>7}",
            mean(&|b| b.entropy, first_k),
            mean(&|b| b.sink_share, first_k),
            mean(&|b| b.background_var, first_k),
            rows
        );
    }
}

/// The model whose attention is probed, owned for one sequence.
enum ProbeModel {
    /// The target itself, or a vanilla / PARD drafter.
    Lm(CausalLm),
    Eagle3(Eagle3Drafter),
    DFlash(DFlashDrafter),
}

impl ProbeModel {
    fn load(
        config: &ProbeConfig,
        target: &CausalLm,
        device: tch::Device,
        capacity: i64,
    ) -> Result<Self> {
        let name = config.drafter.as_deref().unwrap_or(&config.target);
        // EAGLE-3 and DFlash through the one drafter specification (a chain of one: the probe drives
        // their passes itself); the target and LM drafters as the causal LMs they are.
        let spec = |method| DrafterSpec::new(method, name).chains_of(1);
        let loaded = match config.drafter_kind() {
            None | Some(DrafterKind::Vanilla) | Some(DrafterKind::Pard) => {
                let dir = registry::resolve(name)?;
                if let Some(kind) = config.drafter_kind() {
                    sharpdraft_draft::checkpoint_kind::expect_kind(&dir, kind)?;
                }
                Self::Lm(CausalLm::load(&dir, device, Kind::Float)?)
            }
            Some(DrafterKind::Eagle3) => {
                match drafter_spec::load(
                    &spec(DrafterKind::Eagle3),
                    target,
                    Sampling::greedy(),
                    capacity,
                )? {
                    LoadedDrafter::Eagle3(d) => Self::Eagle3(d),
                    _ => unreachable!("an EAGLE-3 specification loads an EAGLE-3 drafter"),
                }
            }
            Some(DrafterKind::Dflash) => {
                match drafter_spec::load(
                    &spec(DrafterKind::Dflash),
                    target,
                    Sampling::greedy(),
                    capacity,
                )? {
                    LoadedDrafter::Dflash(d) => Self::DFlash(d),
                    _ => unreachable!("a DFlash specification loads a DFlash drafter"),
                }
            }
        };
        Ok(loaded)
    }

    /// The probed model as query scaling sees it.
    fn scaled(&self) -> &dyn ScaledQueries {
        match self {
            Self::Lm(lm) => lm,
            Self::Eagle3(d) => d,
            Self::DFlash(d) => d,
        }
    }

    fn scaled_mut(&mut self) -> &mut dyn ScaledQueries {
        match self {
            Self::Lm(lm) => lm,
            Self::Eagle3(d) => d,
            Self::DFlash(d) => d,
        }
    }

    fn subject(&mut self) -> Subject<'_> {
        match self {
            Self::Lm(lm) => Subject::Causal(&lm.net),
            Self::Eagle3(d) => Subject::Eagle3(d),
            Self::DFlash(d) => Subject::DFlash(d),
        }
    }
}

/// Reads a finished probe's tables.
pub fn read_probe(dir: &Path) -> Result<ProbeOutput> {
    // A probe written by this workbench carries its files' fingerprints: tables changed or swapped
    // since are refused rather than paired with the wrong summary.
    if let Some(mut marker) = output_folder::Marker::read(dir)? {
        let differences = marker.verify(dir, false)?;
        ensure!(
            differences.is_empty(),
            "{}: the probe's files changed since it was written ({}); run the probe again",
            dir.display(),
            differences.join("; ")
        );
    }
    let summary: ProbeSummary = serde_json::from_str(
        &std::fs::read_to_string(dir.join("probe.json"))
            .with_context(|| format!("{}: no finished probe", dir.display()))?,
    )?;
    // The tables' columns are the records' fields (`columns::table_of` wrote them).
    let bins = rows_of(&Table::read_parquet(&dir.join("stats.parquet"))?)?;
    let curves = rows_of(&Table::read_parquet(&dir.join("mass_curves.parquet"))?)?;
    Ok(ProbeOutput {
        dir: dir.to_path_buf(),
        n0: summary.n0,
        read: summary.read,
        bins,
        curves,
    })
}

/// `stats.parquet` and `mass_curves.parquet`: a column per field of [`BinRecord`] and [`CurveRecord`], in
/// their order.
fn write_tables(dir: &Path, bins: &[BinRecord], curves: &[CurveRecord]) -> Result<()> {
    table_of(bins)?.write_parquet(&dir.join("stats.parquet"))?;
    table_of(curves)?
        .write_parquet(&dir.join("mass_curves.parquet"))
        .map_err(Into::into)
}

/// Runs (or reuses) the probe of a config file.
pub fn run(config_path: &Path) -> Result<ProbeOutput> {
    let config = ProbeConfig::load(config_path)?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    run_config(&config, base)
}

/// `name:size:mtime_ns` of every `.safetensors` file in a model folder, sorted: what tells a retrained
/// model from the one a finished probe saw.
fn model_fingerprint(model_dir: &Path) -> Result<String> {
    let mut files: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(model_dir)
        .with_context(|| format!("reading model folder {}", model_dir.display()))?
    {
        let path = entry
            .with_context(|| format!("reading model folder {}", model_dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            let stat = || format!("reading {}", path.display());
            let meta = std::fs::metadata(&path).with_context(stat)?;
            let modified = meta
                .modified()
                .with_context(stat)?
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            files.push(format!("{name}:{}:{modified}", meta.len()));
        }
    }
    files.sort();
    Ok(files.join(";"))
}

/// What the probe read, for the held-out check of the prompts a run tests on: the prompts of its
/// text sources (relative to `base`), and the tokens of `stream` its sequences of `length` covered
/// with their words (decoded by `target`'s tokenizer, the one that made `stream`).
fn text_read(
    config: &ProbeConfig,
    base: &Path,
    target: &CausalLm,
    stream: &[i64],
    length: usize,
) -> Result<sharpdraft_math::DataFingerprint> {
    let mut read = sharpdraft_data::fingerprint::empty();
    for source in &config.text {
        sharpdraft_data::fingerprint::add_prompts(
            &mut read,
            &sharpdraft_data::fingerprint::source_prompts(source, base)?,
        );
    }
    let probed_end = (config.skip_tokens + config.sequences * length).min(stream.len());
    let probed = &stream[config.skip_tokens.min(probed_end)..probed_end];
    sharpdraft_data::fingerprint::add_tokens(&mut read, probed);
    sharpdraft_data::fingerprint::add_text(&mut read, &target.tokenizer()?.decode(probed)?);
    sharpdraft_data::fingerprint::tidy(&mut read);
    Ok(read)
}

/// What a probe of `config` (relative paths from `base`) at training length `n0` reads, found again
/// from its config without probing: for the held-out check of a schedule calibrated before its
/// fingerprint recorded words. `target` tokenizes the text when it is the probe's own target;
/// otherwise the probe's target is loaded for it.
pub fn text_read_of(
    config: &ProbeConfig,
    base: &Path,
    target: &CausalLm,
    target_name: &str,
    n0: f64,
) -> Result<sharpdraft_math::DataFingerprint> {
    let own;
    let target = if config.target == target_name {
        target
    } else {
        own = CausalLm::load(
            &registry::resolve(&config.target)?,
            tch::Device::Cpu,
            Kind::Float,
        )
        .with_context(|| format!("loading target {}", config.target))?;
        &own
    };
    let bins = LengthBins {
        n0,
        lowest: config.bins.lowest,
        highest: config.bins.highest,
    };
    let length = sequence_length(&bins, target.net.config.max_position_embeddings);
    let stream = token_stream(&config.text, base, target)?;
    text_read(config, base, target, &stream, length)
}

/// Runs (or reuses) a probe; relative paths in `config` resolve against `base`.
pub fn run_config(config: &ProbeConfig, base: &Path) -> Result<ProbeOutput> {
    let dir = config.out_dir();
    let model_dir = registry::resolve(config.drafter.as_ref().unwrap_or(&config.target))?;
    let fingerprint = model_fingerprint(&model_dir)?;
    let target_dir = registry::resolve(&config.target)?;
    let claim = output_folder::claim(&dir, "probe", &[&model_dir, &target_dir])?;
    let earlier = match claim {
        output_folder::Claim::Own(_) => finished_probe_of(config, &dir, &fingerprint),
        output_folder::Claim::Fresh => None,
    };
    let started = std::time::Instant::now();
    let device = sharpdraft_model::parse_device(&config.device)?;
    let target = CausalLm::load(&registry::resolve(&config.target)?, device, Kind::Float)
        .with_context(|| format!("loading target {}", config.target))?;
    // A probe of the same config and weights is reused only over the same text: its files are named
    // by the config, their content is not.
    let stream = token_stream(&config.text, base, &target)?;
    let text_digest = ids_digest(&stream);
    if let Some(recorded) = earlier {
        if recorded == text_digest {
            eprintln!("probe: reusing the finished probe in {}", shown(&dir));
            return read_probe(&dir);
        }
        eprintln!(
            "probe: {} holds a probe of this config and weights over another text (its data changed, or it was probed before texts were recorded); probing again (it is replaced when the new probe is complete)",
            shown(&dir)
        );
    }
    let scaling_spec = resolved_scaling_spec(config, base);

    // The model probed; it also tells n0 (for the bins) when the config does not. Capacity for the
    // longest context the target allows.
    let max_positions = target.net.config.max_position_embeddings;
    let load = || ProbeModel::load(config, &target, device, max_positions);
    let mut first = Some(load()?);
    let n0 = probe_n0(
        config,
        first
            .as_ref()
            .and_then(|model| model.scaled().training_length()),
    )?;
    let bins = LengthBins {
        n0,
        lowest: config.bins.lowest,
        highest: config.bins.highest,
    };
    let length = sequence_length(&bins, max_positions);
    ensure_enough_text(config, stream.len(), length)?;
    let max_k = *config.ks.iter().max().expect("validated");
    let counts = bins.sample_counts(config.rows_per_bin, max_k + 1, length as i64);
    let mut recorder = new_recorder(config, bins);

    // A fresh model (and cache) per sequence; the first reuses the one loaded above. Scaling
    // defaults to the probe's n0.
    let mut next_model = || -> Result<ProbeModel> {
        let mut model = match first.take() {
            Some(model) => model,
            None => load()?,
        };
        scale_queries(&mut model, config, &scaling_spec, n0)?;
        Ok(model)
    };
    probe_sequences(
        config,
        &target,
        &stream,
        length,
        &counts,
        &mut next_model,
        &mut recorder,
    )?;
    let (bin_records, curves) = recorder.records();
    ensure!(
        !bin_records.is_empty(),
        "probe recorded no rows: are the bins beyond the text length {length}?"
    );
    let read = text_read(config, base, &target, &stream, length)?;
    // The whole result goes into a staging folder, renamed into place at the end: tables and their
    // probe.json are always one probe's.
    let staging = output_folder::Staging::new(&dir)?;
    write_tables(staging.path(), &bin_records, &curves)?;
    let summary = ProbeSummary {
        config: config.clone(),
        n0,
        sequence_tokens: length,
        rows: recorder.rows_recorded(),
        seconds: started.elapsed().as_secs_f64(),
        peak_resident_mib: sharpdraft_decode::records::peak_rss_bytes() as f64 / (1024.0 * 1024.0),
        model_fingerprint: fingerprint,
        statistics: recorder.statistics_path().to_string(),
        read: Some(read.clone()),
        text_digest,
    };
    commit_probe(staging, &summary, &model_dir)?;
    eprintln!(
        "probe: {} rows over {} sequences of {length} tokens in {:.0} s ({}); peak resident memory {:.0} MiB",
        summary.rows, config.sequences, summary.seconds, summary.statistics, summary.peak_resident_mib
    );
    Ok(ProbeOutput {
        dir,
        n0,
        read: Some(read),
        bins: bin_records,
        curves,
    })
}

/// The text digest of the finished probe in `dir` when it names the same config and weights (it may
/// be reused if it read the same text); says so on stderr when it names others.
fn finished_probe_of(config: &ProbeConfig, dir: &Path, fingerprint: &str) -> Option<String> {
    let summary = std::fs::read_to_string(dir.join("probe.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<ProbeSummary>(&text).ok())
        .and_then(|mut s| s.config.fold_old_spelling().ok().map(|()| s));
    match summary {
        Some(s) if s.config == *config && s.model_fingerprint == fingerprint => Some(s.text_digest),
        _ => {
            eprintln!(
                "probe: {} holds a probe of another config or of other weights; probing again (it is replaced when the new probe is complete)",
                shown(dir)
            );
            None
        }
    }
}

/// The config's scaling (none by default), with a schedule path that has a separator read from `base`.
fn resolved_scaling_spec(config: &ProbeConfig, base: &Path) -> ScalingSpec {
    let mut scaling_spec = config.scaling.clone().unwrap_or_default();
    if let Some(schedule) = &scaling_spec.schedule {
        if schedule.to_string_lossy().contains('/') {
            scaling_spec.schedule = Some(under(base, schedule));
        }
    }
    scaling_spec
}

/// The probe's n0: the config's, else the probed model's recorded training length.
fn probe_n0(config: &ProbeConfig, training_length: Option<i64>) -> Result<f64> {
    let drafter_name = config.drafter.clone().unwrap_or_default();
    Ok(match (config.n0, training_length) {
        (Some(n0), _) => n0,
        (None, Some(n0)) => n0 as f64,
        (None, None) => bail!("n0: drafter {drafter_name} records no training length; give n0"),
    })
}

/// Tokens per probed sequence: up to the top of the highest bin, capped at the target's positions.
fn sequence_length(bins: &LengthBins, max_positions: i64) -> usize {
    let n0 = bins.n0;
    let wanted = bins.range(bins.highest).1.ceil() as i64;
    let length = wanted.min(max_positions) as usize;
    if wanted > max_positions {
        eprintln!("probe: the target sees at most {max_positions} positions; the longest bins stop there ({:.1} n0)", max_positions as f64 / n0);
    }
    length
}

/// The text must hold `skip_tokens` plus every sequence of `length` tokens.
fn ensure_enough_text(config: &ProbeConfig, stream_tokens: usize, length: usize) -> Result<()> {
    let needed = config
        .skip_tokens
        .saturating_add(config.sequences.saturating_mul(length));
    ensure!(
        stream_tokens >= needed,
        "text: {} tokens, fewer than skip_tokens {} + {} sequences x {length}",
        stream_tokens,
        config.skip_tokens,
        config.sequences
    );
    Ok(())
}

/// A recorder of every row over the config's bins, ks, scale grid and layers.
fn new_recorder(config: &ProbeConfig, bins: LengthBins) -> ProbeRecorder {
    let settings = ProbeSettings {
        bins,
        ks: config.ks.clone(),
        scales: config.scale_grid(),
    };
    let layers = config.layers.as_ref().map(|l| l.iter().copied().collect());
    ProbeRecorder::new(settings, RowFilter::All, layers)
}

/// Applies the probe's query scaling to `model`, its n0 defaulting to the probe's.
fn scale_queries(
    model: &mut ProbeModel,
    config: &ProbeConfig,
    scaling_spec: &ScalingSpec,
    n0: f64,
) -> Result<()> {
    let what = format!(
        "the probed {} model",
        config.drafter_kind().map_or("target", DrafterKind::name)
    );
    let scaling = scaling_spec.build_for(model.scaled(), Some(n0 as i64), &what)?;
    model.scaled_mut().set_query_scaling(scaling);
    Ok(())
}

/// Probes each sequence of `length` tokens after `skip_tokens` with a model from `next_model`, behind
/// a progress bar over all their tokens.
fn probe_sequences(
    config: &ProbeConfig,
    target: &CausalLm,
    stream: &[i64],
    length: usize,
    counts: &[i64],
    next_model: &mut dyn FnMut() -> Result<ProbeModel>,
    recorder: &mut ProbeRecorder,
) -> Result<()> {
    let bar = indicatif::ProgressBar::new((config.sequences * length) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} tokens, {msg} [{elapsed_precise} < {eta}]",
        )
        .expect("valid template"),
    );
    for sequence in 0..config.sequences {
        let start = config.skip_tokens + sequence * length;
        let tokens = &stream[start..start + length];
        let done_before = (sequence * length) as u64;
        let mut progress = |done: usize| {
            bar.set_position(done_before + done as u64);
            bar.set_message(format!("sequence {}/{}", sequence + 1, config.sequences));
            if bar.is_hidden() && done == length {
                eprintln!(
                    "probe: sequence {}/{} ({length} tokens) done",
                    sequence + 1,
                    config.sequences
                );
            }
        };
        let mut model = next_model()?;
        probe_sequence(
            model.subject(),
            &target.net,
            tokens,
            counts,
            config.chunk,
            recorder,
            &mut progress,
        )?;
    }
    bar.finish_and_clear();
    Ok(())
}

/// Writes probe.json into the staging folder and renames it into place with a finished marker.
fn commit_probe(
    staging: output_folder::Staging,
    summary: &ProbeSummary,
    model_dir: &Path,
) -> Result<()> {
    std::fs::write(
        staging.path().join("probe.json"),
        serde_json::to_string_pretty(summary)?,
    )?;
    let mut marker =
        output_folder::Marker::new("probe", true, format!("probe of {}", model_dir.display()));
    staging.commit(&mut marker, true)?;
    Ok(())
}
