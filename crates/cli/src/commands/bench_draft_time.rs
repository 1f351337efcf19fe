//! `sharpdraft bench draft-time`: where a drafter's cycle goes. A greedy speculative decode runs with the
//! drafter's calls (prefill, propose, observe) recorded step by step (`sharpdraft_model::time_split`):
//! the embedding, the fusion of target features, each layer's own operations (norms, rotary
//! embeddings, reshapes), the linear maps' products, attention, cache writes, the LM head, sampling,
//! and the rest of the drafter's own code. Each step stands beside its memory bound (the weight bytes it
//! read over the machine's read bandwidth), so a reader sees which part of a draft costs more than its
//! weights and which part the weights themselves set. The drafter's prefill (the prompt's context
//! features, once a request, over all of libtorch's threads) is timed apart from the cycles: spread
//! over them it would read as a per-cycle cost that grows with the prompt. `--drafter-dtypes f32,bf16`
//! times the same drafter in each dtype in turn, repeat by repeat, and gives the ratio of their cycles
//! paired by repeat, so a slow minute of a shared machine falls on both.

use super::bench_rows::read_bandwidth;
use super::bounds::{ensure_context, ensure_repeats, ensure_within, target_config};
use super::common_flags::{ModelArgs, ScalingModesArgs};
use crate::allocator::{self, AllocatorReport};
use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use sharpdraft_decode::drafter_spec::{self, DrafterSpec};
use sharpdraft_decode::speculative_generate;
use sharpdraft_draft::{DraftContext, Drafter, DrafterStats, Feedback, Proposal};
use sharpdraft_model::time_split::{self, TimeSplit};
use sharpdraft_model::{CausalLm, KeySelection, Sampler, Sampling, Tap};
use sharpdraft_report::intervals::median;
use std::time::Instant;
use tch::{Device, Tensor};

#[derive(Args, Debug)]
pub struct DraftTimeBenchArgs {
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub target: String,
    /// Context lengths (prompt tokens) to measure at.
    #[arg(long, value_delimiter = ',', default_value = "1024")]
    pub contexts: Vec<usize>,
    /// Tokens generated per measurement.
    #[arg(long, default_value_t = 64)]
    pub new_tokens: usize,
    /// Decodes per context (their steps are summed; the first one warms up and is left out).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// The drafter's weights in each of these dtypes (f32, bf16, f16), side by side: every repeat
    /// decodes once in each, in turn, and each dtype's cycle is compared with the first's, repeat by
    /// repeat. One dtype, the target's, by default (or `--drafter-dtype`).
    #[arg(long, value_delimiter = ',', conflicts_with = "drafter_dtype")]
    pub drafter_dtypes: Vec<String>,
    #[arg(long)]
    pub json: bool,
    /// The drafter, drafting as it would in `generate` (one `--scaling` mode).
    #[command(flatten)]
    pub drafter: DrafterSpec,
    #[command(flatten)]
    pub scaling_modes: ScalingModesArgs,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// One step of a drafting cycle.
#[derive(Serialize)]
struct StepRow {
    step: String,
    ms_per_cycle: f64,
    /// Of the drafter's time per cycle.
    share: f64,
    calls_per_cycle: f64,
    /// The weight bytes the step read per cycle over the read bandwidth (0 for steps without weights).
    memory_bound_ms_per_cycle: f64,
}

#[derive(Serialize)]
struct ContextRow {
    context: usize,
    /// The drafter's dtype (`None`: the target's).
    drafter_dtype: Option<String>,
    cycles: usize,
    /// Wall-clock time inside the drafter's calls, per cycle.
    drafter_ms_per_cycle: f64,
    /// Mean accepted drafts per cycle + 1.
    tau: f64,
    /// The drafter's prefill of one request (the prompt's context features), not in the cycles.
    prefill_ms_per_request: f64,
    /// Proposing and observing: the cycle's steps, per cycle.
    steps: Vec<StepRow>,
}

/// One dtype's drafter cycle against the first dtype's, at one context, paired by repeat.
#[derive(Serialize)]
struct PairedRow {
    context: usize,
    baseline: String,
    dtype: String,
    /// Per timed repeat: the baseline's drafter ms per cycle over this dtype's (above 1: faster).
    ratios: Vec<f64>,
    median: f64,
}

#[derive(Serialize)]
struct Report {
    /// The drafter's kind.
    kind: String,
    /// The allocator, and whether libtorch's tensors come from it (`crate::allocator`).
    allocator: AllocatorReport,
    read_bandwidth_gb_s: f64,
    contexts: Vec<ContextRow>,
    /// With `--drafter-dtypes`: each later dtype against the first, per context.
    paired: Vec<PairedRow>,
}

/// Time recorded step by step over some of a drafter's calls.
#[derive(Default)]
struct Recording {
    split: TimeSplit,
    seconds: f64,
}

/// A drafter whose calls are recorded step by step, its prefill apart from its cycles (proposing and
/// observing); everything else passes through.
struct Recorded<'d> {
    inner: &'d mut dyn Drafter,
    device: Device,
    prefill: Recording,
    cycles: Recording,
}

