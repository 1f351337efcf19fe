//! The flag groups several commands share: the device and dtype models load in (`DeviceArgs`,
//! `ModelArgs`) and the query-scaling modes a drafter runs with (`ScalingModesArgs`). The drafter's own
//! flags are its specification's (`DrafterSpec`), the prompt set's are `prompt_set`'s.

use anyhow::Context;
use clap::Args;
use sharpdraft_decode::drafter_spec::DRAFTER_FLAG;
use sharpdraft_decode::scaling::ScalingMode;
use sharpdraft_model::{parse_device, resolve_dtype, CausalLm};
use sharpdraft_store::registry;

/// The device a command runs its models on (`--device`): `ModelArgs`' and `bench decode`'s (`bench
/// attention-stats` has its own, defaulting to CUDA where there is one).
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Device: cpu, cuda or cuda:N.
    #[arg(long, default_value = sharpdraft_model::DEFAULT_DEVICE)]
    pub device: String,
}

impl DeviceArgs {
    /// The device `--device` names, or an error naming the value.
    pub fn device(&self) -> anyhow::Result<tch::Device> {
        Ok(parse_device(&self.device)?)
    }
}

/// Where and in which dtype a command loads its target (and drafter): `--device` and `--dtype`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Weights dtype: f32, bf16, f16, gguf (the weights as the GGUF file they were imported from
    /// stores them: a decode step reads the file's blocks), or auto, the fastest of those for the model
    /// on this machine (docs/setup.md, "Which dtype"; printed).
    #[arg(long, default_value = "auto")]
    pub dtype: String,
}

impl ModelArgs {
    pub fn load(&self, name_or_path: &str) -> anyhow::Result<CausalLm> {
        let dir = registry::resolve(name_or_path)?;
        let device = self.device.device()?;
        let (dtype, why) = resolve_dtype(&self.dtype, &dir, device)?;
        if let Some(why) = why {
            eprintln!("dtype auto for {name_or_path}: {} ({why})", dtype.name());
        }
        let model = CausalLm::load_dtype(&dir, device, dtype)
            .with_context(|| format!("loading model {name_or_path}"))?;
        Ok(model)
    }
}

/// The query-scaling modes a command runs its drafter with (`--scaling`): the one `generate` and `bench
/// draft-time` decode with, or the list `tau` and `bench speculative` compare. The drafter specification holds the mode's
/// options (`--schedule`, `--beta`, `--n0`:
/// [`ScalingSpec`](sharpdraft_decode::scaling::ScalingSpec)); the mode alone is named apart because a
/// comparison names several, while YAML compares them as `methods:`.
#[derive(Args, Debug, Clone)]
pub struct ScalingModesArgs {
    /// SharpDraft query scaling of the drafter; `tau` and `bench speculative` take a comma-separated
    /// list and compare them.
    #[arg(
        id = "scaling",
        long = "scaling",
        value_name = "SCALING",
        value_enum,
        requires = DRAFTER_FLAG,
        value_delimiter = ',',
        default_value = "off"
    )]
    pub modes: Vec<ScalingMode>,
}

impl ScalingModesArgs {
    /// The one mode of a command that runs one drafter.
    pub fn single(&self) -> anyhow::Result<ScalingMode> {
        match self.modes.as_slice() {
            [mode] => Ok(*mode),
            modes => anyhow::bail!("--scaling takes one mode here, got {modes:?}"),
        }
    }
}
