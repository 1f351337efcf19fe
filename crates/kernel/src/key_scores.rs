//! `out [rows, keys] = queries [rows, width] keys [keys, width]^T` over a range of keys: attention's
//! scores for the grouped rows of a pass (a key head's query heads times the pass's rows: 12 rows for
//! a 4-row verification of a model with 3 query heads per key head), each key read once.
//!
//! A dot product per key and row ([`crate::products`], which suits weight rows hundreds of values
//! long) ends every 64-wide score with a sum across the lanes, which bound a 4-row pass over a long
//! context (attention alone over 4096 keys, timed once and not recorded: about 5x its one-row cost;
//! `bench rows --context 4096` gives the whole pass before and after). Here the lanes run across the
//! rows instead: the queries are transposed once (`[width, rows]`, padded to 8 or 16 rows), and each
//! key element, broadcast, is multiplied into every row's score at once; a block of keys keeps its
//! scores in registers until they are stored, row by row. No sum across lanes, so the compiler
//! vectorises the plain loops for the instruction set of each entry point below; except AVX2's, which
//! it left scalar (8 lanes) or slow in one profile (16): AVX2's body is written in [`crate::lanes`]
//! (`benches/attention.rs` shows a body the compiler failed).

use crate::form::KernelForm;
#[cfg(target_arch = "x86_64")]
use crate::lanes::Lanes;
use crate::multiply_add::multiply_add;
use std::ops::Range;

/// The operands of a product of keys with queries, as slices: `queries` `[rows, width]` and `keys`
/// `[keys, width]` (row-major).
#[derive(Debug)]
pub struct KeyScores<'a> {
    pub queries: &'a [f32],
    pub keys: &'a [f32],
    pub rows: usize,
    pub key_count: usize,
    pub width: usize,
}

/// Operands that do not make the shape they claim.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("scores of {rows} rows over {keys} keys of width {width}: {reason}")]
pub struct KeyScoresError {
    rows: usize,
    keys: usize,
    width: usize,
    reason: String,
}

/// The most rows one product takes (the lanes of two AVX-512 vectors would be needed beyond).
pub const MAX_ROWS: usize = 16;

impl KeyScores<'_> {
    /// Writes the scores of the keys in `range` into their columns of `out` `[rows, key_count]`, in
    /// `form` (any form: where it has no entry point of its own, or this CPU cannot run it, the
    /// portable loop).
    pub fn write_to(
        &self,
        form: KernelForm,
        range: Range<usize>,
        out: &mut [f32],
    ) -> Result<(), KeyScoresError> {
        self.check(&range)?;
        if out.len() != self.rows * self.key_count {
            return self.refuse(format!(
                "{} outputs for {} rows of {} keys",
                out.len(),
                self.rows,
                self.key_count
            ));
        }
        // SAFETY: `out` holds the whole `[rows, key_count]` matrix and nothing else writes it.
        unsafe { self.write_columns(form, range, out.as_mut_ptr()) }
    }

    /// [`Self::write_to`] for one of several parts of the keys, each writing its own columns of the
    /// same output.
    ///
    /// # Safety
    /// `out` points at `rows * key_count` writable f32 (`[rows, key_count]`, row-major), and no
    /// other thread reads or writes the columns of `range` meanwhile.
    pub unsafe fn write_columns(
        &self,
        form: KernelForm,
        range: Range<usize>,
        out: *mut f32,
    ) -> Result<(), KeyScoresError> {
        self.check(&range)?;
        let out = Columns {
            at: out,
            key_count: self.key_count,
        };
        match form {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the form is available, so the CPU has the instruction set.
            KernelForm::Avx512 if form.available() => unsafe { write_avx512(self, range, out) },
            #[cfg(target_arch = "x86_64")]
            KernelForm::Avx2 if form.available() => unsafe { write_avx2(self, range, out) },
            _ => write_portable(self, range, out),
        }
        Ok(())
    }

    /// Whether the operands make the shape they claim and `range` lies within the keys.
    fn check(&self, range: &Range<usize>) -> Result<(), KeyScoresError> {
        if !(1..=MAX_ROWS).contains(&self.rows) {
            return self.refuse(format!("1 to {MAX_ROWS} rows are taken"));
        }
        if self.queries.len() != self.rows * self.width
            || self.keys.len() != self.key_count * self.width
        {
            return self.refuse(format!(
                "{} query and {} key values given",
                self.queries.len(),
                self.keys.len()
            ));
        }
        if range.start > range.end || range.end > self.key_count {
            return self.refuse(format!(
                "keys {range:?} are not within 0..{}",
                self.key_count
            ));
        }
        Ok(())
    }

    fn refuse(&self, reason: String) -> Result<(), KeyScoresError> {
        Err(KeyScoresError {
            rows: self.rows,
            keys: self.key_count,
            width: self.width,
            reason,
        })
    }
}