impl Recorded<'_> {
    fn timed<T>(&mut self, prefill: bool, call: impl FnOnce(&mut dyn Drafter) -> T) -> T {
        let started = Instant::now();
        let inner = &mut *self.inner;
        let (out, split) = time_split::record(self.device, || call(inner));
        let recording = if prefill {
            &mut self.prefill
        } else {
            &mut self.cycles
        };
        recording.seconds += started.elapsed().as_secs_f64();
        recording.split.add(&split);
        out
    }
}

impl Drafter for Recorded<'_> {
    fn kind(&self) -> sharpdraft_draft::DrafterKind {
        self.inner.kind()
    }
    fn target_taps(&self) -> Vec<Tap> {
        self.inner.target_taps()
    }
    fn prefill(
        &mut self,
        ctx: &DraftContext<'_>,
        target_hidden: Option<&Tensor>,
    ) -> sharpdraft_draft::drafter::Result<()> {
        self.timed(true, |d| d.prefill(ctx, target_hidden))
    }
    fn propose(
        &mut self,
        ctx: &DraftContext<'_>,
        sampler: &mut Sampler,
    ) -> sharpdraft_draft::drafter::Result<Proposal> {
        self.timed(false, |d| d.propose(ctx, sampler))
    }
    fn observe(
        &mut self,
        ctx: &DraftContext<'_>,
        feedback: &Feedback<'_>,
    ) -> sharpdraft_draft::drafter::Result<()> {
        self.timed(false, |d| d.observe(ctx, feedback))
    }
    fn set_key_selection(
        &mut self,
        selection: Option<KeySelection>,
    ) -> sharpdraft_draft::drafter::Result<()> {
        self.inner.set_key_selection(selection)
    }
    fn wants_target_attention(&self) -> bool {
        self.inner.wants_target_attention()
    }
    fn variables(&self) -> Vec<(String, Tensor)> {
        self.inner.variables()
    }
    fn linears(&self) -> Vec<&sharpdraft_model::layers::Linear> {
        self.inner.linears()
    }
    fn stats(&self) -> DrafterStats {
        self.inner.stats()
    }
}

/// One dtype's timed decodes at one context (the warm-up left out).
#[derive(Default)]
struct Timed {
    split: TimeSplit,
    seconds: f64,
    cycles: usize,
    accepted: usize,
    prefill_seconds: f64,
    requests: usize,
    /// Each timed decode's drafter ms per cycle, in repeat order (what the paired ratio compares).
    ms_per_cycle: Vec<f64>,
}

