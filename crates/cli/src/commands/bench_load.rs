//! `sharpdraft bench load`: how long loading a target takes and how much memory it holds, copying every
//! weight against using the mapped checkpoint in place, each in a fresh process (a process's peak
//! resident memory only grows), side by side in one run.
//!
//! Each measurement: load, then a 16-token prefill and 8 greedy decode steps (which touch every weight, so
//! an in-place load pays its page faults there, not hidden). Reported: load seconds, first-pass seconds,
//! the peak resident memory at the end of the load and at the end of the passes, the resident memory
//! after them (steady state), against the model's weight bytes.

use clap::Args;
use serde::{Deserialize, Serialize};
use sharpdraft_decode::records::{peak_rss_bytes, resident_bytes};
use sharpdraft_model::generate::generate;
use sharpdraft_model::{parse_kind, CausalLm, Sampler, Sampling, WeightLoading};
use sharpdraft_store::registry;
use std::process::Command;
use std::time::Instant;
use tch::Device;

#[derive(Args, Debug)]
pub struct LoadBenchArgs {
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub target: String,
    /// f32 (the file's own dtype: in place) or bf16 / f16 (converted: copied either way).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Measurements of each way, alternating (the first read of a file from disk is slower).
    #[arg(long, default_value_t = 2)]
    pub repeats: usize,
    #[arg(long)]
    pub json: bool,
    /// Measures one way (`copy` or `in-place`) in this process and prints it as JSON (what the parent
    /// runs in each child process).
    #[arg(long, hide = true)]
    pub child: Option<String>,
}

/// One load, measured in its own process.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Measurement {
    loading: String,
    load_seconds: f64,
    first_pass_seconds: f64,
    weight_bytes: u64,
    /// Weights whose storage is the mapped file.
    mapped_bytes: u64,
    /// VmHWM right after the load.
    load_peak_bytes: u64,
    /// VmHWM after the passes (the whole process).
    peak_bytes: u64,
    /// VmRSS after the passes: what the loaded model holds while it runs.
    steady_bytes: u64,
}

fn loading_named(name: &str) -> anyhow::Result<WeightLoading> {
    match name {
        "copy" => Ok(WeightLoading::Copy),
        "in-place" => Ok(WeightLoading::InPlace),
        other => anyhow::bail!("--child {other:?}: expected copy or in-place"),
    }
}

fn measure(args: &LoadBenchArgs, loading: &str) -> anyhow::Result<Measurement> {
    let dir = registry::resolve(&args.target)?;
    let kind = parse_kind(&args.dtype)?;
    let started = Instant::now();
    let model = CausalLm::load_as(&dir, Device::Cpu, kind, loading_named(loading)?)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let load_peak_bytes = peak_rss_bytes();
    let weight_bytes = super::bench::weight_bytes(&model) as u64;
    let vocab = model.net.config.vocab_size;
    let ids: Vec<i64> = (0..16).map(|i| (i * 7919 + 13) % vocab).collect();
    let started = Instant::now();
    let _ = generate(
        &model.net,
        &ids,
        9,
        &mut Sampler::new(Sampling::greedy()),
        &[],
    )?;
    Ok(Measurement {
        loading: loading.into(),
        load_seconds,
        first_pass_seconds: started.elapsed().as_secs_f64(),
        weight_bytes,
        mapped_bytes: model.mapped_weight_bytes() as u64,
        load_peak_bytes,
        peak_bytes: peak_rss_bytes(),
        steady_bytes: resident_bytes(),
    })
}

/// Runs this binary as `bench load --child WAY` and reads its measurement.
fn measure_in_child(args: &LoadBenchArgs, loading: &str) -> anyhow::Result<Measurement> {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "bench",
            "load",
            "--target",
            &args.target,
            "--dtype",
            &args.dtype,
        ])
        .args(["--child", loading])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "the {loading} measurement failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

pub fn run(args: &LoadBenchArgs) -> anyhow::Result<()> {
    if let Some(loading) = &args.child {
        println!("{}", serde_json::to_string(&measure(args, loading)?)?);
        return Ok(());
    }
    super::bounds::ensure_repeats(args.repeats)?;
    let mut rows = Vec::new();
    for _ in 0..args.repeats {
        for loading in ["copy", "in-place"] {
            let m = measure_in_child(args, loading)?;
            if !args.json {
                println!(
                    "{:<8} load {:>6.2} s, first pass {:>6.2} s | weights {:.2} GB ({:.2} GB mapped) | peak after load {:.2} GB ({:.2}x weights), peak {:.2} GB, steady {:.2} GB",
                    m.loading,
                    m.load_seconds,
                    m.first_pass_seconds,
                    gb(m.weight_bytes),
                    gb(m.mapped_bytes),
                    gb(m.load_peak_bytes),
                    m.load_peak_bytes as f64 / m.weight_bytes as f64,
                    gb(m.peak_bytes),
                    gb(m.steady_bytes),
                );
            }
            rows.push(m);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}
