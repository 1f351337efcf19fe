//! The few-row kernel (verification passes of a few rows on a CPU: f32 `ROWS`, bf16 `BF16_ROWS`)
//! computes what libtorch computes, in every form this CPU runs (AVX-512 and AVX2 forced on the same
//! x86 CPU; NEON on ARM), and `SHARPDRAFT_KERNEL` names the form or is refused.
mod common;

use common::{load, max_abs_diff};
use sharpdraft_kernel::form::{self as kernel_form, KernelForm};
use sharpdraft_model::{cpu::few_rows, ForwardInput, LogitRows};
use tch::{Device, Kind, Tensor};

/// Runs `check` once in each kernel form this CPU runs; says which it cannot.
fn in_every_form(check: fn()) {
    for form in KernelForm::ALL
        .into_iter()
        .filter(|f| *f != KernelForm::Libtorch)
    {
        match kernel_form::with_form(form, check) {
            Ok(()) => {}
            Err(_) => sharpdraft_testing::skip_for_this_machine(format!(
                "this CPU has no {}",
                form.name()
            )),
        }
    }
}

#[test]
fn the_kernel_multiplies_like_libtorch_for_every_row_count_and_odd_shapes() {
    in_every_form(products_match_libtorch);
}

fn products_match_libtorch() {
    let _guard = tch::no_grad_guard();
    tch::manual_seed(0);
    // Widths that are and are not multiples of the vector width; an odd number of weight rows; rows
    // wide enough (16 KB) that more than 12 rows go over a part's weights in blocks of 63 weight rows
    // (output columns), the last one short.
    for (outputs, inputs) in [(37, 16), (257, 50), (1001, 576), (300, 4100)] {
        let weight = Tensor::randn([outputs, inputs], (Kind::Float, Device::Cpu));
        for rows in few_rows::ROWS {
            let x = Tensor::randn([rows, inputs], (Kind::Float, Device::Cpu));
            let Some(got) = few_rows::linear(&x, &weight, 2) else {
                sharpdraft_testing::skip_cpu_form(
                    sharpdraft_kernel::KernelForm::best()
                        != sharpdraft_kernel::KernelForm::Libtorch,
                    "this CPU runs no form of the kernel",
                );
                return;
            };
            let want = x.linear::<Tensor>(&weight, None);
            let diff = max_abs_diff(&got, &want);
            // f32 rounding in a sum grows with its length (the two sum in different orders).
            let tolerance = 1e-4 * (inputs as f64 / 576.0).max(1.0);
            assert!(
                diff < tolerance,
                "{rows} rows of {inputs} -> {outputs}: {diff}"
            );
        }
    }
}

#[test]
fn the_bf16_kernel_multiplies_like_libtorch_to_bf16_rounding() {
    in_every_form(bf16_products_are_exact_to_bf16_rounding);
}

#[test]
fn the_bf16_kernel_that_widens_weights_multiplies_like_libtorch_to_bf16_rounding() {
    // The path of CPUs without AVX512-BF16, forced here on one that has it.
    in_every_form(|| few_rows::without_pair_products(bf16_products_are_exact_to_bf16_rounding));
}

