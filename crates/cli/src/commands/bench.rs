//! `sharpdraft bench decode`: autoregressive prefill and decode throughput of a target at several
//! context lengths and dtypes, next to the memory-bandwidth bound measured on the same machine and
//! (optionally) HF transformers on the same weights and llama.cpp on the same GGUF file, with the
//! same thread count and prompt ids, in the same run.

use super::bounds::{ensure_context, ensure_within, MAX_THREADS};
use clap::{Args, Subcommand};
use serde::Serialize;
use sharpdraft_model::generate::generate;
use sharpdraft_model::{CausalLm, Sampler, Sampling};
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
    /// A Python with the xllamacpp wheel (llama.cpp): runs crates/cli/benches/llama_decode.py on the
    /// target's GGUF file (a known model imported from GGUF), the same threads and prompt ids.
    #[arg(long)]
    pub llama_python: Option<String>,
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
    /// Memory-bandwidth bound on decode tokens/s: the bandwidth over the bytes of weights a step reads.
    decode_bound_tokens_per_s: f64,
}

#[derive(Serialize)]
struct Report {
    threads: i32,
    /// On the CPU the read rate (a sum over a buffer far larger than the caches); on CUDA the copy
    /// rate, read and write counted.
    bandwidth_gb_s: f64,
    bandwidth: &'static str,
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

/// Bytes of the weights a decode step reads: every weight of `model`, its linear maps as the blocks
/// where it runs as stored (the embedding's rows a step reads are few; the tied head's blocks count).
pub(super) fn weight_bytes(model: &CausalLm) -> f64 {
    if model.as_stored {
        return model.net.step_weight_bytes() as f64;
    }
    model
        .vars
        .variables()
        .values()
        .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as f64)
        .sum()
}

/// Deterministic pseudo-text ids of `context` tokens; throughput does not depend on which they are.
fn pseudo_text(context: i64, vocab: i64) -> Vec<i64> {
    (0..context).map(|i| (i * 7919 + 13) % vocab).collect()
}

/// Context of the untimed pass before the measured ones: more rows than a few-row pass takes, so the
/// prompt's weights are read too.
const WARM_UP_CONTEXT: i64 = 32;

/// An untimed prefill and two decode steps: a model's files are mapped, not read, at load, so the first
/// pass reads its weights' pages in; llama.cpp makes the same warm-up pass before it measures.
pub(super) fn warm_up(model: &CausalLm) -> anyhow::Result<()> {
    let context = WARM_UP_CONTEXT
        .min(model.net.config.positions() as i64 - 3)
        .max(1);
    measure(model, context, 2).map(|_| ())
}

/// Prefill tokens/s at `context`, and decode tokens/s of the greedy steps after it (the first generated
/// token comes from the prefill pass and is not counted as decode).
fn measure(model: &CausalLm, context: i64, decode_tokens: i64) -> anyhow::Result<(f64, f64)> {
    let ids = pseudo_text(context, model.net.config.vocab_size);
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
    let (bandwidth, bandwidth_kind) = match device {
        Device::Cpu => (super::bench_rows::read_bandwidth(), "read"),
        _ => (copy_bandwidth(device), "copy (read + write)"),
    };
    let mut rows = Vec::new();
    let mut as_stored_bound = f64::NAN;
    for dtype in &args.dtypes {
        let model = CausalLm::load_dtype(&dir, device, sharpdraft_model::parse_dtype(dtype)?)?;
        let bound = bandwidth / weight_bytes(&model);
        if model.as_stored {
            as_stored_bound = bound;
        }
        warm_up(&model)?;
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
    if let Some(python) = &args.llama_python {
        let gguf = registry::gguf_file(&args.target)?;
        let vocab = config.vocab_size;
        let prompts: Vec<Vec<i64>> = args
            .contexts
            .iter()
            .map(|&c| pseudo_text(c, vocab))
            .collect();
        for r in run_llama(
            python,
            &gguf,
            None,
            &prompts,
            args.decode_tokens,
            threads,
            false,
        )? {
            let row = Row {
                engine: "llama.cpp".into(),
                dtype: "gguf".into(),
                context: r.context,
                prefill_tokens_per_s: r.prefill_tokens_per_s,
                decode_tokens_per_s: r.decode_tokens_per_s,
                // The same file's blocks, read once a step (NaN unless gguf was measured here).
                decode_bound_tokens_per_s: as_stored_bound,
            };
            if !args.json {
                print_row(&row);
            }
            rows.push(row);
        }
    }
    let report = Report {
        threads,
        bandwidth_gb_s: bandwidth / 1e9,
        bandwidth: bandwidth_kind,
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "threads {threads}, {} bandwidth {:.1} GB/s",
            report.bandwidth, report.bandwidth_gb_s
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

/// What llama.cpp measured on one prompt: its prefill and decode tokens/s, the tokens it generated and
/// the seconds of the whole request (prefill included), and with a drafter its drafts and the
/// accepted ones.
pub(super) struct LlamaRow {
    pub context: i64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub tokens: usize,
    pub seconds: f64,
    /// The generated text.
    pub text: Option<String>,
    pub drafts: u64,
    pub accepted: u64,
}

/// Runs crates/cli/benches/llama_decode.py under `python` (a Python with the xllamacpp wheel) on GGUF
/// file `gguf` (with GGUF drafter `draft`, drafting up to its `n_max`), each of `prompts` (token ids)
/// decoded greedily on `threads` threads: the prefill's token and `decode_tokens` more, or fewer where
/// `stop_at_eos` and the model ends its turn.
pub(super) fn run_llama(
    python: &str,
    gguf: &std::path::Path,
    draft: Option<(&std::path::Path, usize)>,
    prompts: &[Vec<i64>],
    decode_tokens: i64,
    threads: i32,
    stop_at_eos: bool,
) -> anyhow::Result<Vec<LlamaRow>> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/llama_decode.py");
    let prompt_file = tempfile::NamedTempFile::new()?;
    std::fs::write(prompt_file.path(), serde_json::to_string(prompts)?)?;
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0) as i64;
    let mut command = Command::new(python);
    command.arg(&script).args([
        "--model",
        &gguf.display().to_string(),
        "--prompts",
        &prompt_file.path().display().to_string(),
        "--decode-tokens",
        &decode_tokens.to_string(),
        "--threads",
        &threads.to_string(),
        "--ctx",
        &(longest + decode_tokens + 64).to_string(),
    ]);
    if stop_at_eos {
        command.arg("--stop-at-eos");
    }
    if let Some((draft, n_max)) = draft {
        command.args([
            "--draft",
            &draft.display().to_string(),
            "--draft-max",
            &n_max.to_string(),
        ]);
    }
    let out = command.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    Ok(rows
        .into_iter()
        .map(|r| LlamaRow {
            context: r["context"].as_i64().unwrap_or(0),
            prefill_tokens_per_s: r["prefill_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            decode_tokens_per_s: r["decode_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            tokens: r["tokens"].as_u64().unwrap_or(0) as usize,
            seconds: r["seconds"].as_f64().unwrap_or(f64::NAN),
            text: r["text"].as_str().map(str::to_string),
            drafts: r["draft_n"].as_u64().unwrap_or(0),
            accepted: r["draft_n_accepted"].as_u64().unwrap_or(0),
        })
        .collect())
}
