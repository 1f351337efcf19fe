//! `sharpdraft generate` and `sharpdraft logits`: a target model on its own.

use super::common_flags::{ModelArgs, ScalingModesArgs};
use super::paired_rounds::{self, PairedRatio};
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use sharpdraft_decode::drafter_spec::{self, DrafterSpec, DRAFTER_FLAG};
use sharpdraft_decode::records::{peak_rss_bytes, resident_bytes};
use sharpdraft_decode::{speculative_generate, CycleRecord, MemoryReport};
use sharpdraft_draft::AdaptationReport;
use sharpdraft_model::generate::generate;
use sharpdraft_model::{CausalLm, ChatMessage, ForwardInput, LogitRows, Sampler, Sampling};
use tch::{Kind, Tensor};

#[derive(Args, Debug)]
// The one command that may decode without a drafter: `--drafter` optional here, and the whole
// specification `None` without it.
#[command(mut_arg(DRAFTER_FLAG, |arg| arg.required(false)))]
pub struct GenerateArgs {
    /// Target model: a known name (e.g. smollm2-135m-instruct) or a model folder.
    #[arg(long)]
    pub target: String,
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// 0 keeps the whole vocabulary.
    #[arg(long, default_value_t = 0)]
    pub top_k: i64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use the prompt as raw text instead of a user turn of the chat template.
    #[arg(long)]
    pub raw: bool,
    #[arg(long)]
    pub json: bool,
    /// The drafter, and how it drafts; without `--drafter`, plain autoregressive decoding.
    #[command(flatten)]
    pub drafter: Option<DrafterSpec>,
    #[command(flatten)]
    pub scaling_modes: ScalingModesArgs,
    /// Also decode the same prompt autoregressively in this process and report the speed-up: the
    /// target alone and speculation alternate over --rounds, as `run` times them.
    #[arg(long)]
    pub compare_ar: bool,
    /// With --compare-ar: rounds of the target alone and speculation, which goes first swapping every
    /// round, each decode taken again when other processes loaded the machine; the speed-up printed
    /// is the median ratio with its range (one round for a drafter that adapts: it learns each round).
    #[arg(long, default_value_t = 3, requires = "compare_ar")]
    pub rounds: usize,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Serialize)]
struct GenerateReport {
    prompt_ids: Vec<i64>,
    ids: Vec<i64>,
    text: String,
    tokens_per_s: f64,
    prefill_tokens_per_s: f64,
    /// The drafter's kind (vanilla, eagle3, pard, dflash).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    /// The drafter's query scaling (`off`, `fixed`, `exact`, `logn`).
    #[serde(skip_serializing_if = "Option::is_none")]
    scaling: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tau: Option<f64>,
    /// The drafter's gate (`off`, `goodput`, `closed`), and of the cycles, those that drafted and
    /// those the gate ran as plain target steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    drafted_cycles: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plain_cycles: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cycles: Option<Vec<CycleRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    engine_overhead: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ar_tokens_per_s: Option<f64>,
    /// The median of the alternated rounds' ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    speedup_vs_ar: Option<f64>,
    /// Every round of `--compare-ar`, the median's range and the load seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    paired: Option<PairedRatio>,
    #[serde(skip_serializing_if = "Option::is_none")]
    identical_to_ar: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryReport>,
    /// Online adaptation's updates, their seconds (inside the total) and bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptation: Option<AdaptationReport>,
    process: ProcessMemory,
    /// The form of the few-row kernel whose products ran (`avx512`, `avx2`, `neon`; the LM head of a
    /// decode step takes it on any model; `libtorch` when none did: a CPU without a form, or
    /// `SHARPDRAFT_KERNEL=libtorch`).
    kernel: &'static str,
}

/// The process's resident memory, loading apart from running (0 where /proc is not available).
#[derive(Serialize)]
struct ProcessMemory {
    /// Peak once the target (and drafter) were loaded.
    load_peak_rss_bytes: u64,
    /// Peak at the end (the whole run).
    peak_rss_bytes: u64,
    /// Resident at the end: what the loaded models hold while they run.
    rss_bytes: u64,
}

