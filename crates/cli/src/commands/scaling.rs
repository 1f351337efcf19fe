//! Command-line choice of SharpDraft query scaling for a drafter (`--scaling`, `--schedule`, `--beta`,
//! `--n0`); resolved by the lab's [`ScalingSpec`], which configs use too.

use anyhow::{bail, Result};
use clap::Args;
pub use sharpdraft_lab::scaling::ScalingKind;
use sharpdraft_lab::scaling::ScalingSpec;
use std::path::PathBuf;

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
    /// n0 for `--beta`, `logn` and `yarn`, defaulting to the drafter's recorded training length;
    /// `llama4`'s floor scale, defaulting to Llama 4's own 8192.
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

    /// Every mode asked for, in order.
    pub fn kinds(&self) -> Vec<ScalingKind> {
        self.scaling.clone()
    }

    /// The scaling specification of mode `kind` with these flags' schedule, beta and n0.
    pub fn spec(&self, kind: ScalingKind) -> ScalingSpec {
        ScalingSpec {
            mode: kind,
            schedule: self.schedule.clone(),
            beta: self.beta,
            n0: self.n0,
        }
    }
}
