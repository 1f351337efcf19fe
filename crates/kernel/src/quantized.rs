//! `out [rows, outputs] = x [rows, inputs] W^T` for a few rows where `W` keeps GGUF's quantized blocks
//! (llama.cpp's layouts, as the file stores them): each weight block is read from memory once, decoded
//! into registers, and dotted with every row while it is there, so a verification of k + 1 rows reads
//! the weights' bytes once, as a decode step does.
//!
//! The rows are quantized first, as llama.cpp quantizes its activations: to 8 bits per value with one
//! f32 scale per block of 32 values (against `Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` weights) or of 256 (against the
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
    /// 32 values: an f16 scale, the 32 values' fifth bits (a u32), 32 nibbles: `(q - 16) d`.
    Q5_0,
    /// 32 values: f16 scale and minimum, fifth bits, nibbles: `q d + m`.
    Q5_1,
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
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 => 32,
            Self::Q4K | Self::Q6K => 256,
        }
    }

    /// Bytes a block takes in the file.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
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
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q4K => "Q4_K",
            Self::Q6K => "Q6_K",
        }
    }

    /// The type GGUF's type id names (ggml's `GGML_TYPE_*`), where this kernel multiplies it.
    pub const fn from_ggml_type(id: u32) -> Option<Self> {
        match id {
            2 => Some(Self::Q4_0),
            3 => Some(Self::Q4_1),
            6 => Some(Self::Q5_0),
            7 => Some(Self::Q5_1),
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

    /// Every block type this kernel multiplies.
    pub const ALL: [Self; 7] = [
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q4K,
        Self::Q6K,
    ];

    /// The type GGUF names `name` (`Q4_K`, ...), where this kernel multiplies it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// A 32-value type's layout: where its nibbles start, whether it keeps a minimum (at byte 2) and
    /// whether it keeps a fifth bit a value (a u32 at byte 2 or 4); the value's offset is 8 or 16
    /// where it keeps no minimum.
    const fn small_layout(self) -> SmallLayout {
        match self {
            Self::Q4_1 => SmallLayout {
                nibbles: 4,
                minimum: true,
                fifth_bits: None,
            },
            Self::Q5_0 => SmallLayout {
                nibbles: 6,
                minimum: false,
                fifth_bits: Some(2),
            },
            Self::Q5_1 => SmallLayout {
                nibbles: 8,
                minimum: true,
                fifth_bits: Some(4),
            },
            _ => SmallLayout {
                nibbles: 2,
                minimum: false,
                fifth_bits: None,
            },
        }
    }
}

/// Where a block of 32 nibble values (Q4_0, Q4_1, Q5_0, Q5_1) keeps its parts ([`BlockFormat::small_layout`]).
#[derive(Clone, Copy)]
struct SmallLayout {
    /// The byte where its 16 bytes of nibbles start: value `j`'s in byte `j`'s low nibble, value
    /// `j + 16`'s in its high one.
    nibbles: usize,
    /// Whether an f16 minimum follows the scale (`q d + m`), else the values are `(q - offset) d`.
    minimum: bool,
    /// The byte of the u32 whose bit `j` is value `j`'s fifth bit.
    fifth_bits: Option<usize>,
}

impl SmallLayout {
    /// What comes off each value without a minimum: half the values' range.
    const fn offset(self) -> f32 {
        if self.fifth_bits.is_some() {
            16.0
        } else {
            8.0
        }
    }

    /// The unsigned value `j` (0..32) of `block`.
    fn value(self, block: &[u8], j: usize) -> u8 {
        let byte = block[self.nibbles + j % 16];
        let nibble = if j < 16 { byte & 0xF } else { byte >> 4 };
        let fifth = self.fifth_bits.map_or(0, |at| {
            let bits = u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
            ((bits >> j) & 1) as u8
        });
        nibble | (fifth << 4)
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
        BlockFormat::Q4_0 | BlockFormat::Q4_1 | BlockFormat::Q5_0 | BlockFormat::Q5_1 => {
            let layout = format.small_layout();
            let d = f16_at(block, 0);
            let m = if layout.minimum {
                f16_at(block, 2)
            } else {
                -layout.offset() * d
            };
            for (j, o) in out.iter_mut().enumerate().take(32) {
                *o = f32::from(layout.value(block, j)) * d + m;
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
/// signed bytes, and the sums of each 16 (the offsets and minimums of all but `Q8_0` need them).
struct QuantizedRow {
    scales: Vec<f32>,
    values: Vec<i8>,
    /// Per 16 values, their sum (16 x 127 fits an i16).
    sums16: Vec<i16>,
    /// Per block, its scale times the sum of its bytes: what a weight block's minimum multiplies.
    block_sums: Vec<f32>,
}

impl QuantizedRow {
    /// `x` in blocks of `block` values: each block's largest magnitude maps to 127.
    fn of(x: &[f32], block: usize) -> Self {
        let blocks = x.len() / block;
        let mut row = Self {
            scales: Vec::with_capacity(blocks),
            values: Vec::with_capacity(x.len()),
            sums16: Vec::with_capacity(x.len() / 16),
            block_sums: Vec::with_capacity(blocks),
        };
        for values in x.chunks_exact(block) {
            let largest = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = largest / 127.0;
            let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            row.scales.push(scale);
            for sixteen in values.chunks_exact(16) {
                let mut sum = 0i16;
                for &v in sixteen {
                    let q = nearest_byte((v * inverse).clamp(-127.0, 127.0));
                    row.values.push(q);
                    sum += i16::from(q);
                }
                row.sums16.push(sum);
            }
            let sixteens = &row.sums16[row.sums16.len() - block / 16..];
            let sum: i32 = sixteens.iter().map(|&s| i32::from(s)).sum();
            row.block_sums.push(scale * sum as f32);
        }
        row
    }
}

/// `v` (-127..=127) to the nearest integer, ties to even: adding 1.5 x 2^23 leaves it in the low bits
/// of the sum's mantissa (llama.cpp's `nearest_int`), with no call to `roundf`, which a build without
/// SSE4.1 makes.
fn nearest_byte(v: f32) -> i8 {
    ((v + 12_582_912.0).to_bits() as i32 - 0x4b40_0000) as i8
}

/// One weight block dotted with the matching block `b` of a quantized row, portable form.
fn dot_block(format: BlockFormat, w: &[u8], x: &QuantizedRow, b: usize) -> f32 {
    let n = format.values();
    let xs = &x.values[b * n..(b + 1) * n];
    let sums: Vec<i32> = x.sums16[b * n / 16..(b + 1) * n / 16]
        .iter()
        .map(|&s| i32::from(s))
        .collect();
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
        BlockFormat::Q4_0 | BlockFormat::Q4_1 | BlockFormat::Q5_0 | BlockFormat::Q5_1 => {
            let layout = format.small_layout();
            let s: i32 = (0..32)
                .map(|j| i32::from(layout.value(w, j)) * i32::from(xs[j]))
                .sum();
            let d = f16_at(w, 0);
            let sum_x = (sums[0] + sums[1]) as f32;
            if layout.minimum {
                d * dx * s as f32 + f16_at(w, 2) * dx * sum_x
            } else {
                d * dx * (s as f32 - layout.offset() * sum_x)
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

/// The most rows one sweep over a weight row carries (an accumulator register a row in AVX2); more
/// rows take several sweeps over each tile of [`TILE_OUTPUTS`] output rows, the later ones reading
/// the tile's blocks from cache.
const SWEEP_ROWS: usize = 8;

/// Output rows a tile holds: small enough that a tile's blocks stay in L2 between the sweeps of a
/// pass of more than [`SWEEP_ROWS`] rows (64 rows of 1536 Q6_K inputs: 80 KB).
const TILE_OUTPUTS: usize = 64;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The dot products of the output rows `outputs` of a weight with `N` rows (1 to [`SWEEP_ROWS`])
    //! in AVX2's integer lanes: each block is unpacked into registers once and multiplied into each
    //! row's bytes (`maddubs`: unsigned weight bytes by signed row bytes, pairs summed to i16; `madd`
    //! by the sub-blocks' scales to i32), the block's integer sums scaled into one f32 accumulator a
    //! row, summed across the lanes once at the output row's end. `N` is a constant, so the row loops
    //! unroll and the accumulators stay in registers.
    use super::{BlockFormat, QuantizedRow, QuantizedWeight};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Whether this CPU has what these loops use beside AVX2 and FMA (F16C's f16 conversions).
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }

    /// The f16 value at `at` as f32.
    #[inline(always)]
    unsafe fn f16_one(bytes: *const u8, at: usize) -> f32 {
        let raw = (bytes.add(at) as *const u16).read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(raw))))
    }

    /// The two f16 values at `at` as f32.
    #[inline(always)]
    unsafe fn f16_pair(bytes: *const u8, at: usize) -> (f32, f32) {
        let raw = (bytes.add(at) as *const u32).read_unaligned();
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(raw as i32));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[inline(always)]
    unsafe fn load(at: *const u8) -> __m256i {
        _mm256_loadu_si256(at as *const __m256i)
    }

    /// `sum(a_u8 * b_i8)` per 32 bytes, weighted per 16-byte half by `scales` (i16 lanes), to i32 lanes.
    #[inline(always)]
    unsafe fn weighted(a: __m256i, b: __m256i, scales: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), scales)
    }

    /// Shuffles of 8 i16 lanes (the same in both 128-bit halves) that broadcast lane `j` to every
    /// lane: Q4_K's scale of sub-block `j` over its 32 values.
    const LANE_OF_I16: [[u8; 32]; 8] = {
        let mut masks = [[0u8; 32]; 8];
        let mut j = 0;
        while j < 8 {
            let mut k = 0;
            while k < 32 {
                masks[j][k] = (2 * j + k % 2) as u8;
                k += 1;
            }
            j += 1;
        }
        masks
    };

    /// Shuffles of 8 i16 lanes (the same in both halves) that broadcast lane `2k` to the low half and
    /// lane `2k + 1` to the high half: Q6_K's scales of the two groups of 16 in a register of 32.
    const LANE_PAIR_OF_I16: [[u8; 32]; 4] = {
        let mut masks = [[0u8; 32]; 4];
        let mut k = 0;
        while k < 4 {
            let mut b = 0;
            while b < 32 {
                let lane = 2 * k + b / 16;
                masks[k][b] = (2 * lane + b % 2) as u8;
                b += 1;
            }
            k += 1;
        }
        masks
    };

    /// Q4_K's 8 six-bit scales and 8 minimums (`q4k_scale_min`'s) from its 12 packed bytes, as i16
    /// lanes: the scales' low 6 bits sit in bytes 0..4 (scales 0..3) and 4..8 (minimums 0..3); scales
    /// and minimums 4..7 take the low and high nibbles of bytes 8..12 with the top 2 bits of bytes 0..4
    /// and 4..8 above them.
    #[inline(always)]
    unsafe fn q4k_scales_mins(scales: *const u8) -> (__m128i, __m128i) {
        let word = |k: usize| (scales.add(4 * k) as *const u32).read_unaligned();
        let (a, b, c) = (word(0), word(1), word(2));
        let low6 = 0x3f3f_3f3f;
        let (nibble, top2) = (0x0f0f_0f0f, 0x0303_0303);
        let scales_lo = a & low6;
        let scales_hi = (c & nibble) | (((a >> 6) & top2) << 4);
        let mins_lo = b & low6;
        let mins_hi = ((c >> 4) & nibble) | (((b >> 6) & top2) << 4);
        (
            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, scales_hi as i32, scales_lo as i32)),
            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, mins_hi as i32, mins_lo as i32)),
        )
    }

    /// Bytes ahead of the block being multiplied that a part asks the memory for: the weights stream
    /// from memory, and the hardware's own prefetching left one row's read rate 15-25% short on the
    /// 2-core EPYC of this revision (Q4_K, Q6_K, Q8_0 from memory, 2 threads: 12.3, 11.4, 12.8 GB/s
    /// without, 14.0, 13.8, 16.3 with 4 KB; 1 to 6 KB all gain alike). A part's output rows lie one
    /// after another, so ahead is its next blocks.
    const PREFETCH_BYTES: usize = 4096;

    /// Asks for the cache lines [`PREFETCH_BYTES`] past each of a block's `bytes`.
    #[inline(always)]
    unsafe fn prefetch_ahead(block: *const u8, bytes: usize) {
        let mut at = 0;
        while at < bytes {
            // A hint: an address past the weights' end is never read.
            _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(PREFETCH_BYTES + at) as *const i8);
            at += 64;
        }
    }

    /// Where each of `N` quantized rows keeps its bytes, scales and sums of 16.
    struct RowPointers<const N: usize> {
        values: [*const u8; N],
        scales: [*const f32; N],
        sums16: [*const u8; N],
        block_sums: [*const f32; N],
    }

    impl<const N: usize> RowPointers<N> {
        fn of(rows: &[QuantizedRow; N]) -> Self {
            Self {
                values: std::array::from_fn(|r| rows[r].values.as_ptr() as *const u8),
                scales: std::array::from_fn(|r| rows[r].scales.as_ptr()),
                sums16: std::array::from_fn(|r| rows[r].sums16.as_ptr() as *const u8),
                block_sums: std::array::from_fn(|r| rows[r].block_sums.as_ptr()),
            }
        }
    }

    /// Output rows `outputs` of Q4_K weight `weight` dotted with each of `rows`: `out[r * stride + o]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4k<const N: usize>(
        weight: &QuantizedWeight,
        outputs: Range<usize>,
        rows: &[QuantizedRow; N],
        out: *mut f32,
        stride: usize,
    ) {
        let x = RowPointers::of(rows);
        let (row_bytes, blocks) = (weight.row_bytes(), weight.inputs / 256);
        let low = _mm256_set1_epi8(0xF);
        for o in outputs {
            let w = weight.data.as_ptr().add(o * row_bytes);
            let mut acc = [_mm256_setzero_ps(); N];
            for b in 0..blocks {
                let block = w.add(144 * b);
                prefetch_ahead(block, 144);
                let (d, dmin) = f16_pair(block, 0);
                let (scales16, mins16) = q4k_scales_mins(block.add(4));
                let scales = _mm256_broadcastsi128_si256(scales16);
                // Each sub-block's minimum twice, once for each of its groups of 16 (madd's pairs).
                let mins = _mm256_set_m128i(
                    _mm_unpackhi_epi16(mins16, mins16),
                    _mm_unpacklo_epi16(mins16, mins16),
                );
                let mut dots = [_mm256_setzero_si256(); N];
                for chunk in 0..4 {
                    // Values 64 chunk .. + 32 in the low nibbles, the next 32 in the high ones.
                    let q = load(block.add(16 + 32 * chunk));
                    let (lo, hi) = (
                        _mm256_and_si256(q, low),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(q), low),
                    );
                    let shuffle =
                        |j: usize| _mm256_shuffle_epi8(scales, load(LANE_OF_I16[j].as_ptr()));
                    let (sc_lo, sc_hi) = (shuffle(2 * chunk), shuffle(2 * chunk + 1));
                    for r in 0..N {
                        let y = x.values[r].add(256 * b + 64 * chunk);
                        let both = _mm256_add_epi32(
                            weighted(lo, load(y), sc_lo),
                            weighted(hi, load(y.add(32)), sc_hi),
                        );
                        dots[r] = _mm256_add_epi32(dots[r], both);
                    }
                }
                for r in 0..N {
                    // Lane j: the minimum of sub-block j times the sum of its 32 row bytes.
                    let sums = load(x.sums16[r].add(32 * b));
                    let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(sums, mins));
                    let dx = *x.scales[r].add(b);
                    acc[r] = _mm256_fmadd_ps(
                        _mm256_set1_ps(d * dx),
                        _mm256_cvtepi32_ps(dots[r]),
                        acc[r],
                    );
                    acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dx), m, acc[r]);
                }
            }
            for r in 0..N {
                *out.add(r * stride + o) = hsum(acc[r]);
            }
        }
    }

    /// Output rows `outputs` of Q6_K weight `weight` dotted with each of `rows`: `out[r * stride + o]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q6k<const N: usize>(
        weight: &QuantizedWeight,
        outputs: Range<usize>,
        rows: &[QuantizedRow; N],
        out: *mut f32,
        stride: usize,
    ) {
        let x = RowPointers::of(rows);
        let (row_bytes, blocks) = (weight.row_bytes(), weight.inputs / 256);
        let low = _mm256_set1_epi8(0xF);
        let two = _mm256_set1_epi8(3);
        for o in outputs {
            let w = weight.data.as_ptr().add(o * row_bytes);
            let mut acc = [_mm256_setzero_ps(); N];
            for b in 0..blocks {
                let block = w.add(210 * b);
                prefetch_ahead(block, 210);
                let (ql, qh) = (block, block.add(128));
                let d = f16_one(block, 208);
                // The 16 groups' scales as i16: groups 0..8 and 8..16, each in both halves.
                let scales8 = _mm_loadu_si128(block.add(192) as *const __m128i);
                let (first, second) = (
                    _mm_cvtepi8_epi16(scales8),
                    _mm_cvtepi8_epi16(_mm_srli_si128::<8>(scales8)),
                );
                let group_scales = _mm256_set_m128i(second, first);
                let mut dots = [_mm256_setzero_si256(); N];
                for half in 0..2 {
                    let scales =
                        _mm256_broadcastsi128_si256(if half == 0 { first } else { second });
                    let l0 = load(ql.add(64 * half));
                    let l1 = load(ql.add(64 * half + 32));
                    let h = load(qh.add(32 * half));
                    let high = |shift: __m128i| {
                        _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(h, shift), two))
                    };
                    // Values 128 half + 32 k .. + 32 (unsigned, 0..64).
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(l0, low), high(_mm_cvtsi32_si128(0))),
                        _mm256_or_si256(_mm256_and_si256(l1, low), high(_mm_cvtsi32_si128(2))),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l0), low),
                            high(_mm_cvtsi32_si128(4)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l1), low),
                            high(_mm_cvtsi32_si128(6)),
                        ),
                    ];
                    let sc: [__m256i; 4] = std::array::from_fn(|k| {
                        _mm256_shuffle_epi8(scales, load(LANE_PAIR_OF_I16[k].as_ptr()))
                    });
                    for r in 0..N {
                        let y = x.values[r].add(256 * b + 128 * half);
                        let pair = |k: usize| weighted(q[k], load(y.add(32 * k)), sc[k]);
                        let four = _mm256_add_epi32(
                            _mm256_add_epi32(pair(0), pair(1)),
                            _mm256_add_epi32(pair(2), pair(3)),
                        );
                        dots[r] = _mm256_add_epi32(dots[r], four);
                    }
                }
                for r in 0..N {
                    // The values are q - 32: each group's scale times the sum of its 16 row bytes,
                    // 32 times, comes off (lane k: groups 2k and 2k + 1).
                    let sums = load(x.sums16[r].add(32 * b));
                    let offsets = _mm256_madd_epi16(group_scales, sums);
                    let dots = _mm256_sub_epi32(dots[r], _mm256_slli_epi32::<5>(offsets));
                    let dx = *x.scales[r].add(b);
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dots), acc[r]);
                }
            }
            for r in 0..N {
                *out.add(r * stride + o) = hsum(acc[r]);
            }
        }
    }

    /// Each byte `i` of the result 16 where bit `i` of the u32 at `at` is set, else 0: the fifth bits
    /// of Q5_0 and Q5_1, as the values' 16s.
    #[inline(always)]
    unsafe fn fifth_bits(at: *const u8) -> __m256i {
        let bits = (at as *const u32).read_unaligned();
        // Byte i takes byte i / 8 of the bits, then keeps bit i % 8.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    }

    /// Output rows `outputs` of a Q8_0 weight dotted with each of `rows`: `out[r * stride + o]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q8_0<const N: usize>(
        weight: &QuantizedWeight,
        outputs: Range<usize>,
        rows: &[QuantizedRow; N],
        out: *mut f32,
        stride: usize,
    ) {
        let x = RowPointers::of(rows);
        let (row_bytes, blocks) = (weight.row_bytes(), weight.inputs / 32);
        let ones = _mm256_set1_epi16(1);
        for o in outputs {
            let w = weight.data.as_ptr().add(o * row_bytes);
            let mut acc = [_mm256_setzero_ps(); N];
            for b in 0..blocks {
                let block = w.add(34 * b);
                prefetch_ahead(block, 34);
                let d = f16_one(block, 0);
                let weights = load(block.add(2));
                // maddubs takes unsigned bytes first: the weights' magnitudes, their signs moved
                // onto the row's bytes.
                let magnitude = _mm256_sign_epi8(weights, weights);
                for r in 0..N {
                    let y = _mm256_sign_epi8(load(x.values[r].add(32 * b)), weights);
                    let dots = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, y), ones);
                    let dx = *x.scales[r].add(b);
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dots), acc[r]);
                }
            }
            for r in 0..N {
                *out.add(r * stride + o) = hsum(acc[r]);
            }
        }
    }

    /// Output rows `outputs` of a weight of 32 nibbles a block dotted with each of `rows`:
    /// `out[r * stride + o]`. `MINIMUM`: Q4_1 and Q5_1, `q d + m` (else Q4_0 and Q5_0, `(q - 8) d`
    /// and `(q - 16) d`); `FIFTH`: Q5_0 and Q5_1, a fifth bit a value.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn nibbles<const N: usize, const MINIMUM: bool, const FIFTH: bool>(
        weight: &QuantizedWeight,
        outputs: Range<usize>,
        rows: &[QuantizedRow; N],
        out: *mut f32,
        stride: usize,
    ) {
        let x = RowPointers::of(rows);
        let layout = weight.format.small_layout();
        debug_assert!(layout.minimum == MINIMUM && layout.fifth_bits.is_some() == FIFTH);
        let (row_bytes, blocks, bytes) = (
            weight.row_bytes(),
            weight.inputs / 32,
            weight.format.bytes(),
        );
        let (nibbles_at, fifth_at) = (layout.nibbles, layout.fifth_bits.unwrap_or(0));
        let offset = _mm256_set1_epi8(layout.offset() as i8);
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0xF);
        for o in outputs {
            let w = weight.data.as_ptr().add(o * row_bytes);
            let mut acc = [_mm256_setzero_ps(); N];
            let mut minimums = [0f32; N];
            for b in 0..blocks {
                let block = w.add(bytes * b);
                prefetch_ahead(block, bytes);
                let (d, m) = if MINIMUM {
                    f16_pair(block, 0)
                } else {
                    (f16_one(block, 0), 0.0)
                };
                // Values 0..16 in the low 16 bytes' nibbles, 16..32 in their high ones.
                let packed = _mm_loadu_si128(block.add(nibbles_at) as *const __m128i);
                let both = _mm256_set_m128i(_mm_srli_epi16::<4>(packed), packed);
                let mut values = _mm256_and_si256(both, low);
                if FIFTH {
                    values = _mm256_or_si256(values, fifth_bits(block.add(fifth_at)));
                }
                // Without a minimum the values are signed (q - 8 or q - 16): their magnitudes first,
                // their signs moved onto the row's bytes, as Q8_0's.
                let signed = _mm256_sub_epi8(values, offset);
                let magnitude = if MINIMUM {
                    values
                } else {
                    _mm256_sign_epi8(signed, signed)
                };
                for r in 0..N {
                    let mut y = load(x.values[r].add(32 * b));
                    if !MINIMUM {
                        y = _mm256_sign_epi8(y, signed);
                    }
                    let dots = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, y), ones);
                    let dx = *x.scales[r].add(b);
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(dots), acc[r]);
                    if MINIMUM {
                        // The minimum times the row's block (its scale times its bytes' sum).
                        minimums[r] += m * *x.block_sums[r].add(b);
                    }
                }
            }
            for r in 0..N {
                *out.add(r * stride + o) = hsum(acc[r]) + minimums[r];
            }
        }
    }

    /// The loop of `weight`'s block type for `N` rows.
    ///
    /// # Safety
    /// As [`super::sweep`]'s.
    unsafe fn sweep_of<const N: usize>(
        weight: &QuantizedWeight,
        outputs: Range<usize>,
        rows: &[QuantizedRow],
        out: *mut f32,
        stride: usize,
    ) {
        let rows: &[QuantizedRow; N] = rows.try_into().expect("a sweep of N rows");
        match weight.format {
            BlockFormat::Q4K => q4k::<N>(weight, outputs, rows, out, stride),
            BlockFormat::Q6K => q6k::<N>(weight, outputs, rows, out, stride),
            BlockFormat::Q8_0 => q8_0::<N>(weight, outputs, rows, out, stride),
            BlockFormat::Q4_0 => nibbles::<N, false, false>(weight, outputs, rows, out, stride),
            BlockFormat::Q4_1 => nibbles::<N, true, false>(weight, outputs, rows, out, stride),
            BlockFormat::Q5_0 => nibbles::<N, false, true>(weight, outputs, rows, out, stride),
            BlockFormat::Q5_1 => nibbles::<N, true, true>(weight, outputs, rows, out, stride),
        }
    }

    /// Output rows `outputs` dotted with 1 to [`SWEEP_ROWS`] rows: `out[r * stride + o]`.
    ///
    /// # Safety
    /// This CPU runs AVX2, FMA and F16C ([`available`]); `out` holds `rows.len()` rows of `stride`
    /// values with `outputs` inside each, and the rows were quantized for `weight`'s block size.
    pub(super) unsafe fn sweep(
        weight: &QuantizedWeight,
        outputs: Range<usize>,
        rows: &[QuantizedRow],
        out: *mut f32,
        stride: usize,
    ) {
        match rows.len() {
            1 => sweep_of::<1>(weight, outputs, rows, out, stride),
            2 => sweep_of::<2>(weight, outputs, rows, out, stride),
            3 => sweep_of::<3>(weight, outputs, rows, out, stride),
            4 => sweep_of::<4>(weight, outputs, rows, out, stride),
            5 => sweep_of::<5>(weight, outputs, rows, out, stride),
            6 => sweep_of::<6>(weight, outputs, rows, out, stride),
            7 => sweep_of::<7>(weight, outputs, rows, out, stride),
            8 => sweep_of::<8>(weight, outputs, rows, out, stride),
            n => unreachable!("a sweep of {n} rows: at most SWEEP_ROWS"),
        }
    }
}