fn process_memory(load_peak_rss_bytes: u64) -> ProcessMemory {
    ProcessMemory {
        load_peak_rss_bytes,
        peak_rss_bytes: peak_rss_bytes(),
        rss_bytes: resident_bytes(),
    }
}

pub fn run_generate(args: &GenerateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        sharpdraft_model::is_valid_temperature(args.temperature),
        "--temperature {} must lie in 0..={}",
        args.temperature,
        sharpdraft_model::MAX_TEMPERATURE
    );
    anyhow::ensure!(
        args.top_p > 0.0 && args.top_p <= 1.0,
        "--top-p {} must lie in (0, 1]",
        args.top_p
    );
    super::bounds::ensure_within("rounds", args.rounds, 1, super::bounds::MAX_REPEATS)?;
    let model = args.model.load(&args.target)?;
    let load_peak_rss_bytes = peak_rss_bytes();
    let tokenizer = model.tokenizer()?;
    let prompt_ids = prompt_ids(args, tokenizer)?;
    anyhow::ensure!(!prompt_ids.is_empty(), "the prompt encodes to no tokens");
    // With a drafter the first token comes from the prefill before any limit is looked at: zero
    // would give one token there and none without, so it is refused for both.
    anyhow::ensure!(
        args.max_new_tokens >= 1,
        "--max-new-tokens 0: generate at least 1 token"
    );
    model
        .net
        .config
        .ensure_positions(prompt_ids.len(), args.max_new_tokens)
        .with_context(|| format!("--max-new-tokens {}", args.max_new_tokens))?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        seed: args.seed,
    };
    anyhow::ensure!(
        !args.compare_ar || args.drafter.is_some(),
        "--compare-ar needs --drafter"
    );
    let report = match &args.drafter {
        None => autoregressive_report(args, &model, prompt_ids, sampling, load_peak_rss_bytes)?,
        Some(drafter) => speculative_report(args, &model, drafter, prompt_ids, sampling)?,
    };
    print_report(&report, args.json)
}

/// The prompt's token ids: the text itself with `--raw` or without a chat template, else one user turn
/// of the target's chat template.
fn prompt_ids(
    args: &GenerateArgs,
    tokenizer: &sharpdraft_model::TextTokenizer,
) -> anyhow::Result<Vec<i64>> {
    let text = if args.raw || !tokenizer.has_chat_template() {
        args.prompt.clone()
    } else {
        tokenizer.apply_chat_template(
            &[ChatMessage {
                role: "user".into(),
                content: args.prompt.clone(),
            }],
            true,
        )?
    };
    Ok(tokenizer.encode(&text, false)?)
}

/// Plain autoregressive decoding of the prompt, reported.
fn autoregressive_report(
    args: &GenerateArgs,
    model: &CausalLm,
    prompt_ids: Vec<i64>,
    sampling: Sampling,
    load_peak_rss_bytes: u64,
) -> anyhow::Result<GenerateReport> {
    let tokenizer = model.tokenizer()?;
    let result = generate(
        &model.net,
        &prompt_ids,
        args.max_new_tokens,
        &mut Sampler::new(sampling),
        &model.stop_tokens(),
    )?;
    Ok(GenerateReport {
        text: tokenizer.decode(&result.ids)?,
        tokens_per_s: result.tokens_per_second(),
        prefill_tokens_per_s: prompt_ids.len() as f64 / result.prefill_seconds.max(1e-9),
        prompt_ids,
        ids: result.ids,
        kind: None,
        scaling: None,
        tau: None,
        gate: None,
        drafted_cycles: None,
        plain_cycles: None,
        cycles: None,
        engine_overhead: None,
        ar_tokens_per_s: None,
        speedup_vs_ar: None,
        paired: None,
        identical_to_ar: None,
        memory: None,
        adaptation: None,
        process: process_memory(load_peak_rss_bytes),
        kernel: sharpdraft_model::cpu::few_rows::form_that_ran().name(),
    })
}

