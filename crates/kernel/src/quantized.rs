//! `out [rows, outputs] = x [rows, inputs] W^T` for a few rows where `W` keeps GGUF's quantized blocks
//! (llama.cpp's layouts, as the file stores them): each weight block is read from memory once, decoded
//! into registers, and dotted with every row while it is there, so a verification of k + 1 rows reads
//! the weights' bytes once, as a decode step does.
//!
//! The rows are quantized first, as llama.cpp quantizes its activations: to 8 bits per value with one
//! f32 scale per block of 32 values (against `Q8_0`, `Q4_0`, `Q4_1` weights) or of 256 (against the
//! K-quants `Q4_K` and `Q6_K`, with the sums of each 16 values the weights' offsets need), so a block's
//! dot product is integer arithmetic and one multiply by the scales. A row's result depends on that row
//! alone, whatever the other rows of the pass: a decode step and a verification compute each row
//! exactly alike, and greedy speculative output stays the target's own.
//!
//! The AVX2 form (AVX-512 machines take it too) is chosen at run time ([`KernelForm`]); elsewhere the
//! portable loops run. Each is checked against the weights dequantized and multiplied in f64
//! (`tests/quantized.rs`); the two forms sum a row's blocks in other orders, so they agree to f32
//! rounding, and each computes a row alike whatever the rows beside it.

use crate::form::KernelForm;
use crate::workers;
use half::f16;

/// A GGUF block type this kernel multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockFormat {
    /// 32 values: an f16 scale and 32 signed bytes.
    Q8_0,
    /// 32 values: an f16 scale and 32 nibbles, `(q - 8) d`.
    Q4_0,
    /// 32 values: f16 scale and minimum, 32 nibbles, `q d + m`.
    Q4_1,
    /// 256 values in 8 sub-blocks of 32: f16 super-scale and super-minimum, 6-bit scales and minimums
    /// per sub-block, nibbles: `d sc q - dmin m`.
    Q4K,
    /// 256 values in 16 sub-blocks of 16: 6-bit values (4 low bits and 2 high bits apart), a signed
    /// 8-bit scale per sub-block and an f16 super-scale: `d sc (q - 32)`.
    Q6K,
}

impl BlockFormat {
    /// Values a block holds.
    pub const fn values(self) -> usize {
        match self {
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 => 32,
            Self::Q4K | Self::Q6K => 256,
        }
    }

    /// Bytes a block takes in the file.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q4K => 144,
            Self::Q6K => 210,
        }
    }

    /// GGUF's name of the type (`Q4_K`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Q8_0 => "Q8_0",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q4K => "Q4_K",
            Self::Q6K => "Q6_K",
        }
    }

    /// The type GGUF's type id names (ggml's `GGML_TYPE_*`), where this kernel multiplies it.
    pub const fn from_ggml_type(id: u32) -> Option<Self> {
        match id {
            2 => Some(Self::Q4_0),
            3 => Some(Self::Q4_1),
            8 => Some(Self::Q8_0),
            12 => Some(Self::Q4K),
            14 => Some(Self::Q6K),
            _ => None,
        }
    }

    /// Whether the rows take 256-value blocks (the K-quants) rather than 32-value ones.
    const fn super_blocks(self) -> bool {
        matches!(self, Self::Q4K | Self::Q6K)
    }
}

/// What a quantized product cannot take: a shape or a byte count that does not fit the blocks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantizedError {
    #[error(
        "{format} weights of {inputs} inputs: a row must hold whole blocks of {values} values"
    )]
    PartialBlock {
        format: &'static str,
        inputs: usize,
        values: usize,
    },
    #[error("{format} weights [{outputs}, {inputs}] take {expected} bytes, not {given}")]
    Bytes {
        format: &'static str,
        outputs: usize,
        inputs: usize,
        expected: usize,
        given: usize,
    },
    #[error("rows: {given} values for {rows} rows of {inputs}; out: {out} values for {rows} x {outputs}")]
    Rows {
        rows: usize,
        inputs: usize,
        outputs: usize,
        given: usize,
        out: usize,
    },
}

/// A weight matrix `[outputs, inputs]` as GGUF stores it: each output row `inputs / values` blocks.
#[derive(Debug, Clone, Copy)]
pub struct QuantizedWeight<'a> {
    pub format: BlockFormat,
    pub data: &'a [u8],
    pub outputs: usize,
    pub inputs: usize,
}

