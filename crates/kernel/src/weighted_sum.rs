//! `out [rows, width] += weights [rows, keys] values [keys, width]` over a range of keys: attention's
//! product of a few rows' probabilities with the values, reading each value row once.
//!
//! libtorch's f32 GEMM packs (copies) the whole value matrix before multiplying, so for a decode step
//! or a verification over a long context it moves the values three times; here each value row is read
//! once and added, scaled, into every row's accumulator (an axpy per row: no sum across lanes, so the
//! compiler vectorises the plain loop for the instruction set of each entry point below; AVX2's, with
//! half AVX-512's registers, is written in [`crate::lanes`]).
//!
//! Each product and sum is one fused multiply-add where the instruction set has it (every form the
//! kernel runs: AVX-512, AVX2 + FMA, NEON): rounded once, in one instruction where a product and a
//! sum took two.

use crate::form::KernelForm;
#[cfg(target_arch = "x86_64")]
use crate::lanes::Lanes;
use crate::multiply_add::multiply_add;
use std::ops::Range;

/// The operands of a weighted sum, as slices: `weights` `[rows, keys]` (row-major, every key of each
/// row), `values` `[keys, width]` (row-major), `out` `[rows, width]`, added to.
#[derive(Debug)]
pub struct WeightedSum<'a> {
    pub weights: &'a [f32],
    pub values: &'a [f32],
    pub rows: usize,
    pub keys: usize,
    pub width: usize,
}

/// Operands that do not make a weighted sum of the shape they give.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("weighted sum of {rows} rows over {keys} keys of width {width}: {reason}")]
pub struct WeightedSumError {
    rows: usize,
    keys: usize,
    width: usize,
    reason: String,
}

impl WeightedSum<'_> {
    /// Adds `weights[:, range] values[range, :]` to `out`, in `form` (any form: where it has no entry
    /// point of its own, or this CPU cannot run it, the portable loop).
    pub fn add_to(
        &self,
        form: KernelForm,
        range: Range<usize>,
        out: &mut [f32],
    ) -> Result<(), WeightedSumError> {
        let refuse = |reason: String| {
            Err(WeightedSumError {
                rows: self.rows,
                keys: self.keys,
                width: self.width,
                reason,
            })
        };
        let (weights, values, outputs) = (
            self.rows.checked_mul(self.keys),
            self.keys.checked_mul(self.width),
            self.rows.checked_mul(self.width),
        );
        if weights != Some(self.weights.len())
            || values != Some(self.values.len())
            || outputs != Some(out.len())
        {
            return refuse(format!(
                "{} weights, {} values and {} outputs given",
                self.weights.len(),
                self.values.len(),
                out.len()
            ));
        }
        if range.start > range.end || range.end > self.keys {
            return refuse(format!("keys {range:?} are not within 0..{}", self.keys));
        }
        match form {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the form is available, so the CPU has the instruction set.
            KernelForm::Avx512 if form.available() => unsafe { add_avx512(self, range, out) },
            #[cfg(target_arch = "x86_64")]
            KernelForm::Avx2 if form.available() => unsafe { add_avx2(self, range, out) },
            _ => add_portable(self, range, out),
        }
        Ok(())
    }
}

/// Keys per block of [`add_blocked`]: a block of value rows (32 KB at width 64) stays in the core's
/// L1/L2 while each group of rows goes over it.
const KEY_BLOCK: usize = 128;

