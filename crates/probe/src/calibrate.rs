//! `sharpdraft calibrate CONFIG.yaml`: beta from probe statistics with the estimators of
//! derivations/top-k-mass-scaling.md §5, pooled and per head, with the guards; writes the schedule YAML that `generate`, `tau` and probes
//! consume, a table of beta by estimator, and plots.
//!
//! ```yaml
//! probe: ../probe/smollm2-eagle3.yaml   # a probe config, run first when it has not finished
//! # probe_dir: path/to/finished/probe   # or the folder of a finished probe
//! k: 4                                  # the M_k the schedule preserves
//! estimator: exact_least_squares        # gaussian_plug_in | mass_plug_in | local_slope | exact_least_squares
//! per_head: true                        # per-head betas in the schedule (else the pooled beta)
//! beta_max: 2.0
//! out: smollm2-eagle3                   # $SHARPDRAFT_HOME/calibrations/<out>, or a path with a '/'
//! # reference: target                   # hold (iii)'s mass where the target's own dilution puts it
//! # target_probe: ../probe/smollm2-target.yaml   # (or target_probe_dir) a probe with method: target
//! ```
//!
//! Output folder: `schedule.yaml` (n0, beta, and the exact table of estimator (iii)), `betas.parquet`
//! (estimator, layer, head, beta, raw, guard), `mass_vs_n.png` (M_k against n, measured unscaled and
//! re-evaluated under the schedule) and `beta_per_head.png`.

use crate::error::{bail, ensure, Context, Result};
use crate::head_stats;
use crate::run::{read_probe, ProbeConfig, ProbeOutput};
use serde::{Deserialize, Serialize};
use sharpdraft_math::DataFingerprint;
use sharpdraft_math::{
    calibrate, Beta, Calibration, CalibrationOptions, Estimator, ExactScales, HeadStats,
    MassReference, ScaleSchedule, TargetDilution,
};
use sharpdraft_model::CausalLm;
use sharpdraft_report::charts::{line_chart, Chart, Series};
use sharpdraft_report::table::{Column, Table};
use sharpdraft_store::output_folder;
use sharpdraft_store::paths::under;
use sharpdraft_store::registry;
use statrs::statistics::Statistics;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrateConfig {
    #[serde(default)]
    pub probe: Option<PathBuf>,
    #[serde(default)]
    pub probe_dir: Option<PathBuf>,
    #[serde(default = "default_k")]
    pub k: i64,
    #[serde(default = "default_estimator")]
    pub estimator: Estimator,
    #[serde(default = "default_per_head")]
    pub per_head: bool,
    #[serde(default = "default_beta_max")]
    pub beta_max: f64,
    pub out: String,
    /// What estimator (iii) holds each long bin's mass at.
    #[serde(default)]
    pub reference: ReferenceKind,
    /// With `reference: target`: a probe config with `method: target` over the drafter's lengths (run
    /// first when it has not finished) ...
    #[serde(default)]
    pub target_probe: Option<PathBuf>,
    /// ... or the folder of a finished one.
    #[serde(default)]
    pub target_probe_dir: Option<PathBuf>,
}

/// The mass estimator (iii) solves for at each long bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceKind {
    /// The drafter head's own mass at n0.
    #[default]
    Drafter,
    /// That mass moved as the target's own mass falls from n0 (pooled over its heads): a drafter that
    /// imitates a diluting target is not sharpened past it.
    Target,
}

fn default_k() -> i64 {
    4
}
fn default_estimator() -> Estimator {
    Estimator::ExactLeastSquares
}
fn default_per_head() -> bool {
    true
}
fn default_beta_max() -> f64 {
    2.0
}

const ESTIMATORS: [Estimator; 4] = [
    Estimator::GaussianPlugIn,
    Estimator::MassPlugIn,
    Estimator::LocalSlope,
    Estimator::ExactLeastSquares,
];

fn estimator_name(e: Estimator) -> &'static str {
    match e {
        Estimator::GaussianPlugIn => "(i) gaussian_plug_in",
        Estimator::MassPlugIn => "(i') mass_plug_in",
        Estimator::LocalSlope => "(ii) local_slope",
        Estimator::ExactLeastSquares => "(iii) exact_least_squares",
    }
}

