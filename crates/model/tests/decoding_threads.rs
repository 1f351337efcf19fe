//! A decoding loop holds libtorch to one thread from its first few-row pass to its last (its idle
//! OpenMP threads would otherwise spin on the cores the kernel's workers need), gives libtorch its
//! threads back for work that wants them, and leaves the count as it found it, also when it unwinds.
//!
//! libtorch's thread count is process-wide, so this file is its own test binary with one test.

use sharpdraft_kernel::form::{self as kernel_form, KernelForm};
use sharpdraft_model::cpu::few_rows;
use tch::{Device, Kind};

/// Weights no cache holds: a model whose passes the kernel takes on any CPU that runs it.
const STREAMED: usize = usize::MAX;

#[test]
fn a_decoding_loop_holds_libtorch_to_one_thread_and_gives_its_threads_back_where_work_wants_them() {
    if kernel_form::current() == KernelForm::Libtorch {
        sharpdraft_testing::skip_cpu_form(
            sharpdraft_kernel::KernelForm::best() != sharpdraft_kernel::KernelForm::Libtorch,
            "this CPU runs no form of the kernel, so no loop holds libtorch",
        );
        return;
    }
    tch::set_num_threads(2);

    let inside = few_rows::decoding(Device::Cpu, Kind::Float, STREAMED, || {
        let between_passes = tch::get_num_threads();
        let in_a_pass = few_rows::with_kernel(few_rows::kernel_threads);
        let given_back = few_rows::with_libtorch_threads(tch::get_num_threads);
        let after_giving_back = tch::get_num_threads();
        let nested = few_rows::decoding(Device::Cpu, Kind::Float, STREAMED, tch::get_num_threads);
        (
            between_passes,
            in_a_pass,
            given_back,
            after_giving_back,
            nested,
            few_rows::holds_libtorch_to_one_thread(),
        )
    });
    assert_eq!(
        inside,
        (1, Some(2), 2, 1, 1, true),
        "(between passes, a pass's kernel threads, given back, after, nested, held)"
    );
    assert_eq!(
        tch::get_num_threads(),
        2,
        "the loop leaves libtorch's count as it found it"
    );
    assert!(!few_rows::holds_libtorch_to_one_thread());

    // A model whose weights a cache holds keeps libtorch's products and its threads.
    let small = few_rows::decoding(Device::Cpu, Kind::Float, 0, tch::get_num_threads);
    assert_eq!(
        small, 2,
        "a loop the kernel does not take leaves libtorch alone"
    );

    // Outside a loop, giving threads back changes nothing.
    assert_eq!(few_rows::with_libtorch_threads(tch::get_num_threads), 2);

    // A loop that unwinds puts the count back.
    let unwound = std::panic::catch_unwind(|| {
        few_rows::decoding(Device::Cpu, Kind::Float, STREAMED, || {
            panic!("a failed cycle")
        })
    });
    assert!(unwound.is_err());
    assert_eq!(tch::get_num_threads(), 2, "after a loop that unwound");
    assert!(!few_rows::holds_libtorch_to_one_thread());

    // A model the cache holds alone takes the kernel, and holds a loop to one thread, beside another
    // model whose weights together with its own outgrow the cache (a drafter beside its target).
    let cache = few_rows::min_weight_bytes();
    let kernel_on = || {
        few_rows::where_it_pays(1, Device::Cpu, Kind::Float, 1, || {
            few_rows::kernel_threads().is_some()
        })
    };
    assert!(
        !kernel_on(),
        "alone, one byte of weights keeps libtorch's products"
    );
    assert!(
        few_rows::beside(cache, kernel_on),
        "beside a model the size of the cache"
    );
    assert!(
        !few_rows::beside(cache - 2, kernel_on),
        "beside a model that fits with it"
    );
    let loop_threads = few_rows::beside(cache, || {
        few_rows::decoding(Device::Cpu, Kind::Float, 1, tch::get_num_threads)
    });
    assert_eq!(
        loop_threads, 1,
        "a loop beside another model holds libtorch"
    );
    assert_eq!(tch::get_num_threads(), 2);
}
