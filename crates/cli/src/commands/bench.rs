//! `sharpdraft bench decode`: autoregressive prefill and decode throughput of a target at several
//! context lengths and dtypes, next to the memory-bandwidth bound measured on the same machine and
//! (optionally) HF transformers on the same weights with the same thread count, in the same run.

use super::bounds::{ensure_context, ensure_within, MAX_THREADS};
use clap::{Args, Subcommand};
use serde::Serialize;
use sharpdraft_model::generate::generate;
use sharpdraft_model::{parse_kind, CausalLm, Sampler, Sampling};
use sharpdraft_store::registry;
use std::process::Command;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Prefill and decode tokens/s of a target model.
    Decode(DecodeArgs),
    /// A drafter's forward time per cycle with and without query scaling, side by side.
    Scaling(super::bench_scaling::ScalingBenchArgs),
    /// The target's greedy answers to chat prompts one at a time and in packed batches, side by side.
    Continuations(super::bench_continuations::ContinuationsBenchArgs),
    /// Load time and memory of a target, weights copied against mapped in place.
    Load(super::bench_load::LoadBenchArgs),
    /// The cost of one target pass against its row count (decode step, verification), next to bounds.
    Rows(super::bench_rows::RowsBenchArgs),
    /// Where a drafter's cycle goes: embedding, features, each layer, cache writes, LM head, sampling.
    DraftTime(super::bench_draft_time::DraftTimeBenchArgs),
    /// A drafter's end-to-end speed-up over AR on a prompt set (and HF's assisted generation), side by side.
    Speculative(super::bench_speculative::SpeculativeBenchArgs),
    /// The probe's attention statistics, libtorch against the CUDA kernel, over growing contexts.
    AttentionStats(super::bench_attention_stats::AttentionStatsBenchArgs),
}

#[derive(Args, Debug)]
pub struct DecodeArgs {
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub target: String,
    /// Context lengths (prefill lengths) to measure at.
    #[arg(long, value_delimiter = ',', default_value = "512,2048,8192")]
    pub contexts: Vec<i64>,
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16")]
    pub dtypes: Vec<String>,
    /// Decode steps timed after each prefill.
    #[arg(long, default_value_t = 32)]
    pub decode_tokens: i64,
    /// CPU threads for libtorch (and for HF transformers); default: all cores.
    #[arg(long)]
    pub threads: Option<i32>,
    #[command(flatten)]
    pub device: super::common_flags::DeviceArgs,
    /// A Python with torch and transformers: runs crates/cli/benches/hf_decode.py on the same weights.
    #[arg(long)]
    pub hf_python: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Clone)]
struct Row {
    engine: String,
    dtype: String,
    context: i64,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    /// Memory-bandwidth bound on decode tokens/s: copy bandwidth / weight bytes.
    decode_bound_tokens_per_s: f64,
}

#[derive(Serialize)]
struct Report {
    threads: i32,
    copy_bandwidth_gb_s: f64,
    rows: Vec<Row>,
}

/// Bytes per second of `dst.copy_(src)` on a buffer far larger than the caches, counting the read and
/// the write (what a decode step does with weights is a read; this is the machine's streaming rate).
fn copy_bandwidth(device: Device) -> f64 {
    let elements = 64 * 1024 * 1024; // 256 MB of f32
    let src = Tensor::ones([elements], (Kind::Float, device));
    let mut dst = Tensor::zeros([elements], (Kind::Float, device));
    dst.copy_(&src);
    let rounds = 10;
    let started = Instant::now();
    for _ in 0..rounds {
        dst.copy_(&src);
    }
    let _ = dst.sum(Kind::Float).double_value(&[]);
    (2 * elements * 4 * rounds) as f64 / started.elapsed().as_secs_f64()
}

/// Bytes of every weight of `model`.
pub(super) fn weight_bytes(model: &CausalLm) -> f64 {
    model
        .vars
        .variables()
        .values()
        .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as f64)
        .sum()
}

/// Prefill tokens/s at `context`, and decode tokens/s of the greedy steps after it (the first generated
/// token comes from the prefill pass and is not counted as decode).
fn measure(model: &CausalLm, context: i64, decode_tokens: i64) -> anyhow::Result<(f64, f64)> {
    let vocab = model.net.config.vocab_size;
    // Deterministic pseudo-text ids; throughput does not depend on which tokens they are.
    let ids: Vec<i64> = (0..context).map(|i| (i * 7919 + 13) % vocab).collect();
    let out = generate(
        &model.net,
        &ids,
        decode_tokens as usize + 1,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )?;
    Ok((
        context as f64 / out.prefill_seconds,
        (out.ids.len() - 1) as f64 / out.decode_seconds.max(1e-9),
    ))
}

