//! A SharpDraft query-scaling choice as configs and the command line spell it, resolved against the
//! drafter it scales.

use crate::driver::{ensure, Context, DecodeError, Result};
use serde::{Deserialize, Serialize};
use sharpdraft_math::ScaleSchedule;
pub use sharpdraft_model::ScalingMode;
use sharpdraft_model::{QueryScaling, ScaledQueries};
use sharpdraft_store::registry;
use std::path::PathBuf;

/// A drafter's query scaling: the `scaling:` block of a drafter specification and the `--schedule`,
/// `--beta` and `--n0` flags, one declaration for both. The command line names the mode apart
/// (`--scaling`, a list where a command compares several).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct ScalingSpec {
    /// `off` when absent (a beta sweep's `scaling:` gives only n0).
    #[serde(default)]
    #[arg(skip)]
    pub mode: ScalingMode,
    /// Schedule YAML (as `sharpdraft calibrate` writes it) for `fixed` and `exact`: a path, or the name
    /// of a calibration (`smollm2-dflash` = `$SHARPDRAFT_HOME/calibrations/smollm2-dflash/schedule.yaml`).
    #[serde(default)]
    #[arg(long)]
    pub schedule: Option<PathBuf>,
    /// A global beta for `fixed` instead of a schedule.
    #[serde(default)]
    #[arg(long)]
    pub beta: Option<f64>,
    /// n0 for `--beta`, `logn` and `yarn`, defaulting to the drafter's recorded training length;
    /// `llama4`'s floor scale, defaulting to Llama 4's own 8192.
    #[serde(default)]
    #[arg(long)]
    pub n0: Option<f64>,
}

impl ScalingSpec {
    /// Checks what needs no model: beta a finite slope >= 0 and n0 a finite length >= 1. (A value the
    /// mode does not read is allowed: the command line gives one beta to every mode it compares.)
    pub fn validate(&self) -> Result<()> {
        if let Some(beta) = self.beta {
            ensure!(
                beta.is_finite() && beta >= 0.0,
                "scaling.beta = {beta}: a slope must be finite and >= 0 (0 leaves the drafter unmodified)"
            );
        }
        if let Some(n0) = self.n0 {
            ensure!(
                n0.is_finite() && n0 >= 1.0,
                "scaling.n0 = {n0}: must be a finite length of at least 1 token"
            );
        }
        Ok(())
    }

    fn n0(&self, training_length: Option<i64>, what: &str) -> Result<f64> {
        let n0 = match (self.n0, training_length) {
            (Some(n0), _) => n0,
            (None, Some(n0)) => n0 as f64,
            (None, None) => {
                return Err(DecodeError::Invalid(format!(
                    "{what} records no training length: give n0"
                )))
            }
        };
        if !(n0.is_finite() && n0 >= 1.0) {
            return Err(DecodeError::Invalid(format!(
                "n0 = {n0} must be a finite length of at least 1 token"
            )));
        }
        Ok(n0)
    }

    fn load_schedule(&self) -> Result<ScaleSchedule> {
        let path = self.schedule.as_ref().ok_or_else(|| {
            DecodeError::Invalid(format!(
                "scaling {} needs a schedule (see `sharpdraft calibrate`)",
                self.mode.name()
            ))
        })?;
        if self.n0.is_some() {
            return Err(DecodeError::Invalid(format!(
                "n0 conflicts with schedule {}: the schedule carries its own n0",
                path.display()
            )));
        }
        Ok(ScaleSchedule::load(&resolve_schedule(path))?)
    }

    /// Builds the scaling for `model` (checked against its query layout; `what` names it in errors).
    /// A `beta` or `logn` scaling without its own `n0` takes `n0`, else the model's recorded training
    /// length.
    pub fn build_for(
        &self,
        model: &dyn ScaledQueries,
        n0: Option<i64>,
        what: &str,
    ) -> Result<QueryScaling> {
        let (layers, heads) = model.query_layout();
        let training_length = n0.or_else(|| model.training_length());
        let source = match (&self.schedule, self.beta) {
            (Some(path), _) => path.display().to_string(),
            (None, Some(beta)) => format!("beta {beta}"),
            (None, None) => "no schedule".into(),
        };
        let context = || format!("scaling {} ({source}) for {what}", self.mode.name());
        match self.mode {
            ScalingMode::Off => Ok(QueryScaling::off()),
            ScalingMode::Fixed | ScalingMode::Exact => {
                let schedule = match (self.mode, self.beta, &self.schedule) {
                    (ScalingMode::Fixed, Some(_), Some(path)) => {
                        return Err(DecodeError::Invalid(format!(
                            "beta conflicts with schedule {}: give one",
                            path.display()
                        )))
                    }
                    (ScalingMode::Fixed, Some(beta), None) => {
                        ScaleSchedule::global(self.n0(training_length, what)?, beta)
                            .with_context(|| format!("beta {beta}"))?
                    }
                    _ => self.load_schedule()?,
                };
                QueryScaling::from_schedule(self.mode, schedule, layers, heads)
                    .with_context(context)
            }
            ScalingMode::Logn | ScalingMode::Yarn => {
                let n0 = self.n0(training_length, what)?;
                QueryScaling::rule(self.mode, n0, 0.0, layers, heads).with_context(context)
            }
            ScalingMode::Llama4 => QueryScaling::rule(
                self.mode,
                self.n0.unwrap_or(sharpdraft_math::LLAMA4_FLOOR_SCALE),
                sharpdraft_math::LLAMA4_ATTN_SCALE,
                layers,
                heads,
            )
            .with_context(context),
        }
    }
}

/// Whether a schedule is named by its calibration (a bare name without `/` or `.yaml`), not by path.
pub fn is_calibration_name(path: &std::path::Path) -> bool {
    let text = path.to_string_lossy();
    !(text.contains('/') || text.ends_with(".yaml") || text.ends_with(".yml"))
}

/// A schedule path as given, or a calibration's schedule when it is a bare name without `/` or `.yaml`.
pub fn resolve_schedule(path: &std::path::Path) -> PathBuf {
    if !is_calibration_name(path) {
        path.to_path_buf()
    } else {
        registry::calibration_dir(&path.to_string_lossy()).join(registry::SCHEDULE)
    }
}
