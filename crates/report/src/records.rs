//! What one finished unit leaves: for each arm, raw counters per request and per verification cycle,
//! with the provenance of the run and the machine's state while it ran. One JSON file per unit under
//! `units/`, written whole through a rename: a run killed at any moment leaves finished units intact
//! and nothing half-written. A unit file is read back only into the run it belongs to: its name, its
//! config hash, its unit and its arms must all be the run's ([`UnitRecord::read_belonging`]).

use crate::error::{bail, Context, Result};
use crate::grid::{arms, units, Arm, Unit};
use crate::machine_state::MachineState;
use crate::outline::{Outline, Setting};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One draft -> verify -> commit cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleRecord {
    /// Committed tokens when the cycle started (the context the drafter saw, root included).
    pub context: i64,
    /// Draft tokens proposed (tree nodes).
    pub drafted: usize,
    /// Draft tokens accepted (length of the accepted path).
    pub accepted: usize,
    /// Per depth d: 1 when the accepted path reached depth d, else 0 (length = the proposal's depth).
    pub accepted_per_position: Vec<u8>,
    /// Tokens the target added itself (1 every cycle).
    pub bonus: usize,
    pub draft_seconds: f64,
    pub verify_seconds: f64,
}

/// Where a row came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The run's config hash: the experiment's YAML and every input it reads
    /// ([`Outline::hash`]).
    pub config_hash: String,
    /// `git rev-parse HEAD` of the experiment's checkout (`+dirty` with uncommitted changes), or
    /// "unknown" outside a git checkout.
    pub git_revision: String,
    /// Host name, CPU model and cores.
    pub machine: String,
    pub device: String,
    pub dtype: String,
    pub sharpdraft_version: String,
    /// Seconds since the Unix epoch when the unit started.
    pub started_unix: u64,
    /// The form the CPU kernel's products ran in (`avx512`, `avx2`, `neon`, `libtorch`: see
    /// `SHARPDRAFT_KERNEL`); empty in units written before it was recorded.
    #[serde(default)]
    pub kernel: String,
    /// libtorch's CPU threads; 0 in units written before it was recorded.
    #[serde(default)]
    pub threads: usize,
}

impl Provenance {
    /// The timing setting the unit was measured under, when recorded: (kernel form, threads, the
    /// target's dtype).
    pub fn timing_setting(&self) -> Option<(&str, usize, &str)> {
        (!self.kernel.is_empty()).then_some((
            self.kernel.as_str(),
            self.threads,
            self.dtype.as_str(),
        ))
    }

    /// Whether some piece of the unit ran from a checkout with uncommitted changes (its revision
    /// marked `+dirty`): what it ran is not a revision anyone can check out.
    pub fn dirty_tree(&self) -> bool {
        self.git_revision.contains(DIRTY)
    }
}

/// What a revision ends with when its checkout had uncommitted changes to tracked files.
pub const DIRTY: &str = "+dirty";

