//! The CPU's own products for passes of a few rows (a verification of a few drafts, a drafting step):
//! on a CPU a pass is bound by reading the weights, and libtorch's f32 GEMM packs the whole weight
//! matrix from 4 rows on, which doubles the bytes a pass moves. Here each weight is read once and
//! multiplied into every row while it is in a register.
//!
//! - [`products`]: the product over raw operands ([`products::multiply`], one part of the columns)
//!   or slices ([`products::product`]), the sweeps over the weights and the register blocking.
//! - [`quantized`]: the same product over GGUF's quantized blocks as the file stores them (Q8_0,
//!   Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K), the rows quantized to 8 bits as llama.cpp does.
//! - `streams`: the kernel's one body, generic over an instruction set's lanes (`lanes`: AVX-512,
//!   AVX2 + FMA, NEON); `bf16_pairs`: AVX512-BF16's pair products.
//! - [`form`]: which form this CPU runs, or `SHARPDRAFT_KERNEL` forces.
//! - [`workers`]: threads that wait, spinning, for the parts of a product.
//! - [`key_scores`]: attention's scores for a few rows, each key read once, the lanes across the rows.
//! - [`softmax`]: attention's score rows to probabilities, in place, between the two products.
//! - [`weighted_sum`]: attention's probabilities times its values for a few rows, each value read once.
//! - `multiply_add`: the fused or unfused `a * b + c` of both products' portable loops.
//!
//! No libtorch: `sharpdraft-model` applies it to tensors (`cpu/few_rows.rs`), and this crate builds
//! and tests for every target on its own (the NEON form under an emulator on x86 machines).

#[cfg(target_arch = "x86_64")]
mod bf16_pairs;
pub mod form;
pub mod key_scores;
mod lanes;
mod multiply_add;
pub mod products;
pub mod quantized;
pub mod softmax;
mod streams;
pub mod weighted_sum;
pub mod workers;

pub use form::{FormError, KernelForm};
pub use products::{product, ProductError, Rows, Shape, Weights};
