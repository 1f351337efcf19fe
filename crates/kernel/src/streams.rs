//! The kernel's one body: `S` weight rows streamed at a time, each multiplied into `M` input rows while
//! it is in a register, for any instruction set ([`Lanes`]).
//!
//! `S` x `M` accumulators, which the const parameters let the compiler keep in registers (with the `S`
//! weights and an input they must fit the form's register file: 32 on AVX-512 and NEON, 16 on AVX2);
//! rows past `shape.rows` are padding. More streams keep more of the weights' reads in flight: a 5-row
//! pass over Qwen2.5-Coder-1.5B's linear maps took 268-276 ms with 2 streams, 251-256 with 4, 238-243
//! with 5, on 2 threads (one row through libtorch: 205-225 ms in the same runs). The next `S` weight rows
//! are prefetched. Pointers move with `wrapping_add`: `add` carries a precondition check in debug
//! builds. With `BF16` the weights are bf16, widened to f32 as they are loaded: half the bytes per
//! weight. The `inputs % WIDTH` last elements are multiplied one at a time.

use crate::lanes::Lanes;
use crate::products::{x_row, Operands, Shape};

/// # Safety
/// The operands hold `shape` and `columns` lie within its outputs; the CPU has `L`'s instruction set
/// and the caller is compiled for it (so that `L`'s operations inline).
#[inline(always)]
pub(crate) unsafe fn streams<L: Lanes, const BF16: bool, const M: usize, const S: usize>(
    p: Operands,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    let element = if BF16 { 2 } else { 4 };
    // `WIDTH` weights at `at`, as f32; and one, for the tail.
    let load = |at: *const u8| {
        if BF16 {
            L::load_bf16(at as *const u16)
        } else {
            L::load(at as *const f32)
        }
    };
    let scalar = |at: *const u8| {
        if BF16 {
            f32::from_bits((*(at as *const u16) as u32) << 16)
        } else {
            *(at as *const f32)
        }
    };
    // Once per part: a panic here is caught, and the caller does the product another way.
    assert!(shape.rows <= M, "{} rows in a kernel for {M}", shape.rows);
    let k = shape.inputs;
    let full = k / L::WIDTH * L::WIDTH;
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
        let mut acc = [[L::zero(); M]; S];
        let mut i = 0usize;
        while i < full {
            let offset = i * element;
            for s in 0..S {
                L::prefetch(first.wrapping_add((S + s) * row_bytes + offset));
            }
            let mut w = [L::zero(); S];
            for s in 0..S {
                w[s] = load(weight_rows[s].wrapping_add(offset));
            }
            for r in 0..M {
                let xv = L::load(rows[r].wrapping_add(i));
                for s in 0..S {
                    acc[s][r] = L::fma(w[s], xv, acc[s][r]);
                }
            }
            i = i.wrapping_add(L::WIDTH);
        }
        for r in 0..shape.rows.min(M) {
            for s in 0..present {
                let mut sum = L::sum(acc[s][r]);
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
