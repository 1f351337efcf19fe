//! A linear map over a few rows (a verification pass of a few drafts, a drafting step) that reads each
//! weight once. libtorch's f32 CPU GEMM switches at 4 rows to a kernel that first packs the whole
//! weight matrix, which doubles the bytes a pass moves (`sharpdraft bench rows`: 4 rows of
//! Qwen2.5-Coder-1.5B in f32 cost 2.0x one row), and its bf16 kernel reads a single row at about half
//! the machine's bandwidth. Decoding on a CPU is bound by reading the weights, so here each weight row
//! is streamed once and multiplied into every input row while it is in a register.
//!
//! Shapes: `x [M, in]`, `weight [out, in]` (row-major, as checkpoints store it), result `[M, out]`.
//! Taken: contiguous CPU tensors outside autograd on a CPU with AVX-512, f32 for [`ROWS`] rows and bf16
//! for [`BF16_ROWS`] rows (f32 accumulation, rounded to bf16 once). Anything else returns `None` and
//! goes through libtorch.

use std::cell::Cell;
use tch::{Device, Kind, Tensor};

/// Row counts this kernel takes in f32. Up to 3 rows libtorch's own kernel is bandwidth-bound already;
/// from 9 rows a second read of the weights costs what libtorch's packing does.
pub const ROWS: std::ops::RangeInclusive<i64> = 4..=8;

/// Row counts it takes in bf16: from one row, where libtorch's bf16 kernel reads at
/// about half the machine's bandwidth (`bench rows --dtype bf16`).
pub const BF16_ROWS: std::ops::RangeInclusive<i64> = 1..=4;

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
}

