//! How a test that cannot run here says so.
//!
//! Two kinds of absence, told apart so that a skip cannot hide a broken set-up:
//! - [`skip`]: something `make test` provides (the fetched default model, its cached wheel, NVRTC,
//!   `/proc`, g++). Plain `cargo test` prints `skipped: <why>` and passes; under `make test`, which sets
//!   [`NO_SKIPS`], the test fails with the same reason, so a fetch that silently broke turns CI red
//!   instead of green.
//! - [`skip_for_this_machine`]: something no set-up can give this machine (a CUDA device, a CPU form
//!   its processor lacks, a machine that never goes quiet). It prints the reason everywhere and passes.
//!
//! A CPU-form test calls [`skip_cpu_form`], which is the second kind only when the processor has no
//! form of the kernel at all; a form the processor has but the test did not get (`SHARPDRAFT_KERNEL`
//! forcing libtorch, say) is the first kind.

use std::fmt::Display;

/// Set to `1` by `make test`: a test that would skip for something `make test` provides fails instead.
pub const NO_SKIPS: &str = "SHARPDRAFT_NO_SKIPS";

/// Whether this test run may skip for something `make test` provides.
pub fn skips_allowed() -> bool {
    std::env::var(NO_SKIPS).map_or(true, |value| value.is_empty() || value == "0")
}

/// This test cannot run without something `make test` provides: says why and returns (the caller
/// returns too), or fails under [`NO_SKIPS`].
#[track_caller]
pub fn skip(why: impl Display) {
    assert!(
        skips_allowed(),
        "{why} ({NO_SKIPS} is set, as make test sets it: a test that would skip here fails instead)"
    );
    eprintln!("skipped: {why}");
}

/// This test cannot run on this machine whatever is installed (no CUDA device, a CPU without the form):
/// says why, under `make test` too.
pub fn skip_for_this_machine(why: impl Display) {
    eprintln!("skipped: {why}");
}

/// A test of a CPU form of the kernel did not get one. `processor_has_a_form`: whether this processor
/// runs any form of its own (`KernelForm::best() != Libtorch`); when it does, the skip is a set-up
/// that hid the form ([`skip`]), else the machine's ([`skip_for_this_machine`]).
#[track_caller]
pub fn skip_cpu_form(processor_has_a_form: bool, why: impl Display) {
    if processor_has_a_form {
        skip(why);
    } else {
        skip_for_this_machine(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_for_the_machine_never_fails() {
        skip_for_this_machine("no CUDA device");
        skip_cpu_form(false, "this CPU has no form of the kernel");
    }

    #[test]
    fn a_skip_for_a_missing_model_passes_only_where_skips_are_allowed() {
        let outcome = std::panic::catch_unwind(|| skip("smollm2-135m-instruct is not fetched"));
        assert_eq!(outcome.is_ok(), skips_allowed());
    }
}
