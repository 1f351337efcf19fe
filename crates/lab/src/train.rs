//! `sharpdraft train CONFIG.yaml`: train a drafter for a target. Every check that can fail runs before
//! any compute is spent; output goes to a model folder that every command can name.
//!
//! ```yaml
//! target: smollm2-135m-instruct
//! method: eagle3
//! out: smollm2-135m-eagle3            # a name (under $SHARPDRAFT_HOME/models) or a path
//! windows: 256                        # training windows of n0 tokens
//! data:
//!   - text_file: corpus.txt
//!   - target_continuations: {path: prompts.jsonl, field: prompt, prompts: 4, max_new_tokens: 512}
//! eagle3: {n0: 256, steps: 600, draft_vocab: 8192, eagle31: true}
//! ```

use crate::datasets::{token_stream, Source};
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use sharpdraft_draft::eagle3_train::{extract_windows, train, Eagle3TrainConfig};
use sharpdraft_model::{registry, CausalLm, Tap};
use std::path::{Path, PathBuf};
use tch::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Eagle3,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub target: String,
    pub method: Method,
    pub out: String,
    pub windows: usize,
    /// Each source is a one-key map (`- text_file: PATH`), not a YAML tag.
    #[serde(with = "serde_yaml::with::singleton_map_recursive")]
    pub data: Vec<Source>,
    #[serde(default)]
    pub eagle3: Option<Eagle3TrainConfig>,
    #[serde(default = "default_device")]
    pub device: String,
}

fn default_device() -> String {
    "cpu".into()
}

impl TrainConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_yaml::from_str(&text).with_context(|| format!("{}: invalid training config", path.display()))
    }

    /// Where the drafter goes: `out` as a path when it has a separator, else a model name.
    pub fn out_dir(&self) -> PathBuf {
        if self.out.contains('/') {
            PathBuf::from(&self.out)
        } else {
            registry::model_dir(&self.out)
        }
    }

    /// Checks against the target before any compute: method block present, n0 within the target's
    /// context, a draft vocabulary that fits, at least one window.
    pub fn validate(&self, target: &CausalLm) -> Result<()> {
        ensure!(self.windows >= 1, "windows = {} must be at least 1", self.windows);
        ensure!(!self.data.is_empty(), "data: at least one source is needed");
        match self.method {
            Method::Eagle3 => {
                let e = self.eagle3.as_ref().context("method eagle3 needs an `eagle3:` block")?;
                let context = target.net.config.max_position_embeddings;
                ensure!(e.n0 >= 8 && e.n0 <= context, "eagle3.n0 = {} must lie in 8..={context} (the target's max_position_embeddings)", e.n0);
                ensure!(e.draft_vocab >= 2 && e.draft_vocab <= target.net.config.vocab_size, "eagle3.draft_vocab = {} must lie in 2..={}", e.draft_vocab, target.net.config.vocab_size);
                ensure!(e.steps >= 1 && e.ttt_steps >= 1, "eagle3.steps and eagle3.ttt_steps must be at least 1");
                ensure!(e.learning_rate > 0.0 && e.learning_rate.is_finite(), "eagle3.learning_rate = {} must be > 0", e.learning_rate);
                ensure!(target.net.config.num_layers >= 4, "EAGLE-3 captures layers 2, L/2 and L-3: the target needs at least 4 layers");
            }
        }
        Ok(())
    }
}

/// Runs a training config; returns the drafter's folder.
pub fn run(config_path: &Path) -> Result<PathBuf> {
    let config = TrainConfig::load(config_path)?;
    let device = sharpdraft_model::parse_device(&config.device)?;
    let target = CausalLm::load(&registry::resolve(&config.target)?, device, Kind::Float).with_context(|| format!("loading target {}", config.target))?;
    config.validate(&target)?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    let out_dir = config.out_dir();
    std::fs::create_dir_all(&out_dir)?;
    match config.method {
        Method::Eagle3 => {
            let e = config.eagle3.as_ref().expect("validated");
            eprintln!("building the training text ({} sources)", config.data.len());
            let stream = token_stream(&config.data, base, &target)?;
            let layers = target.net.config.num_layers;
            let taps = [Tap::LayerInput(2), Tap::LayerInput(layers / 2), Tap::LayerInput(layers - 3)];
            eprintln!("extracting target features: {} tokens, up to {} windows of {}", stream.len(), config.windows, e.n0);
            let windows = extract_windows(&target.net, &taps, &stream, e.n0, config.windows, e.top_k_targets)?;
            let bar = indicatif::ProgressBar::new(e.steps as u64);
            bar.set_style(indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps, loss {msg} [{elapsed_precise} < {eta}]").expect("valid template"));
            let started = std::time::Instant::now();
            let state = train(&target.net, &windows, &out_dir, e, |step, loss| {
                let rate = (step as f64 * e.n0 as f64) / started.elapsed().as_secs_f64().max(1e-9);
                bar.set_position(step as u64);
                bar.set_message(format!("{loss:.3}, {rate:.0} tokens/s"));
                // Without a terminal the bar is hidden: log a line now and then instead.
                if bar.is_hidden() && (step % 50 == 0 || step == e.steps) {
                    eprintln!("step {step}/{}: loss {loss:.3}, {rate:.0} tokens/s", e.steps);
                }
            })?;
            bar.finish();
            if state.losses.is_empty() {
                bail!("no training step was run");
            }
        }
    }
    Ok(out_dir)
}
