//! The command line's memory allocator: mimalloc, in place of glibc's malloc for the whole process.
//!
//! Why: libtorch allocates every tensor of a pass with `posix_memalign` and frees it a moment later
//! (a 4-row verification at 4096 keys allocates scores `[Hkv, G T, L]` of about 0.6 MB in each of 30
//! layers). After an experiment's long prefills and dataset loading had left glibc's heap fragmented,
//! glibc searched its bins for every such block: `perf` put `_int_malloc` at a fifth of the samples
//! under a decoding cycle, where `bench draft-time` (a fresh heap) showed 1%. In paired runs of the
//! quickstart's 16 n0 cell (`scripts/allocator-ab.sh`, experiments/results/allocator-ab-smollm2/)
//! mimalloc drafted, verified and ran the target alone a few percent faster and held about 300 MiB
//! less.
//!
//! The `override` feature makes mimalloc define `malloc`, `free`, `posix_memalign` and the rest in
//! this executable, which the dynamic linker then binds libtorch's calls to; `#[global_allocator]`
//! sends Rust's own allocations to the same heap. [`report`] checks that a libtorch tensor's memory
//! really came from mimalloc, so a build that lost the override shows it.

use serde::Serialize;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What the benches print about the allocator.
#[derive(Serialize, Debug, Clone)]
pub struct AllocatorReport {
    /// `mimalloc <major>.<minor>.<patch>`, or `the system's malloc` in a build without the
    /// `mimalloc` feature.
    pub name: String,
    /// Whether a tensor libtorch just allocated came from that allocator: checked against mimalloc's
    /// heap; the system's malloc is what libtorch calls when nothing replaces it.
    pub libtorch_tensors: bool,
}

impl std::fmt::Display for AllocatorReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let through = if self.libtorch_tensors {
            "libtorch's tensors through it"
        } else {
            "libtorch's tensors NOT through it: the system's malloc"
        };
        write!(f, "allocator {} ({through})", self.name)
    }
}

/// The allocator this process runs on, and whether libtorch's tensors come from it.
#[cfg(feature = "mimalloc")]
pub fn report() -> AllocatorReport {
    // SAFETY: mi_version only returns a constant (major * 10000 + minor * 100 + patch).
    let version = unsafe { libmimalloc_sys::mi_version() };
    AllocatorReport {
        name: format!(
            "mimalloc {}.{}.{}",
            version / 10000,
            version / 100 % 100,
            version % 100
        ),
        libtorch_tensors: libtorch_tensors_through_mimalloc(),
    }
}

/// The allocator of a build without the `mimalloc` feature.
#[cfg(not(feature = "mimalloc"))]
pub fn report() -> AllocatorReport {
    AllocatorReport {
        name: "the system's malloc".into(),
        libtorch_tensors: true,
    }
}

/// Allocates a 1 MiB CPU tensor through libtorch and asks mimalloc whether its memory is mimalloc's.
#[cfg(feature = "mimalloc")]
fn libtorch_tensors_through_mimalloc() -> bool {
    let tensor = tch::Tensor::zeros([1 << 18], (tch::Kind::Float, tch::Device::Cpu));
    // SAFETY: mi_is_in_heap_region only compares the address with mimalloc's own regions; the
    // tensor is alive for the call.
    unsafe { libmimalloc_sys::mi_is_in_heap_region(tensor.data_ptr()) }
}
