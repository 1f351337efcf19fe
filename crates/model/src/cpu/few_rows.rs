//! A linear map over a few rows (a verification pass of a few drafts, a drafting step) that reads each
//! weight once. libtorch's f32 CPU GEMM switches at 4 rows to a kernel that first packs the whole
//! weight matrix, which doubles the bytes a pass moves (`sharpdraft bench rows`: 4 rows of
//! Qwen2.5-Coder-1.5B in f32 cost 2.0x one row), and its bf16 kernel reads a single row at about half
//! the machine's bandwidth. Decoding on a CPU is bound by reading the weights, so here each weight row
//! is streamed once and multiplied into every input row while it is in a register, several weight
//! rows at a time so that enough reads are in flight, split by output over the pass's threads
//! (the others wait, spinning, in kernel_workers.rs).
//!
//! Shapes: `x [M, in]`, `weight [out, in]` (row-major, as checkpoints store it), result `[M, out]`.
//! Taken: contiguous CPU tensors outside autograd on a CPU with AVX-512 or AVX2 + FMA (the form
//! `kernel_form.rs` picks; the AVX2 one is `few_rows_avx2.rs`), f32 for [`ROWS`] rows and bf16 for
//! [`BF16_ROWS`] rows (f32 accumulation, rounded to bf16 once). Up to 12 rows (AVX2: 6) share one
//! read of each weight; more go over each block of weights in turns while it is in cache. Anything
//! else returns `None` and goes through libtorch.

use crate::cpu::kernel_form::{self, KernelForm};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::LocalKey;
use tch::{Device, Kind, Tensor};

/// Nanoseconds spent in [`linear`]'s products since the process started, over all threads
/// (`bench rows` splits a pass into the kernel's products and the rest with it).
static KERNEL_NANOS: AtomicU64 = AtomicU64::new(0);

/// Seconds spent in this kernel's products so far in this process.
pub fn kernel_seconds() -> f64 {
    KERNEL_NANOS.load(Ordering::Relaxed) as f64 * 1e-9
}

/// The form whose products have run in this process (`libtorch` while none has: a model too small
/// for the kernel, or `SHARPDRAFT_KERNEL=libtorch`): what `bench rows` and `generate --json` report.
pub fn form_that_ran() -> KernelForm {
    if KERNEL_NANOS.load(Ordering::Relaxed) > 0 {
        kernel_form::current()
    } else {
        KernelForm::Libtorch
    }
}

/// Row counts this kernel takes in f32. Up to 3 rows libtorch's own kernel is bandwidth-bound already.
/// Qwen2.5-Coder-1.5B, one pass against one row (`bench rows`): 8 rows 1.2-1.3x (libtorch 2.9x), 12
/// rows 1.6-1.8x (3.5x), 16 rows 2.0-2.2x (3.0-3.2x); from about 20 rows libtorch's packed GEMM costs
/// about what this kernel does (24 rows 3.2x against 3.4x; 32 rows 3.6x against 3.5x).
pub const ROWS: std::ops::RangeInclusive<i64> = 4..=16;

/// Row counts it takes in bf16: from one row, where libtorch's bf16 kernel reads at about half the
/// machine's bandwidth (`bench rows --dtype bf16`); from 5 rows only on CPUs with AVX512-BF16, whose
/// pair products keep a pass of 8 rows within 1.4x of one row (Qwen2.5-Coder-1.5B: libtorch's bf16
/// passes cost about the same from 1 to 24 rows, the one row included, so from 9 rows, 2.0x one row
/// here against libtorch's 1.5x, it keeps them).
pub const BF16_ROWS: std::ops::RangeInclusive<i64> = 1..=8;

/// Whether this thread's passes may use the kernel.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Passes of a few rows switch it on (the default).
    Automatic,
    /// Inside a pass that uses it, on this many threads.
    Inside(usize),
    /// Inside [`without_kernel`]: libtorch only.
    Bypassed,
}

thread_local! {
    static MODE: Cell<Mode> = const { Cell::new(Mode::Automatic) };
    /// Inside [`without_pair_products`]: bf16 weights widened to f32 as they are read, as on CPUs
    /// without AVX512-BF16.
    static WIDEN_BF16: Cell<bool> = const { Cell::new(false) };
}