impl<'a> QuantizedWeight<'a> {
    /// Checks that `data` holds exactly `outputs` rows of whole blocks.
    pub fn new(
        format: BlockFormat,
        data: &'a [u8],
        outputs: usize,
        inputs: usize,
    ) -> Result<Self, QuantizedError> {
        if !inputs.is_multiple_of(format.values()) {
            return Err(QuantizedError::PartialBlock {
                format: format.name(),
                inputs,
                values: format.values(),
            });
        }
        let expected = outputs * (inputs / format.values()) * format.bytes();
        if data.len() != expected {
            return Err(QuantizedError::Bytes {
                format: format.name(),
                outputs,
                inputs,
                expected,
                given: data.len(),
            });
        }
        Ok(Self {
            format,
            data,
            outputs,
            inputs,
        })
    }

    /// Bytes of one output row.
    pub fn row_bytes(&self) -> usize {
        self.inputs / self.format.values() * self.format.bytes()
    }

    /// Output row `o`, dequantized into `out` (`inputs` values).
    pub fn dequantize_row(&self, o: usize, out: &mut [f32]) {
        let row = &self.data[o * self.row_bytes()..(o + 1) * self.row_bytes()];
        for (block, values) in row
            .chunks_exact(self.format.bytes())
            .zip(out.chunks_exact_mut(self.format.values()))
        {
            dequantize_block(self.format, block, values);
        }
    }
}

fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Q4_K's 6-bit scale and minimum of sub-block `j` (0..8) from its 12 packed bytes.
fn q4k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Q6_K's 6-bit value `i` (0..256) of a block, unsigned (0..64; the value is `q - 32`).
fn q6k_value(block: &[u8], i: usize) -> u8 {
    let (ql, qh) = (&block[..128], &block[128..192]);
    let (half, within) = (i / 128, i % 128);
    let (quarter, l) = (within / 32, within % 32);
    let ql = ql[64 * half + l + 32 * (quarter & 1)];
    let low = if quarter < 2 { ql & 0xF } else { ql >> 4 };
    let high = (qh[32 * half + l] >> (2 * quarter)) & 3;
    low | (high << 4)
}

/// One block of `format` dequantized into `out` (`format.values()` values).
pub fn dequantize_block(format: BlockFormat, block: &[u8], out: &mut [f32]) {
    match format {
        BlockFormat::Q8_0 => {
            let d = f16_at(block, 0);
            for (o, &q) in out.iter_mut().zip(&block[2..34]) {
                *o = d * f32::from(q as i8);
            }
        }
        BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
            let d = f16_at(block, 0);
            let (m, qs) = match format {
                BlockFormat::Q4_1 => (f16_at(block, 2), &block[4..20]),
                _ => (-8.0 * d, &block[2..18]),
            };
            for (i, &q) in qs.iter().enumerate() {
                out[i] = f32::from(q & 0xF) * d + m;
                out[i + 16] = f32::from(q >> 4) * d + m;
            }
        }
        BlockFormat::Q4K => {
            let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
            let (scales, qs) = (&block[4..16], &block[16..144]);
            for chunk in 0..4 {
                let (sc_lo, m_lo) = q4k_scale_min(scales, 2 * chunk);
                let (sc_hi, m_hi) = q4k_scale_min(scales, 2 * chunk + 1);
                for l in 0..32 {
                    let q = qs[32 * chunk + l];
                    out[64 * chunk + l] =
                        d * f32::from(sc_lo) * f32::from(q & 0xF) - dmin * f32::from(m_lo);
                    out[64 * chunk + 32 + l] =
                        d * f32::from(sc_hi) * f32::from(q >> 4) - dmin * f32::from(m_hi);
                }
            }
        }
        BlockFormat::Q6K => {
            let d = f16_at(block, 208);
            let scales = &block[192..208];
            for (i, o) in out.iter_mut().enumerate().take(256) {
                let sc = scales[i / 16] as i8;
                *o = d * f32::from(sc) * (f32::from(q6k_value(block, i)) - 32.0);
            }
        }
    }
}

