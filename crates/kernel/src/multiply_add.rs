//! `a * b + c` for the portable loops of attention's products, fused or not by the entry point.

/// `a * b + c`: fused (rounded once) where the entry point's instruction set has the instruction,
/// else a product and a sum (a fused one without it is a library call per element). Fused, the
/// portable loops round as the bodies written in lanes ([`crate::lanes::Lanes::fma`]) do, so that every
/// form with the instruction gives the same bits.
#[inline(always)]
pub(crate) fn multiply_add<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}