/// Runs `pass` with bf16 products through the path CPUs without AVX512-BF16 take (weights widened
/// to f32 as they are read; 1 to 4 rows), so that tests on a CPU with it check that path too.
pub fn without_pair_products<T>(pass: impl FnOnce() -> T) -> T {
    with_setting(&WIDEN_BF16, true, pass)
}

/// Whether bf16 products on this thread go through AVX512-BF16's pair products.
fn pair_products() -> bool {
    kernel_form::current() == KernelForm::Avx512 && cpu_has_bf16_dot() && !WIDEN_BF16.with(Cell::get)
}

fn with_mode<T>(mode: Mode, pass: impl FnOnce() -> T) -> T {
    with_setting(&MODE, mode, pass)
}

/// Runs `pass` with this thread's `setting` at `value`, and puts the old value back after it, also
/// when the pass unwinds.
fn with_setting<V: Copy + 'static, T>(
    setting: &'static LocalKey<Cell<V>>,
    value: V,
    pass: impl FnOnce() -> T,
) -> T {
    struct Restore<V: Copy + 'static>(&'static LocalKey<Cell<V>>, V);
    impl<V: Copy + 'static> Drop for Restore<V> {
        fn drop(&mut self) {
            self.0.with(|cell| cell.set(self.1));
        }
    }
    let _restore = Restore(setting, setting.with(|cell| cell.replace(value)));
    pass()
}

/// Passes inside [`with_kernel`] now, over all threads, and libtorch's thread count before the first.
static ACTIVE: std::sync::Mutex<(usize, i32)> = std::sync::Mutex::new((0, 0));

/// libtorch single-threaded while any pass on any thread uses the kernel: the first pass in saves the
/// thread count, the last one out restores it (also when a pass unwinds).
struct LibtorchStepsAside;

impl LibtorchStepsAside {
    /// The kernel's threads: libtorch's count before it stepped aside.
    fn enter() -> (Self, usize) {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        if active.0 == 0 {
            active.1 = tch::get_num_threads().max(1);
            tch::set_num_threads(1);
        }
        active.0 += 1;
        (Self, active.1 as usize)
    }
}

impl Drop for LibtorchStepsAside {
    fn drop(&mut self) {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        active.0 -= 1;
        if active.0 == 0 {
            tch::set_num_threads(active.1);
        }
    }
}

/// Runs `pass` with this kernel on for the linear maps it calls ([`kernel_threads`]), on libtorch's
/// thread count, while libtorch itself runs single-threaded: its idle OpenMP workers spin on the cores
/// this kernel's threads need (measured: the kernel alone beat libtorch, inside a pass it lost until
/// libtorch stepped aside).
pub fn with_kernel<T>(pass: impl FnOnce() -> T) -> T {
    let (_aside, threads) = LibtorchStepsAside::enter();
    with_mode(Mode::Inside(threads), pass)
}

/// Runs `pass` with libtorch's own matrix products only (the benchmark's side-by-side baseline).
pub fn without_kernel<T>(pass: impl FnOnce() -> T) -> T {
    with_mode(Mode::Bypassed, pass)
}

/// The kernel's threads inside [`with_kernel`], `None` elsewhere.
pub fn kernel_threads() -> Option<usize> {
    match MODE.with(Cell::get) {
        Mode::Inside(threads) => Some(threads),
        _ => None,
    }
}

/// Whether a pass starting now may switch the kernel on (not inside another, not bypassed).
pub fn automatic() -> bool {
    MODE.with(Cell::get) == Mode::Automatic
}

/// Models whose linear maps hold fewer bytes than this keep libtorch's products: their weights sit in
/// the last-level cache of a large server CPU (480 MB on the machines measured) and a pass is bound by
/// libtorch's per-op overhead, which the single-threaded libtorch of a kernel pass makes worse
/// (SmolLM2-135M, 0.43 GB of linear weights in f32: 5 rows 68 ms with the kernel, 44 ms without;
/// Qwen2.5-Coder-0.5B in bf16, 0.99 GB: one row 59 ms with, 73 ms without).
pub const MIN_WEIGHT_BYTES: usize = 512 << 20;

