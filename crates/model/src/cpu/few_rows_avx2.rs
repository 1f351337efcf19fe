//! The AVX2 + FMA form of the few-row products (`few_rows.rs` holds the AVX-512 form and what both
//! share): the same weight streams, with 8 f32 lanes a register and 16 registers, so one sweep carries
//! at most [`ROWS_PER_SWEEP`] rows and more rows go over each cached block of weights in turns.

use crate::cpu::few_rows::{x_row, Pointers, Shape};

/// The most rows one sweep carries: 6 rows of accumulators for 2 weight streams, with the 2 weights
/// and an input 15 of AVX2's 16 registers.
pub(crate) const ROWS_PER_SWEEP: usize = 6;

/// One sweep over the weights of `columns` for at most [`ROWS_PER_SWEEP`] rows (bf16 weights: at most
/// 4 rows, as on AVX-512 CPUs without pair products).
///
/// # Safety
/// As `few_rows::sweep`: the pointers hold `shape`, the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn sweep(p: Pointers, shape: Shape, columns: std::ops::Range<usize>) {
    // M x S accumulators, S weights and an input within 16 registers.
    if p.bf16 {
        return match shape.rows {
            1 => streams_256::<true, 1, 6>(p, shape, columns),
            _ => streams_256::<true, 4, 3>(p, shape, columns),
        };
    }
    match shape.rows {
        ..=4 => streams_256::<false, 4, 3>(p, shape, columns),
        _ => streams_256::<false, 6, 2>(p, shape, columns),
    }
}

/// The sum of the 8 lanes of `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lane_sum(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
}

/// AVX2 + FMA, `S` weight rows at a time, `M` rows of accumulators (rows past `shape.rows` are
/// padding); the next `S` weight rows prefetched; with `BF16` the weights are bf16, 8 widened to f32
/// per load. The `inputs % 8` last elements one at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn streams_256<const BF16: bool, const M: usize, const S: usize>(
    p: Pointers,
    shape: Shape,
    columns: std::ops::Range<usize>,
) {
    use std::arch::x86_64::*;
    let element = if BF16 { 2 } else { 4 };
    let load = |at: *const u8| {
        if BF16 {
            let half = _mm_loadu_si128(at as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(half)))
        } else {
            _mm256_loadu_ps(at as *const f32)
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
    let full = k / 8 * 8;
    let row_bytes = k * element;
    let mut rows = [p.x; M];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = x_row(p.x, shape, r);
    }
    let mut column = columns.start;
    while column < columns.end {
        let present = (columns.end - column).min(S);
        let first = p.weight.wrapping_add(column * row_bytes);
        let mut weight_rows = [first; S];
        for (s, row) in weight_rows.iter_mut().enumerate() {
            *row = first.wrapping_add(s.min(present - 1) * row_bytes);
        }
        let mut acc = [[_mm256_setzero_ps(); M]; S];
        let mut i = 0usize;
        while i < full {
            let offset = i * element;
            for s in 0..S {
                _mm_prefetch::<_MM_HINT_T0>(
                    first.wrapping_add((S + s) * row_bytes + offset) as *const i8
                );
            }
            let mut w = [_mm256_setzero_ps(); S];
            for s in 0..S {
                w[s] = load(weight_rows[s].wrapping_add(offset));
            }
            for r in 0..M {
                let xv = _mm256_loadu_ps(rows[r].wrapping_add(i));
                for s in 0..S {
                    acc[s][r] = _mm256_fmadd_ps(w[s], xv, acc[s][r]);
                }
            }
            i = i.wrapping_add(8);
        }
        for r in 0..shape.rows.min(M) {
            for s in 0..present {
                let mut sum = lane_sum(acc[s][r]);
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