/// A row quantized for the dot products: per block of 32 or 256 values an f32 scale, the values as
/// signed bytes, and the sums of each 16 (the offsets of `Q4_1`, `Q4_K` and `Q6_K` need them).
struct QuantizedRow {
    scales: Vec<f32>,
    values: Vec<i8>,
    /// Per 16 values, their sum (as i32: 16 x 127 fits an i16, the 32-value sums of `Q4_1` too).
    sums16: Vec<i32>,
}

impl QuantizedRow {
    /// `x` in blocks of `block` values: each block's largest magnitude maps to 127.
    fn of(x: &[f32], block: usize) -> Self {
        let blocks = x.len() / block;
        let mut row = Self {
            scales: Vec::with_capacity(blocks),
            values: Vec::with_capacity(x.len()),
            sums16: Vec::with_capacity(x.len() / 16),
        };
        for values in x.chunks_exact(block) {
            let largest = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = largest / 127.0;
            let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            row.scales.push(scale);
            for sixteen in values.chunks_exact(16) {
                let mut sum = 0i32;
                for &v in sixteen {
                    let q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
                    row.values.push(q);
                    sum += i32::from(q);
                }
                row.sums16.push(sum);
            }
        }
        row
    }
}

/// One weight block dotted with the matching block `b` of a quantized row, portable form.
fn dot_block(format: BlockFormat, w: &[u8], x: &QuantizedRow, b: usize) -> f32 {
    let n = format.values();
    let xs = &x.values[b * n..(b + 1) * n];
    let sums = &x.sums16[b * n / 16..(b + 1) * n / 16];
    let dx = x.scales[b];
    match format {
        BlockFormat::Q8_0 => {
            let s: i32 = w[2..34]
                .iter()
                .zip(xs)
                .map(|(&q, &y)| i32::from(q as i8) * i32::from(y))
                .sum();
            f16_at(w, 0) * dx * s as f32
        }
        BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
            let qs = match format {
                BlockFormat::Q4_1 => &w[4..20],
                _ => &w[2..18],
            };
            let mut s = 0i32;
            for (i, &q) in qs.iter().enumerate() {
                s += i32::from(q & 0xF) * i32::from(xs[i])
                    + i32::from(q >> 4) * i32::from(xs[i + 16]);
            }
            let d = f16_at(w, 0);
            let sum_x = (sums[0] + sums[1]) as f32;
            match format {
                BlockFormat::Q4_1 => d * dx * s as f32 + f16_at(w, 2) * dx * sum_x,
                _ => d * dx * (s as f32 - 8.0 * sum_x),
            }
        }
        BlockFormat::Q4K => {
            let (d, dmin) = (f16_at(w, 0), f16_at(w, 2));
            let (scales, qs) = (&w[4..16], &w[16..144]);
            let (mut s, mut mins) = (0i32, 0i32);
            for chunk in 0..4 {
                let (sc_lo, m_lo) = q4k_scale_min(scales, 2 * chunk);
                let (sc_hi, m_hi) = q4k_scale_min(scales, 2 * chunk + 1);
                let (mut lo, mut hi) = (0i32, 0i32);
                for l in 0..32 {
                    let q = qs[32 * chunk + l];
                    lo += i32::from(q & 0xF) * i32::from(xs[64 * chunk + l]);
                    hi += i32::from(q >> 4) * i32::from(xs[64 * chunk + 32 + l]);
                }
                s += i32::from(sc_lo) * lo + i32::from(sc_hi) * hi;
                let group = 4 * chunk;
                mins += i32::from(m_lo) * (sums[group] + sums[group + 1])
                    + i32::from(m_hi) * (sums[group + 2] + sums[group + 3]);
            }
            dx * (d * s as f32 - dmin * mins as f32)
        }
        BlockFormat::Q6K => {
            let scales = &w[192..208];
            let mut s = 0i32;
            for g in 0..16 {
                let mut group = 0i32;
                for i in 16 * g..16 * g + 16 {
                    group += i32::from(q6k_value(w, i)) * i32::from(xs[i]);
                }
                s += i32::from(scales[g] as i8) * (group - 32 * sums[g]);
            }
            f16_at(w, 208) * dx * s as f32
        }
    }
}