fn with_mode<T>(mode: Mode, pass: impl FnOnce() -> T) -> T {
    /// Puts the thread's mode back, also when the pass unwinds.
    struct Restore(Mode);
    impl Drop for Restore {
        fn drop(&mut self) {
            MODE.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(MODE.with(|m| m.replace(mode)));
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
            Kind::BFloat16 => BF16_ROWS.contains(&rows),
            _ => false,
        }
        && cpu_has_kernel()
}

/// AVX-512 (the only width written: the machines measured have it, and an untested narrower path
/// would be a claim without a test; elsewhere libtorch keeps every product).
fn cpu_has_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x W^T` for `x [M, in]` with M in [`ROWS`] ([`BF16_ROWS`] in bf16) on `threads` threads, or `None` where this kernel does
/// not apply.
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
        // bf16: the rows are widened to f32 once (they are small), the weights as they are read.
        let x = x.to_kind(Kind::Float).contiguous();
        let out = Tensor::empty([rows, outputs], (Kind::Float, Device::Cpu));
        let shape = Shape {
            rows: rows as usize,
            inputs: inputs as usize,
            outputs: outputs as usize,
        };
        let pointers = Pointers {
            x: x.data_ptr() as *const f32,
            weight: weight.data_ptr() as *const u8,
            bf16: kind == Kind::BFloat16,
            out: out.data_ptr() as *mut f32,
        };
        let threads = threads.clamp(1, shape.outputs.div_ceil(256));
        let per_thread = shape.outputs.div_ceil(threads);
        std::thread::scope(|scope| {
            for t in 1..threads {
                let columns =
                    (t * per_thread).min(shape.outputs)..((t + 1) * per_thread).min(shape.outputs);
                // SAFETY: the tensors are contiguous f32 of `shape`, alive until the scope ends; each
                // thread writes only its own columns of the fresh `out`.
                scope.spawn(move || unsafe { multiply(pointers, shape, columns) });
            }
            // SAFETY: as above, for the first columns.
            unsafe { multiply(pointers, shape, 0..per_thread.min(shape.outputs)) };
        });
        Some(out.to_kind(kind))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, weight, threads);
        None
    }
}

#[derive(Clone, Copy)]
struct Shape {
    rows: usize,
    inputs: usize,
    outputs: usize,
}

/// `x [rows, inputs]` f32, `weight [outputs, inputs]` (f32, or bf16 where `bf16`), `out [rows, outputs]`
/// f32.
#[derive(Clone, Copy)]
struct Pointers {
    x: *const f32,
    weight: *const u8,
    bf16: bool,
    out: *mut f32,
}
// SAFETY: the threads only read `x` and `weight` and write disjoint columns of `out`.
unsafe impl Send for Pointers {}

#[cfg(target_arch = "x86_64")]
unsafe fn multiply(p: Pointers, shape: Shape, columns: std::ops::Range<usize>) {
    if p.bf16 {
        return match shape.rows {
            1 => paired_512::<true, 1>(p, shape, columns),
            2..=4 => paired_512::<true, 4>(p, shape, columns),
            _ => paired_512::<true, 8>(p, shape, columns),
        };
    }
    match shape.rows {
        ..=4 => paired_512::<false, 4>(p, shape, columns),
        _ => paired_512::<false, 8>(p, shape, columns),
    }
}

/// Row `r` of `x`, or row 0 for the padding rows past `rows` (their results are not stored).
#[cfg(target_arch = "x86_64")]
fn x_row(p: Pointers, shape: Shape, r: usize) -> *const f32 {
    p.x.wrapping_add(if r < shape.rows { r * shape.inputs } else { 0 })
}

/// AVX-512, two weight rows at a time (two streams per thread, and each input load feeds two FMAs):
/// 2 M accumulators, which const `M` lets the compiler keep in registers; rows past `shape.rows` are
/// padding. The rows two and three ahead are prefetched (the hardware prefetcher alone falls behind).
/// Pointers move with `wrapping_add`: `add` carries a precondition check in debug builds. With `BF16` the weights are
/// bf16, 16 of them widened to f32 per load (a bf16 is the top half of an f32): half the bytes per
/// weight.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn paired_512<const BF16: bool, const M: usize>(
    p: Pointers,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    use std::arch::x86_64::*;
    let element = if BF16 { 2 } else { 4 };
    // 16 weights from `row` at element `i`, as f32; and one, for the tail.
    let load = |row: *const u8, i: usize| {
        let at = row.wrapping_add(i * element);
        if BF16 {
            let half = _mm256_loadu_si256(at as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(half)))
        } else {
            _mm512_loadu_ps(at as *const f32)
        }
    };
    let scalar = |row: *const u8, j: usize| {
        let at = row.wrapping_add(j * element);
        if BF16 {
            f32::from_bits((*(at as *const u16) as u32) << 16)
        } else {
            *(at as *const f32)
        }
    };
    let k = shape.inputs;
    let full = k / 16 * 16;
    let row_bytes = k * element;
    let mut rows = [p.x; M];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = x_row(p, shape, r);
    }
    let mut column = columns.start;
    while column < columns.end {
        let pair = column + 1 < columns.end;
        let first = p.weight.wrapping_add(column * row_bytes);
        // The lone last row of an odd range is paired with itself (its second result is dropped).
        let second = if pair {
            first.wrapping_add(row_bytes)
        } else {
            first
        };
        let mut acc_a = [_mm512_setzero_ps(); M];
        let mut acc_b = [_mm512_setzero_ps(); M];
        let mut i = 0usize;
        while i < full {
            _mm_prefetch::<_MM_HINT_T0>(
                first.wrapping_add(2 * row_bytes + i * element) as *const i8
            );
            _mm_prefetch::<_MM_HINT_T0>(
                first.wrapping_add(3 * row_bytes + i * element) as *const i8
            );
            let (wa, wb) = (load(first, i), load(second, i));
            for r in 0..M {
                let xv = _mm512_loadu_ps(rows[r].wrapping_add(i));
                acc_a[r] = _mm512_fmadd_ps(wa, xv, acc_a[r]);
                acc_b[r] = _mm512_fmadd_ps(wb, xv, acc_b[r]);
            }
            i = i.wrapping_add(16);
        }
        for r in 0..shape.rows.min(M) {
            let (mut a, mut b) = (
                _mm512_reduce_add_ps(acc_a[r]),
                _mm512_reduce_add_ps(acc_b[r]),
            );
            for j in full..k {
                let xj = *rows[r].wrapping_add(j);
                a += scalar(first, j) * xj;
                b += scalar(second, j) * xj;
            }
            *p.out.wrapping_add(r * shape.outputs + column) = a;
            if pair {
                *p.out.wrapping_add(r * shape.outputs + column + 1) = b;
            }
        }
        column += 2;
    }
}