/// Whether a pass of `rows` rows of a model in `kind` on `device`, whose linear maps hold
/// `weight_bytes`, runs with this kernel on this CPU.
pub fn takes(rows: i64, device: Device, kind: Kind, weight_bytes: usize) -> bool {
    weight_bytes >= MIN_WEIGHT_BYTES && takes_rows(rows, device, kind)
}

/// Whether [`linear`] takes `rows` rows in `kind` on `device` on this CPU.
pub fn takes_rows(rows: i64, device: Device, kind: Kind) -> bool {
    device == Device::Cpu
        && match kind {
            Kind::Float => ROWS.contains(&rows),
            Kind::BFloat16 => BF16_ROWS.contains(&rows) && (rows <= 4 || pair_products()),
            _ => false,
        }
        && cpu_has_kernel()
}

/// The cores this process may run on, counted once: `available_parallelism` reads the cgroup's CPU
/// quota from files on every call (about 11 us here, and a pass makes over a hundred products).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Whether this thread's products take a form of this kernel (AVX-512 or AVX2; elsewhere, or with
/// `SHARPDRAFT_KERNEL=libtorch`, libtorch keeps every product).
fn cpu_has_kernel() -> bool {
    kernel_form::current() != KernelForm::Libtorch
}

/// `x W^T` for `x [M, in]` with M in [`ROWS`] ([`BF16_ROWS`] in bf16) on `threads` threads, or
/// `None` where this kernel does not apply.
pub fn linear(x: &Tensor, weight: &Tensor, threads: usize) -> Option<Tensor> {
    #[cfg(target_arch = "x86_64")]
    {
        let (rows, inputs) = x.size2().ok()?;
        let (outputs, weight_inputs) = weight.size2().ok()?;
        let kind = weight.kind();
        let applies = takes_rows(rows, Device::Cpu, kind)
            && inputs == weight_inputs
            && [x, weight].iter().all(|t| {
                t.device() == Device::Cpu
                    && t.kind() == kind
                    && t.is_contiguous()
                    && !t.requires_grad()
            });
        if !applies {
            return None;
        }
        let started = std::time::Instant::now();
        // bf16 rows feed the pair products as they are; the other paths read f32 rows (bf16 ones
        // widened here once: rows are small).
        let pairs = kind == Kind::BFloat16 && pair_products();
        let widened = if pairs {
            x.shallow_clone()
        } else {
            x.to_kind(Kind::Float).contiguous()
        };
        let out = Tensor::empty([rows, outputs], (Kind::Float, Device::Cpu));
        let shape = Shape {
            rows: rows as usize,
            inputs: inputs as usize,
            outputs: outputs as usize,
        };
        let pointers = Pointers {
            form: kernel_form::current(),
            x: widened.data_ptr() as *const f32,
            x_bf16: x.data_ptr() as *const u16,
            weight: weight.data_ptr() as *const u8,
            bf16: kind == Kind::BFloat16,
            pairs,
            out: out.data_ptr() as *mut f32,
        };
        // At most a part per 256 outputs, and no more threads than cores (a worker spins).
        let threads = threads.clamp(1, shape.outputs.div_ceil(256)).min(cores());
        let per_thread = shape.outputs.div_ceil(threads);
        let part = |t: usize| {
            (t * per_thread).min(shape.outputs)..((t + 1) * per_thread).min(shape.outputs)
        };
        let parts = (0..threads)
            .map(|t| {
                let columns = part(t);
                // SAFETY: the tensors are contiguous, of `shape`, and alive until `run` has waited
                // for every part; each part writes only its own columns of the fresh `out`.
                Box::new(move || unsafe { multiply(pointers, shape, columns) })
                    as crate::cpu::kernel_workers::Part
            })
            .collect();
        match crate::cpu::kernel_workers::run(parts) {
            Some(true) => {}
            // A part panicked: its columns are not all written, so libtorch does the product.
            Some(false) => return None,
            // Another thread's pass holds the workers: this thread does every part.
            // SAFETY: as above, all the columns on this thread.
            None => unsafe { multiply(pointers, shape, 0..shape.outputs) },
        }
        let out = out.to_kind(kind);
        KERNEL_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Some(out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, weight, threads);
        None
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) rows: usize,
    pub(crate) inputs: usize,
    pub(crate) outputs: usize,
}

