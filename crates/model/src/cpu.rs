//! The CPU's own products for passes of a few rows (4-16), where libtorch's matrix products cost
//! about twice one row: [`few_rows`] decides which passes and products take them and applies
//! `sharpdraft-kernel`'s products (its AVX-512, AVX2 + FMA and NEON forms, chosen at run time or
//! forced by `SHARPDRAFT_KERNEL`) to tensors. Everything else in the model runs through libtorch.

pub mod few_rows;
