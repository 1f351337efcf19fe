//! `sharpdraft bench rows`: what one forward pass of the target costs against how many rows it
//! carries (1 is a decode step, K + 1 a verification of K drafts), after a prompt of `--context`
//! tokens, next to the memory bound (every weight read once) and the compute bound (2 flops per weight
//! read, per row, at the machine's measured matmul rate), as the workbench runs it (the few-row kernel
//! for `few_rows::ROWS` rows: crates/model/src/cpu/few_rows.rs and crates/kernel) and with libtorch's matrix products
//! alone. The LM head (random weights of its shape) is timed alone too: through `linear`, against
//! weights kept transposed, and through the kernel.

use super::bounds::{ensure_context, ensure_within};
use crate::allocator::{self, AllocatorReport};
use anyhow::Result;
use clap::Args;
use serde::Serialize;
use sharpdraft_model::generate::prefill;
use sharpdraft_model::time_split::{self, Step};
use sharpdraft_model::{cpu::few_rows, CausalLm, ForwardInput, LogitRows};
use sharpdraft_store::registry;
use std::collections::BTreeMap;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

#[derive(Args, Debug)]
pub struct RowsBenchArgs {
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub target: String,
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Row counts of the passes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,3,4,5,6,8,12,16,32,64"
    )]
    pub rows: Vec<i64>,
    /// Prompt tokens in the cache before each pass.
    #[arg(long, default_value_t = 256)]
    pub context: i64,
    /// Timed passes per row count (after one untimed).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Also split each row count's pass into its steps (linear maps, attention and, from 1024 keys,
    /// its softmax apart, the layers' other operations, cache writes, LM head, embedding), over as many
    /// passes again, recorded apart from the timed ones (a recording reads the clock at every step).
    #[arg(long)]
    pub split: bool,
    /// Store every linear map's weight column-major (`[out, in]` viewed over `[in, out]` memory) before
    /// timing.
    #[arg(long)]
    pub column_major: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Row {
    rows: i64,
    /// The pass as the workbench runs it (the few-row kernel for `few_rows::ROWS` rows of an f32 CPU
    /// model).
    pass_ms: f64,
    /// Of `pass_ms`, the kernel's linear maps (mean over the timed and untimed passes; 0 where the
    /// pass keeps libtorch's products): the rest is norms, attention, RoPE, activations and dispatch.
    kernel_ms: f64,
    /// The same pass with libtorch's matrix products alone.
    libtorch_pass_ms: f64,
    /// pass_ms / the first row count's pass (one row).
    relative_to_one_row: f64,
    /// The bytes a pass reads (linear maps, and a tied embedding) over the read bandwidth.
    memory_bound_ms: f64,
    compute_bound_ms: f64,
    /// The LM head `[vocab, hidden]` alone, through `linear` (weights `[out, in]`).
    head_linear_ms: f64,
    /// The same product against the weights stored transposed (`[in, out]`, `x.mm(w_t)`).
    head_transposed_ms: f64,
    /// The LM head through the few-row kernel, where it applies.
    head_kernel_ms: Option<f64>,
    /// With `--split`: ms a pass in each step (`time_split`), the layers' own operations summed as
    /// `layers' rest`, and `other` for what no step marks (the final norm, the pass's own code).
    split_ms: Option<BTreeMap<String, f64>>,
}

#[derive(Serialize)]
struct Report {
    /// The form of the few-row kernel whose products ran (`avx512`, `avx2`; `libtorch` when none did;
    /// `SHARPDRAFT_KERNEL` forces one).
    kernel: &'static str,
    threads: i32,
    /// The allocator, and whether libtorch's tensors come from it (`crate::allocator`).
    allocator: AllocatorReport,
    weight_bytes: usize,
    /// Bytes one pass reads (the memory bound's numerator).
    read_bytes: usize,
    bandwidth_gb_s: f64,
    matmul_gflops: f64,
    rows: Vec<Row>,
}