pub struct CalibrationOutput {
    pub dir: PathBuf,
    pub schedule_path: PathBuf,
    pub schedule: ScaleSchedule,
    /// Every estimator that could be formed (the others' errors are printed).
    pub fits: Vec<Calibration>,
}

impl CalibrateConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let config: Self = serde_norway::from_str(&text)
            .with_context(|| format!("{}: invalid calibrate config", path.display()))?;
        ensure!(
            config.probe.is_some() != config.probe_dir.is_some(),
            "{}: give exactly one of probe (a probe config) and probe_dir (a finished probe)",
            path.display()
        );
        ensure!(
            config.beta_max >= 0.0,
            "{}: beta_max {} must be >= 0",
            path.display(),
            config.beta_max
        );
        let target_probes = usize::from(config.target_probe.is_some())
            + usize::from(config.target_probe_dir.is_some());
        match config.reference {
            ReferenceKind::Drafter => ensure!(
                target_probes == 0,
                "{}: target_probe / target_probe_dir given with reference: drafter (use reference: target)",
                path.display()
            ),
            ReferenceKind::Target => {
                ensure!(
                    target_probes == 1,
                    "{}: reference: target needs exactly one of target_probe (a probe config with method: target) and target_probe_dir",
                    path.display()
                );
                ensure!(
                    config.estimator == Estimator::ExactLeastSquares,
                    "{}: reference: target applies to estimator exact_least_squares, not {:?}",
                    path.display(),
                    config.estimator
                );
            }
        }
        Ok(config)
    }

    pub fn out_dir(&self) -> PathBuf {
        if self.out.contains('/') {
            PathBuf::from(&self.out)
        } else {
            registry::calibration_dir(&self.out)
        }
    }
}

/// Runs a calibrate config (and its probe, when it has not run).
pub fn run(config_path: &Path) -> Result<CalibrationOutput> {
    let config = CalibrateConfig::load(config_path)?;
    // Refused before the probe runs, not after.
    output_folder::claim(&config.out_dir(), "calibrate", &[config_path])?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    let probe = match (&config.probe, &config.probe_dir) {
        (Some(probe), _) => {
            let path = under(base, probe);
            let probe_config = ProbeConfig::load(&path)?;
            crate::run::run_config(&probe_config, path.parent().unwrap_or(Path::new(".")))?
        }
        (None, Some(dir)) => read_probe(&under(base, dir))?,
        (None, None) => unreachable!("validated"),
    };
    let target = match (&config.target_probe, &config.target_probe_dir) {
        (Some(probe), _) => {
            let path = under(base, probe);
            let probe_config = ProbeConfig::load(&path)?;
            Some(crate::run::run_config(
                &probe_config,
                path.parent().unwrap_or(Path::new(".")),
            )?)
        }
        (None, Some(dir)) => Some(read_probe(&under(base, dir))?),
        (None, None) => None,
    };
    calibrate_probe(&config, &probe, target.as_ref())
}

/// What the calibration of `config_path` read, found again from its probe configs without probing
/// (`n0`: the schedule's), with words: for the held-out check of a schedule written before its
/// fingerprint recorded them. `None` when a probe is named by its finished folder alone
/// (`probe_dir`), whose config may not be at hand.
pub fn text_read_of(
    config_path: &Path,
    target: &CausalLm,
    target_name: &str,
    n0: f64,
) -> Result<Option<DataFingerprint>> {
    let config = CalibrateConfig::load(config_path)?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    let read_of = |probe: &Option<PathBuf>| -> Result<Option<DataFingerprint>> {
        let Some(probe) = probe else {
            return Ok(None);
        };
        let path = under(base, probe);
        let probe_config = ProbeConfig::load(&path)?;
        crate::run::text_read_of(
            &probe_config,
            path.parent().unwrap_or(Path::new(".")),
            target,
            target_name,
            n0,
        )
        .map(Some)
    };
    let drafter = match (&config.probe, &config.probe_dir) {
        (Some(_), _) => read_of(&config.probe)?,
        _ => return Ok(None),
    };
    Ok(
        match (
            config.target_probe.is_some(),
            config.target_probe_dir.is_some(),
        ) {
            (true, _) => sharpdraft_data::fingerprint::joined(
                drafter.as_ref(),
                read_of(&config.target_probe)?.as_ref(),
            ),
            (false, true) => None,
            (false, false) => drafter,
        },
    )
}

