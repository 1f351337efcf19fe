//! `sharpdraft bench attention-stats`: the probe's per-row statistics over growing contexts, computed the
//! two ways the probe can: libtorch (logits tiles of 8 rows, `[H, 8, L]`, reduced in f64) and the CUDA
//! kernel (kernels/attention_stats.cu, streamed over the keys), on the same random attention, side by
//! side, with the largest difference between their top-k masses. On a CPU only the libtorch path runs.

use super::bounds::ensure_within;
use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;
use sharpdraft_model::{parse_device, AttentionView};
use sharpdraft_probe::recorder::ROWS_PER_TILE;
use sharpdraft_probe::row_statistics::{row_statistics, RowStatistics};
use sharpdraft_probe::AttentionStatsKernel;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

#[derive(Args, Debug)]
pub struct AttentionStatsBenchArgs {
    /// `cuda` (the kernel and libtorch) or `cpu` (libtorch alone); default: cuda when present.
    #[arg(long)]
    pub device: Option<String>,
    /// Key counts (context lengths) to measure at.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384,65536")]
    pub keys: Vec<i64>,
    /// Query rows reduced per measurement (the last rows of a causal pass).
    #[arg(long, default_value_t = 64)]
    pub rows: i64,
    /// Attention shape; the default is SmolLM2-135M's (9 query heads over 3 KV heads of 64).
    #[arg(long, default_value_t = 9)]
    pub heads: i64,
    #[arg(long, default_value_t = 3)]
    pub kv_heads: i64,
    #[arg(long, default_value_t = 64)]
    pub head_dim: i64,
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    pub ks: Vec<i64>,
    /// Scales of the estimator-(iii) curve: 1 to `--max-scale` in steps of 0.05 (the probe's default).
    #[arg(long, default_value_t = 3.0)]
    pub max_scale: f64,
    /// Timed repeats per measurement (after one untimed); the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Measurement {
    keys: i64,
    libtorch_ms: f64,
    kernel_ms: Option<f64>,
    /// libtorch_ms / kernel_ms.
    kernel_speedup: Option<f64>,
    /// The largest |M_k difference| between the two paths over every row, head and k both give.
    max_mass_difference: Option<f64>,
    /// Values one path gives and the other leaves NaN (a k not below the row's n).
    nan_mismatches: Option<usize>,
}

#[derive(Serialize)]
struct Report {
    device: String,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    rows: i64,
    ks: Vec<i64>,
    scales: usize,
    /// Why the kernel was not timed, where it was not.
    kernel_unavailable: Option<String>,
    measurements: Vec<Measurement>,
}

/// Median milliseconds of `repeats` timed runs (after one untimed), and the last run's output.
fn median_ms<T>(mut run: impl FnMut() -> Result<T>, repeats: usize) -> Result<(f64, T)> {
    let mut output = run()?;
    let mut times = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        output = run()?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], output))
}

/// The largest |kernel - libtorch| over every M_k, and the entries where only one side is NaN.
fn mass_differences(kernel: &RowStatistics, libtorch: &RowStatistics) -> (f64, usize) {
    let pairs = kernel
        .per_k
        .iter()
        .zip(&libtorch.per_k)
        .flat_map(|(a, b)| a.mass.iter().zip(&b.mass));
    let (mut largest, mut mismatches) = (0.0f64, 0usize);
    for (gpu, cpu) in pairs {
        if cpu.is_nan() != gpu.is_nan() {
            mismatches += 1;
        } else if !cpu.is_nan() {
            largest = largest.max((cpu - gpu).abs());
        }
    }
    (largest, mismatches)
}

/// Every flag within what a synthetic layer can hold, before any tensor is allocated.
fn check(args: &AttentionStatsBenchArgs) -> Result<()> {
    if args.heads % args.kv_heads.max(1) != 0 || args.rows < 1 {
        bail!(
            "--heads {} must be a multiple of --kv-heads {} and --rows {} at least 1",
            args.heads,
            args.kv_heads,
            args.rows
        );
    }
    if let Some(&keys) = args.keys.iter().find(|&&l| l < args.rows) {
        bail!("--keys {keys} is below --rows {}", args.rows);
    }
    // A synthetic layer, bounded by what a real one holds: a query tensor of heads x rows x head_dim
    // and a key tensor of kv_heads x keys x head_dim, each at most 2^30 elements (4 GiB of f32).
    const MOST_ELEMENTS: i64 = 1 << 30;
    ensure_within("heads", args.heads, 1, 1024)?;
    ensure_within("kv-heads", args.kv_heads, 1, args.heads)?;
    ensure_within("head-dim", args.head_dim, 1, 4096)?;
    ensure_within(
        "rows",
        args.rows,
        1,
        MOST_ELEMENTS / (args.heads * args.head_dim),
    )?;
    for &keys in &args.keys {
        ensure_within(
            "keys",
            keys,
            args.rows,
            MOST_ELEMENTS / (args.kv_heads * args.head_dim),
        )?;
    }
    // The first row sees the fewest keys: keys - rows + 1 of the shortest context.
    let fewest_visible = args.keys.iter().copied().min().unwrap_or(args.rows) - args.rows + 1;
    for &k in &args.ks {
        ensure_within("ks", k, 1, fewest_visible)?;
    }
    ensure_within("max-scale", args.max_scale, 1.0, 100.0)?;
    super::bounds::ensure_repeats(args.repeats)?;
    Ok(())
}