/// Speculative decoding of the prompt with `drafter` (and AR beside it with `--compare-ar`), reported;
/// the process's peak memory is read once the drafter is loaded.
fn speculative_report(
    args: &GenerateArgs,
    model: &CausalLm,
    drafter: &DrafterSpec,
    prompt_ids: Vec<i64>,
    sampling: Sampling,
) -> anyhow::Result<GenerateReport> {
    let tokenizer = model.tokenizer()?;
    let scaling = args.scaling_modes.single()?;
    let spec = drafter.with_scaling_mode(scaling);
    let (mut built, config) = drafter_spec::prepare(
        &spec,
        &model,
        sampling,
        prompt_ids.len(),
        args.max_new_tokens,
    )?;
    let load_peak_rss_bytes = peak_rss_bytes();
    let adapts = spec.adapt.is_some();
    let (spec, ar, paired) = if args.compare_ar {
        if adapts && args.rounds > 1 {
            eprintln!(
                "--rounds {}: a drafter that adapts learns from every round, so one round is run",
                args.rounds
            );
        }
        let rounds = if adapts { 1 } else { args.rounds };
        let stop = model.stop_tokens();
        let (paired, ar, spec) = paired_rounds::alternate(
            rounds,
            paired_rounds::RETRIES,
            || {
                let ar = generate(
                    &model.net,
                    &prompt_ids,
                    args.max_new_tokens,
                    &mut Sampler::new(sampling),
                    &stop,
                )?;
                Ok((ar.tokens_per_second(), ar))
            },
            || {
                let spec =
                    speculative_generate(&model.net, built.drafter.as_mut(), &prompt_ids, &config)?;
                Ok((spec.tokens_per_second(), spec))
            },
        )?;
        (spec, Some(ar), Some(paired))
    } else {
        let spec = speculative_generate(&model.net, built.drafter.as_mut(), &prompt_ids, &config)?;
        (spec, None, None)
    };
    Ok(GenerateReport {
        text: tokenizer.decode(&spec.ids)?,
        tokens_per_s: spec.tokens_per_second(),
        prefill_tokens_per_s: prompt_ids.len() as f64 / spec.prefill_seconds.max(1e-9),
        kind: Some(built.drafter.kind().name()),
        scaling: Some(scaling.name()),
        // No cycle ran when the prefill's token was the only one: nothing was drafted, no tau.
        tau: (!spec.cycles.is_empty()).then(|| spec.tau()),
        gate: Some(drafter.gate.name()),
        drafted_cycles: Some(spec.cycles.iter().filter(|c| c.drafted > 0).count()),
        plain_cycles: Some(spec.cycles.iter().filter(|c| c.drafted == 0).count()),
        engine_overhead: Some(spec.engine_overhead()),
        ar_tokens_per_s: ar.as_ref().map(|a| a.tokens_per_second()),
        speedup_vs_ar: paired.as_ref().map(|p| p.median),
        paired,
        identical_to_ar: ar
            .as_ref()
            .filter(|_| sampling.is_greedy())
            .map(|a| a.ids == spec.ids),
        memory: Some(spec.memory()),
        adaptation: spec.adaptation.clone(),
        prompt_ids,
        ids: spec.ids,
        cycles: Some(spec.cycles),
        process: process_memory(load_peak_rss_bytes),
        kernel: sharpdraft_model::cpu::few_rows::form_that_ran().name(),
    })
}