/// The target's dilution from its probe, for `reference: target`.
fn target_dilution(
    config: &CalibrateConfig,
    target: Option<&ProbeOutput>,
) -> Result<MassReference> {
    match (config.reference, target) {
        (ReferenceKind::Drafter, _) => Ok(MassReference::Drafter),
        (ReferenceKind::Target, None) => {
            bail!("reference: target needs the target's probe (target_probe or target_probe_dir)")
        }
        (ReferenceKind::Target, Some(probe)) => {
            let heads = head_stats(&probe.bins, &probe.curves, config.k);
            let dilution = TargetDilution::from_heads(&heads)
                .with_context(|| format!("the target probe in {}", probe.dir.display()))?;
            Ok(MassReference::Target(dilution))
        }
    }
}

/// Fits every estimator on a finished probe and writes the schedule, table and plots; `target` is the
/// target's finished probe for `reference: target`.
pub fn calibrate_probe(
    config: &CalibrateConfig,
    probe: &ProbeOutput,
    target: Option<&ProbeOutput>,
) -> Result<CalibrationOutput> {
    let dir = config.out_dir();
    let mut inputs = vec![probe.dir.as_path()];
    inputs.extend(target.map(|t| t.dir.as_path()));
    output_folder::claim(&dir, "calibrate", &inputs)?;
    let reference = target_dilution(config, target)?;
    let heads = heads_at_k(config, probe)?;
    let n0 = probe.n0;
    let fits = fit_estimators(config, &heads, &reference, n0)?;
    let chosen = fits
        .iter()
        .find(|f| f.estimator == config.estimator)
        .expect("the chosen estimator was formed");
    let mut schedule = schedule_of(
        config,
        &heads,
        chosen,
        fits.iter()
            .find(|f| f.estimator == Estimator::ExactLeastSquares),
        n0,
    )?;
    // What the calibration read: the drafter's probe, and the target's where it holds the mass to it.
    schedule.calibrated_on = match target {
        Some(t) => sharpdraft_data::fingerprint::joined(probe.read.as_ref(), t.read.as_ref()),
        None => probe.read.clone(),
    };
    write_calibration(config, probe, &dir, &heads, &fits, &schedule)?;
    let schedule_path = dir.join(registry::SCHEDULE);
    println!(
        "schedule ({} beta{}): {}",
        estimator_name(config.estimator),
        if config.per_head {
            " per head"
        } else {
            ", pooled"
        },
        schedule_path.display()
    );
    Ok(CalibrationOutput {
        dir,
        schedule_path,
        schedule,
        fits,
    })
}

/// The probe's per-head statistics at the config's k; an error lists the ks it did record.
fn heads_at_k(config: &CalibrateConfig, probe: &ProbeOutput) -> Result<Vec<HeadStats>> {
    let heads = head_stats(&probe.bins, &probe.curves, config.k);
    ensure!(
        !heads.is_empty(),
        "{}: the probe recorded no k = {} (its ks: {:?})",
        probe.dir.display(),
        config.k,
        probe
            .bins
            .iter()
            .map(|b| b.k)
            .collect::<std::collections::BTreeSet<_>>()
    );
    Ok(heads)
}

/// Fits each estimator, printing a row of its betas; one that cannot be formed is printed and
/// skipped, unless it is the config's own estimator (an error).
fn fit_estimators(
    config: &CalibrateConfig,
    heads: &[HeadStats],
    reference: &MassReference,
    n0: f64,
) -> Result<Vec<Calibration>> {
    let mut fits = Vec::new();
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "estimator", "pooled", "mean", "min", "max", "guarded"
    );
    for estimator in ESTIMATORS {
        match calibrate(
            heads,
            &CalibrationOptions {
                n0,
                estimator,
                beta_max: config.beta_max,
                // The target reference is defined for (iii); the other estimators are shown as they are.
                reference: if estimator == Estimator::ExactLeastSquares {
                    reference.clone()
                } else {
                    MassReference::Drafter
                },
            },
        ) {
            Ok(fit) => {
                print_fit(estimator, &fit);
                fits.push(fit);
            }
            Err(e) if estimator == config.estimator => {
                return Err(e).context(format!("estimator {}", estimator_name(estimator)))
            }
            Err(e) => println!("{:<28} not formed: {e}", estimator_name(estimator)),
        }
    }
    Ok(fits)
}

