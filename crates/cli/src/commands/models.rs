//! `sharpdraft fetch` and `sharpdraft import gguf`: getting models into the cache.

use clap::{Args, Subcommand};
use sharpdraft_model::registry;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Known model names (see `sharpdraft fetch --list`).
    #[arg(required_unless_present = "list")]
    pub names: Vec<String>,
    /// List the known models and whether they are fetched.
    #[arg(long)]
    pub list: bool,
}

#[derive(Subcommand, Debug)]
pub enum ImportCommand {
    /// Convert a GGUF file into an HF-format model folder (config.json, model.safetensors, tokenizer.json).
    Gguf {
        /// The .gguf file.
        file: PathBuf,
        /// The folder to write (replaced if it exists).
        out_dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum InitCommand {
    /// Write a randomly initialised EAGLE-3 (or 3.1) head for a target in the published layout.
    Eagle3 {
        /// Target model (known name or folder) whose hidden size, heads and vocabulary the head fits.
        #[arg(long)]
        target: String,
        /// Output folder (config.json + model.safetensors).
        #[arg(long)]
        out: PathBuf,
        /// EAGLE 3.1 flags (fc_norm, norm_output).
        #[arg(long)]
        eagle31: bool,
        #[arg(long, default_value_t = 0)]
        seed: i64,
    },
    /// Write a randomly initialised DFlash drafter for a target in the published layout.
    Dflash {
        #[arg(long)]
        target: String,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 2)]
        layers: usize,
        #[arg(long, default_value_t = 8)]
        block_size: i64,
        /// Mask token id (an id the target never produces in text).
        #[arg(long)]
        mask_token: i64,
        #[arg(long, default_value_t = 0)]
        seed: i64,
    },
}

pub fn init(command: &InitCommand) -> anyhow::Result<()> {
    let load = |target: &str| -> anyhow::Result<sharpdraft_model::CausalLm> {
        Ok(sharpdraft_model::CausalLm::load(
            &registry::resolve(target)?,
            tch::Device::Cpu,
            tch::Kind::Float,
        )?)
    };
    match command {
        InitCommand::Eagle3 {
            target,
            out,
            eagle31,
            seed,
        } => {
            let options = sharpdraft_draft::eagle3::RandomHeadOptions {
                eagle31: *eagle31,
                seed: *seed,
                ..Default::default()
            };
            sharpdraft_draft::eagle3::write_random_head(out, &load(target)?.net, &options)?;
            println!(
                "wrote a random EAGLE-3 head for {target} to {}",
                out.display()
            );
        }
        InitCommand::Dflash {
            target,
            out,
            layers,
            block_size,
            mask_token,
            seed,
        } => {
            let options = sharpdraft_draft::dflash::RandomDFlashOptions {
                layers: *layers,
                block_size: *block_size,
                sliding_window: None,
                mask_token: *mask_token,
                seed: *seed,
            };
            sharpdraft_draft::dflash::write_random_dflash(out, &load(target)?.net, &options)?;
            println!(
                "wrote a random DFlash drafter for {target} to {}",
                out.display()
            );
        }
    }
    Ok(())
}

pub fn fetch(args: &FetchArgs) -> anyhow::Result<()> {
    if args.list {
        for model in registry::KNOWN_MODELS {
            let dir = registry::model_dir(model.name);
            let state = if dir.join("config.json").exists() {
                "fetched"
            } else {
                "not fetched"
            };
            println!("{:<28} {:<12} {}", model.name, state, model.description);
        }
        return Ok(());
    }
    for name in &args.names {
        let dir = registry::fetch(name)?;
        println!("{name}: {}", dir.display());
    }
    Ok(())
}

pub fn import(command: &ImportCommand) -> anyhow::Result<()> {
    match command {
        ImportCommand::Gguf { file, out_dir } => {
            sharpdraft_model::gguf::import(file, out_dir)?;
            println!("imported {} into {}", file.display(), out_dir.display());
        }
    }
    Ok(())
}
