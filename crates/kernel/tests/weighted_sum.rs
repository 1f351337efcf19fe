//! Attention's weighted sum of value rows, in every form (and the portable loop), adds what a plain
//! sum in f64 gives, over any range of the keys, for widths that are not a multiple of any vector
//! width; a row's sum is the same to the bit whatever rows share the pass, and in every form this CPU
//! runs, each of which fuses a product into its sum; and operands that do not make the shape they
//! claim are refused, naming it.

mod common;

use common::{forms_this_cpu_runs, values};

use sharpdraft_kernel::weighted_sum::WeightedSum;
use sharpdraft_kernel::KernelForm;

#[test]
fn a_weighted_sum_over_a_range_of_keys_adds_the_plain_sum_in_every_form() {
    for (rows, keys, width) in [(1, 5, 64), (12, 300, 64), (3, 17, 19), (16, 40, 128)] {
        let weights = values(rows * keys, 1);
        let vals = values(keys * width, 2);
        let sum = WeightedSum {
            weights: &weights,
            values: &vals,
            rows,
            keys,
            width,
        };
        let range = keys / 3..keys;
        let start = values(rows * width, 3);
        let want: Vec<f64> = (0..rows * width)
            .map(|i| {
                let (r, d) = (i / width, i % width);
                start[i] as f64
                    + range
                        .clone()
                        .map(|k| weights[r * keys + k] as f64 * vals[k * width + d] as f64)
                        .sum::<f64>()
            })
            .collect();
        for form in KernelForm::ALL {
            let mut out = start.clone();
            sum.add_to(form, range.clone(), &mut out).unwrap();
            let worst = out
                .iter()
                .zip(&want)
                .map(|(o, w)| (*o as f64 - w).abs())
                .fold(0.0, f64::max);
            assert!(
                worst < 1e-4,
                "{} rows, {keys} keys, width {width}, {}: off by {worst}",
                rows,
                form.name()
            );
        }
    }
}

#[test]
fn a_rows_weighted_sum_is_the_same_to_the_bit_whatever_rows_share_the_pass_and_in_every_fused_form()
{
    // 300 keys from key 7: blocks of 128 and a part block; 13 and 14 rows: AVX2's groups of 3 and a
    // last group of 1 or 2.
    for (rows, width) in [(13, 64), (14, 64), (13, 128), (14, 128)] {
        let (keys, range) = (300, 7..300);
        let weights = values(rows * keys, 6);
        let vals = values(keys * width, 7);
        let start = values(rows * width, 8);
        let sum_of = |form: KernelForm, rows: std::ops::Range<usize>| {
            let sum = WeightedSum {
                weights: &weights[rows.start * keys..rows.end * keys],
                values: &vals,
                rows: rows.len(),
                keys,
                width,
            };
            let mut out = start[rows.start * width..rows.end * width].to_vec();
            sum.add_to(form, range.clone(), &mut out).unwrap();
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        for form in KernelForm::ALL {
            let all = sum_of(form, 0..rows);
            for row in [0, 4, rows - 1] {
                assert_eq!(
                    sum_of(form, row..row + 1),
                    all[row * width..(row + 1) * width],
                    "row {row} of {rows} alone, width {width}, {}",
                    form.name()
                );
            }
        }
        // The forms this CPU runs each take a fused multiply-add per key in the same order.
        for pair in forms_this_cpu_runs().windows(2) {
            assert_eq!(
                sum_of(pair[0], 0..rows),
                sum_of(pair[1], 0..rows),
                "{rows} rows, width {width}: {} against {}",
                pair[0].name(),
                pair[1].name()
            );
        }
    }
}

#[test]
fn every_form_this_cpu_runs_rounds_each_product_and_its_sum_once() {
    // Key 0 puts -1 in the accumulator; key 1's product (1 + 2^-13)(1 - 2^-13) = 1 - 2^-26 rounds to 1
    // in f32, so a product rounded before its sum leaves 0, and a fused one leaves -2^-26.
    let (eps, width) = (2f32.powi(-13), 64);
    let weights = [-1.0, 1.0 + eps];
    let mut vals = vec![0.0; 2 * width];
    vals[0] = 1.0;
    vals[width] = 1.0 - eps;
    let sum = WeightedSum {
        weights: &weights,
        values: &vals,
        rows: 1,
        keys: 2,
        width,
    };
    for form in forms_this_cpu_runs() {
        let mut out = vec![0.0; width];
        sum.add_to(form, 0..2, &mut out).unwrap();
        assert_eq!(out[0], -(2f32.powi(-26)), "{}", form.name());
    }
}

#[test]
fn a_weighted_sum_whose_operands_do_not_make_its_shape_is_refused() {
    let (weights, vals) = (vec![0.0; 6], vec![0.0; 8]);
    let sum = WeightedSum {
        weights: &weights,
        values: &vals,
        rows: 2,
        keys: 3,
        width: 4,
    };
    let mut out = vec![0.0; 8];
    let short = sum
        .add_to(KernelForm::Avx2, 0..3, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        short.contains("2 rows over 3 keys of width 4") && short.contains("8 values"),
        "{short}"
    );
    let vals = vec![0.0; 12];
    let sum = WeightedSum {
        values: &vals,
        ..sum
    };
    let past = sum
        .add_to(KernelForm::Avx2, 1..4, &mut out)
        .unwrap_err()
        .to_string();
    assert!(past.contains("1..4") && past.contains("0..3"), "{past}");
}