/// One row of the estimator table: pooled beta, mean / min / max over heads, heads guarded.
fn print_fit(estimator: Estimator, fit: &Calibration) {
    let betas: Vec<f64> = fit.heads.iter().map(|h| h.beta).collect();
    let mean = betas.iter().sum::<f64>() / betas.len() as f64;
    let (min, max) = betas
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let guarded = fit.heads.iter().filter(|h| h.guard.is_some()).count();
    println!(
        "{:<28} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>5}/{}",
        estimator_name(estimator),
        fit.pooled,
        mean,
        min,
        max,
        guarded,
        betas.len()
    );
}

/// Writes the betas table, the plots and the schedule into a staging folder renamed into `dir`, and
/// prints the mass by length bin.
fn write_calibration(
    config: &CalibrateConfig,
    probe: &ProbeOutput,
    dir: &Path,
    heads: &[HeadStats],
    fits: &[Calibration],
    schedule: &ScaleSchedule,
) -> Result<()> {
    let n0 = probe.n0;
    // Everything is written into a staging folder and renamed into place: the schedule, its table and
    // plots always belong together.
    let staging = output_folder::Staging::new(dir)?;
    let staged = staging.path();
    write_betas(&staged.join("betas.parquet"), fits)?;
    let bins = bin_summaries(heads, schedule);
    print_bins(&bins, n0, config.k);
    plot_mass(
        &staged.join("mass_vs_n.png"),
        &bins,
        schedule.exact.is_some(),
        n0,
        config.k,
    )?;
    plot_betas(&staged.join("beta_per_head.png"), fits)?;
    schedule.save(&staged.join(registry::SCHEDULE))?;
    let mut marker = output_folder::Marker::new(
        "calibrate",
        true,
        format!("calibration of the probe in {}", probe.dir.display()),
    );
    staging.commit(&mut marker, true)?;
    Ok(())
}

/// The schedule: the chosen estimator's betas (per head, or pooled), plus the exact table of (iii) when
/// it was formed, with unreachable bins filled from that head's fitted slope.
fn schedule_of(
    config: &CalibrateConfig,
    heads: &[HeadStats],
    chosen: &Calibration,
    exact: Option<&Calibration>,
    n0: f64,
) -> Result<ScaleSchedule> {
    let layers = heads.iter().map(|h| h.layer).max().expect("heads") + 1;
    let per_layer = heads.iter().map(|h| h.head).max().expect("heads") + 1;
    let complete = heads.len() == layers * per_layer;
    let table = |value: &dyn Fn(usize) -> Vec<f64>| -> Vec<Vec<Vec<f64>>> {
        let mut t = vec![vec![Vec::new(); per_layer]; layers];
        for (i, h) in heads.iter().enumerate() {
            t[h.layer][h.head] = value(i);
        }
        t
    };
    let beta = if config.per_head {
        if !complete {
            bail!("per_head: the probe recorded {} of {layers} x {per_layer} heads (a `layers:` subset?); use per_head: false", heads.len());
        }
        let betas = table(&|i| vec![chosen.heads[i].beta]);
        Beta::PerHead(
            betas
                .into_iter()
                .map(|l| l.into_iter().map(|h| h[0]).collect())
                .collect(),
        )
    } else {
        Beta::Global(chosen.pooled)
    };
    let exact = match exact {
        Some(fit) if complete && !fit.heads.is_empty() && !fit.heads[0].bin_scales.is_empty() => {
            let n: Vec<f64> = fit.heads[0].bin_scales.iter().map(|(n, _)| *n).collect();
            let same_bins = fit.heads.iter().all(|h| h.bin_scales.len() == n.len());
            same_bins.then(|| ExactScales {
                // Bin lengths differ slightly between heads only through rounding; the first head's stand.
                n: n.clone(),
                s: table(&|i| {
                    let head = &fit.heads[i];
                    head.bin_scales
                        .iter()
                        .map(|(nb, s)| s.unwrap_or(1.0 + head.beta * (nb / n0).ln()))
                        .collect()
                }),
            })
        }
        _ => None,
    };
    let schedule = ScaleSchedule {
        n0,
        beta,
        exact,
        calibrated_on: None,
    };
    schedule.validate()?;
    Ok(schedule)
}