fn median_ms(mut run: impl FnMut(), repeats: usize) -> f64 {
    run();
    let mut times: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Read bandwidth in bytes/s: summing a buffer far larger than the caches.
pub(super) fn read_bandwidth() -> f64 {
    let elements = 128 * 1024 * 1024; // 512 MB of f32
    let x = Tensor::ones([elements], (Kind::Float, Device::Cpu));
    let ms = median_ms(
        || {
            let _ = x.sum(Kind::Float).double_value(&[]);
        },
        5,
    );
    (elements * 4) as f64 / (ms / 1e3)
}

/// Flops/s of a large square f32 matmul.
fn matmul_rate() -> f64 {
    let n = 1024;
    let a = Tensor::rand([n, n], (Kind::Float, Device::Cpu));
    let ms = median_ms(
        || {
            let _ = a.mm(&a);
        },
        5,
    );
    (2 * n * n * n) as f64 / (ms / 1e3)
}

/// Every flag within the target's positions, read from its config alone, before anything is measured.
fn check(args: &RowsBenchArgs) -> Result<()> {
    super::bounds::ensure_repeats(args.repeats)?;
    let config = super::bounds::target_config(&args.target)?;
    ensure_context(&config, "context", args.context as i128, 0)?;
    anyhow::ensure!(!args.rows.is_empty(), "--rows: give at least one row count");
    for &rows in &args.rows {
        // A pass's ids are the context's first rows, placed after the context.
        ensure_within("rows", rows, 1, args.context)?;
        ensure_context(&config, "context", args.context as i128, rows as usize)?;
    }
    let _guard = tch::no_grad_guard();
    Ok(())
}

/// What a pass reads: every linear map, and the embedding only where it is the LM head too (a pass
/// gathers a few of its rows otherwise); norms are too small to count.
fn bytes_a_pass_reads(net: &sharpdraft_model::Transformer) -> usize {
    let embedding_bytes = if net.config.tie_word_embeddings {
        let (vocab, hidden) = (net.config.vocab_size, net.config.hidden_size);
        (vocab * hidden) as usize * net.kind().elt_size_in_bytes()
    } else {
        0
    };
    net.linear_weight_bytes() + embedding_bytes
}

pub fn run(args: &RowsBenchArgs) -> Result<()> {
    check(args)?;
    let dir = registry::resolve(&args.target)?;
    let model = CausalLm::load_dtype(
        &dir,
        Device::Cpu,
        sharpdraft_model::parse_dtype(&args.dtype)?,
    )?;
    if args.column_major {
        for linear in model.net.linears() {
            let mut w = linear.weight.shallow_clone();
            let column_major = w.tr().contiguous().tr();
            w.set_data(&column_major);
        }
    }
    let net = &model.net;
    let weight_bytes: usize = (model.vars.variables().values())
        .map(|t| t.numel() * t.kind().elt_size_in_bytes())
        .sum();
    let read_bytes = bytes_a_pass_reads(net);
    // The weights a row is multiplied by: those a pass reads (not an untied embedding, which a pass
    // gathers from).
    let multiplied_weights = read_bytes / net.kind().elt_size_in_bytes();
    let (bandwidth, flops) = (read_bandwidth(), matmul_rate());
    let vocab = net.config.vocab_size;
    let prompt: Vec<i64> = (0..args.context).map(|i| (i * 7919 + 13) % vocab).collect();
    let max_rows = args.rows.iter().copied().max().unwrap_or(1);
    let mut cache = net.new_cache(args.context + max_rows);
    let _ = prefill(net, &prompt, &mut cache)?;
    let hidden = net.config.hidden_size;
    let head = Tensor::randn([vocab, hidden], (net.kind(), Device::Cpu));
    let head_t = head.transpose(0, 1).contiguous();
    let threads = tch::get_num_threads().max(1) as usize;
    let mut rows = Vec::new();
    let mut one_row_ms = None;
    for &r in &args.rows {
        let ids = Tensor::from_slice(&prompt[..r as usize]);
        let positions =
            Tensor::arange_start(args.context, args.context + r, (Kind::Int64, Device::Cpu));
        let mut pass = || {
            let input = ForwardInput {
                logits: LogitRows::All,
                ..ForwardInput::causal(&ids, &positions)
            };
            let mut speculation = cache.speculate();
            let _ = net
                .forward(input, &mut *speculation)
                .expect("a pass the bounds above fit in the cache");
        };
        let kernel_before = few_rows::kernel_seconds();
        let pass_ms = median_ms(&mut pass, args.repeats);
        let kernel_ms =
            (few_rows::kernel_seconds() - kernel_before) * 1e3 / (args.repeats.max(1) + 1) as f64;
        let split_ms = args
            .split
            .then(|| milliseconds_by_step(&mut pass, args.repeats.max(1)));
        let libtorch_pass_ms = median_ms(|| few_rows::without_kernel(&mut pass), args.repeats);
        let x = Tensor::randn([r, hidden], (net.kind(), Device::Cpu));
        let one = *one_row_ms.get_or_insert(pass_ms);
        let row = Row {
            rows: r,
            pass_ms,
            kernel_ms,
            libtorch_pass_ms,
            relative_to_one_row: pass_ms / one,
            memory_bound_ms: read_bytes as f64 / bandwidth * 1e3,
            compute_bound_ms: 2.0 * multiplied_weights as f64 * r as f64 / flops * 1e3,
            head_linear_ms: median_ms(|| drop(x.linear::<Tensor>(&head, None)), args.repeats),
            head_transposed_ms: median_ms(|| drop(x.mm(&head_t)), args.repeats),
            head_kernel_ms: few_rows::takes_rows(r, Device::Cpu, net.kind())
                .then(|| median_ms(|| drop(few_rows::linear(&x, &head, threads)), args.repeats)),
            split_ms,
        };
        if !args.json {
            print_row(&row, hidden, vocab);
        }
        rows.push(row);
    }
    let report = Report {
        kernel: few_rows::form_that_ran().name(),
        threads: tch::get_num_threads(),
        allocator: allocator::report(),
        weight_bytes,
        read_bytes,
        bandwidth_gb_s: bandwidth / 1e9,
        matmul_gflops: flops / 1e9,
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    Ok(())
}

/// `passes` runs of `pass` split by step ([`time_split`]), milliseconds a pass per step; every layer's
/// unnamed work is "layers' rest" and the time no step marked is "other".
fn milliseconds_by_step(pass: &mut impl FnMut(), passes: usize) -> BTreeMap<String, f64> {
    let started = Instant::now();
    let ((), split) = time_split::record(Device::Cpu, || (0..passes).for_each(|_| pass()));
    let unmarked = started.elapsed().as_secs_f64() - split.marked_seconds();
    let mut by_step = BTreeMap::from([("other".to_string(), unmarked * 1e3 / passes as f64)]);
    for (step, cost) in &split.steps {
        let name = match step {
            Step::Layer(_) => "layers' rest".to_string(),
            other => other.to_string(),
        };
        *by_step.entry(name).or_insert(0.0) += cost.seconds * 1e3 / passes as f64;
    }
    by_step
}

/// One row count's line (and its split, with `--split`), for a model of `hidden` width and `vocab`.
fn print_row(row: &Row, hidden: i64, vocab: i64) {
    println!(
        "{:>3} rows: pass {:>7.1} ms ({:>4.2}x one row; kernel's products {:>6.1} ms; libtorch alone {:>7.1} ms) | bounds: memory {:>6.1} ms, compute {:>6.1} ms | head {hidden}->{vocab}: linear {:>6.2} ms, transposed {:>6.2} ms, kernel {}",
        row.rows,
        row.pass_ms,
        row.relative_to_one_row,
        row.kernel_ms,
        row.libtorch_pass_ms,
        row.memory_bound_ms,
        row.compute_bound_ms,
        row.head_linear_ms,
        row.head_transposed_ms,
        row.head_kernel_ms.map_or("-".to_string(), |ms| format!("{ms:.2} ms")),
    );
    if let Some(split) = &row.split_ms {
        let steps: Vec<String> = (split.iter())
            .map(|(step, ms)| format!("{step} {ms:.1}"))
            .collect();
        println!("          split, ms a pass: {}", steps.join(", "));
    }
}

/// The machine and model line that ends the text output.
fn print_summary(report: &Report) {
    println!(
        "kernel {}, threads {}, {}, weights {:.2} GB ({:.2} GB read per pass), read bandwidth {:.1} GB/s, matmul {:.1} GFLOP/s",
        report.kernel,
        report.threads,
        report.allocator,
        report.weight_bytes as f64 / 1e9,
        report.read_bytes as f64 / 1e9,
        report.bandwidth_gb_s,
        report.matmul_gflops
    );
}