impl Timed {
    fn add(&mut self, recorded: &Recorded<'_>, report: &sharpdraft_decode::SpecReport) {
        let cycles = report.cycles.len();
        self.split.add(&recorded.cycles.split);
        self.seconds += recorded.cycles.seconds;
        self.prefill_seconds += recorded.prefill.seconds;
        self.requests += 1;
        self.cycles += cycles;
        self.accepted += report.cycles.iter().map(|c| c.accepted).sum::<usize>();
        self.ms_per_cycle
            .push(recorded.cycles.seconds * 1e3 / cycles.max(1) as f64);
    }

    fn row(&self, context: usize, drafter_dtype: Option<String>, bandwidth: f64) -> ContextRow {
        let cycles = self.cycles.max(1) as f64;
        ContextRow {
            context,
            drafter_dtype,
            cycles: self.cycles,
            drafter_ms_per_cycle: self.seconds * 1e3 / cycles,
            tau: 1.0 + self.accepted as f64 / cycles,
            prefill_ms_per_request: self.prefill_seconds * 1e3 / self.requests.max(1) as f64,
            steps: step_rows(&self.split, self.seconds, self.cycles, bandwidth),
        }
    }
}

fn print_row(row: &ContextRow) {
    let dtype =
        (row.drafter_dtype.as_deref()).map_or(String::new(), |d| format!(" (drafter in {d})"));
    println!(
        "context {}{dtype}: {} cycles, tau {:.2}, drafter {:.2} ms/cycle (its prefill apart: {:.1} ms a request)",
        row.context, row.cycles, row.tau, row.drafter_ms_per_cycle, row.prefill_ms_per_request
    );
    println!(
        "  {:<44} {:>10} {:>7} {:>8} {:>12}",
        "step", "ms/cycle", "share", "calls", "bound ms"
    );
    for s in &row.steps {
        println!(
            "  {:<44} {:>10.3} {:>6.1}% {:>8.1} {:>12.3}",
            s.step,
            s.ms_per_cycle,
            s.share * 100.0,
            s.calls_per_cycle,
            s.memory_bound_ms_per_cycle
        );
    }
}

/// The steps of `split` per cycle, in pass order, then what no step marked (`other`).
fn step_rows(split: &TimeSplit, seconds: f64, cycles: usize, bandwidth: f64) -> Vec<StepRow> {
    let per_cycle = |x: f64| x / cycles.max(1) as f64;
    let mut rows: Vec<StepRow> = (split.steps.iter())
        .map(|(step, cost)| StepRow {
            step: step.to_string(),
            ms_per_cycle: per_cycle(cost.seconds * 1e3),
            share: cost.seconds / seconds,
            calls_per_cycle: per_cycle(cost.calls as f64),
            memory_bound_ms_per_cycle: per_cycle(cost.weight_bytes as f64 / bandwidth * 1e3),
        })
        .collect();
    let other = (seconds - split.marked_seconds()).max(0.0);
    rows.push(StepRow {
        step: "other (the drafter's own code, host copies)".into(),
        ms_per_cycle: per_cycle(other * 1e3),
        share: other / seconds,
        calls_per_cycle: 0.0,
        memory_bound_ms_per_cycle: 0.0,
    });
    rows
}