/// The most rows one sweep over a weight row carries in AVX2 (an accumulator register a row).
const SWEEP_ROWS: usize = 16;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The dot products of a weight row with up to [`SWEEP_ROWS`] rows in AVX2's integer lanes: each
    //! block is unpacked into registers once and multiplied into each row's bytes (`maddubs`:
    //! unsigned weight bytes by signed row bytes, pairs summed to i16; `madd` by the sub-blocks'
    //! scales to i32), the block's integer sums scaled into one f32 accumulator a row, summed across
    //! the lanes once at the row's end.
    use super::{q4k_scale_min, BlockFormat, QuantizedRow, SWEEP_ROWS};
    use std::arch::x86_64::*;

    /// Whether this CPU has what these loops use beside AVX2 and FMA (F16C's f16 conversions).
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }

    /// The two f16 values at `at` as f32.
    #[inline(always)]
    unsafe fn f16_pair(bytes: &[u8], at: usize) -> (f32, f32) {
        let raw = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(raw as i32));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_shuffle_ps::<1>(v, v)))
    }

    #[inline(always)]
    unsafe fn f16_one(bytes: &[u8], at: usize) -> f32 {
        let raw = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(raw))))
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// `sum(a_u8 * b_i8)` per 32 bytes, weighted per 16-byte half by `scales` (i16 lanes), to i32 lanes.
    #[inline(always)]
    unsafe fn weighted(a: __m256i, b: __m256i, scales: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), scales)
    }

    /// Each of `rows`' dot with weight row `w` of Q4_K blocks, into `out`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4k(w: &[u8], rows: &[QuantizedRow], out: &mut [f32]) {
        let n = rows.len();
        let mut acc = [_mm256_setzero_ps(); SWEEP_ROWS];
        let mut offsets = [0f32; SWEEP_ROWS];
        let low = _mm256_set1_epi8(0xF);
        for (b, block) in w.chunks_exact(144).enumerate() {
            let (d, dmin) = f16_pair(block, 0);
            let (scales, qs) = (&block[4..16], &block[16..144]);
            let mut nibbles = [_mm256_setzero_si256(); 8];
            let mut sc = [_mm256_setzero_si256(); 8];
            let mut mins = [0i32; 8];
            for chunk in 0..4 {
                let q = _mm256_loadu_si256(qs.as_ptr().add(32 * chunk) as *const __m256i);
                nibbles[2 * chunk] = _mm256_and_si256(q, low);
                nibbles[2 * chunk + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low);
                for half in 0..2 {
                    let (s, m) = q4k_scale_min(scales, 2 * chunk + half);
                    sc[2 * chunk + half] = _mm256_set1_epi16(i16::from(s));
                    mins[2 * chunk + half] = i32::from(m);
                }
            }
            for (r, row) in rows.iter().enumerate() {
                let xs = row.values.as_ptr().add(256 * b);
                let sums = &row.sums16[16 * b..16 * b + 16];
                let mut dots = _mm256_setzero_si256();
                for j in 0..8 {
                    let y = _mm256_loadu_si256(xs.add(32 * j) as *const __m256i);
                    dots = _mm256_add_epi32(dots, weighted(nibbles[j], y, sc[j]));
                }
                let mut m = 0i32;
                for j in 0..8 {
                    m += mins[j] * (sums[2 * j] + sums[2 * j + 1]);
                }
                let dx = row.scales[b];
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dots), acc[r]);
                offsets[r] += dmin * dx * m as f32;
            }
        }
        for r in 0..n {
            out[r] = hsum(acc[r]) - offsets[r];
        }
    }

    /// Each of `rows`' dot with weight row `w` of Q6_K blocks, into `out`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q6k(w: &[u8], rows: &[QuantizedRow], out: &mut [f32]) {
        let n = rows.len();
        let mut acc = [_mm256_setzero_ps(); SWEEP_ROWS];
        let low = _mm256_set1_epi8(0xF);
        let two = _mm256_set1_epi8(3);
        for (b, block) in w.chunks_exact(210).enumerate() {
            let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
            let d = f16_one(block, 208);
            // Values 32 j .. 32 j + 32 (unsigned, 0..64) and the scales of their two groups of 16.
            let mut q = [_mm256_setzero_si256(); 8];
            let mut sc = [_mm256_setzero_si256(); 8];
            for half in 0..2 {
                let l0 = _mm256_loadu_si256(ql.as_ptr().add(64 * half) as *const __m256i);
                let l1 = _mm256_loadu_si256(ql.as_ptr().add(64 * half + 32) as *const __m256i);
                let h = _mm256_loadu_si256(qh.as_ptr().add(32 * half) as *const __m256i);
                let bits = [
                    h,
                    _mm256_srli_epi16::<2>(h),
                    _mm256_srli_epi16::<4>(h),
                    _mm256_srli_epi16::<6>(h),
                ];
                let high = |k: usize| _mm256_slli_epi16::<4>(_mm256_and_si256(bits[k], two));
                q[4 * half] = _mm256_or_si256(_mm256_and_si256(l0, low), high(0));
                q[4 * half + 1] = _mm256_or_si256(_mm256_and_si256(l1, low), high(1));
                q[4 * half + 2] =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l0), low), high(2));
                q[4 * half + 3] =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), low), high(3));
                for quarter in 0..4 {
                    let g = 8 * half + 2 * quarter;
                    let (lo, hi) = (
                        _mm_set1_epi16((scales[g] as i8).into()),
                        _mm_set1_epi16((scales[g + 1] as i8).into()),
                    );
                    sc[4 * half + quarter] = _mm256_set_m128i(hi, lo);
                }
            }
            for (r, row) in rows.iter().enumerate() {
                let xs = row.values.as_ptr().add(256 * b);
                let sums = &row.sums16[16 * b..16 * b + 16];
                let mut dots = _mm256_setzero_si256();
                for j in 0..8 {
                    let y = _mm256_loadu_si256(xs.add(32 * j) as *const __m256i);
                    dots = _mm256_add_epi32(dots, weighted(q[j], y, sc[j]));
                }
                let mut offset = 0i32;
                for g in 0..16 {
                    offset += i32::from(scales[g] as i8) * sums[g];
                }
                // The values are q - 32: each group's sum of the row's bytes, 32 times, comes off.
                let dots =
                    _mm256_sub_epi32(dots, _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
                acc[r] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * row.scales[b]),
                    _mm256_cvtepi32_ps(dots),
                    acc[r],
                );
            }
        }
        for r in 0..n {
            out[r] = hsum(acc[r]);
        }
    }

    /// Each of `rows`' dot with weight row `w` of 32-value blocks (Q8_0, Q4_0, Q4_1), into `out`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q32(
        format: BlockFormat,
        w: &[u8],
        rows: &[QuantizedRow],
        out: &mut [f32],
    ) {
        let n = rows.len();
        let mut acc = [_mm256_setzero_ps(); SWEEP_ROWS];
        let mut offsets = [0f32; SWEEP_ROWS];
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0xF);
        for (b, block) in w.chunks_exact(format.bytes()).enumerate() {
            // The weights as bytes: signed for Q8_0 (through the sign trick), unsigned nibbles otherwise.
            let (d, m, weights) = match format {
                BlockFormat::Q8_0 => (
                    f16_one(block, 0),
                    0.0,
                    _mm256_loadu_si256(block.as_ptr().add(2) as *const __m256i),
                ),
                _ => {
                    let (d, m, at) = match format {
                        BlockFormat::Q4_1 => {
                            let (d, m) = f16_pair(block, 0);
                            (d, m, 4)
                        }
                        _ => (f16_one(block, 0), 0.0, 2),
                    };
                    let packed = _mm_loadu_si128(block.as_ptr().add(at) as *const __m128i);
                    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(packed), packed);
                    (d, m, _mm256_and_si256(both, low))
                }
            };
            let signed = format == BlockFormat::Q8_0;
            let magnitude = if signed {
                _mm256_sign_epi8(weights, weights)
            } else {
                weights
            };
            for (r, row) in rows.iter().enumerate() {
                let mut y = _mm256_loadu_si256(row.values.as_ptr().add(32 * b) as *const __m256i);
                if signed {
                    y = _mm256_sign_epi8(y, weights);
                }
                let dots = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, y), ones);
                let dx = row.scales[b];
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dots), acc[r]);
                if !signed {
                    let sum_x = (row.sums16[2 * b] + row.sums16[2 * b + 1]) as f32;
                    // Q4_0's values are q - 8: 8 times the row's sum comes off; Q4_1's minimum adds on.
                    offsets[r] += match format {
                        BlockFormat::Q4_1 => m * dx * sum_x,
                        _ => -8.0 * d * dx * sum_x,
                    };
                }
            }
        }
        for r in 0..n {
            out[r] = hsum(acc[r]) + offsets[r];
        }
    }
}