pub fn run(args: &AttentionStatsBenchArgs) -> Result<()> {
    let device = match args.device.as_deref() {
        Some(name) => parse_device(name)?,
        None => Device::cuda_if_available(),
    };
    check(args)?;
    let scales: Vec<f64> = (0..)
        .map(|i| 1.0 + 0.05 * i as f64)
        .take_while(|&s| s <= args.max_scale + 1e-9)
        .collect();
    let (kernel, mut kernel_unavailable) = match device {
        Device::Cuda(ordinal) => match AttentionStatsKernel::new(ordinal) {
            Ok(kernel) => (Some(kernel), None),
            Err(e) => (None, Some(e.to_string())),
        },
        _ => (
            None,
            Some("the kernel runs on CUDA devices only".to_string()),
        ),
    };
    let mut measurements = Vec::new();
    for &keys in &args.keys {
        let measurement = measure_at(
            args,
            keys,
            kernel.as_ref(),
            &scales,
            device,
            &mut kernel_unavailable,
        )?;
        measurements.push(measurement);
    }
    let report = Report {
        device: format!("{device:?}"),
        heads: args.heads,
        kv_heads: args.kv_heads,
        head_dim: args.head_dim,
        rows: args.rows,
        ks: args.ks.clone(),
        scales: scales.len(),
        kernel_unavailable,
        measurements,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Times the probe's statistics at `keys` keys over synthetic heads: the libtorch path, and the CUDA
/// kernel (checked against libtorch's numbers) when there is one. A kernel that refuses these inputs
/// says why in `kernel_unavailable` (the first reason kept).
fn measure_at(
    args: &AttentionStatsBenchArgs,
    keys: i64,
    kernel: Option<&AttentionStatsKernel>,
    scales: &[f64],
    device: Device,
    kernel_unavailable: &mut Option<String>,
) -> Result<Measurement> {
    let softmax_scale = 1.0 / (args.head_dim as f64).sqrt();
    let rows: Vec<i64> = (0..args.rows).collect();
    tch::manual_seed(0);
    // Queries spread like a trained head's (logit std about 2), keys unit normal; causal rows at the
    // end of the context: row r sees keys - rows + r + 1 keys.
    let queries = Tensor::randn(
        [args.heads, args.rows, args.head_dim],
        (Kind::Float, device),
    ) * 2.0;
    let key_tensor = Tensor::randn([args.kv_heads, keys, args.head_dim], (Kind::Float, device));
    let key_index = Tensor::arange(keys, (Kind::Int64, device)).unsqueeze(0);
    let row_end =
        Tensor::arange(args.rows, (Kind::Int64, device)).unsqueeze(1) + (keys - args.rows);
    let visible = key_index.le_tensor(&row_end);
    let view = AttentionView {
        queries: &queries,
        keys: &key_tensor,
        visible: Some(&visible),
        past: keys - args.rows,
        softmax_scale,
    };
    // The probe's libtorch path: logits tiles of ROWS_PER_TILE rows.
    let (libtorch_ms, ()) = median_ms(
        || {
            for start in (0..args.rows).step_by(ROWS_PER_TILE as usize) {
                let end = (start + ROWS_PER_TILE).min(args.rows);
                row_statistics(&view.logits(start..end, 0..keys), &args.ks, &scales);
            }
            Ok(())
        },
        args.repeats,
    )?;
    let (mut kernel_ms, mut max_mass_difference, mut nan_mismatches) = (None, None, None);
    if let Some(kernel) = &kernel {
        let timed = median_ms(
            || Ok(kernel.row_statistics(&view, &rows, &args.ks, &scales)?),
            args.repeats,
        );
        match timed {
            Ok((ms, stats)) => {
                kernel_ms = Some(ms);
                // Untimed, every row at once: the same head-major [H, rows] layout as the kernel's.
                let reference =
                    row_statistics(&view.logits(0..args.rows, 0..keys), &args.ks, &scales);
                let (largest, mismatches) = mass_differences(&stats, &reference);
                max_mass_difference = Some(largest);
                nan_mismatches = Some(mismatches);
            }
            Err(e) => {
                // Inputs the kernel refuses (more than 64 scales, k above 64): said, not fatal.
                kernel_unavailable.get_or_insert_with(|| format!("at {keys} keys: {e:#}"));
            }
        }
    }
    let measurement = Measurement {
        keys,
        libtorch_ms,
        kernel_speedup: kernel_ms.map(|k| libtorch_ms / k),
        kernel_ms,
        max_mass_difference,
        nan_mismatches,
    };
    if !args.json {
        eprintln!(
            "keys {keys}: libtorch {libtorch_ms:.2} ms, kernel {}",
            kernel_ms.map_or("-".to_string(), |k| format!("{k:.2} ms"))
        );
    }
    Ok(measurement)
}

/// The report as a markdown table, after a line naming the shape and device.
fn print_table(report: &Report) {
    println!(
        "{} rows x {} heads ({} KV, dim {}) on {}, ks {:?}, {} scales",
        report.rows,
        report.heads,
        report.kv_heads,
        report.head_dim,
        report.device,
        report.ks,
        report.scales
    );
    if let Some(why) = &report.kernel_unavailable {
        println!("kernel not timed: {why}");
    }
    println!("| keys | libtorch ms | kernel ms | kernel speed-up | max |M_k diff| |");
    println!("|---|---|---|---|---|");
    let cell = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for m in &report.measurements {
        println!(
            "| {} | {:.2} | {} | {} | {} |",
            m.keys,
            m.libtorch_ms,
            cell(m.kernel_ms, 2),
            cell(m.kernel_speedup, 2),
            m.max_mass_difference
                .map_or("-".into(), |d| format!("{d:.1e}"))
        );
    }
}
