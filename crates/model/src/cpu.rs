//! The CPU's own products for passes of a few rows (4-16), where libtorch's matrix products cost
//! about twice one row: the kernel ([`few_rows`]), its instruction-set forms (AVX-512 in
//! `few_rows`, AVX2 + FMA in `few_rows_avx2`) chosen at run time or forced by `SHARPDRAFT_KERNEL`
//! ([`kernel_form`]), and the workers that split a product's columns ([`kernel_workers`]).
//! Everything else in the model runs through libtorch.

pub mod few_rows;
#[cfg(target_arch = "x86_64")]
mod few_rows_avx2;
pub mod kernel_form;
pub mod kernel_workers;
