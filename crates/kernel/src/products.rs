//! `out [rows, outputs] = x [rows, inputs] W^T` for a few rows, reading each weight once: the weights
//! `W [outputs, inputs]` (row-major, as checkpoints store them; f32, or bf16 widened as they are read)
//! are streamed once and multiplied into every input row while they are in a register.
//!
//! Up to [`most_rows`] rows share one sweep over the weights (12 on AVX-512 and NEON, 6 on AVX2); more
//! rows go over each block of weights in turns while it sits in cache, so every weight is still read
//! from memory once. [`multiply`] does the columns of one part of a product (the model splits a product
//! by output columns over its threads); [`product`] is the whole product over slices, on this thread.

use crate::form::{FormError, KernelForm};
use crate::streams::streams;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub rows: usize,
    pub inputs: usize,
    pub outputs: usize,
}

/// `x [rows, inputs]` f32 (and `x_bf16`), `weight [outputs, inputs]` (f32, or bf16 where `bf16`),
/// `out [rows, outputs]` f32.
#[derive(Debug, Clone, Copy)]
pub struct Operands {
    /// The instructions the products take (read once a product, so all its parts agree).
    pub form: KernelForm,
    pub x: *const f32,
    /// The rows as bf16; read only where `pairs` (the pair products take them so). `x` is read only
    /// where not.
    pub x_bf16: *const u16,
    pub weight: *const u8,
    pub bf16: bool,
    /// bf16 weights and rows through AVX512-BF16's pair products ([`pair_products_available`]).
    pub pairs: bool,
    pub out: *mut f32,
}
// SAFETY: the threads only read `x` and `weight` and write disjoint columns of `out`.
unsafe impl Send for Operands {}

/// The most rows one sweep over the weights carries in `form`: as many rows of accumulators as the
/// registers hold beside the weight streams. AVX-512 and NEON (32 registers): 12 rows for 2 f32
/// streams, 8 rows of bf16 (a 12-row pass of Qwen2.5-Coder-1.5B took 1.57x one row in one sweep, 1.71x
/// in two of 6 rows; 16 rows in one sweep of a single stream 2.44x, in two of 8 rows 2.10x). AVX2 (16
/// registers): 6 rows of f32, 4 of bf16.
pub fn most_rows(form: KernelForm, bf16: bool) -> usize {
    match (form, bf16) {
        (KernelForm::Avx2, false) => 6,
        (KernelForm::Avx2, true) => 4,
        (_, false) => 12,
        (_, true) => 8,
    }
}

/// Whether this CPU multiplies bf16 pairs (AVX512-BF16's `vdpbf16ps`).
pub fn pair_products_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Bytes of weight rows a block of output columns holds when more rows than [`most_rows`] sweep over it
/// in turn: half of a core's L2 (2 MiB on the machines measured; the other half keeps the sweep's input
/// rows, 8 x 8960 f32 = 287 KB for an MLP's down projection), so the later sweeps read it from there,
/// not from memory. (Blocks of 12, 60 and 240 columns of Qwen2.5-Coder-1.5B measured alike: the later
/// sweeps' products, not their reads, are what a pass of 13-16 rows adds.)
const BLOCK_BYTES: usize = 1 << 20;

/// The fewest output columns in a block, whatever the width of a weight row.
const MIN_BLOCK_COLUMNS: usize = 12;

/// Row `r` of the rows at `x` (`[rows, inputs]`, f32 or bf16), or row 0 for the padding rows past
/// `rows` (their results are not stored).
pub(crate) fn x_row<T>(x: *const T, shape: Shape, r: usize) -> *const T {
    x.wrapping_add(if r < shape.rows { r * shape.inputs } else { 0 })
}