fn write_betas(path: &Path, fits: &[Calibration]) -> Result<()> {
    let rows: Vec<(&Calibration, &sharpdraft_math::calibrate::HeadBeta)> = fits
        .iter()
        .flat_map(|f| f.heads.iter().map(move |h| (f, h)))
        .collect();
    Table::default()
        .with(
            "estimator",
            Column::Str(
                rows.iter()
                    .map(|(f, _)| estimator_name(f.estimator).to_string())
                    .collect(),
            ),
        )
        .with(
            "layer",
            Column::I64(rows.iter().map(|(_, h)| h.layer as i64).collect()),
        )
        .with(
            "head",
            Column::I64(rows.iter().map(|(_, h)| h.head as i64).collect()),
        )
        .with(
            "beta",
            Column::F64(rows.iter().map(|(_, h)| h.beta).collect()),
        )
        .with(
            "raw",
            Column::F64(rows.iter().map(|(_, h)| h.raw).collect()),
        )
        .with(
            "guard",
            Column::Str(
                rows.iter()
                    .map(|(_, h)| h.guard.map_or(String::new(), |g| format!("{g:?}")))
                    .collect(),
            ),
        )
        .with(
            "pooled",
            Column::F64(rows.iter().map(|(f, _)| f.pooled).collect()),
        )
        .write_parquet(path)
        .map_err(Into::into)
}

/// One length bin averaged over heads: what the dilution and its correction look like.
struct BinSummary {
    n: f64,
    /// Measured `M_k` at s = 1.
    unscaled: f64,
    /// `M_k` re-evaluated on each head's mass curve at the schedule's fixed-slope `s(n)`.
    fixed: f64,
    /// The same under the exact table (NaN without one).
    exact: f64,
    background_var: f64,
    /// `<l>_{R,p} - <l>_{B,p}`, from `M (1 - M) gap / (M (1 - M))`, over the heads whose mean `M_k` is
    /// not 1 (a head with all its mass on k keys has no measurable gap; NaN when no head has one).
    gap: f64,
}

fn bin_summaries(heads: &[HeadStats], schedule: &ScaleSchedule) -> Vec<BinSummary> {
    // Per bin, one row per head: n, M_k, M_k under fixed and exact, background variance, gap.
    let mut by_bin: BTreeMap<i64, Vec<[f64; 6]>> = BTreeMap::new();
    for h in heads {
        for b in &h.bins {
            // Bins are a factor 2 apart; heads share them.
            let key = b.n.log2().round() as i64;
            let fixed = b.mean_mass(schedule.scale(b.n, h.layer, h.head));
            let exact = schedule
                .exact_scale(b.n, h.layer, h.head)
                .map_or(f64::NAN, |s| b.mean_mass(s));
            let gap = b.mass_gap / (b.mass * (1.0 - b.mass));
            by_bin
                .entry(key)
                .or_default()
                .push([b.n, b.mass, fixed, exact, b.background_var, gap]);
        }
    }
    by_bin
        .values()
        .map(|rows| {
            let column = |i: usize| rows.iter().map(move |row| row[i]);
            BinSummary {
                n: column(0).mean(),
                unscaled: column(1).mean(),
                fixed: column(2).mean(),
                exact: column(3).mean(),
                background_var: column(4).mean(),
                gap: column(5).filter(|gap| gap.is_finite()).mean(),
            }
        })
        .collect()
}

fn print_bins(bins: &[BinSummary], n0: f64, k: i64) {
    println!("\nmean over heads by length bin (M_{k}: measured unscaled, and under the schedule)");
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "n", "n/n0", "unscaled", "fixed", "exact", "sigma^2", "gap"
    );
    for b in bins {
        println!(
            "{:>8.0} {:>8.2} {:>10.4} {:>10.4} {:>10.4} {:>10.3} {:>8.3}",
            b.n,
            b.n / n0,
            b.unscaled,
            b.fixed,
            b.exact,
            b.background_var,
            b.gap
        );
    }
    println!();
}