/// The output `[rows, key_count]`, of which a part writes the columns of its keys.
#[derive(Clone, Copy)]
struct Columns {
    at: *mut f32,
    key_count: usize,
}

impl Columns {
    /// Stores the score of `row` and `key`.
    ///
    /// # Safety
    /// As [`KeyScores::write_columns`]: `key` is in the caller's range, `row` below the rows.
    #[inline(always)]
    unsafe fn store(self, row: usize, key: usize, score: f32) {
        unsafe { *self.at.add(row * self.key_count + key) = score }
    }
}

/// The body for the usual head widths `W`: rows padded to `P` lanes, blocks of `B` keys whose `B x P`
/// scores stay in registers while every element of the block's keys is broadcast into them. Each score
/// is one chain of multiply-adds over the width in order, whatever the rows beside it: a row's
/// scores do not depend on how many rows share the pass (a decode step and a verification agree to the
/// bit, so greedy speculative output stays the target's own).
#[inline(always)]
fn write_blocked<const W: usize, const P: usize, const B: usize, const FUSED: bool>(
    s: &KeyScores<'_>,
    range: Range<usize>,
    out: Columns,
) {
    let rows = s.rows;
    // [W, P]: column r holds row r's query, zero past the last row.
    let mut transposed = [[0f32; P]; W];
    for r in 0..rows {
        for (d, column) in transposed.iter_mut().enumerate() {
            column[r] = s.queries[r * W + d];
        }
    }
    let mut key = range.start;
    while key + B <= range.end {
        let block: &[f32] = &s.keys[key * W..(key + B) * W];
        let mut acc = [[0f32; P]; B];
        for (d, query) in transposed.iter().enumerate() {
            for (j, acc) in acc.iter_mut().enumerate() {
                let element = block[j * W + d];
                for (a, q) in acc.iter_mut().zip(query) {
                    *a = multiply_add::<FUSED>(element, *q, *a);
                }
            }
        }
        for r in 0..rows {
            for (j, acc) in acc.iter().enumerate() {
                // SAFETY: the key is in the caller's range (write_columns).
                unsafe { out.store(r, key + j, acc[r]) };
            }
        }
        key += B;
    }
    write_plain::<FUSED>(s, key..range.end, out);
}

/// Each score of `keys` on its own: the keys past the last block, and widths the blocked body does
/// not take. The same operations in the same order as a lane of the blocked body, so that a score is
/// the same to the bit whichever body, block or part computed it.
#[inline(always)]
fn write_plain<const FUSED: bool>(s: &KeyScores<'_>, keys: Range<usize>, out: Columns) {
    let width = s.width;
    for key in keys {
        let k = &s.keys[key * width..(key + 1) * width];
        for r in 0..s.rows {
            let q = &s.queries[r * width..(r + 1) * width];
            let score = k
                .iter()
                .zip(q)
                .fold(0f32, |acc, (k, q)| multiply_add::<FUSED>(*k, *q, acc));
            // SAFETY: the key is in the caller's range (write_columns).
            unsafe { out.store(r, key, score) };
        }
    }
}

/// The one body: blocked for widths 64 and 128, in 8 or 16 lanes of rows; plain otherwise.
#[inline(always)]
fn write<const B: usize, const FUSED: bool>(s: &KeyScores<'_>, range: Range<usize>, out: Columns) {
    match (s.width, s.rows <= 8) {
        (64, true) => write_blocked::<64, 8, B, FUSED>(s, range, out),
        (64, false) => write_blocked::<64, 16, B, FUSED>(s, range, out),
        (128, true) => write_blocked::<128, 8, B, FUSED>(s, range, out),
        (128, false) => write_blocked::<128, 16, B, FUSED>(s, range, out),
        _ => write_plain::<FUSED>(s, range, out),
    }
}

// The body compiled for each instruction set. AVX-512 holds a block of 8 keys x 16 rows in 8 of its
// 32 registers. NEON (the baseline of aarch64, with fused multiply-add) takes the portable entry with
// 4 keys. AVX2 has a body of its own, written in its instructions (below).

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn write_avx512(s: &KeyScores<'_>, range: Range<usize>, out: Columns) {
    write::<8, true>(s, range, out)
}