/// Refuses units measured under more than one timing setting (kernel form or thread count): their
/// timings are not one population. Each unit comes with how a message names it ("unit w.c0.s0.r0").
/// Units written before the setting was recorded are taken as they are.
pub fn ensure_one_timing_setting<'a>(
    provenances: impl IntoIterator<Item = (String, &'a Provenance)>,
) -> Result<()> {
    let mut first: Option<(String, (&str, usize, &str))> = None;
    for (unit, provenance) in provenances {
        let Some(setting) = provenance.timing_setting() else {
            continue;
        };
        match &first {
            None => first = Some((unit, setting)),
            Some((first_unit, first_setting)) if *first_setting != setting => {
                return Err(crate::error::ReportError::Invalid(format!(
                    "{first_unit} was measured with the {} kernel on {} threads in {} and {unit} with the {} kernel on {} threads in {}: timings of two settings are not pooled; run them again under one (SHARPDRAFT_KERNEL, the thread count and the dtype: `auto` picks one a machine), or in separate folders",
                    first_setting.0, first_setting.1, first_setting.2, setting.0, setting.1, setting.2
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn unknown() -> f64 {
    f64::NAN
}
fn one() -> usize {
    1
}

/// One request (prompt) of a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRow {
    /// The prompt's index in its source.
    pub prompt: usize,
    /// Tokens of the request when generation started.
    pub prompt_tokens: usize,
    pub generated: usize,
    pub prefill_seconds: f64,
    /// Wall time of the request, prefill and online updates included.
    pub total_seconds: f64,
    /// Where this arm ran among the request's arms (0: first).
    #[serde(default)]
    pub slot: usize,
    /// Other processes' share of the cores while this decode ran (the kept attempt's; NaN unknown).
    #[serde(default = "unknown")]
    pub other_cpu_share: f64,
    /// Decodes of this request by this arm: 1, or more where earlier ones ran under load.
    #[serde(default = "one")]
    pub attempts: usize,
    /// Seconds of this request spent in online updates (inside `total_seconds`).
    pub update_seconds: f64,
    pub updates: usize,
    pub drafter_weight_bytes: usize,
    pub drafter_cache_bytes: usize,
    pub target_cache_bytes: usize,
    /// Adapters, optimizer state, gradients and buffer of online adaptation.
    pub adaptation_bytes: usize,
    /// The process's peak resident memory since the unit started (VmHWM), bytes.
    pub peak_rss_bytes: u64,
    /// Empty for target-only decoding.
    pub cycles: Vec<CycleRecord>,
    /// The generated ids: under greedy decoding every method must give the target's own output.
    #[serde(default)]
    pub output_ids: Vec<i64>,
}

impl RequestRow {
    /// Tokens per target pass (bonus included); 1 for target-only decoding.
    pub fn tau(&self) -> f64 {
        if self.cycles.is_empty() {
            return 1.0;
        }
        let emitted: usize = self.cycles.iter().map(|c| c.accepted + c.bonus).sum();
        emitted as f64 / self.cycles.len() as f64
    }

    pub fn tokens_per_second(&self) -> f64 {
        self.generated as f64 / self.total_seconds.max(1e-9)
    }

    /// Seconds after the prefill: drafting, verification and online updates.
    pub fn decode_seconds(&self) -> f64 {
        (self.total_seconds - self.prefill_seconds).max(0.0)
    }

    /// Tokens per second of the decode alone (NaN when nothing was decoded after the prefill: the
    /// prefill's logits give the first token, so a request of one token has no decode step, and the
    /// bookkeeping between prefill and return is no decode speed).
    pub fn decode_tokens_per_second(&self) -> f64 {
        let seconds = self.decode_seconds();
        if self.generated > 1 && seconds > 0.0 {
            self.generated as f64 / seconds
        } else {
            f64::NAN
        }
    }

    /// Share of the output's 4-grams that are distinct: near 1 for prose, far below for an output that
    /// loops (small models under greedy decoding), where tau measures the loop; NaN below 4 tokens.
    pub fn distinct_4grams(&self) -> f64 {
        let grams: Vec<&[i64]> = self.output_ids.windows(4).collect();
        if grams.is_empty() {
            return f64::NAN;
        }
        let distinct: std::collections::BTreeSet<&[i64]> = grams.iter().copied().collect();
        distinct.len() as f64 / grams.len() as f64
    }
}

/// One arm's requests within a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmRecord {
    pub arm: Arm,
    /// The drafter's training length n0 (none for the target alone or unrecorded).
    pub n0: Option<i64>,
    /// The slope beta of the drafter's query scaling (0 unmodified; a schedule's mean beta; the
    /// literature's rules at their nominal slope); none for the target alone, exact corrections, or
    /// units written before it was recorded.
    #[serde(default)]
    pub scaling_slope: Option<f64>,
    /// What the arm read besides the target, as the run sealed it at its start.
    #[serde(flatten)]
    pub inputs: ArmInputs,
    pub requests: Vec<RequestRow>,
}

/// An arm's own provenance: the drafter and schedule it decoded with, by content (a unit of an older
/// version, or the target alone, leaves them empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmInputs {
    /// The digest of the drafter's checkpoint folder as the run sealed it
    /// (`sharpdraft_store::output_folder::digest_of` over its files' sha256).
    #[serde(default)]
    pub drafter_digest: String,
    /// The dtype the drafter's weights ran in (`f32`, `bf16`).
    #[serde(default)]
    pub drafter_dtype: String,
    /// The sha256 of the schedule file the arm's query scaling read (empty for none).
    #[serde(default)]
    pub schedule_digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    pub unit: Unit,
    pub setting: Setting,
    pub target: String,
    pub max_new_tokens: usize,
    pub provenance: Provenance,
    /// What else the machine did while the unit ran.
    pub machine: MachineState,
    /// Every arm of the grid, in the experiment's order.
    pub arms: Vec<ArmRecord>,
    /// Wall time of the whole unit, drafter loading included.
    pub seconds: f64,
}

impl UnitRecord {
    pub fn path(units_dir: &Path, unit: &Unit) -> PathBuf {
        units_dir.join(format!("{}.json", unit.id()))
    }

    /// Writes the record through a temporary file and a rename.
    pub fn write(&self, units_dir: &Path) -> Result<PathBuf> {
        let path = Self::path(units_dir, &self.unit);
        sharpdraft_store::atomic_write::write_whole(&path, serde_json::to_string(self)?)?;
        Ok(path)
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not a finished unit of this version of sharpdraft run (truncated, edited or from an older version): move it out of the folder, and `run --resume` runs that unit again",
                path.display()
            )
        })
    }

    /// Every unit file under `units_dir`, in name order (temporary files are ignored).
    pub fn files(units_dir: &Path) -> Result<Vec<PathBuf>> {
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(units_dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", units_dir.display())),
        };
        paths.sort();
        Ok(paths)
    }

    /// Every finished unit under `units_dir` that belongs to `outline`'s run (its config hash, one of its
    /// units, under that unit's file name, with exactly its arms); any other unit file is an error
    /// naming the file, so nothing from another run or another set of inputs is pooled.
    pub fn read_belonging(units_dir: &Path, outline: &Outline) -> Result<Vec<Self>> {
        let grid: BTreeSet<Unit> = units(outline).into_iter().collect();
        let arms = arms(outline);
        let move_out = "move it out of the folder (a unit of another run, or of other inputs, would be pooled with this one's)";
        let mut out = Vec::new();
        for path in Self::files(units_dir)? {
            let record = Self::read(&path)?;
            let p = path.display();
            if record.provenance.config_hash != outline.hash() {
                bail!(
                    "{p}: belongs to config hash {}, not this run's {} (another experiment, or the same YAML over other prompts, checkpoints or schedules): {move_out}",
                    record.provenance.config_hash,
                    outline.hash()
                );
            }
            if !grid.contains(&record.unit) {
                bail!(
                    "{p}: unit {} is not in this experiment's grid: {move_out}",
                    record.unit.id()
                );
            }
            if path != Self::path(units_dir, &record.unit) {
                bail!(
                    "{p}: holds unit {}, whose file is {}.json: {move_out}",
                    record.unit.id(),
                    record.unit.id()
                );
            }
            let recorded: Vec<&Arm> = record.arms.iter().map(|a| &a.arm).collect();
            if recorded != arms.iter().collect::<Vec<_>>() {
                bail!("{p}: its arms are not this experiment's: {move_out}");
            }
            out.push(record);
        }
        Ok(out)
    }
}