/// Whether this process takes the AVX2 loops in `form` (AVX-512 machines take them too).
fn takes_avx2(form: KernelForm) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        matches!(form, KernelForm::Avx2 | KernelForm::Avx512)
            && *AVAILABLE.get_or_init(avx2::available)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = form;
        false
    }
}

/// Every block of weight row `o` dotted with every quantized row: `out[r]` (f32, one a row).
fn dot_output(
    weight: &QuantizedWeight,
    o: usize,
    rows: &[QuantizedRow],
    form: KernelForm,
    out: &mut [f32],
) {
    let bytes = weight.format.bytes();
    let row = &weight.data[o * weight.row_bytes()..(o + 1) * weight.row_bytes()];
    #[cfg(target_arch = "x86_64")]
    if takes_avx2(form) {
        for (sweep, out) in rows.chunks(SWEEP_ROWS).zip(out.chunks_mut(SWEEP_ROWS)) {
            // SAFETY: this CPU runs AVX2, FMA and F16C (`takes_avx2`), every block and row block
            // holds the bytes the loads read, and a sweep holds at most SWEEP_ROWS rows.
            unsafe {
                match weight.format {
                    BlockFormat::Q4K => avx2::q4k(row, sweep, out),
                    BlockFormat::Q6K => avx2::q6k(row, sweep, out),
                    f => avx2::q32(f, row, sweep, out),
                }
            }
        }
        return;
    }
    let _ = form;
    out.iter_mut().for_each(|v| *v = 0.0);
    for (b, block) in row.chunks_exact(bytes).enumerate() {
        for (r, x) in rows.iter().enumerate() {
            out[r] += dot_block(weight.format, block, x, b);
        }
    }
}