/// `x [rows, inputs]` f32 (and `x_bf16`), `weight [outputs, inputs]` (f32, or bf16 where `bf16`),
/// `out [rows, outputs]` f32.
#[derive(Clone, Copy)]
pub(crate) struct Pointers {
    /// The instructions the products take (read once a product, so all its parts agree).
    pub(crate) form: KernelForm,
    pub(crate) x: *const f32,
    /// The rows as given; read only where `pairs`, as bf16 (the pair products take them so). `x`
    /// is read only where not.
    pub(crate) x_bf16: *const u16,
    pub(crate) weight: *const u8,
    pub(crate) bf16: bool,
    /// bf16 through AVX512-BF16's pair products ([`bf16_pairs_512`]).
    pub(crate) pairs: bool,
    pub(crate) out: *mut f32,
}
// SAFETY: the threads only read `x` and `weight` and write disjoint columns of `out`.
unsafe impl Send for Pointers {}

/// The most rows one sweep over the weights carries: 12 rows of accumulators for 2 weight streams
/// (with the 2 weights and an input, 27 of AVX-512's 32 registers). A 12-row pass of
/// Qwen2.5-Coder-1.5B took 1.57x one row in one sweep, 1.71x in two of 6 rows; 16 rows in one sweep
/// of a single stream 2.44x, in two of 8 rows 2.10x.
const ROWS_PER_SWEEP: usize = 12;

/// Bytes of weight rows a block of output columns holds when more rows than [`ROWS_PER_SWEEP`] sweep
/// over it in turn: half of a core's L2 (2 MiB on the machines measured; the other half keeps the
/// sweep's input rows, 8 x 8960 f32 = 287 KB for an MLP's down projection), so the later sweeps read
/// it from there, not from memory. (Blocks of 12, 60 and 240 columns of Qwen2.5-Coder-1.5B measured
/// alike: the later sweeps' products, not their reads, are what a pass of 13-16 rows adds.)
const BLOCK_BYTES: usize = 1 << 20;

/// The fewest output columns in a block, whatever the width of a weight row.
const MIN_BLOCK_COLUMNS: usize = 12;

/// `columns` of the product for every row: up to [`ROWS_PER_SWEEP`] rows in one sweep over the
/// weights; more rows in a few balanced sweeps (16 rows: two of 8) over blocks of columns small enough
/// to stay in cache between the sweeps, so each weight is still read from memory once.
#[cfg(target_arch = "x86_64")]
unsafe fn multiply(p: Pointers, shape: Shape, columns: std::ops::Range<usize>) {
    let most_rows = match p.form {
        KernelForm::Avx2 => crate::cpu::few_rows_avx2::ROWS_PER_SWEEP,
        _ => ROWS_PER_SWEEP,
    };
    if shape.rows <= most_rows {
        return sweep(p, shape, columns);
    }
    let sweeps = shape.rows.div_ceil(most_rows);
    let rows_per_sweep = shape.rows.div_ceil(sweeps);
    let element = if p.bf16 { 2 } else { 4 };
    let block = (BLOCK_BYTES / (shape.inputs * element).max(1)).max(MIN_BLOCK_COLUMNS);
    let mut start = columns.start;
    while start < columns.end {
        let end = (start + block).min(columns.end);
        for first in (0..shape.rows).step_by(rows_per_sweep) {
            let rows = rows_per_sweep.min(shape.rows - first);
            // The same product over rows `first..first + rows` of `x` and of `out`.
            let rows_of_sweep = Pointers {
                x: p.x.wrapping_add(first * shape.inputs),
                x_bf16: p.x_bf16.wrapping_add(first * shape.inputs),
                out: p.out.wrapping_add(first * shape.outputs),
                ..p
            };
            sweep(rows_of_sweep, Shape { rows, ..shape }, start..end);
        }
        start = end;
    }
}

