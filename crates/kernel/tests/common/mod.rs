//! What the kernel's tests share.

use sharpdraft_kernel::KernelForm;

/// The forms with bodies of their own that this CPU runs (none where libtorch keeps every product:
/// a test over them then says it skipped).
#[allow(dead_code)] // not every test file asks
pub fn forms_this_cpu_runs() -> Vec<KernelForm> {
    let forms: Vec<KernelForm> = KernelForm::ALL
        .into_iter()
        .filter(|f| *f != KernelForm::Libtorch && f.available())
        .collect();
    if forms.is_empty() {
        sharpdraft_testing::skip_for_this_machine(
            "this CPU has no form of the kernel (libtorch keeps every product)",
        );
    }
    forms
}

/// Deterministic values in [-1, 1) (a linear congruential generator: no dependency, the same on every
/// target).
pub fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
