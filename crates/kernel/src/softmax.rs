//! The softmax of attention's score rows, in place: `rows [count, length]`, each row replaced by
//! `exp(x - max) / sum`. Between the scores ([`crate::key_scores`]) and the weighted sum
//! ([`crate::weighted_sum`]) of a few-row pass over a long context, libtorch's softmax took about a
//! seventh of the attention of a 4-row verification over 4096 keys (`bench rows --split`, the attention
//! step's parts timed apart in a run not recorded; `bench rows --split` now times the softmax as a step
//! of its own). The exponential here is the usual single-precision one (a degree-5 polynomial after
//! reducing by ln 2, as Cephes' `expf`); a row's weights come within 10 ulp of the exact softmax of its
//! f32 differences to the maximum (tests/softmax.rs).
//!
//! A row's result depends only on that row and is the same to the bit whatever rows share the call;
//! keys hidden at the end of a row (exp 0, in lanes by position) leave the others' weights as they are.
//! Scores at minus infinity (hidden keys) get weight exactly 0. Only AVX2 + FMA has a body
//! (AVX-512 CPUs run it too); elsewhere [`softmax_rows`] declines and the caller keeps libtorch's.

use crate::form::KernelForm;

/// Rows that do not make the shape they claim.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("softmax of rows of {length} over {values} values: {reason}")]
pub struct SoftmaxError {
    length: usize,
    values: usize,
    reason: &'static str,
}

/// Whether `form` has a body here (AVX2's, which AVX-512 CPUs also run) and this CPU runs it.
pub fn has_body(form: KernelForm) -> bool {
    matches!(form, KernelForm::Avx512 | KernelForm::Avx2) && KernelForm::Avx2.available()
}

/// Replaces each row of `length` values in `rows` by its softmax. `Ok(false)`, nothing changed,
/// where `form` has no body here ([`has_body`]).
pub fn softmax_rows(
    form: KernelForm,
    rows: &mut [f32],
    length: usize,
) -> Result<bool, SoftmaxError> {
    if length == 0 || !rows.len().is_multiple_of(length) {
        return Err(SoftmaxError {
            length,
            values: rows.len(),
            reason: "rows must be whole and not empty",
        });
    }
    if !has_body(form) {
        return Ok(false);
    }
    #[cfg(target_arch = "x86_64")]
    for row in rows.chunks_exact_mut(length) {
        // SAFETY: has_body checked that this CPU has AVX2 and FMA.
        unsafe { avx2::softmax_row(row) };
    }
    Ok(true)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Inputs below this give 0: exp(-87.34) is about f32's smallest normal, and past it the scale 2^n
    /// built from the exponent field below would be 0 (n = -127) or minus infinity (n = -128).
    const LOWEST: f32 = -87.336_55;
    const HIGHEST: f32 = 88.376_26;
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    /// ln 2 in two parts, the first exact in a few bits, so that `x - n ln 2` loses nothing.
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    /// exp(r) - 1 - r over r in [-ln2 / 2, ln2 / 2], as r^2 times this polynomial (Cephes' expf).
    const POLYNOMIAL: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];

    /// exp of 8 lanes; lanes below [`LOWEST`] (minus infinity among them) give 0, and NaN stays NaN.
    #[inline(always)]
    unsafe fn exp(x: __m256) -> __m256 {
        // Not less than: true for NaN too.
        let kept = _mm256_cmp_ps::<_CMP_NLT_UQ>(x, _mm256_set1_ps(LOWEST));
        // max and min return their second operand where either is NaN: x's NaN goes through.
        let x = _mm256_min_ps(
            _mm256_set1_ps(HIGHEST),
            _mm256_max_ps(_mm256_set1_ps(LOWEST), x),
        );
        // x = n ln2 + r, |r| <= ln2 / 2.
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HIGH), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LOW), r);
        let mut p = _mm256_set1_ps(POLYNOMIAL[0]);
        for c in &POLYNOMIAL[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        // 1 + r + r^2 p.
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        // 2^n, n in [-126, 127]: the biased exponent in the float's exponent field.
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        )));
        _mm256_and_ps(_mm256_mul_ps(y, scale), kept)
    }

    /// The lanes' maximum (exact in any order).
    #[inline(always)]
    unsafe fn max_of_lanes(v: __m256) -> f32 {
        let quad = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_max_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
    }

    /// The lanes' sum, in a fixed order.
    #[inline(always)]
    unsafe fn sum_of_lanes(v: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
    }

    /// One row's softmax in place: its maximum; `exp(x - max)` written back and summed in lanes (value
    /// i into lane i mod 8, the tail past the last whole 8 padded with minus infinity, so exp 0), then
    /// across them; each value times `1 / sum`. Every access goes through one pointer taken from the
    /// row, which is not touched otherwise meanwhile.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_row(row: &mut [f32]) {
        let (length, at) = (row.len(), row.as_mut_ptr());
        let whole = length / 8 * 8;
        let tail_len = length - whole;
        // SAFETY (every access below): i + 8 <= whole <= length, and the tail's tail_len < 8 values
        // start at whole.
        let mut lanes = _mm256_set1_ps(f32::NEG_INFINITY);
        for i in (0..whole).step_by(8) {
            lanes = _mm256_max_ps(lanes, unsafe { _mm256_loadu_ps(at.add(i)) });
        }
        let mut tail = [f32::NEG_INFINITY; 8];
        unsafe { std::ptr::copy_nonoverlapping(at.add(whole), tail.as_mut_ptr(), tail_len) };
        let tail_lanes = unsafe { _mm256_loadu_ps(tail.as_ptr()) };
        let max = unsafe { max_of_lanes(_mm256_max_ps(lanes, tail_lanes)) };
        // A row that sees no key keeps minus infinity everywhere and gives NaN, as libtorch's does.
        let shift = _mm256_set1_ps(max);
        let mut sums = _mm256_setzero_ps();
        for i in (0..whole).step_by(8) {
            let e = unsafe { exp(_mm256_sub_ps(_mm256_loadu_ps(at.add(i)), shift)) };
            unsafe { _mm256_storeu_ps(at.add(i), e) };
            sums = _mm256_add_ps(sums, e);
        }
        let tail_exps = unsafe { exp(_mm256_sub_ps(tail_lanes, shift)) };
        sums = _mm256_add_ps(sums, tail_exps);
        unsafe { _mm256_storeu_ps(tail.as_mut_ptr(), tail_exps) };
        let scale = _mm256_set1_ps(1.0 / unsafe { sum_of_lanes(sums) });
        for i in (0..whole).step_by(8) {
            unsafe {
                _mm256_storeu_ps(at.add(i), _mm256_mul_ps(_mm256_loadu_ps(at.add(i)), scale))
            };
        }
        unsafe {
            _mm256_storeu_ps(
                tail.as_mut_ptr(),
                _mm256_mul_ps(_mm256_loadu_ps(tail.as_ptr()), scale),
            );
            std::ptr::copy_nonoverlapping(tail.as_ptr(), at.add(whole), tail_len);
        }
    }
}
