//! One instruction set's f32 vector and the operations the weight streams ([`crate::streams`]) and
//! attention's products ([`crate::key_scores`], [`crate::weighted_sum`]) take, so that one body serves
//! AVX-512, AVX2 + FMA and NEON.
//!
//! Every operation is `#[inline(always)]` and is only called from a function compiled for its
//! instruction set (the `#[target_feature]` entry points in `products.rs`), where the intrinsics inline.
//! (A portable SIMD crate such as pulp offers the vectors and the fused multiply-add, but not a
//! constant shift for widening bf16, a plain unaligned load through a pointer, or a prefetch; the
//! kernel needs all three on every form, so it would be these impls again beside the dependency.)

/// An f32 vector of `WIDTH` lanes and what the kernel does with it.
///
/// # Safety
/// Every function requires the CPU to have the instruction set (the caller's `#[target_feature]`),
/// and the loads read `WIDTH` elements at the pointer.
pub(crate) trait Lanes {
    type Vector: Copy;
    /// f32 lanes per vector.
    const WIDTH: usize;
    unsafe fn zero() -> Self::Vector;
    /// `WIDTH` f32 at `at`, unaligned.
    unsafe fn load(at: *const f32) -> Self::Vector;
    /// `x` in every lane. (Only AVX2's attention takes this and `store` so far; NEON's takes the portable
    /// loops.)
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    unsafe fn splat(x: f32) -> Self::Vector;
    /// The `WIDTH` lanes to `at`, unaligned.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    unsafe fn store(at: *mut f32, v: Self::Vector);
    /// `WIDTH` bf16 at `at`, widened to f32 (a bf16 is the top half of an f32: shifted up 16 bits).
    unsafe fn load_bf16(at: *const u16) -> Self::Vector;
    /// `acc + a * b`, rounded once.
    unsafe fn fma(a: Self::Vector, b: Self::Vector, acc: Self::Vector) -> Self::Vector;
    /// `a + b`, rounded (AVX2's weighted sum adds a block's sums into its output with it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    unsafe fn add(a: Self::Vector, b: Self::Vector) -> Self::Vector;
    /// The sum of the lanes.
    unsafe fn sum(v: Self::Vector) -> f32;
    /// Asks for the cache line at `at` (the next weight rows: the hardware prefetcher alone falls
    /// behind the streams).
    unsafe fn prefetch(at: *const u8);
}

/// AVX-512: 16 lanes, 32 registers.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512 {
    type Vector = std::arch::x86_64::__m512;
    const WIDTH: usize = 16;

    #[inline(always)]
    unsafe fn zero() -> Self::Vector {
        std::arch::x86_64::_mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn load(at: *const f32) -> Self::Vector {
        std::arch::x86_64::_mm512_loadu_ps(at)
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::Vector {
        std::arch::x86_64::_mm512_set1_ps(x)
    }

    #[inline(always)]
    unsafe fn store(at: *mut f32, v: Self::Vector) {
        std::arch::x86_64::_mm512_storeu_ps(at, v)
    }

    #[inline(always)]
    unsafe fn load_bf16(at: *const u16) -> Self::Vector {
        use std::arch::x86_64::*;
        let half = _mm256_loadu_si256(at as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(half)))
    }

    #[inline(always)]
    unsafe fn fma(a: Self::Vector, b: Self::Vector, acc: Self::Vector) -> Self::Vector {
        std::arch::x86_64::_mm512_fmadd_ps(a, b, acc)
    }

    #[inline(always)]
    unsafe fn add(a: Self::Vector, b: Self::Vector) -> Self::Vector {
        std::arch::x86_64::_mm512_add_ps(a, b)
    }

    #[inline(always)]
    unsafe fn sum(v: Self::Vector) -> f32 {
        std::arch::x86_64::_mm512_reduce_add_ps(v)
    }

    #[inline(always)]
    unsafe fn prefetch(at: *const u8) {
        use std::arch::x86_64::*;
        _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
    }
}

/// AVX2 with FMA: 8 lanes, 16 registers.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    type Vector = std::arch::x86_64::__m256;
    const WIDTH: usize = 8;

    #[inline(always)]
    unsafe fn zero() -> Self::Vector {
        std::arch::x86_64::_mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn load(at: *const f32) -> Self::Vector {
        std::arch::x86_64::_mm256_loadu_ps(at)
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::Vector {
        std::arch::x86_64::_mm256_set1_ps(x)
    }

    #[inline(always)]
    unsafe fn store(at: *mut f32, v: Self::Vector) {
        std::arch::x86_64::_mm256_storeu_ps(at, v)
    }

    #[inline(always)]
    unsafe fn load_bf16(at: *const u16) -> Self::Vector {
        use std::arch::x86_64::*;
        let half = _mm_loadu_si128(at as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(half)))
    }

    #[inline(always)]
    unsafe fn fma(a: Self::Vector, b: Self::Vector, acc: Self::Vector) -> Self::Vector {
        std::arch::x86_64::_mm256_fmadd_ps(a, b, acc)
    }

    #[inline(always)]
    unsafe fn add(a: Self::Vector, b: Self::Vector) -> Self::Vector {
        std::arch::x86_64::_mm256_add_ps(a, b)
    }

    #[inline(always)]
    unsafe fn sum(v: Self::Vector) -> f32 {
        use std::arch::x86_64::*;
        let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
    }

    #[inline(always)]
    unsafe fn prefetch(at: *const u8) {
        use std::arch::x86_64::*;
        _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
    }
}

/// NEON (ARM's Advanced SIMD): 4 lanes, 32 registers.
#[cfg(target_arch = "aarch64")]
pub(crate) struct Neon;

#[cfg(target_arch = "aarch64")]
impl Lanes for Neon {
    type Vector = std::arch::aarch64::float32x4_t;
    const WIDTH: usize = 4;

    #[inline(always)]
    unsafe fn zero() -> Self::Vector {
        std::arch::aarch64::vdupq_n_f32(0.0)
    }

    #[inline(always)]
    unsafe fn load(at: *const f32) -> Self::Vector {
        std::arch::aarch64::vld1q_f32(at)
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::Vector {
        std::arch::aarch64::vdupq_n_f32(x)
    }

    #[inline(always)]
    unsafe fn store(at: *mut f32, v: Self::Vector) {
        std::arch::aarch64::vst1q_f32(at, v)
    }

    #[inline(always)]
    unsafe fn load_bf16(at: *const u16) -> Self::Vector {
        use std::arch::aarch64::*;
        // SHLL by the element size: each u16 becomes the top half of a u32.
        vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(at)))
    }

    #[inline(always)]
    unsafe fn fma(a: Self::Vector, b: Self::Vector, acc: Self::Vector) -> Self::Vector {
        std::arch::aarch64::vfmaq_f32(acc, a, b)
    }

    #[inline(always)]
    unsafe fn add(a: Self::Vector, b: Self::Vector) -> Self::Vector {
        std::arch::aarch64::vaddq_f32(a, b)
    }

    #[inline(always)]
    unsafe fn sum(v: Self::Vector) -> f32 {
        std::arch::aarch64::vaddvq_f32(v)
    }

    #[inline(always)]
    unsafe fn prefetch(at: *const u8) {
        // PRFM PLDL1KEEP: a hint; it never faults, whatever the address.
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags));
    }
}