/// The body for the usual head widths: each group of `R` rows keeps its `R x W` accumulators in
/// registers over a block of keys (an axpy per key and row), rather than adding into `out` in memory
/// for every key, which bound the plain loop by its loads and stores from 4 rows on.
#[inline(always)]
fn add_blocked<const W: usize, const R: usize, const FUSED: bool>(
    s: &WeightedSum<'_>,
    range: Range<usize>,
    out: &mut [f32],
) {
    let rows = s.rows;
    let mut block_start = range.start;
    while block_start < range.end {
        let block = block_start..(block_start + KEY_BLOCK).min(range.end);
        for first in (0..rows).step_by(R) {
            let mut acc = [[0f32; W]; R];
            for key in block.clone() {
                let value: &[f32; W] = s.values[key * W..(key + 1) * W].try_into().expect("W wide");
                for (r, acc) in acc.iter_mut().enumerate() {
                    // Rows past the last of a group add nothing (weight 0) and are not stored.
                    let weight = match first + r < rows {
                        true => s.weights[(first + r) * s.keys + key],
                        false => 0.0,
                    };
                    for (a, v) in acc.iter_mut().zip(value) {
                        *a = multiply_add::<FUSED>(weight, *v, *a);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows - first) {
                for (o, a) in out[(first + r) * W..(first + r + 1) * W]
                    .iter_mut()
                    .zip(acc)
                {
                    *o += a;
                }
            }
        }
        block_start = block.end;
    }
}

/// The one body: the register-blocked loop for widths 64 and 128, the plain one otherwise.
#[inline(always)]
fn add<const FUSED: bool>(s: &WeightedSum<'_>, range: Range<usize>, out: &mut [f32]) {
    match s.width {
        64 => add_blocked::<64, 4, FUSED>(s, range, out),
        128 => add_blocked::<128, 2, FUSED>(s, range, out),
        _ => add_plain::<FUSED>(s, range, out),
    }
}

/// For each key of `range`, its value row added into every row's accumulator in `out`, scaled by that
/// row's weight of the key.
#[inline(always)]
fn add_plain<const FUSED: bool>(s: &WeightedSum<'_>, range: Range<usize>, out: &mut [f32]) {
    let width = s.width;
    for key in range {
        let value = &s.values[key * width..(key + 1) * width];
        for (row, acc) in out.chunks_exact_mut(width).enumerate() {
            let weight = s.weights[row * s.keys + key];
            for (a, v) in acc.iter_mut().zip(value) {
                *a = multiply_add::<FUSED>(weight, *v, *a);
            }
        }
    }
}

// The body compiled for each instruction set (NEON, with its fused multiply-add, is the baseline of
// aarch64: the portable entry).

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn add_avx512(s: &WeightedSum<'_>, range: Range<usize>, out: &mut [f32]) {
    add::<true>(s, range, out)
}

/// Fused where the target has the instruction without asking (aarch64), else unfused: on x86 this entry
/// serves only the tests' forms that the CPU cannot run, and `libtorch`, which the kernel never runs.
fn add_portable(s: &WeightedSum<'_>, range: Range<usize>, out: &mut [f32]) {
    add::<{ cfg!(target_arch = "aarch64") }>(s, range, out)
}

/// AVX2: the body written in lanes ([`add_group_lanes`]), 3 rows by 32 columns at a time. The
/// compiler's body of [`add_blocked`] keeps 4 rows of 64 columns, which take 32 AVX2 registers of its
/// 16 (`experiments/results/kernel-attention-avx2`: 94 us for one row over 4096 keys;
/// `experiments/results/kernel-attention-avx2-ab` before and after, in both profiles).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn add_avx2(s: &WeightedSum<'_>, range: Range<usize>, out: &mut [f32]) {
    use crate::lanes::Avx2;
    match s.width {
        64 => unsafe { add_blocked_lanes::<Avx2, 64, 4>(s, range, out) },
        128 => unsafe { add_blocked_lanes::<Avx2, 128, 4>(s, range, out) },
        _ => add::<true>(s, range, out),
    }
}

/// [`add_blocked`] in an instruction set's own vectors: over each block of keys, the rows 3 at a
/// time and the columns `V` vectors at a time, whose `3 x V` accumulators stay in registers. The same
/// operations in the same order as every other fused body (a fused multiply-add per key in order; a
/// block's sum then added to `out`), so a row's sum is the same to the bit in every form with the
/// instruction and whatever rows share the pass.
///
/// # Safety
/// Called from a function compiled for `L`'s instruction set, on a CPU that has it (as [`Lanes`]);
/// the operands checked by [`WeightedSum::add_to`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_blocked_lanes<L: Lanes, const W: usize, const V: usize>(
    s: &WeightedSum<'_>,
    range: Range<usize>,
    out: &mut [f32],
) {
    // Column groups tile the row: none reaches past it.
    const { assert!(W % (V * L::WIDTH) == 0) };
    let mut block_start = range.start;
    while block_start < range.end {
        let block = block_start..(block_start + KEY_BLOCK).min(range.end);
        for first in (0..s.rows).step_by(3) {
            for column in (0..W).step_by(V * L::WIDTH) {
                // SAFETY: as this function's.
                match s.rows - first {
                    1 => unsafe { add_group_lanes::<L, W, 1, V>(s, &block, first, column, out) },
                    2 => unsafe { add_group_lanes::<L, W, 2, V>(s, &block, first, column, out) },
                    _ => unsafe { add_group_lanes::<L, W, 3, V>(s, &block, first, column, out) },
                }
            }
        }
        block_start = block.end;
    }
}

/// Rows `first..first + R`, columns `column..column + V * L::WIDTH`, over the keys of `block`.
///
/// # Safety
/// As [`add_blocked_lanes`]; the rows and columns lie within the operands.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_group_lanes<L: Lanes, const W: usize, const R: usize, const V: usize>(
    s: &WeightedSum<'_>,
    block: &Range<usize>,
    first: usize,
    column: usize,
    out: &mut [f32],
) {
    // Checked once here rather than at every key: the loop's index checks were more instructions than
    // its loads and products, and held every row count at about 12 us a row over 4096 keys
    // (`experiments/results/weighted-sum-ab`, before and after). With these bounds every read below
    // lies within `weights` and `values`, whatever the caller.
    assert!(
        W == s.width
            && block.end <= s.keys
            && first + R <= s.rows
            && column + V * L::WIDTH <= W
            && s.values.len() >= block.end * W
            && s.weights.len() >= (first + R - 1) * s.keys + block.end
    );
    // Each row's weights from the block's first key: R pointers into `weights` `[rows, keys]`.
    let weight_rows: [*const f32; R] =
        std::array::from_fn(|r| s.weights[(first + r) * s.keys + block.start..].as_ptr());
    let mut value_row = s.values[block.start * W + column..].as_ptr();
    // SAFETY (every vector operation): the caller's instruction set; each load reads L::WIDTH values
    // within key `block.start + k`'s columns `column..column + V * L::WIDTH` of `values`, and each
    // weight read is row `first + r`'s key `block.start + k` of `weights` (both within the slices by the
    // assert above).
    let mut acc = [[unsafe { L::zero() }; V]; R];
    for k in 0..block.len() {
        let weights: [L::Vector; R] =
            std::array::from_fn(|r| unsafe { L::splat(*weight_rows[r].wrapping_add(k)) });
        for v in 0..V {
            let value = unsafe { L::load(value_row.wrapping_add(v * L::WIDTH)) };
            for (acc, weight) in acc.iter_mut().zip(&weights) {
                acc[v] = unsafe { L::fma(*weight, value, acc[v]) };
            }
        }
        value_row = value_row.wrapping_add(W);
    }
    for (r, acc) in acc.iter().enumerate() {
        let row = &mut out[(first + r) * W + column..(first + r) * W + column + V * L::WIDTH];
        for (v, acc) in acc.iter().enumerate() {
            let at = row[v * L::WIDTH..].as_mut_ptr();
            unsafe { L::store(at, L::add(L::load(at), *acc)) };
        }
    }
}