/// The report as one JSON line (`--json`), or the text on stdout and the figures on stderr.
fn print_report(report: &GenerateReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.text);
        eprintln!(
            "{} tokens, {:.1} tokens/s (prefill {:.0} tokens/s)",
            report.ids.len(),
            report.tokens_per_s,
            report.prefill_tokens_per_s
        );
        match (report.kind, report.tau) {
            (Some(kind), Some(tau)) => {
                let cycles = report.cycles.as_ref().map_or(0, Vec::len);
                eprintln!(
                    "{kind}: tau {tau:.2} over {cycles} cycles ({} drafted, {} plain target steps; gate {}), engine overhead {:.1}%",
                    report.drafted_cycles.unwrap_or(0),
                    report.plain_cycles.unwrap_or(0),
                    report.gate.unwrap_or("off"),
                    100.0 * report.engine_overhead.unwrap_or(0.0)
                );
            }
            (Some(kind), None) => eprintln!(
                "{kind}: nothing drafted, no tau: the prefill gave the only token and no cycle ran"
            ),
            (None, _) => {}
        }
        if let Some(a) = &report.adaptation {
            let mib = |bytes: usize| bytes as f64 / (1u64 << 20) as f64;
            eprintln!(
                "adaptation ({}): {} updates in {:.2} s; adapters {:.2} MiB, optimizer {:.2} MiB, gradients {:.2} MiB, buffer {:.2} MiB",
                a.mode,
                a.updates,
                a.update_seconds,
                mib(a.adapter_bytes),
                mib(a.optimizer_bytes),
                mib(a.gradient_bytes),
                mib(a.buffer_bytes)
            );
        }
        if let (Some(ar), Some(paired)) = (report.ar_tokens_per_s, &report.paired) {
            eprintln!("autoregressive {ar:.1} tokens/s (first round)");
            eprintln!("{}", paired.describe("speed-up over the target alone"));
        }
        if let Some(identical) = report.identical_to_ar {
            eprintln!(
                "output identical to the target alone's, token for token: {}",
                if identical { "yes" } else { "NO" }
            );
        }
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct LogitsArgs {
    /// A known model name or a model folder.
    #[arg(long)]
    pub model: String,
    /// Raw text (no chat template; BOS only if the tokenizer adds one).
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 10)]
    pub top: i64,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: ModelArgs,
}

#[derive(Serialize)]
struct LogitsReport {
    prompt_ids: Vec<i64>,
    top_ids: Vec<i64>,
    top_logits: Vec<f32>,
}

pub fn run_logits(args: &LogitsArgs) -> anyhow::Result<()> {
    let model = args.runtime.load(&args.model)?;
    let prompt_ids = model.tokenizer()?.encode(&args.prompt, true)?;
    anyhow::ensure!(!prompt_ids.is_empty(), "the prompt encodes to no tokens");
    model.net.config.ensure_positions(prompt_ids.len(), 0)?;
    anyhow::ensure!(
        args.top >= 1 && args.top <= model.net.config.vocab_size,
        "--top {} must lie in 1..={}",
        args.top,
        model.net.config.vocab_size
    );
    let _guard = tch::no_grad_guard();
    let mut cache = model.net.new_cache(prompt_ids.len() as i64);
    let device = model.net.device();
    let ids = Tensor::from_slice(&prompt_ids).to_device(device);
    let positions = Tensor::arange(prompt_ids.len() as i64, (Kind::Int64, device));
    let input = ForwardInput {
        logits: LogitRows::Last,
        ..ForwardInput::causal(&ids, &positions)
    };
    let logits = model
        .net
        .forward(input, &mut cache)?
        .logits
        .expect("logits requested")
        .squeeze_dim(0);
    let (values, indices) = logits.topk(args.top, -1, true, true);
    let report = LogitsReport {
        prompt_ids,
        top_ids: Vec::<i64>::try_from(indices.to_device(tch::Device::Cpu))?,
        top_logits: Vec::<f32>::try_from(values.to_device(tch::Device::Cpu))?,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let tokenizer = model.tokenizer()?;
        for (id, logit) in report.top_ids.iter().zip(&report.top_logits) {
            println!("{id:>8} {logit:>10.4} {:?}", tokenizer.decode(&[*id])?);
        }
    }
    Ok(())
}