pub fn run(args: &DraftTimeBenchArgs) -> Result<()> {
    let scaling = args
        .scaling_modes
        .single()
        .context("bench draft-time splits one drafter's cycle: give one --scaling mode")?;
    ensure_repeats(args.repeats)?;
    anyhow::ensure!(
        args.repeats >= 2,
        "--repeats {}: the first decode warms up and is left out, so at least 2",
        args.repeats
    );
    let config = target_config(&args.target)?;
    ensure_within("new-tokens", args.new_tokens, 1, config.positions())?;
    for &context in &args.contexts {
        ensure_context(&config, "contexts", context as i128, args.new_tokens)?;
    }
    let target = args.model.load(&args.target)?;
    let bandwidth = read_bandwidth();
    let vocab = target.net.config.vocab_size;
    let base_spec = args.drafter.with_scaling_mode(scaling);
    // One run per dtype, in turn within every repeat; `None` keeps the specification's own.
    let dtypes: Vec<Option<String>> = if args.drafter_dtypes.is_empty() {
        vec![base_spec.dtype.clone()]
    } else {
        args.drafter_dtypes.iter().cloned().map(Some).collect()
    };
    let specs: Vec<_> = (dtypes.iter())
        .map(|dtype| drafter_spec::DrafterSpec {
            dtype: dtype.clone(),
            ..base_spec.clone()
        })
        .collect();
    for spec in &specs {
        spec.validate()?;
    }
    let mut contexts = Vec::new();
    let mut paired = Vec::new();
    for &context in &args.contexts {
        // A fixed pseudo-random prompt: the drafter's passes are what is timed, not its acceptance.
        let prompt: Vec<i64> = (0..context as i64)
            .map(|i| (i * 7919 + 13) % (vocab - 1) + 1)
            .collect();
        let runs = time_drafters(&specs, &target, &prompt, args.new_tokens, args.repeats)?;
        for (dtype, timed) in dtypes.iter().zip(&runs) {
            let row = timed.row(context, dtype.clone(), bandwidth);
            if !args.json {
                print_row(&row);
            }
            contexts.push(row);
        }
        for (dtype, timed) in dtypes.iter().zip(&runs).skip(1) {
            let name = |d: &Option<String>| d.clone().unwrap_or_else(|| "the target's".into());
            let ratios: Vec<f64> = (runs[0].ms_per_cycle.iter())
                .zip(&timed.ms_per_cycle)
                .map(|(baseline, this)| baseline / this)
                .collect();
            let row = PairedRow {
                context,
                baseline: name(&dtypes[0]),
                dtype: name(dtype),
                median: median(&ratios),
                ratios,
            };
            if !args.json {
                print_paired(&row);
            }
            paired.push(row);
        }
    }
    let report = Report {
        kind: base_spec.kind.to_string(),
        allocator: allocator::report(),
        read_bandwidth_gb_s: bandwidth / 1e9,
        contexts,
        paired,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "kind {}, {}, read bandwidth {:.1} GB/s (bound: weight bytes read / bandwidth)",
            report.kind, report.allocator, report.read_bandwidth_gb_s
        );
    }
    Ok(())
}

/// Each of `specs` decoding `prompt` for `new_tokens`, the specifications in turn within every one
/// of `repeats` rounds, the first round a warm-up left out.
fn time_drafters(
    specs: &[drafter_spec::DrafterSpec],
    target: &CausalLm,
    prompt: &[i64],
    new_tokens: usize,
    repeats: usize,
) -> Result<Vec<Timed>> {
    let device = target.net.device();
    let mut runs: Vec<Timed> = specs.iter().map(|_| Timed::default()).collect();
    for repeat in 0..repeats {
        for (spec, timed) in specs.iter().zip(&mut runs) {
            let (mut built, mut config) =
                drafter_spec::prepare(spec, target, Sampling::greedy(), prompt.len(), new_tokens)?;
            // Every decode generates exactly `new_tokens`: no stop token ends one early.
            config.stop_tokens.clear();
            let mut recorded = Recorded {
                inner: built.drafter.as_mut(),
                device,
                prefill: Recording::default(),
                cycles: Recording::default(),
            };
            let report = speculative_generate(&target.net, &mut recorded, prompt, &config)?;
            if repeat > 0 {
                timed.add(&recorded, &report);
            }
        }
    }
    Ok(runs)
}

/// A dtype's cycle against the first dtype's, repeat by repeat.
fn print_paired(row: &PairedRow) {
    let (low, high) = (row.ratios.iter()).fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &r| {
        (l.min(r), h.max(r))
    });
    println!(
        "context {}: drafter cycle in {} over in {}, repeat by repeat: median {:.2} [{:.2}, {:.2}] over {} repeats ({})",
        row.context,
        row.baseline,
        row.dtype,
        row.median,
        low,
        high,
        row.ratios.len(),
        (row.ratios.iter()).map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ")
    );
}