pub fn run(command: &BenchCommand) -> anyhow::Result<()> {
    let args = match command {
        BenchCommand::Decode(args) => args,
        BenchCommand::Scaling(args) => return super::bench_scaling::run(args),
        BenchCommand::Continuations(args) => return super::bench_continuations::run(args),
        BenchCommand::Load(args) => return super::bench_load::run(args),
        BenchCommand::Rows(args) => return super::bench_rows::run(args),
        BenchCommand::DraftTime(args) => return super::bench_draft_time::run(args),
        BenchCommand::Speculative(args) => return super::bench_speculative::run(args),
        BenchCommand::AttentionStats(args) => return super::bench_attention_stats::run(args),
    };
    if let Some(threads) = args.threads {
        ensure_within("threads", threads, 1, MAX_THREADS)?;
    }
    let device = args.device.device()?;
    let dir = registry::resolve(&args.target)?;
    let config = sharpdraft_model::ModelConfig::from_folder(&dir)?;
    ensure_within(
        "decode-tokens",
        args.decode_tokens,
        1,
        config.positions() as i64,
    )?;
    for &context in &args.contexts {
        // The prefill's token and the timed decode steps after it.
        ensure_context(
            &config,
            "contexts",
            context as i128,
            args.decode_tokens as usize + 1,
        )?;
    }
    let threads = args.threads.unwrap_or_else(tch::get_num_threads);
    tch::set_num_threads(threads);
    let bandwidth = copy_bandwidth(device);
    let mut rows = Vec::new();
    for dtype in &args.dtypes {
        let model = CausalLm::load(&dir, device, parse_kind(dtype)?)?;
        let bound = bandwidth / weight_bytes(&model);
        for &context in &args.contexts {
            let (prefill_rate, decode_rate) = measure(&model, context, args.decode_tokens)?;
            let row = Row {
                engine: "sharpdraft".into(),
                dtype: dtype.clone(),
                context,
                prefill_tokens_per_s: prefill_rate,
                decode_tokens_per_s: decode_rate,
                decode_bound_tokens_per_s: bound,
            };
            if !args.json {
                print_row(&row);
            }
            rows.push(row);
        }
        if let Some(python) = &args.hf_python {
            for row in run_hf(
                python,
                &dir,
                dtype,
                &args.contexts,
                args.decode_tokens,
                threads,
            )? {
                let row = Row {
                    decode_bound_tokens_per_s: bound,
                    ..row
                };
                if !args.json {
                    print_row(&row);
                }
                rows.push(row);
            }
        }
    }
    let report = Report {
        threads,
        copy_bandwidth_gb_s: bandwidth / 1e9,
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "threads {threads}, copy bandwidth {:.1} GB/s (read + write)",
            report.copy_bandwidth_gb_s
        );
    }
    Ok(())
}

fn print_row(row: &Row) {
    println!(
        "{:<11} {:<5} context {:>6}: prefill {:>8.1} tok/s, decode {:>7.2} tok/s (bandwidth bound {:.1})",
        row.engine, row.dtype, row.context, row.prefill_tokens_per_s, row.decode_tokens_per_s, row.decode_bound_tokens_per_s
    );
}

fn run_hf(
    python: &str,
    dir: &std::path::Path,
    dtype: &str,
    contexts: &[i64],
    decode_tokens: i64,
    threads: i32,
) -> anyhow::Result<Vec<Row>> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/hf_decode.py");
    let contexts: Vec<String> = contexts.iter().map(i64::to_string).collect();
    let out = Command::new(python)
        .arg(&script)
        .args([
            "--model",
            &dir.display().to_string(),
            "--dtype",
            dtype,
            "--contexts",
            &contexts.join(","),
            "--decode-tokens",
            &decode_tokens.to_string(),
            "--threads",
            &threads.to_string(),
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    Ok(rows
        .into_iter()
        .map(|r| Row {
            engine: "hf".into(),
            dtype: dtype.to_string(),
            context: r["context"].as_i64().unwrap_or(0),
            prefill_tokens_per_s: r["prefill_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            decode_tokens_per_s: r["decode_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            decode_bound_tokens_per_s: f64::NAN,
        })
        .collect())
}
