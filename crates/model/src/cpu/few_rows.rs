//! A linear map over a few rows (a verification pass of a few drafts, a drafting step) that reads each
//! weight once. libtorch's f32 CPU GEMM switches at 4 rows to a kernel that first packs the whole
//! weight matrix, which doubles the bytes a pass moves (`sharpdraft bench rows`: 4 rows of
//! Qwen2.5-Coder-1.5B in f32 cost 2.0x one row), and its bf16 kernel reads a single row at about half
//! the machine's bandwidth. Decoding on a CPU is bound by reading the weights, so here each weight row
//! is streamed once and multiplied into every input row while it is in a register, several weight
//! rows at a time so that enough reads are in flight, split by output over the pass's threads
//! (the others wait, spinning, in `sharpdraft_kernel::workers`). The products themselves are
//! `sharpdraft-kernel`'s (no libtorch); this module decides which passes and tensors take them.
//!
//! Shapes: `x [M, in]`, `weight [out, in]` (row-major, as checkpoints store it), result `[M, out]`.
//! Taken: contiguous CPU tensors outside autograd on a CPU with AVX-512, AVX2 + FMA or NEON (the form
//! `sharpdraft_kernel::form` picks; the products themselves are that crate's), f32 for [`ROWS`] rows
//! and bf16 for [`BF16_ROWS`] rows (f32 accumulation, rounded to bf16 once). Anything else returns
//! `None` and goes through libtorch.

use sharpdraft_kernel::form::{self as kernel_form, KernelForm};
use sharpdraft_kernel::key_scores::{self, KeyScores};
use sharpdraft_kernel::products::{multiply, pair_products_available, Operands, Shape};
use sharpdraft_kernel::softmax;
use sharpdraft_kernel::weighted_sum::WeightedSum;
use sharpdraft_kernel::workers;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::LocalKey;
use tch::{Device, Kind, Tensor};

/// Nanoseconds spent in the kernel's products ([`linear`]'s and those over GGUF blocks) since the
/// process started, over all threads (`bench rows` splits a pass into the kernel's products and the
/// rest with it).
static KERNEL_NANOS: AtomicU64 = AtomicU64::new(0);

/// Adds the time since `started` to the kernel's products: the few-row products here and the
/// products over a GGUF file's blocks (`weight_blocks`) alike.
pub(crate) fn count_kernel_time(started: std::time::Instant) {
    KERNEL_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

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

/// Row counts this kernel takes in f32, from one row: libtorch's products of a few rows read far below
/// the bandwidth (`bench rows`, Qwen2.5-Coder-1.5B on a 2-core AMD EPYC: 2 rows 937.7 ms with libtorch
/// alone against 250.8 ms with the kernel, one row 431.5 ms against 374.9 ms). From about 20 rows
/// libtorch's packed GEMM costs about what this kernel does (24 rows 3.2x one row against 3.4x; 32 rows
/// 3.6x against 3.5x, on the machines of earlier measurements).
pub const ROWS: std::ops::RangeInclusive<i64> = 1..=16;

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
    kernel_form::current() == KernelForm::Avx512
        && pair_products_available()
        && !WIDEN_BF16.with(Cell::get)
}

fn with_mode<T>(mode: Mode, pass: impl FnOnce() -> T) -> T {
    with_setting(&MODE, mode, pass)
}

/// Runs `pass` with this thread's `setting` at `value`, and puts the old value back after it, also
/// when the pass unwinds.
pub(crate) fn with_setting<V: Copy + 'static, T>(
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

thread_local! {
    /// Inside [`decoding`] on this thread: its hold on libtorch's single thread (`None` while
    /// [`with_libtorch_threads`] has handed it back, and outside a decoding loop).
    static DECODING: std::cell::RefCell<Option<LibtorchStepsAside>> = const { std::cell::RefCell::new(None) };
}

/// Runs `decode`, the token loop of a model whose one-row passes take this kernel (`takes(1, ..)` of
/// its bytes and, inside [`beside`], the other model's),
/// with libtorch single-threaded from its first pass to its last, not only inside each pass. Between
/// two passes a loop runs small operations over the logits (an argmax over 49152 entries, a softmax)
/// that libtorch splits over its OpenMP threads, and an idle OpenMP thread then spins for milliseconds
/// on the core the kernel's worker needs for the next pass. Measured with `perf` on a DFlash drafter at
/// 4096 tokens: half of the drafter's time was its thread waiting for a worker that an OpenMP thread
/// had pushed off the second core. Work in the loop that wants libtorch's threads (a pass this kernel
/// does not take, an online-adaptation update) gets them back through [`with_libtorch_threads`].
/// Anything else runs `decode` as it is.
pub fn decoding<T>(
    device: Device,
    kind: Kind,
    weight_bytes: usize,
    decode: impl FnOnce() -> T,
) -> T {
    let streamed = streamed_bytes(weight_bytes);
    if holds_libtorch_to_one_thread() || !automatic() || !takes(1, device, kind, streamed) {
        return decode();
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DECODING.with(|held| held.borrow_mut().take());
        }
    }
    let (aside, _) = LibtorchStepsAside::enter();
    DECODING.with(|held| *held.borrow_mut() = Some(aside));
    let _leave = Leave;
    decode()
}

