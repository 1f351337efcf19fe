//! Attention's weighted sum of value rows, in every form (and the portable loop), adds what a plain
//! sum in f64 gives, over any range of the keys, for widths that are not a multiple of any vector
//! width; a row's sum is the same to the bit in every form and whatever rows share the pass; and
//! operands that do not make the shape they claim are refused, naming it.

mod common;

use common::values;

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
fn a_rows_weighted_sum_is_the_same_to_the_bit_in_every_form_whatever_rows_share_the_pass() {
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
        // The kernel has no libtorch body: that form takes the portable loop.
        let portable_in_all = sum_of(KernelForm::Libtorch, 0..rows);
        for form in KernelForm::ALL {
            assert_eq!(
                sum_of(form, 0..rows),
                portable_in_all,
                "{rows} rows, width {width}, {}",
                form.name()
            );
            for row in [0, 4, rows - 1] {
                assert_eq!(
                    sum_of(form, row..row + 1),
                    portable_in_all[row * width..(row + 1) * width],
                    "row {row} of {rows} alone, width {width}, {}",
                    form.name()
                );
            }
        }
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