fn plot_mass(path: &Path, bins: &[BinSummary], has_exact: bool, n0: f64, k: i64) -> Result<()> {
    let points =
        |f: &dyn Fn(&BinSummary) -> f64| bins.iter().map(|b| (b.n, f(b))).collect::<Vec<_>>();
    let mut series = vec![
        Series {
            name: "unscaled (measured)".into(),
            points: points(&|b| b.unscaled),
            intervals: Vec::new(),
            colour: None,
        },
        Series {
            name: "fixed-slope schedule".into(),
            points: points(&|b| b.fixed),
            intervals: Vec::new(),
            colour: None,
        },
    ];
    if has_exact {
        series.push(Series {
            name: "exact table".into(),
            points: points(&|b| b.exact),
            intervals: Vec::new(),
            colour: None,
        });
    }
    let title = format!("top-{k} attention mass against visible keys (n0 = {n0})");
    line_chart(
        path,
        &Chart {
            title: &title,
            x_label: "visible keys n",
            y_label: &format!("mean M_{k} over heads"),
            log_x: true,
            reference_y: None,
        },
        &series,
    )
    .map_err(Into::into)
}

fn plot_betas(path: &Path, fits: &[Calibration]) -> Result<()> {
    let heads_per_layer = fits
        .iter()
        .flat_map(|f| f.heads.iter().map(|h| h.head))
        .max()
        .unwrap_or(0)
        + 1;
    let series: Vec<Series> = fits
        .iter()
        .map(|f| Series {
            name: estimator_name(f.estimator).into(),
            points: f
                .heads
                .iter()
                .map(|h| ((h.layer * heads_per_layer + h.head) as f64, h.beta))
                .collect(),
            intervals: Vec::new(),
            colour: None,
        })
        .collect();
    line_chart(
        path,
        &Chart {
            title: "beta per head (layer-major)",
            x_label: "layer x heads + head",
            y_label: "beta",
            log_x: false,
            reference_y: None,
        },
        &series,
    )
    .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharpdraft_math::calibrate::BinStats;

    fn bin(n: f64, mass: f64, mass_gap: f64) -> BinStats {
        BinStats {
            n,
            weight: 1.0,
            mass,
            mass_gap,
            top_mean: 0.0,
            background_mean: 0.0,
            background_var: 1.0,
            rows: Vec::new(),
            curve: vec![(1.0, mass), (2.0, mass)],
        }
    }

    fn head(head: usize, bins: Vec<BinStats>) -> HeadStats {
        HeadStats {
            layer: 0,
            head,
            k: 4,
            bins,
        }
    }

    #[test]
    fn a_bin_averages_every_head_and_its_gap_skips_a_head_with_all_its_mass_on_k_keys() {
        let schedule = ScaleSchedule::global(256.0, 0.0).unwrap();
        // Head 0: M = 0.5 and gap 2 at n = 256 and 512. Head 1 at 256 puts all its mass on k keys (no gap).
        let heads = [
            head(0, vec![bin(256.0, 0.5, 0.5), bin(512.0, 0.5, 0.5)]),
            head(1, vec![bin(256.0, 1.0, 0.0)]),
        ];
        let bins = bin_summaries(&heads, &schedule);
        assert_eq!(bins.len(), 2, "one summary per length bin");
        assert!((bins[0].unscaled - 0.75).abs() < 1e-12, "M over both heads");
        assert!(
            (bins[0].fixed - 0.75).abs() < 1e-12,
            "beta 0 leaves M as measured"
        );
        assert!((bins[0].gap - 2.0).abs() < 1e-12, "gap of head 0 alone");
        assert!((bins[1].gap - 2.0).abs() < 1e-12);
        let lone = bin_summaries(&[head(1, vec![bin(256.0, 1.0, 0.0)])], &schedule);
        assert!(lone[0].gap.is_nan(), "no head with a gap: NaN, not 0");
    }
}
