//! Command-line choice of SharpDraft query scaling for a drafter (`--scaling`, `--schedule`, `--beta`,
//! `--n0`), resolved against the drafter it scales.

use anyhow::{bail, Context, Result};
use clap::Args;
use sharpdraft_draft::Drafter;
use sharpdraft_math::ScaleSchedule;
use sharpdraft_model::{QueryScaling, ScalingMode};
use std::path::PathBuf;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingKind {
    /// The unmodified drafter.
    Off,
    /// s(n) = 1 + beta max(0, ln(n / n0)); beta from --schedule (global, per layer or per head) or --beta.
    Fixed,
    /// The per-length-bin exact corrections of a calibrated --schedule.
    Exact,
    /// Qwen's s = max(1, ln n / ln n0).
    Logn,
}

#[derive(Args, Debug, Clone)]
pub struct ScalingArgs {
    /// SharpDraft query scaling of the drafter; `tau` takes a comma-separated list and compares them.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub scaling: Vec<ScalingKind>,
    /// Schedule YAML (as written by `sharpdraft calibrate`) for `fixed` and `exact`.
    #[arg(long)]
    pub schedule: Option<PathBuf>,
    /// A global beta for `fixed` instead of a schedule.
    #[arg(long)]
    pub beta: Option<f64>,
    /// n0 for `--beta` and `logn`; defaults to the drafter's recorded training length.
    #[arg(long)]
    pub n0: Option<f64>,
}

impl ScalingArgs {
    /// The one mode of a command that runs one drafter.
    pub fn single(&self) -> Result<ScalingKind> {
        match self.scaling.as_slice() {
            [kind] => Ok(*kind),
            kinds => bail!("--scaling takes one mode here, got {kinds:?}"),
        }
    }

    fn n0(&self, drafter: &dyn Drafter) -> Result<f64> {
        match (self.n0, drafter.training_length()) {
            (Some(n0), _) => Ok(n0),
            (None, Some(n0)) => Ok(n0 as f64),
            (None, None) => bail!(
                "the {} drafter records no training length: give --n0",
                drafter.method()
            ),
        }
    }

    fn load_schedule(&self) -> Result<ScaleSchedule> {
        let path = self
            .schedule
            .as_ref()
            .context("this --scaling mode needs --schedule (see `sharpdraft calibrate`)")?;
        if self.n0.is_some() {
            bail!(
                "--n0 conflicts with --schedule {}: the schedule carries its own n0",
                path.display()
            );
        }
        Ok(ScaleSchedule::load(path)?)
    }

    /// Builds `kind` for `drafter`, checked against its layers and heads.
    pub fn build(&self, kind: ScalingKind, drafter: &dyn Drafter) -> Result<QueryScaling> {
        let mode = match kind {
            ScalingKind::Off => ScalingMode::Off,
            ScalingKind::Fixed => match (self.beta, &self.schedule) {
                (Some(_), Some(path)) => bail!(
                    "--beta conflicts with --schedule {}: give one",
                    path.display()
                ),
                (Some(beta), None) => {
                    ScalingMode::Fixed(ScaleSchedule::global(self.n0(drafter)?, beta)?)
                }
                (None, _) => ScalingMode::Fixed(self.load_schedule()?),
            },
            ScalingKind::Exact => ScalingMode::Exact(self.load_schedule()?),
            ScalingKind::Logn => ScalingMode::Logn {
                n0: self.n0(drafter)?,
            },
        };
        let (layers, heads) = drafter.query_layout();
        let schedule = self
            .schedule
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "--beta".into());
        QueryScaling::new(mode, layers, heads).with_context(|| {
            format!(
                "--scaling {kind:?} with {schedule} for the {} drafter",
                drafter.method()
            )
        })
    }
}