/// One sweep over the weights of `columns` for at most [`ROWS_PER_SWEEP`] rows.
#[cfg(target_arch = "x86_64")]
unsafe fn sweep(p: Pointers, shape: Shape, columns: std::ops::Range<usize>) {
    if p.form == KernelForm::Avx2 {
        return crate::cpu::few_rows_avx2::sweep(p, shape, columns);
    }
    // As many weight streams as the registers allow: M x S accumulators, S weights and an input
    // within AVX-512's 32. More streams keep more of the weights' reads in flight: a 5-row pass over
    // Qwen2.5-Coder-1.5B's linear maps took 268-276 ms with 2 streams, 251-256 with 4, 238-243 with
    // 5, on 2 threads (one row through libtorch: 205-225 ms in the same runs).
    if p.pairs {
        return match shape.rows {
            1 => bf16_pairs_512::<1, 8>(p, shape, columns),
            2..=4 => bf16_pairs_512::<4, 6>(p, shape, columns),
            5 => bf16_pairs_512::<5, 5>(p, shape, columns),
            6 => bf16_pairs_512::<6, 4>(p, shape, columns),
            _ => bf16_pairs_512::<8, 3>(p, shape, columns),
        };
    }
    if p.bf16 {
        return match shape.rows {
            1 => streams_512::<true, 1, 8>(p, shape, columns),
            2..=4 => streams_512::<true, 4, 6>(p, shape, columns),
            _ => streams_512::<true, 8, 3>(p, shape, columns),
        };
    }
    match shape.rows {
        ..=4 => streams_512::<false, 4, 6>(p, shape, columns),
        5 => streams_512::<false, 5, 5>(p, shape, columns),
        6 => streams_512::<false, 6, 4>(p, shape, columns),
        7 | 8 => streams_512::<false, 8, 3>(p, shape, columns),
        _ => streams_512::<false, 12, 2>(p, shape, columns),
    }
}

/// AVX512-BF16 (`vdpbf16ps`): multiplies bf16 pairs of weights and rows and adds both products to
/// an f32 accumulator, 32 weights per load and no widening instructions.
fn cpu_has_bf16_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// bf16 weights and rows through `vdpbf16ps`, `S` weight rows at a time as [`streams_512`]; the
/// `inputs % 32` last elements one at a time in f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16_pairs_512<const M: usize, const S: usize>(
    p: Pointers,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    use std::arch::x86_64::*;
    let widen = |at: *const u16| f32::from_bits((*at as u32) << 16);
    let load =
        |at: *const u16| -> __m512bh { std::mem::transmute(_mm512_loadu_si512(at as *const _)) };
    // Once per part: a panic here is caught, and libtorch does the product.
    assert!(shape.rows <= M, "{} rows in a kernel for {M}", shape.rows);
    let k = shape.inputs;
    let full = k / 32 * 32;
    let mut rows = [p.x_bf16; M];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = x_row(p.x_bf16, shape, r);
    }
    let weights = p.weight as *const u16;
    let mut column = columns.start;
    while column < columns.end {
        let present = (columns.end - column).min(S);
        let first = weights.wrapping_add(column * k);
        let mut weight_rows = [first; S];
        for (s, row) in weight_rows.iter_mut().enumerate() {
            *row = first.wrapping_add(s.min(present - 1) * k);
        }
        let mut acc = [[_mm512_setzero_ps(); M]; S];
        let mut i = 0usize;
        while i < full {
            for s in 0..S {
                _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add((S + s) * k + i) as *const i8);
            }
            let mut w = [std::mem::transmute::<__m512, __m512bh>(_mm512_setzero_ps()); S];
            for s in 0..S {
                w[s] = load(weight_rows[s].wrapping_add(i));
            }
            for r in 0..M {
                let xv = load(rows[r].wrapping_add(i));
                for s in 0..S {
                    acc[s][r] = _mm512_dpbf16_ps(acc[s][r], w[s], xv);
                }
            }
            i = i.wrapping_add(32);
        }
        for r in 0..shape.rows.min(M) {
            for s in 0..present {
                let mut sum = _mm512_reduce_add_ps(acc[s][r]);
                for j in full..k {
                    sum += widen(weight_rows[s].wrapping_add(j)) * widen(rows[r].wrapping_add(j));
                }
                *p.out.wrapping_add(r * shape.outputs + column + s) = sum;
            }
        }
        column += S;
    }
}