/// `columns` of the product for every row: up to [`most_rows`] rows in one sweep over the weights; more
/// rows in a few balanced sweeps (16 rows: two of 8) over blocks of columns small enough to stay in
/// cache between the sweeps.
///
/// # Safety
/// The operands point at memory of `shape`, alive for the call; `columns` lie within `0..outputs`;
/// no other thread writes these columns of `out`. A form this CPU cannot run, or `libtorch`, panics
/// (before touching `out`).
pub unsafe fn multiply(p: Operands, shape: Shape, columns: std::ops::Range<usize>) {
    assert!(
        p.form.available() && p.form != KernelForm::Libtorch,
        "{} has no products here",
        p.form.name()
    );
    let most = most_rows(p.form, p.bf16);
    if shape.rows <= most {
        return sweep(p, shape, columns);
    }
    let sweeps = shape.rows.div_ceil(most);
    let rows_per_sweep = shape.rows.div_ceil(sweeps);
    let element = if p.bf16 { 2 } else { 4 };
    let block = (BLOCK_BYTES / (shape.inputs * element).max(1)).max(MIN_BLOCK_COLUMNS);
    let mut start = columns.start;
    while start < columns.end {
        let end = (start + block).min(columns.end);
        for first in (0..shape.rows).step_by(rows_per_sweep) {
            let rows = rows_per_sweep.min(shape.rows - first);
            // The same product over rows `first..first + rows` of `x` and of `out`.
            let rows_of_sweep = Operands {
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

/// The register blocking of a form with 32 vector registers (AVX-512, NEON): `M` rows of accumulators
/// x `S` weight streams, with the `S` weights and an input, within 32.
macro_rules! blocking_of_32_registers {
    ($streams:ident, $p:expr, $shape:expr, $columns:expr) => {
        if $p.bf16 {
            match $shape.rows {
                1 => $streams::<true, 1, 8>($p, $shape, $columns),
                2..=4 => $streams::<true, 4, 6>($p, $shape, $columns),
                _ => $streams::<true, 8, 3>($p, $shape, $columns),
            }
        } else {
            match $shape.rows {
                ..=4 => $streams::<false, 4, 6>($p, $shape, $columns),
                5 => $streams::<false, 5, 5>($p, $shape, $columns),
                6 => $streams::<false, 6, 4>($p, $shape, $columns),
                7 | 8 => $streams::<false, 8, 3>($p, $shape, $columns),
                _ => $streams::<false, 12, 2>($p, $shape, $columns),
            }
        }
    };
}

/// One sweep over the weights of `columns` for at most [`most_rows`] rows, in the operands' form.
unsafe fn sweep(p: Operands, shape: Shape, columns: std::ops::Range<usize>) {
    match p.form {
        #[cfg(target_arch = "x86_64")]
        KernelForm::Avx512 => {
            if p.pairs {
                use crate::bf16_pairs::bf16_pairs_512;
                return match shape.rows {
                    1 => bf16_pairs_512::<1, 8>(p, shape, columns),
                    2..=4 => bf16_pairs_512::<4, 6>(p, shape, columns),
                    5 => bf16_pairs_512::<5, 5>(p, shape, columns),
                    6 => bf16_pairs_512::<6, 4>(p, shape, columns),
                    _ => bf16_pairs_512::<8, 3>(p, shape, columns),
                };
            }
            blocking_of_32_registers!(streams_avx512, p, shape, columns)
        }
        // 16 registers: M x S accumulators, S weights and an input within them.
        #[cfg(target_arch = "x86_64")]
        KernelForm::Avx2 => match (p.bf16, shape.rows) {
            (true, 1) => streams_avx2::<true, 1, 6>(p, shape, columns),
            (true, _) => streams_avx2::<true, 4, 3>(p, shape, columns),
            (false, ..=4) => streams_avx2::<false, 4, 3>(p, shape, columns),
            (false, _) => streams_avx2::<false, 6, 2>(p, shape, columns),
        },
        #[cfg(target_arch = "aarch64")]
        KernelForm::Neon => blocking_of_32_registers!(streams_neon, p, shape, columns),
        form => unreachable!("{} was checked to have products", form.name()),
    }
}

// The weight streams compiled for each instruction set: `streams` and its lanes inline into these.

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn streams_avx512<const BF16: bool, const M: usize, const S: usize>(
    p: Operands,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    streams::<crate::lanes::Avx512, BF16, M, S>(p, shape, columns)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn streams_avx2<const BF16: bool, const M: usize, const S: usize>(
    p: Operands,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    streams::<crate::lanes::Avx2, BF16, M, S>(p, shape, columns)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn streams_neon<const BF16: bool, const M: usize, const S: usize>(
    p: Operands,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    streams::<crate::lanes::Neon, BF16, M, S>(p, shape, columns)
}

/// The rows of a product over slices: f32, or bf16 for AVX512-BF16's pair products (with bf16 weights).
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    Bf16Pairs(&'a [u16]),
}

/// The weights `[outputs, inputs]` of a product over slices.
#[derive(Debug, Clone, Copy)]
pub enum Weights<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

/// Operands that do not make a product of their shape, or a form this CPU cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProductError {
    #[error(transparent)]
    Form(#[from] FormError),
    #[error("product of shape {shape:?}: {reason}")]
    Operands { shape: Shape, reason: String },
}

/// `out = x W^T` over slices, every column on this thread, in `form` (checked against this CPU).
pub fn product(
    form: KernelForm,
    x: Rows<'_>,
    weight: Weights<'_>,
    shape: Shape,
    out: &mut [f32],
) -> Result<(), ProductError> {
    let operands = checked_operands(form, x, weight, shape, out)?;
    // SAFETY: the slices hold `shape` (checked) and outlive the call; this thread writes every column.
    unsafe { multiply(operands, shape, 0..shape.outputs) };
    Ok(())
}

/// The operands of `out = x W^T` over slices, checked: a form this CPU runs, slices that hold
/// `shape`, bf16 rows only for AVX512-BF16's pair products. [`multiply`] may then take any columns
/// while the slices live (a caller that splits the columns over threads, as a pass does).
pub fn checked_operands(
    form: KernelForm,
    x: Rows<'_>,
    weight: Weights<'_>,
    shape: Shape,
    out: &mut [f32],
) -> Result<Operands, ProductError> {
    if form == KernelForm::Libtorch || !form.available() {
        return Err(FormError {
            reason: format!("{}: this CPU has no products of that form", form.name()),
        }
        .into());
    }
    let refuse = |reason: String| Err(ProductError::Operands { shape, reason });
    let (x_len, weight_len) = (shape.rows * shape.inputs, shape.outputs * shape.inputs);
    let (rows_len, pairs, x, x_bf16) = match x {
        Rows::F32(rows) => (rows.len(), false, rows.as_ptr(), std::ptr::null()),
        Rows::Bf16Pairs(rows) => (rows.len(), true, std::ptr::null(), rows.as_ptr()),
    };
    let (given_weights, bf16, weight) = match weight {
        Weights::F32(w) => (w.len(), false, w.as_ptr() as *const u8),
        Weights::Bf16(w) => (w.len(), true, w.as_ptr() as *const u8),
    };
    if shape.rows == 0 || shape.inputs == 0 {
        return refuse("a product needs at least one row and one input".into());
    }
    if rows_len != x_len || given_weights != weight_len || out.len() != shape.rows * shape.outputs {
        return refuse(format!(
            "{rows_len} row elements, {given_weights} weights and {} outputs given",
            out.len()
        ));
    }
    if pairs && !(bf16 && form == KernelForm::Avx512 && pair_products_available()) {
        return refuse("bf16 rows need bf16 weights and AVX512-BF16's pair products".into());
    }
    Ok(Operands {
        form,
        x,
        x_bf16,
        weight,
        bf16,
        pairs,
        out: out.as_mut_ptr(),
    })
}