const _: () = assert!(SWEEP_ROWS == 8, "avx2::sweep instantiates 1 to 8 rows");

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

/// Output rows `outputs` of `weight` dotted with every quantized row, in tiles of [`TILE_OUTPUTS`]
/// and sweeps of [`SWEEP_ROWS`]: `out[r * weight.outputs + o]`.
///
/// # Safety
/// `out` holds `rows.len() * weight.outputs` values, and no other thread writes the columns
/// `outputs` meanwhile.
unsafe fn dot_outputs(
    weight: &QuantizedWeight,
    outputs: std::ops::Range<usize>,
    rows: &[QuantizedRow],
    form: KernelForm,
    out: *mut f32,
) {
    let stride = weight.outputs;
    #[cfg(target_arch = "x86_64")]
    if takes_avx2(form) {
        for first in outputs.clone().step_by(TILE_OUTPUTS) {
            let tile = first..(first + TILE_OUTPUTS).min(outputs.end);
            for (s, sweep) in rows.chunks(SWEEP_ROWS).enumerate() {
                // SAFETY: `takes_avx2` checked the CPU; the sweep's rows start at row
                // `s * SWEEP_ROWS` of `out`, which holds them all.
                avx2::sweep(
                    weight,
                    tile.clone(),
                    sweep,
                    out.add(s * SWEEP_ROWS * stride),
                    stride,
                );
            }
        }
        return;
    }
    let _ = form;
    let bytes = weight.format.bytes();
    for o in outputs {
        let row = &weight.data[o * weight.row_bytes()..(o + 1) * weight.row_bytes()];
        for (r, x) in rows.iter().enumerate() {
            let sum: f32 = row
                .chunks_exact(bytes)
                .enumerate()
                .map(|(b, block)| dot_block(weight.format, block, x, b))
                .sum();
            *out.add(r * stride + o) = sum;
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
        unsafe { dot_outputs(&weight, first..last, rows, form, out_ptr as *mut f32) };
    });
    Ok(())
}