/// Row `r` of the rows at `x` (`[rows, inputs]`, f32 or bf16), or row 0 for the padding rows past
/// `rows` (their results are not stored).
#[cfg(target_arch = "x86_64")]
pub(crate) fn x_row<T>(x: *const T, shape: Shape, r: usize) -> *const T {
    x.wrapping_add(if r < shape.rows { r * shape.inputs } else { 0 })
}

/// AVX-512, `S` weight rows at a time (`S` streams per thread, and each input load feeds `S` FMAs):
/// `S` x `M` accumulators, which the const parameters let the compiler keep in registers (at most
/// 32 with the `S` weights and an input); rows past `shape.rows` are padding. The next `S` weight rows
/// are prefetched (the hardware prefetcher alone falls behind). Pointers move with `wrapping_add`:
/// `add` carries a precondition check in debug builds. With `BF16` the weights are bf16, 16 of them
/// widened to f32 per load (a bf16 is the top half of an f32): half the bytes per weight.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn streams_512<const BF16: bool, const M: usize, const S: usize>(
    p: Pointers,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    use std::arch::x86_64::*;
    let element = if BF16 { 2 } else { 4 };
    // 16 weights at `at`, as f32; and one, for the tail.
    let load = |at: *const u8| {
        if BF16 {
            let half = _mm256_loadu_si256(at as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(half)))
        } else {
            _mm512_loadu_ps(at as *const f32)
        }
    };
    let scalar = |at: *const u8| {
        if BF16 {
            f32::from_bits((*(at as *const u16) as u32) << 16)
        } else {
            *(at as *const f32)
        }
    };
    // Once per part: a panic here is caught, and libtorch does the product.
    assert!(shape.rows <= M, "{} rows in a kernel for {M}", shape.rows);
    let k = shape.inputs;
    let full = k / 16 * 16;
    let row_bytes = k * element;
    let mut rows = [p.x; M];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = x_row(p.x, shape, r);
    }
    let mut column = columns.start;
    while column < columns.end {
        // The last group of a range may hold fewer rows: its missing ones repeat its last row (their
        // results are dropped).
        let present = (columns.end - column).min(S);
        let first = p.weight.wrapping_add(column * row_bytes);
        let mut weight_rows = [first; S];
        for (s, row) in weight_rows.iter_mut().enumerate() {
            *row = first.wrapping_add(s.min(present - 1) * row_bytes);
        }
        let mut acc = [[_mm512_setzero_ps(); M]; S];
        let mut i = 0usize;
        while i < full {
            let offset = i * element;
            for s in 0..S {
                _mm_prefetch::<_MM_HINT_T0>(
                    first.wrapping_add((S + s) * row_bytes + offset) as *const i8
                );
            }
            let mut w = [_mm512_setzero_ps(); S];
            for s in 0..S {
                w[s] = load(weight_rows[s].wrapping_add(offset));
            }
            for r in 0..M {
                let xv = _mm512_loadu_ps(rows[r].wrapping_add(i));
                for s in 0..S {
                    acc[s][r] = _mm512_fmadd_ps(w[s], xv, acc[s][r]);
                }
            }
            i = i.wrapping_add(16);
        }
        for r in 0..shape.rows.min(M) {
            for s in 0..present {
                let mut sum = _mm512_reduce_add_ps(acc[s][r]);
                for j in full..k {
                    sum +=
                        scalar(weight_rows[s].wrapping_add(j * element)) * *rows[r].wrapping_add(j);
                }
                *p.out.wrapping_add(r * shape.outputs + column + s) = sum;
            }
        }
        column += S;
    }
}