/// Runs `work` with libtorch on its own thread count again when it runs inside [`decoding`] (and no
/// kernel pass on another thread holds libtorch to one): a pass of more rows than the kernel takes, the
/// backward passes of an online update. As it is elsewhere.
pub fn with_libtorch_threads<T>(work: impl FnOnce() -> T) -> T {
    let Some(held) = DECODING.with(|held| held.borrow_mut().take()) else {
        return work();
    };
    drop(held);
    struct TakeBack;
    impl Drop for TakeBack {
        fn drop(&mut self) {
            let (aside, _) = LibtorchStepsAside::enter();
            DECODING.with(|held| *held.borrow_mut() = Some(aside));
        }
    }
    let _take_back = TakeBack;
    work()
}

/// Whether this thread is inside [`decoding`] with libtorch held to one thread.
pub fn holds_libtorch_to_one_thread() -> bool {
    DECODING.with(|held| held.borrow().is_some())
}

/// The threads this kernel runs on outside a pass: libtorch's count, or the count it had before a
/// pass or a decoding loop set it to one (what a unit's provenance records: a pass on another thread
/// does not change it).
pub fn threads_outside_a_pass() -> usize {
    let active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    if active.0 > 0 {
        active.1.max(1) as usize
    } else {
        tch::get_num_threads().max(1) as usize
    }
}

thread_local! {
    /// Inside [`beside`] on this thread: the other model's weight bytes.
    static BESIDE: Cell<usize> = const { Cell::new(0) };
}

/// Runs `work`, passes of one model between which another model of `other_bytes` (its weights) streams
/// its own through the same cache: a drafter's proposal between two verifications by its target, and
/// the target's passes of a speculative loop between two proposals (the loop wraps both). Those passes
/// weigh both models' bytes against the cache ([`streamed_bytes`]; the innermost `beside` counts): a
/// drafter small enough for the cache alone still reads its weights from memory when the target's
/// evicted them. Measured on a 300 MiB L3 (docs/benchmarks.md, "A drafter in
/// bf16"): by its own bytes the Qwen v8k DFlash drafter in bf16 stayed on libtorch's few-row products,
/// its maps at 1.7 times their memory bound.
pub fn beside<T>(other_bytes: usize, work: impl FnOnce() -> T) -> T {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            BESIDE.with(|beside| beside.set(self.0));
        }
    }
    let _restore = Restore(BESIDE.with(|beside| beside.replace(other_bytes)));
    work()
}

/// The bytes that pass through the cache around a pass through linear maps of `weight_bytes`: those,
/// and inside [`beside`] the other model's.
pub fn streamed_bytes(weight_bytes: usize) -> usize {
    weight_bytes.saturating_add(BESIDE.with(Cell::get))
}

/// Runs `pass`, a pass of `rows` rows through linear maps of `weight_bytes` in `kind` on `device` (a
/// drafter's block, a tree level, a verification), with this kernel where [`takes`] says it pays for
/// the bytes streamed around it ([`streamed_bytes`]) and no pass has it on already; otherwise on
/// libtorch's own threads (given back for it inside a [`decoding`] loop).
pub fn where_it_pays<T>(
    rows: i64,
    device: Device,
    kind: Kind,
    weight_bytes: usize,
    pass: impl FnOnce() -> T,
) -> T {
    if automatic() && takes(rows, device, kind, streamed_bytes(weight_bytes)) {
        with_kernel(pass)
    } else if automatic() {
        with_libtorch_threads(pass)
    } else {
        pass()
    }
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

/// Models whose linear maps fit in this CPU's last-level cache (with those of another model whose
/// passes run between theirs: [`beside`]) keep libtorch's products: read from the
/// cache, a pass is bound by libtorch's per-operation overhead, which the single-threaded libtorch of a
/// kernel pass makes worse. Measured (`bench rows`, SmolLM2-135M, 0.43 GB of linear weights in f32): on
/// CPUs whose cache reports 480 MB, 5 rows took 68 ms with the kernel and 44 ms without; on an AMD EPYC
/// with 32 MiB of L3, where the weights stream from memory, 4 rows took 36.4 ms with it and 112.8 ms
/// without, one row 36.5 ms against 65.9 ms. Where the cache size is unknown, 512 MiB.
pub fn min_weight_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| last_level_cache_bytes().unwrap_or(512 << 20))
}