fn bf16_products_are_exact_to_bf16_rounding() {
    let _guard = tch::no_grad_guard();
    tch::manual_seed(1);
    if !few_rows::takes_rows(1, Device::Cpu, Kind::BFloat16) {
        sharpdraft_testing::skip_cpu_form(
            sharpdraft_kernel::KernelForm::best() != sharpdraft_kernel::KernelForm::Libtorch,
            "this CPU runs no form of the kernel",
        );
        return;
    }
    // Widths that are and are not multiples of the 16 or 32 weights a load reads.
    for (outputs, inputs) in [(37, 16), (1001, 200), (300, 64)] {
        let weight =
            Tensor::randn([outputs, inputs], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        for rows in few_rows::BF16_ROWS {
            let x =
                Tensor::randn([rows, inputs], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
            let Some(got) = few_rows::linear(&x, &weight, 2) else {
                // 5 to 8 rows: only with AVX512-BF16's pair products.
                assert!(rows > 4, "{rows} bf16 rows declined");
                continue;
            };
            assert_eq!(got.kind(), Kind::BFloat16);
            // The exact product of the bf16 inputs, in f64.
            let exact = x
                .to_kind(Kind::Double)
                .matmul(&weight.to_kind(Kind::Double).tr());
            let scale = exact.abs().max().double_value(&[]);
            let diff = max_abs_diff(&got.to_kind(Kind::Double), &exact);
            assert!(
                diff <= scale / 128.0,
                "{rows} rows of {inputs} -> {outputs}: {diff} of {scale}"
            );
        }
    }
}

#[test]
fn the_kernel_declines_what_it_does_not_take() {
    let weight = Tensor::randn([64, 32], (Kind::Float, Device::Cpu));
    let rows = |m: i64, kind: Kind| Tensor::randn([m, 32], (kind, Device::Cpu));
    assert!(
        few_rows::linear(&rows(17, Kind::Float), &weight, 2).is_none(),
        "17 rows: libtorch's"
    );
    assert!(
        few_rows::linear(&rows(5, Kind::Double), &weight, 2).is_none(),
        "another dtype"
    );
    let trained = Tensor::randn([64, 32], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    assert!(
        few_rows::linear(&rows(5, Kind::Float), &trained, 2).is_none(),
        "autograd"
    );
    assert!(
        !few_rows::takes_rows(9, Device::Cpu, Kind::BFloat16),
        "9 bf16 rows: libtorch's"
    );
    assert!(!few_rows::takes_rows(0, Device::Cpu, Kind::Float));
    assert!(!few_rows::takes_rows(4, Device::Cpu, Kind::Half));
    let big = few_rows::min_weight_bytes();
    assert_eq!(
        few_rows::takes(5, Device::Cpu, Kind::Float, big),
        few_rows::takes_rows(5, Device::Cpu, Kind::Float)
    );
    assert!(
        !few_rows::takes(5, Device::Cpu, Kind::Float, big - 1),
        "weights that fit in a cache"
    );
}

#[test]
fn a_verification_pass_with_the_kernel_gives_libtorchs_logits_and_leaves_its_thread_count() {
    let _guard = tch::no_grad_guard();
    let model = load("qwen2");
    let threads = tch::get_num_threads();
    let ids = Tensor::from_slice(&[5i64, 17, 42, 3, 3, 60]);
    let positions = Tensor::arange(6, (Kind::Int64, Device::Cpu));
    let pass = || {
        let mut cache = model.net.new_cache(8);
        let input = ForwardInput {
            logits: LogitRows::All,
            ..ForwardInput::causal(&ids, &positions)
        };
        model
            .net
            .forward(input, &mut cache)
            .unwrap()
            .logits
            .unwrap()
    };
    // The fixture is tiny (it keeps libtorch's products by itself): the kernel is forced for the pass.
    let libtorch = few_rows::without_kernel(pass);
    for form in KernelForm::ALL
        .into_iter()
        .filter(|f| *f != KernelForm::Libtorch)
    {
        let Ok(with_kernel) = kernel_form::with_form(form, || few_rows::with_kernel(pass)) else {
            sharpdraft_testing::skip_for_this_machine(format!("this CPU has no {}", form.name()));
            continue;
        };
        assert!(
            max_abs_diff(&with_kernel, &libtorch) < 1e-4,
            "{}",
            form.name()
        );
    }
    assert_eq!(tch::get_num_threads(), threads);
}

#[test]
fn a_rows_product_is_the_same_to_the_bit_whatever_number_of_rows_shares_the_pass() {
    in_every_form(products_do_not_depend_on_the_row_count);
    in_every_form(|| few_rows::without_pair_products(products_do_not_depend_on_the_row_count));
}

#[test]
fn the_libtorch_form_declines_every_product_and_unknown_or_missing_forms_are_refused_by_name() {
    let weight = Tensor::randn([64, 32], (Kind::Float, Device::Cpu));
    let x = Tensor::randn([5, 32], (Kind::Float, Device::Cpu));
    let declined =
        kernel_form::with_form(KernelForm::Libtorch, || few_rows::linear(&x, &weight, 2));
    assert!(declined.unwrap().is_none(), "libtorch keeps every product");
    assert_eq!(
        kernel_form::parse("libtorch").unwrap(),
        KernelForm::Libtorch
    );
    // A form of another architecture: this CPU does not have it.
    let foreign = if cfg!(target_arch = "aarch64") {
        "avx2"
    } else {
        "neon"
    };
    for (value, words) in [
        ("sse", "not a kernel form"),
        (foreign, "does not have it"),
        ("AVX2", "not a kernel form"),
    ] {
        let error = kernel_form::parse(value).unwrap_err().to_string();
        assert!(
            error.contains("SHARPDRAFT_KERNEL") && error.contains(words),
            "{value}: {error}"
        );
        assert!(
            error.contains("libtorch"),
            "lists what this CPU runs: {error}"
        );
    }
    for form in KernelForm::ALL {
        match kernel_form::parse(form.name()) {
            Ok(parsed) => assert!(parsed == form && form.available()),
            Err(error) => {
                assert!(!form.available());
                assert!(error.to_string().contains("does not have it"), "{error}");
            }
        }
    }
}

fn products_do_not_depend_on_the_row_count() {
    // Each row accumulates its products in the same order however many rows (and weight streams)
    // the pass has, so the linear maps of a verification pass give each row what a pass of fewer rows
    // gives it.
    let _guard = tch::no_grad_guard();
    tch::manual_seed(2);
    for kind in [Kind::Float, Kind::BFloat16] {
        let rows: Vec<i64> = match kind {
            Kind::Float => few_rows::ROWS.collect(),
            _ => few_rows::BF16_ROWS
                .filter(|&r| few_rows::takes_rows(r, Device::Cpu, kind))
                .collect(),
        };
        // One block of weights, and (f32, 16 KB rows) several, which more than 12 rows go over in turns.
        for (outputs, inputs) in [(1001, 200), (300, 4100)] {
            let weight = Tensor::randn([outputs, inputs], (Kind::Float, Device::Cpu)).to_kind(kind);
            let most = *rows.last().expect("some row counts");
            let x = Tensor::randn([most, inputs], (Kind::Float, Device::Cpu)).to_kind(kind);
            let Some(all) = few_rows::linear(&x, &weight, 2) else {
                sharpdraft_testing::skip_cpu_form(
                    sharpdraft_kernel::KernelForm::best()
                        != sharpdraft_kernel::KernelForm::Libtorch,
                    "this CPU runs no form of the kernel",
                );
                return;
            };
            for &r in &rows {
                let fewer = few_rows::linear(&x.narrow(0, 0, r).contiguous(), &weight, 2).unwrap();
                assert!(
                    fewer.equal(&all.narrow(0, 0, r)),
                    "{kind:?}, {inputs} -> {outputs}: the first {r} of {most} rows differ"
                );
            }
        }
    }
}

#[test]
fn an_lm_head_of_any_few_rows_takes_the_kernel_and_gives_libtorchs_logits() {
    in_every_form(|| {
        let x = Tensor::randn([16, 96], (Kind::Float, Device::Cpu));
        let weight = Tensor::randn([1000, 96], (Kind::Float, Device::Cpu));
        for rows in 1..=few_rows::HEAD_ROWS {
            let x = x.narrow(0, 0, rows);
            let want = x.matmul(&weight.transpose(0, 1));
            let got =
                few_rows::head(&x, &weight).expect("a head of up to 16 rows takes the kernel");
            assert!(max_abs_diff(&got, &want) < 1e-4, "{rows} rows");
        }
        let many = Tensor::randn([few_rows::HEAD_ROWS + 1, 96], (Kind::Float, Device::Cpu));
        assert!(
            few_rows::head(&many, &weight).is_none(),
            "more rows stay with libtorch"
        );
        let bypassed = few_rows::without_kernel(|| few_rows::head(&x.narrow(0, 0, 2), &weight));
        assert!(
            bypassed.is_none(),
            "the libtorch baseline keeps its own head"
        );
    });
}

#[test]
fn cache_sizes_read_as_linux_reports_them() {
    assert_eq!(few_rows::parse_cache_size("32768K"), Some(32 << 20));
    assert_eq!(few_rows::parse_cache_size("480M"), Some(480 << 20));
    assert_eq!(few_rows::parse_cache_size("1G"), Some(1 << 30));
    assert_eq!(few_rows::parse_cache_size("4096"), Some(4096));
    assert_eq!(few_rows::parse_cache_size("12Q"), None);
    assert_eq!(few_rows::parse_cache_size(""), None);
}