/// AVX2: the body written in lanes ([`write_blocked_lanes`]): up to 8 rows in one register a key,
/// blocks of 8 keys; 9 to 16 rows in two registers a key, blocks of 4 keys. Left to the compiler, the
/// plain loops of [`write_blocked`] came out scalar for 8 lanes, so that a one-row decode step over
/// 4096 keys took longer than a 4-row verification (`experiments/results/key-scores-avx2-ab`), and its
/// 16-lane body ran well in the dev profile and at 3 to 5 times the cost a row in the release profile
/// (`experiments/results/kernel-attention-avx2`; `experiments/results/kernel-attention-avx2-ab` sets
/// this body beside it in both profiles).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn write_avx2(s: &KeyScores<'_>, range: Range<usize>, out: Columns) {
    use crate::lanes::Avx2;
    match (s.width, s.rows <= 8) {
        (64, true) => unsafe { write_blocked_lanes::<Avx2, 64, 8, 1>(s, range, out) },
        (64, false) => unsafe { write_blocked_lanes::<Avx2, 64, 4, 2>(s, range, out) },
        (128, true) => unsafe { write_blocked_lanes::<Avx2, 128, 8, 1>(s, range, out) },
        (128, false) => unsafe { write_blocked_lanes::<Avx2, 128, 4, 2>(s, range, out) },
        _ => write::<4, true>(s, range, out),
    }
}

/// [`write_blocked`] in an instruction set's own vectors: the rows (at most `N * L::WIDTH`, at most
/// 16) in `N` vectors a key, blocks of `B` keys whose `B x N` accumulators stay in registers. The same
/// fused multiply-add chain over the width as [`write_plain`], so the scores agree to the bit with
/// every other body.
///
/// # Safety
/// Called from a function compiled for `L`'s instruction set, on a CPU that has it (as [`Lanes`]);
/// as [`KeyScores::write_columns`] for `out` and `range`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn write_blocked_lanes<L: Lanes, const W: usize, const B: usize, const N: usize>(
    s: &KeyScores<'_>,
    range: Range<usize>,
    out: Columns,
) {
    // Every load and store below touches the first N * L::WIDTH of a row's 16 values.
    const { assert!(N * L::WIDTH <= 16) };
    let rows = s.rows;
    debug_assert!(rows <= N * L::WIDTH);
    // [W, 16]: column r holds row r's query, zero past the last row (the first N * L::WIDTH are read).
    let mut transposed = Lines([[0f32; 16]; W]);
    for r in 0..rows {
        for (d, column) in transposed.0.iter_mut().enumerate() {
            column[r] = s.queries[r * W + d];
        }
    }
    let mut key = range.start;
    while key + B <= range.end {
        let block = &s.keys[key * W..(key + B) * W];
        // SAFETY (every vector operation): the caller's instruction set; each load and store touches
        // L::WIDTH values within the first N * L::WIDTH of 16.
        let mut acc = [[unsafe { L::zero() }; N]; B];
        for (d, query) in transposed.0.iter().enumerate() {
            let mut lanes = [unsafe { L::zero() }; N];
            for (n, lanes) in lanes.iter_mut().enumerate() {
                *lanes = unsafe { L::load(query[n * L::WIDTH..].as_ptr()) };
            }
            for (j, acc) in acc.iter_mut().enumerate() {
                let element = unsafe { L::splat(block[j * W + d]) };
                for (acc, query) in acc.iter_mut().zip(&lanes) {
                    *acc = unsafe { L::fma(element, *query, *acc) };
                }
            }
        }
        // [B, 16]: key j's scores in row order; then each row's B scores, to consecutive columns.
        let mut scores = Lines([[0f32; 16]; B]);
        for (scores, acc) in scores.0.iter_mut().zip(&acc) {
            for (n, acc) in acc.iter().enumerate() {
                unsafe { L::store(scores[n * L::WIDTH..].as_mut_ptr(), *acc) };
            }
        }
        for r in 0..rows {
            for (j, scores) in scores.0.iter().enumerate() {
                // SAFETY: the key is in the caller's range (write_columns).
                unsafe { out.store(r, key + j, scores[r]) };
            }
        }
        key += B;
    }
    write_plain::<true>(s, key..range.end, out);
}

/// Rows of 16 f32 on cache lines of their own: a vector load of a row never spans two lines, wherever
/// the stack puts the array (at an f32's alignment, runs of the same binary differed by more than the
/// machine's drift while this body was written; those runs were not recorded).
#[cfg(target_arch = "x86_64")]
#[repr(align(64))]
struct Lines<const N: usize>([[f32; 16]; N]);

fn write_portable(s: &KeyScores<'_>, range: Range<usize>, out: Columns) {
    write::<4, { cfg!(target_arch = "aarch64") }>(s, range, out)
}
