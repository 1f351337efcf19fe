//! bf16 products through AVX512-BF16's pair products (`vdpbf16ps`): each instruction multiplies 16
//! pairs of bf16 weights and bf16 rows and adds both products of a pair to an f32 accumulator, 32
//! weights per load and no widening instructions. On CPUs with it, a bf16 pass of 5-8 rows keeps
//! within 1.4x of one row (Qwen2.5-Coder-1.5B), where widening would cost more.

use crate::products::{x_row, Operands, Shape};

/// bf16 weights and rows through `vdpbf16ps`, `S` weight rows at a time as [`crate::streams`]; the
/// `inputs % 32` last elements one at a time in f32.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn bf16_pairs_512<const M: usize, const S: usize>(
    p: Operands,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    use std::arch::x86_64::*;
    let widen = |at: *const u16| f32::from_bits((*at as u32) << 16);
    let load =
        |at: *const u16| -> __m512bh { std::mem::transmute(_mm512_loadu_si512(at as *const _)) };
    // Once per part: a panic here is caught, and the caller does the product another way.
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