/// The largest cache level's size that Linux reports for CPU 0 (`/sys/devices/system/cpu/cpu0/cache`).
fn last_level_cache_bytes() -> Option<usize> {
    let caches = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let read = |dir: &std::path::Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    caches
        .filter_map(|entry| {
            let dir = entry.ok()?.path();
            let level: u32 = read(&dir, "level")?.trim().parse().ok()?;
            let size = read(&dir, "size")?;
            Some((level, parse_cache_size(size.trim())?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// `32768K`, `480M`, `1G` or plain bytes.
pub fn parse_cache_size(text: &str) -> Option<usize> {
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// Whether a pass of `rows` rows of a model in `kind` on `device`, whose linear maps hold
/// `weight_bytes`, runs with this kernel on this CPU.
pub fn takes(rows: i64, device: Device, kind: Kind, weight_bytes: usize) -> bool {
    weight_bytes >= min_weight_bytes() && takes_rows(rows, device, kind)
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

/// Whether this thread's products take a form of this kernel (AVX-512, AVX2 or NEON; elsewhere, or
/// with `SHARPDRAFT_KERNEL=libtorch`, libtorch keeps every product).
fn cpu_has_kernel() -> bool {
    kernel_form::current() != KernelForm::Libtorch
}

/// `x W^T` for `x [M, in]` with M in [`ROWS`] ([`BF16_ROWS`] in bf16) on `threads` threads, or
/// `None` where this kernel does not apply.
pub fn linear(x: &Tensor, weight: &Tensor, threads: usize) -> Option<Tensor> {
    let rows = x.size2().ok()?.0;
    if !takes_rows(rows, Device::Cpu, weight.kind()) {
        return None;
    }
    product(x, weight, threads)
}

/// The most rows [`head`] takes.
pub const HEAD_ROWS: i64 = 16;

/// An LM head's `x W^T` for `x [M, hidden]`, `W [vocab, hidden]` f32 or bf16, M in 1..=[`HEAD_ROWS`],
/// on this CPU's kernel (on libtorch's thread count), or
/// `None` where it does not apply (another device or kind, gradients, `SHARPDRAFT_KERNEL=libtorch`,
/// inside [`without_kernel`]). Unlike a whole pass, the head pays at any row count and any model size:
/// libtorch reads this short, wide matrix at a fraction of the bandwidth for a few rows (`bench rows`,
/// SmolLM2-135M's 576 -> 49152 head: 3 rows 35 ms through libtorch, 4 rows 5.6 ms here).
pub fn head(x: &Tensor, weight: &Tensor) -> Option<Tensor> {
    let rows = x.size2().ok()?.0;
    let applies = (1..=HEAD_ROWS).contains(&rows)
        && matches!(weight.kind(), Kind::Float | Kind::BFloat16)
        && x.device() == Device::Cpu
        && MODE.with(Cell::get) != Mode::Bypassed
        && cpu_has_kernel();
    if !applies {
        return None;
    }
    let x = x.to_kind(weight.kind()).contiguous();
    // Outside a kernel pass the head leaves libtorch's count as it is (switching it is process-wide,
    // and a reduction on another thread would then round differently; one product is too short to
    // need it) and runs on libtorch's own count, the one before a pass or a decoding loop set it to one.
    let threads = kernel_threads().unwrap_or_else(threads_outside_a_pass);
    product(&x, weight, threads)
}

/// `x W^T` on the kernel for operands it can read (same kind, contiguous, on the CPU, no gradients),
/// whatever the row count up to what a sweep holds; `None` otherwise.
pub(crate) fn product(x: &Tensor, weight: &Tensor, threads: usize) -> Option<Tensor> {
    let (rows, inputs) = x.size2().ok()?;
    let (outputs, weight_inputs) = weight.size2().ok()?;
    let kind = weight.kind();
    let applies = inputs == weight_inputs
        && (1..=HEAD_ROWS).contains(&rows)
        && [x, weight].iter().all(|t| {
            t.device() == Device::Cpu && t.kind() == kind && t.is_contiguous() && !t.requires_grad()
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
    let operands = Operands {
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
    let part = move |t: usize| {
        let columns =
            (t * per_thread).min(shape.outputs)..((t + 1) * per_thread).min(shape.outputs);
        // SAFETY: the tensors are contiguous, of `shape`, and alive until `run_each` has waited for
        // every part; each part writes only its own columns of the fresh `out`.
        unsafe { multiply(operands, shape, columns) }
    };
    if !workers::run_each(threads, part) {
        // A part panicked: its columns are not all written, so libtorch does the product.
        return None;
    }
    let out = out.to_kind(kind);
    count_kernel_time(started);
    Some(out)
}

/// Attention's keys split over at most `threads` parts (no fewer than 512 keys a part, no more parts
/// than cores: a worker spins): the part count and part t's keys.
fn split_keys(
    keys: usize,
    threads: usize,
) -> (
    usize,
    impl Fn(usize) -> std::ops::Range<usize> + Copy + Send + 'static,
) {
    let parts = threads.clamp(1, keys.div_ceil(512)).min(cores());
    let per_part = keys.div_ceil(parts);
    (parts, move |t: usize| {
        (t * per_part).min(keys)..((t + 1) * per_part).min(keys)
    })
}

/// `queries [B, R, D] keys [B, L, D]` -> scores `[B, R, L]` f32 on this kernel
/// (`sharpdraft_kernel::key_scores`: each key read once, the lanes across the rows, up to
/// `key_scores::MAX_ROWS` rows at a time), the keys split over `threads`; `None` where it does not
/// apply (not f32, not on the CPU, a batch whose keys are not contiguous, gradients). Attention's
/// first product for the grouped rows of a pass: as a dot product per key and row, each score ended
/// in a sum across the lanes.
pub fn key_scores(queries: &Tensor, keys: &Tensor, threads: usize) -> Option<Tensor> {
    let (batch, rows, width) = queries.size3().ok()?;
    let (key_batch, key_count, key_width) = keys.size3().ok()?;
    let queries = queries.contiguous();
    let per_batch: Vec<Tensor> = (0..batch).map(|b| keys.get(b)).collect();
    let applies = (batch, width) == (key_batch, key_width)
        && rows >= 1
        && [&queries, keys]
            .iter()
            .all(|t| t.device() == Device::Cpu && t.kind() == Kind::Float && !t.requires_grad())
        && per_batch.iter().all(Tensor::is_contiguous);
    if !applies || !cpu_has_kernel() {
        return None;
    }
    let started = std::time::Instant::now();
    let (batch, rows, keys, width) = (
        batch as usize,
        rows as usize,
        key_count as usize,
        width as usize,
    );
    let out = Tensor::empty(
        [batch as i64, rows as i64, keys as i64],
        (Kind::Float, Device::Cpu),
    );
    let (queries_at, out_at) = (queries.data_ptr() as usize, out.data_ptr() as usize);
    let keys_at: Vec<usize> = per_batch.iter().map(|k| k.data_ptr() as usize).collect();
    let form = kernel_form::current();
    let (threads, part_keys) = split_keys(keys, threads);
    let part = move |t: usize| {
        let range = part_keys(t);
        for (b, &keys_at) in keys_at.iter().enumerate() {
            // SAFETY: batch b's keys are a contiguous f32 `[keys, width]` tensor, alive until
            // `run_each` has waited for every part.
            let key_rows =
                unsafe { std::slice::from_raw_parts(keys_at as *const f32, keys * width) };
            for first in (0..rows).step_by(key_scores::MAX_ROWS) {
                let count = key_scores::MAX_ROWS.min(rows - first);
                let at = b * rows + first;
                // SAFETY: as the keys, for the queries' rows `first..first + count` of batch b.
                let queries = unsafe {
                    std::slice::from_raw_parts(
                        (queries_at as *const f32).add(at * width),
                        count * width,
                    )
                };
                let scores = KeyScores {
                    queries,
                    keys: key_rows,
                    rows: count,
                    key_count: keys,
                    width,
                };
                // SAFETY: those rows of the fresh contiguous `out` are `[count, keys]`; part t writes
                // only the columns of its own keys.
                unsafe {
                    scores
                        .write_columns(form, range.clone(), (out_at as *mut f32).add(at * keys))
                        .expect("the shapes were read from the tensors");
                }
            }
        }
    };
    if !workers::run_each(threads, part) {
        return None;
    }
    count_kernel_time(started);
    Some(out)
}

/// The softmax over the last dimension of `scores [B, R, L]` (f32, contiguous, fresh: changed in place)
/// on this kernel (`sharpdraft_kernel::softmax`), its rows split over `threads`: `Some(true)` once
/// done, `Some(false)` when a part failed (some rows may be changed, others not: the scores are
/// spoiled), `None`, nothing changed, where it does not apply (another kind or layout, gradients, a
/// form without a softmax body: the caller keeps libtorch's). Attention's softmax between its two
/// products.
pub fn softmax_in_place(scores: &Tensor, threads: usize) -> Option<bool> {
    let (batch, rows, length) = scores.size3().ok()?;
    let form = kernel_form::current();
    let applies = scores.device() == Device::Cpu
        && scores.kind() == Kind::Float
        && !scores.requires_grad()
        && scores.is_contiguous()
        && length >= 1
        && softmax::has_body(form);
    if !applies {
        return None;
    }
    let (all_rows, length) = ((batch * rows) as usize, length as usize);
    if all_rows == 0 {
        return Some(true);
    }
    let parts = threads.clamp(1, all_rows).min(cores());
    let per_part = all_rows.div_ceil(parts);
    let scores_at = scores.data_ptr() as usize;
    let part = move |t: usize| {
        let first = (t * per_part).min(all_rows);
        let count = per_part.min(all_rows - first);
        // SAFETY: `scores` is a contiguous f32 `[all_rows, length]` tensor, alive until `run_each` has
        // waited for every part; part t changes only its own rows.
        let rows = unsafe {
            std::slice::from_raw_parts_mut(
                (scores_at as *mut f32).add(first * length),
                count * length,
            )
        };
        softmax::softmax_rows(form, rows, length).expect("the rows are whole");
    };
    Some(workers::run_each(parts, part))
}

/// `probs [B, R, L] values [B, L, D]` -> `[B, R, D]` f32 on this kernel (`sharpdraft_kernel::weighted_sum`:
/// each value row read once), the keys split over `threads`; `None` where it does not apply (not f32,
/// not on the CPU, a batch whose values are not contiguous, gradients). Attention's second product
/// for the few rows of a pass: libtorch's GEMM packs the whole value matrix first.
pub fn weighted_sum(probs: &Tensor, values: &Tensor, threads: usize) -> Option<Tensor> {
    let (batch, rows, keys) = probs.size3().ok()?;
    let (value_batch, value_keys, width) = values.size3().ok()?;
    let per_batch: Vec<Tensor> = (0..batch).map(|b| values.get(b)).collect();
    let applies = (batch, keys) == (value_batch, value_keys)
        && [probs, values]
            .iter()
            .all(|t| t.device() == Device::Cpu && t.kind() == Kind::Float && !t.requires_grad())
        && probs.is_contiguous()
        && per_batch.iter().all(Tensor::is_contiguous);
    if !applies || !cpu_has_kernel() {
        return None;
    }
    let started = std::time::Instant::now();
    let (batch, rows, keys, width) = (batch as usize, rows as usize, keys as usize, width as usize);
    let (threads, part_keys) = split_keys(keys, threads);
    // One partial sum per thread `[threads, B, R, D]`, added up at the end.
    let partial = Tensor::zeros(
        [threads as i64, batch as i64, rows as i64, width as i64],
        (Kind::Float, Device::Cpu),
    );
    let (probs_at, partial_at) = (probs.data_ptr() as usize, partial.data_ptr() as usize);
    let values_at: Vec<usize> = per_batch.iter().map(|v| v.data_ptr() as usize).collect();
    let form = kernel_form::current();
    let part = move |t: usize| {
        let range = part_keys(t);
        for (b, &values_at) in values_at.iter().enumerate() {
            // SAFETY: `probs`, every batch's values and `partial` are contiguous f32 tensors of these
            // shapes, alive until `run` has waited for every part; part t writes only its own slice
            // of `partial`.
            let (weights, values, out) = unsafe {
                (
                    std::slice::from_raw_parts(
                        (probs_at as *const f32).add(b * rows * keys),
                        rows * keys,
                    ),
                    std::slice::from_raw_parts(values_at as *const f32, keys * width),
                    std::slice::from_raw_parts_mut(
                        (partial_at as *mut f32).add((t * batch + b) * rows * width),
                        rows * width,
                    ),
                )
            };
            let sum = WeightedSum {
                weights,
                values,
                rows,
                keys,
                width,
            };
            sum.add_to(form, range.clone(), out)
                .expect("the shapes were read from the tensors");
        }
    };
    if !workers::run_each(threads, part) {
        return None;
    }
    count_kernel_time(started);
    Some(partial.sum_dim_intlist([0i64].as_slice(), false, Kind::Float))
}