/// `out [rows, outputs] = x [rows, inputs] W^T`, `x` quantized first, the output rows split over
/// `threads` parts ([`workers`]). `form` picks the instructions (AVX2's for AVX2 and AVX-512, the
/// portable loops otherwise).
pub fn product(
    weight: &QuantizedWeight,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
    threads: usize,
    form: KernelForm,
) -> Result<(), QuantizedError> {
    if x.len() != rows * weight.inputs || out.len() != rows * weight.outputs {
        return Err(QuantizedError::Rows {
            rows,
            inputs: weight.inputs,
            outputs: weight.outputs,
            given: x.len(),
            out: out.len(),
        });
    }
    let block = if weight.format.super_blocks() {
        256
    } else {
        32
    };
    let quantized: Vec<QuantizedRow> = x
        .chunks_exact(weight.inputs)
        .map(|row| QuantizedRow::of(row, block))
        .collect();
    let parts = threads.clamp(1, weight.outputs.max(1));
    let per_part = weight.outputs.div_ceil(parts);
    // The parts borrow through raw pointers: `run_each` returns only once every part has finished.
    let (quantized_ptr, out_ptr) = (quantized.as_ptr() as usize, out.as_mut_ptr() as usize);
    let (data_ptr, data_len) = (weight.data.as_ptr() as usize, weight.data.len());
    let (format, outputs, inputs) = (weight.format, weight.outputs, weight.inputs);
    let count = quantized.len();
    workers::run_each(parts, move |part| {
        // SAFETY: every part reads the shared weights and rows and writes the disjoint output columns
        // `first..last` of each row; the buffers outlive `run_each`.
        let rows =
            unsafe { std::slice::from_raw_parts(quantized_ptr as *const QuantizedRow, count) };
        let data = unsafe { std::slice::from_raw_parts(data_ptr as *const u8, data_len) };
        let weight = QuantizedWeight {
            format,
            data,
            outputs,
            inputs,
        };
        let (first, last) = (part * per_part, ((part + 1) * per_part).min(outputs));
        let mut column = vec![0.0f32; count];
        for o in first..last {
            dot_output(&weight, o, rows, form, &mut column);
            for (r, v) in column.iter().enumerate() {
                unsafe { *(out_ptr as *mut f32).add(r * outputs + o) = *v };
            }
        }
    });
    Ok(())
}
