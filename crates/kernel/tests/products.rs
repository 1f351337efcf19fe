//! Every form this CPU runs multiplies like a plain sum in f64, for every row count a pass may hold, for
//! shapes whose inputs are not a multiple of any vector width and whose outputs split unevenly into
//! weight streams, in f32 and with bf16 weights; and a form the CPU cannot run is refused by name.
//! (On x86 machines the NEON form is checked by running these tests for aarch64 under an emulator:
//! `make test-neon`.)

mod common;

use common::{forms_this_cpu_runs, values};

use sharpdraft_kernel::products::{most_rows, pair_products_available};
use sharpdraft_kernel::{product, KernelForm, ProductError, Rows, Shape, Weights};

/// bf16 by truncation, and its f32 value.
fn to_bf16(v: &[f32]) -> Vec<u16> {
    v.iter().map(|x| (x.to_bits() >> 16) as u16).collect()
}

fn from_bf16(v: &[u16]) -> Vec<f32> {
    v.iter()
        .map(|&b| f32::from_bits((b as u32) << 16))
        .collect()
}

/// `x W^T` summed in f64.
fn reference(x: &[f32], weight: &[f32], shape: Shape) -> Vec<f64> {
    let mut out = vec![0.0; shape.rows * shape.outputs];
    for r in 0..shape.rows {
        for o in 0..shape.outputs {
            out[r * shape.outputs + o] = (0..shape.inputs)
                .map(|i| x[r * shape.inputs + i] as f64 * weight[o * shape.inputs + i] as f64)
                .sum();
        }
    }
    out
}

/// Within f32 rounding of sums of `inputs` terms of magnitude at most 1.
fn assert_close(got: &[f32], want: &[f64], shape: Shape, what: &str) {
    let tolerance = 4e-6 * shape.inputs as f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tolerance,
            "{what}: output {i} (row {}, column {}): {g} against {w}",
            i / shape.outputs,
            i % shape.outputs
        );
    }
}

/// Inputs 1 (all tail), 67 (a tail on every width) and 256; outputs 1, 5 and 77 (groups of streams
/// cut short).
const SHAPES: [(usize, usize); 4] = [(1, 5), (67, 77), (256, 5), (96, 1)];

#[test]
fn every_form_multiplies_f32_weights_like_a_plain_sum_for_every_row_count() {
    for form in forms_this_cpu_runs() {
        for (inputs, outputs) in SHAPES {
            for rows in 1..=16 {
                let shape = Shape {
                    rows,
                    inputs,
                    outputs,
                };
                let x = values(rows * inputs, 1);
                let weight = values(outputs * inputs, 2);
                let mut out = vec![f32::NAN; rows * outputs];
                product(form, Rows::F32(&x), Weights::F32(&weight), shape, &mut out).unwrap();
                let what = format!("{} f32 {shape:?}", form.name());
                assert_close(&out, &reference(&x, &weight, shape), shape, &what);
            }
        }
    }
}

#[test]
fn every_form_multiplies_bf16_weights_widened_as_they_are_read() {
    for form in forms_this_cpu_runs() {
        for (inputs, outputs) in SHAPES {
            for rows in 1..=most_rows(form, true) + 3 {
                let shape = Shape {
                    rows,
                    inputs,
                    outputs,
                };
                let x = values(rows * inputs, 3);
                let weight = to_bf16(&values(outputs * inputs, 4));
                let mut out = vec![f32::NAN; rows * outputs];
                product(form, Rows::F32(&x), Weights::Bf16(&weight), shape, &mut out).unwrap();
                let want = reference(&x, &from_bf16(&weight), shape);
                assert_close(
                    &out,
                    &want,
                    shape,
                    &format!("{} bf16 {shape:?}", form.name()),
                );
            }
        }
    }
}

#[test]
fn avx512_bf16_pair_products_multiply_bf16_rows_and_weights() {
    if !(KernelForm::Avx512.available() && pair_products_available()) {
        sharpdraft_testing::skip_for_this_machine("this CPU has no AVX512-BF16 pair products");
        return;
    }
    for (inputs, outputs) in SHAPES {
        for rows in 1..=10 {
            let shape = Shape {
                rows,
                inputs,
                outputs,
            };
            let x = to_bf16(&values(rows * inputs, 5));
            let weight = to_bf16(&values(outputs * inputs, 6));
            let mut out = vec![f32::NAN; rows * outputs];
            let (rows_bf16, weights) = (Rows::Bf16Pairs(&x), Weights::Bf16(&weight));
            product(KernelForm::Avx512, rows_bf16, weights, shape, &mut out).unwrap();
            let want = reference(&from_bf16(&x), &from_bf16(&weight), shape);
            assert_close(&out, &want, shape, &format!("pairs {shape:?}"));
        }
    }
}

#[test]
fn a_rows_result_is_the_same_to_the_bit_whatever_number_of_rows_shares_the_product() {
    let shape = |rows| Shape {
        rows,
        inputs: 67,
        outputs: 77,
    };
    for form in forms_this_cpu_runs() {
        let x = values(16 * 67, 7);
        let weight = values(77 * 67, 8);
        let mut all = vec![0.0; 16 * 77];
        product(
            form,
            Rows::F32(&x),
            Weights::F32(&weight),
            shape(16),
            &mut all,
        )
        .unwrap();
        for rows in 1..16 {
            let mut fewer = vec![0.0; rows * 77];
            let some = Rows::F32(&x[..rows * 67]);
            product(form, some, Weights::F32(&weight), shape(rows), &mut fewer).unwrap();
            assert_eq!(fewer, all[..rows * 77], "{} with {rows} rows", form.name());
        }
    }
}

#[test]
fn operands_that_do_not_fit_their_shape_and_forms_the_cpu_cannot_run_are_refused() {
    let shape = Shape {
        rows: 2,
        inputs: 8,
        outputs: 3,
    };
    let (x, weight) = (values(16, 9), values(24, 10));
    let mut out = vec![0.0; 6];
    let unavailable = KernelForm::ALL.into_iter().filter(|f| !f.available());
    for form in unavailable.chain([KernelForm::Libtorch]) {
        let error = product(form, Rows::F32(&x), Weights::F32(&weight), shape, &mut out);
        assert!(
            matches!(&error, Err(ProductError::Form(e)) if e.to_string().contains("SHARPDRAFT_KERNEL")),
            "{}: {error:?}",
            form.name()
        );
    }
    for form in forms_this_cpu_runs() {
        let short = product(
            form,
            Rows::F32(&x[..15]),
            Weights::F32(&weight),
            shape,
            &mut out,
        );
        assert!(
            matches!(short, Err(ProductError::Operands { .. })),
            "{short:?}"
        );
        let no_rows = Shape { rows: 0, ..shape };
        let empty = product(
            form,
            Rows::F32(&[]),
            Weights::F32(&weight),
            no_rows,
            &mut [],
        );
        assert!(
            matches!(empty, Err(ProductError::Operands { .. })),
            "{empty:?}"
        );
    }
    assert_eq!(out, vec![0.0; 6], "a refused product writes nothing");
}
