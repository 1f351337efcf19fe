//! `sharpdraft bench draft-time`: where a drafter's cycle goes. A greedy speculative decode runs with the
//! drafter's calls (prefill, propose, observe) recorded step by step (`sharpdraft_model::time_split`):
//! the embedding, the fusion of target features, each layer's own operations (norms, rotary
//! embeddings, reshapes), the linear maps' products, attention, cache writes, the LM head, sampling,
//! and the rest of the drafter's own code. Each step stands beside its memory bound (the weight bytes it
//! read over the machine's read bandwidth), so a reader sees which part of a draft costs more than its
//! weights and which part the weights themselves set. The drafter's prefill (the prompt's context
//! features, once a request, over all of libtorch's threads) is timed apart from the cycles: spread
//! over them it would read as a per-cycle cost that grows with the prompt.

use super::bench_rows::read_bandwidth;
use super::bounds::{ensure_context, ensure_repeats, ensure_within, target_config};
use super::generate::{DrafterArgs, ModelArgs};
use crate::allocator::{self, AllocatorReport};
use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use sharpdraft_decode::speculative_generate;
use sharpdraft_draft::{DraftContext, Drafter, DrafterStats, Feedback, Proposal};
use sharpdraft_lab::drafter_spec;
use sharpdraft_model::time_split::{self, TimeSplit};
use sharpdraft_model::{KeySelection, Sampler, Sampling, Tap};
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
    #[arg(long)]
    pub json: bool,
    /// The drafter, drafting as it would in `generate` (one `--scaling` kind at most).
    #[command(flatten)]
    pub draft: DrafterArgs,
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

#[derive(Serialize)]
struct Report {
    method: String,
    /// The allocator, and whether libtorch's tensors come from it (`crate::allocator`).
    allocator: AllocatorReport,
    read_bandwidth_gb_s: f64,
    contexts: Vec<ContextRow>,
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
    fn method(&self) -> sharpdraft_draft::Method {
        self.inner.method()
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
    let name = args
        .draft
        .drafter
        .as_deref()
        .context("--drafter is required")?;
    let kinds = &args.draft.scaling.scaling;
    anyhow::ensure!(
        kinds.len() == 1,
        "bench draft-time splits one drafter's cycle: give at most one --scaling kind, not {kinds:?}"
    );
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
    let device = target.net.device();
    let bandwidth = read_bandwidth();
    let vocab = target.net.config.vocab_size;
    let spec = args.draft.spec(name, kinds[0]);
    let mut contexts = Vec::new();
    for &context in &args.contexts {
        // A fixed pseudo-random prompt: the drafter's passes are what is timed, not its acceptance.
        let prompt: Vec<i64> = (0..context as i64)
            .map(|i| (i * 7919 + 13) % (vocab - 1) + 1)
            .collect();
        let (mut split, mut seconds, mut cycles, mut accepted) = (TimeSplit::default(), 0.0, 0, 0);
        let (mut prefill_seconds, mut requests) = (0.0, 0);
        for repeat in 0..args.repeats {
            let (mut built, mut config) = drafter_spec::prepare(
                &spec,
                &target,
                Sampling::greedy(),
                prompt.len(),
                args.new_tokens,
            )?;
            // Every decode generates exactly `new_tokens`: no stop token ends one early.
            config.stop_tokens.clear();
            let mut recorded = Recorded {
                inner: built.drafter.as_mut(),
                device,
                prefill: Recording::default(),
                cycles: Recording::default(),
            };
            let report = speculative_generate(&target.net, &mut recorded, &prompt, &config)?;
            if repeat == 0 {
                continue;
            }
            split.add(&recorded.cycles.split);
            seconds += recorded.cycles.seconds;
            prefill_seconds += recorded.prefill.seconds;
            requests += 1;
            cycles += report.cycles.len();
            accepted += report.cycles.iter().map(|c| c.accepted).sum::<usize>();
        }
        let row = ContextRow {
            context,
            cycles,
            drafter_ms_per_cycle: seconds * 1e3 / cycles.max(1) as f64,
            tau: 1.0 + accepted as f64 / cycles.max(1) as f64,
            prefill_ms_per_request: prefill_seconds * 1e3 / requests.max(1) as f64,
            steps: step_rows(&split, seconds, cycles, bandwidth),
        };
        if !args.json {
            println!(
                "context {}: {} cycles, tau {:.2}, drafter {:.2} ms/cycle (its prefill apart: {:.1} ms a request)",
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
        contexts.push(row);
    }
    let report = Report {
        method: spec.method.to_string(),
        allocator: allocator::report(),
        read_bandwidth_gb_s: bandwidth / 1e9,
        contexts,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "method {}, {}, read bandwidth {:.1} GB/s (bound: weight bytes read / bandwidth)",
            report.method, report.allocator, report.read_bandwidth_gb_s
        );
    }
    Ok(())
}
