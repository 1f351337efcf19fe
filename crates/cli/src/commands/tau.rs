//! `sharpdraft tau`: a drafter's acceptance (tau, tokens per target pass) on held-out chat prompts, at
//! chosen context lengths. A context longer than the prompt puts an excerpt of a long text before the
//! question, so the drafter drafts the answer with that many keys in view. Several `--scaling` modes are
//! compared on the same prompts.

use super::common_flags::{ModelArgs, ScalingModesArgs};
use super::prompt_set::{PromptSet, PromptSetArgs};
use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use sharpdraft_decode::drafter_spec::{self, DrafterSpec};
use sharpdraft_decode::MemoryReport;
use sharpdraft_draft::AdaptationReport;
use sharpdraft_model::{CausalLm, Sampling};

#[derive(Args, Debug)]
pub struct TauArgs {
    /// Target model: a known name or a model folder.
    #[arg(long)]
    pub target: String,
    #[command(flatten)]
    pub set: PromptSetArgs,
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    #[arg(long)]
    pub json: bool,
    /// The drafter, and how it drafts.
    #[command(flatten)]
    pub drafter: DrafterSpec,
    #[command(flatten)]
    pub scaling_modes: ScalingModesArgs,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Serialize)]
struct Row {
    scaling: String,
    requested_context: usize,
    prompt: usize,
    context: usize,
    tau: f64,
    cycles: usize,
    generated: usize,
    tokens_per_s: f64,
    /// Seconds of this request spent in online updates (inside the tokens/s figure).
    update_seconds: f64,
    memory: MemoryReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptation: Option<AdaptationReport>,
}

#[derive(Serialize)]
struct Summary {
    scaling: String,
    requested_context: usize,
    mean_context: f64,
    prompts: usize,
    /// Generated tokens over target passes, pooled over the prompts.
    tau: f64,
    /// Online updates over the prompts and their seconds (0 without `--adapt`).
    updates: usize,
    update_seconds: f64,
    /// The largest adaptation footprint of any prompt (adapters, optimizer, gradients, buffer).
    adaptation_bytes: usize,
    drafter_weight_bytes: usize,
    peak_rss_bytes: u64,
}

pub fn run(args: &TauArgs) -> Result<()> {
    let target = args.model.load(&args.target)?;
    let tokenizer = target.tokenizer()?;
    let set = args.set.load(tokenizer, target.net.config.positions())?;
    let scalings = &args.scaling_modes.modes;
    let (mut rows, mut summaries) = (Vec::new(), Vec::new());
    for (&requested, &scaling) in args
        .set
        .contexts
        .iter()
        .flat_map(|c| scalings.iter().map(move |s| (c, s)))
    {
        let spec = args.drafter.with_scaling_mode(scaling);
        let (cell_rows, summary) = measure(args, &spec, &target, &set, requested)?;
        rows.extend(cell_rows);
        summaries.push(summary);
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"rows": rows, "summary": summaries})
        );
    } else {
        print_summaries(&summaries);
    }
    Ok(())
}

/// Every prompt of `set` at context `requested`, decoded greedily by the drafter `spec` names: a row
/// per prompt (printed as it comes unless `--json`) and their summary.
fn measure(
    args: &TauArgs,
    spec: &drafter_spec::DrafterSpec,
    target: &CausalLm,
    set: &PromptSet,
    requested: usize,
) -> Result<(Vec<Row>, Summary)> {
    let tokenizer = target.tokenizer()?;
    let mode = spec.scaling.mode.name().to_string();
    let (mut generated, mut passes, mut contexts) = (0usize, 0usize, 0usize);
    let (mut updates, mut update_seconds, mut adaptation_bytes) = (0usize, 0.0, 0usize);
    let (mut drafter_weight_bytes, mut peak_rss_bytes) = (0usize, 0u64);
    let prompts: Vec<Vec<i64>> = set
        .questions
        .iter()
        .enumerate()
        .map(|(i, question)| set.ids(tokenizer, i, question, requested))
        .collect::<Result<_>>()?;
    let ids: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
    let decoded =
        drafter_spec::decode_requests(spec, target, &ids, args.max_new_tokens, None, |_| {
            Sampling::greedy()
        })
        .with_context(|| format!("--contexts {requested}"))?;
    let mut rows = Vec::with_capacity(prompts.len());
    for (i, (ids, decoded)) in prompts.iter().zip(decoded).enumerate() {
        let report = decoded.report;
        let adaptation = report.adaptation.clone();
        let request_update_seconds = decoded.update_seconds;
        updates += decoded.updates;
        update_seconds += request_update_seconds;
        let memory = report.memory();
        adaptation_bytes = adaptation_bytes.max(memory.adaptation_bytes);
        drafter_weight_bytes = memory.drafter_weight_bytes;
        peak_rss_bytes = peak_rss_bytes.max(memory.peak_rss_bytes);
        let row = Row {
            scaling: mode.clone(),
            requested_context: requested,
            prompt: args.set.skip + i,
            context: ids.len(),
            tau: report.tau(),
            cycles: report.cycles.len(),
            generated: report.ids.len(),
            tokens_per_s: report.tokens_per_second(),
            update_seconds: request_update_seconds,
            memory,
            adaptation,
        };
        if !args.json {
            eprintln!(
                "{mode:>5} context {:>6}  prompt {:>3}: tau {:.2} over {} cycles, {:.1} tokens/s",
                row.context, row.prompt, row.tau, row.cycles, row.tokens_per_s
            );
        }
        // Every cycle is one target pass (the first token comes from prefill and is not counted).
        generated += report
            .cycles
            .iter()
            .map(|c| c.accepted + c.bonus)
            .sum::<usize>();
        passes += report.cycles.len();
        contexts += ids.len();
        rows.push(row);
    }
    let summary = Summary {
        scaling: mode,
        requested_context: requested,
        mean_context: contexts as f64 / args.set.count as f64,
        prompts: args.set.count,
        tau: generated as f64 / passes.max(1) as f64,
        updates,
        update_seconds,
        adaptation_bytes,
        drafter_weight_bytes,
        peak_rss_bytes,
    };
    Ok((rows, summary))
}

/// The summary table, a line per context and scaling.
fn print_summaries(summaries: &[Summary]) {
    println!(
        "{:>8} {:>10} {:>12} {:>8} {:>6} {:>8} {:>9} {:>10}",
        "scaling", "context", "mean tokens", "prompts", "tau", "updates", "update s", "adapt MiB"
    );
    for s in summaries {
        println!(
            "{:>8} {:>10} {:>12.0} {:>8} {:>6.2} {:>8} {:>9.2} {:>10.2}",
            s.scaling,
            s.requested_context,
            s.mean_context,
            s.prompts,
            s.tau,
            s.updates,
            s.update_seconds,
            s.adaptation_bytes as f64 / (1u64 << 20) as f64
        );
    }
}
