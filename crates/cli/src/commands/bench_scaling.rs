//! `sharpdraft bench scaling`: what SharpDraft's query scaling costs a drafter. At each context length the
//! same greedy decode runs with the drafter unscaled and with the whole scaling path switched on (row
//! counts, `[H, T]` factors, the in-place multiply) at beta = 0, alternating. Beta = 0 keeps every draft
//! identical, so both runs do the same cycles and the drafter's forward time compares side by side (a
//! ratio, so machine noise mostly cancels); the cost of the path does not depend on beta's value. The bytes
//! the drafter's caches hold are reported too (equal: scaling adds no memory).

use super::bounds::{ensure_context, ensure_repeats, ensure_within, target_config};
use super::common_flags::ModelArgs;
use anyhow::Result;
use clap::Args;
use serde::Serialize;
use sharpdraft_decode::drafter_spec::{self, DrafterSpec};
use sharpdraft_decode::scaling::{ScalingMode, ScalingSpec};
use sharpdraft_decode::speculative_generate;
use sharpdraft_model::Sampling;

#[derive(Args, Debug)]
pub struct ScalingBenchArgs {
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub target: String,
    /// Context lengths (prompt tokens) to measure at.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
    pub contexts: Vec<usize>,
    /// Tokens generated per measurement.
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    /// Alternating off/scaled measurements per context (the median ratio is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    #[arg(long)]
    pub json: bool,
    /// The drafter (its query scaling is set by the benchmark).
    #[command(flatten)]
    pub drafter: DrafterSpec,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Serialize)]
struct Row {
    context: usize,
    /// Both runs emitted the same tokens in the same number of cycles.
    identical: bool,
    off_ms_per_cycle: f64,
    scaled_ms_per_cycle: f64,
    /// Median over repeats of scaled / off drafter time per cycle.
    ratio: f64,
    off_cache_bytes: usize,
    scaled_cache_bytes: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: &ScalingBenchArgs) -> Result<()> {
    anyhow::ensure!(
        args.drafter.scaling == ScalingSpec::default(),
        "bench scaling times the drafter unscaled against fixed scaling with beta 0 and n0 1 itself: it takes no --schedule, --beta or --n0"
    );
    ensure_repeats(args.repeats)?;
    let config = target_config(&args.target)?;
    ensure_within("new-tokens", args.new_tokens, 1, config.positions())?;
    for &context in &args.contexts {
        ensure_context(&config, "contexts", context as i128, args.new_tokens)?;
    }
    // Every row past n0 = 1: the factors are computed and multiplied for every query, all equal to 1.
    let mut drafter = args.drafter.clone();
    drafter.scaling = ScalingSpec {
        beta: Some(0.0),
        n0: Some(1.0),
        ..ScalingSpec::default()
    };
    let target = args.model.load(&args.target)?;
    let vocab = target.net.config.vocab_size;
    let sampling = Sampling::greedy();
    let mut rows = Vec::new();
    for &context in &args.contexts {
        // A fixed pseudo-random prompt: acceptance does not matter here, the drafter's passes do.
        let prompt: Vec<i64> = (0..context as i64)
            .map(|i| (i * 7919 + 13) % (vocab - 1) + 1)
            .collect();
        let (mut off, mut scaled, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let mut cache_bytes = (0, 0);
        let mut identical = true;
        for _ in 0..args.repeats {
            let mut per_cycle = [0.0; 2];
            let mut outputs = Vec::new();
            for (slot, mode) in [ScalingMode::Off, ScalingMode::Fixed]
                .into_iter()
                .enumerate()
            {
                let (mut built, mut config) = drafter_spec::prepare(
                    &drafter.with_scaling_mode(mode),
                    &target,
                    sampling,
                    prompt.len(),
                    args.new_tokens,
                )?;
                // Both runs generate exactly `new_tokens`: no stop token ends one early.
                config.stop_tokens.clear();
                let report =
                    speculative_generate(&target.net, built.drafter.as_mut(), &prompt, &config)?;
                per_cycle[slot] =
                    report.drafter_forward_seconds * 1e3 / report.cycles.len().max(1) as f64;
                outputs.push((report.ids.clone(), report.cycles.len()));
                if slot == 0 {
                    cache_bytes.0 = report.drafter_cache_bytes;
                } else {
                    cache_bytes.1 = report.drafter_cache_bytes;
                }
            }
            identical &= outputs[0] == outputs[1];
            off.push(per_cycle[0]);
            scaled.push(per_cycle[1]);
            ratios.push(per_cycle[1] / per_cycle[0]);
        }
        let row = Row {
            context,
            identical,
            off_ms_per_cycle: median(off),
            scaled_ms_per_cycle: median(scaled),
            ratio: median(ratios),
            off_cache_bytes: cache_bytes.0,
            scaled_cache_bytes: cache_bytes.1,
        };
        if !args.json {
            println!(
                "context {:>6}: drafter {:.2} ms/cycle off, {:.2} ms/cycle scaled; ratio {:.3}; cache {} vs {} bytes; identical drafts: {}",
                row.context, row.off_ms_per_cycle, row.scaled_ms_per_cycle, row.ratio, row.off_cache_bytes, row.scaled_cache_bytes, row.identical
            );
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string(&rows)?);
    }
    Ok(())
}
