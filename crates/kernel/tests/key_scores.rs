//! Attention's scores of a few rows over a range of keys, in every form (and the portable loop), are
//! what a plain dot product in f64 gives, for row counts on both sides of a vector's lanes, widths
//! the blocked body takes and one it does not, and ranges that end inside a block of keys; operands
//! that do not make the shape they claim are refused, naming it.

mod common;

use common::values;

use sharpdraft_kernel::key_scores::KeyScores;
use sharpdraft_kernel::KernelForm;

#[test]
fn scores_over_a_range_of_keys_are_the_plain_dot_products_in_every_form() {
    for (rows, key_count, width) in [
        (1, 5, 64),
        (3, 41, 64),
        (12, 301, 64),
        (16, 77, 128),
        (9, 23, 19),
    ] {
        let queries = values(rows * width, 1);
        let keys = values(key_count * width, 2);
        let scores = KeyScores {
            queries: &queries,
            keys: &keys,
            rows,
            key_count,
            width,
        };
        let range = key_count / 3..key_count;
        let want = |r: usize, k: usize| -> f64 {
            (0..width)
                .map(|d| queries[r * width + d] as f64 * keys[k * width + d] as f64)
                .sum()
        };
        for form in KernelForm::ALL {
            let mut out = vec![f32::NAN; rows * key_count];
            scores.write_to(form, range.clone(), &mut out).unwrap();
            let mut worst = 0f64;
            for (i, &o) in out.iter().enumerate() {
                let (r, k) = (i / key_count, i % key_count);
                match range.contains(&k) {
                    true => worst = worst.max((o as f64 - want(r, k)).abs()),
                    // Columns outside the range are left as they were.
                    false => assert!(
                        o.is_nan(),
                        "{} wrote key {k} outside {range:?}",
                        form.name()
                    ),
                }
            }
            assert!(
                worst < 1e-4,
                "{rows} rows, {key_count} keys, width {width}, {}: off by {worst}",
                form.name()
            );
        }
    }
}

#[test]
fn scores_whose_operands_do_not_make_their_shape_are_refused() {
    let (queries, keys) = (vec![0.0; 8], vec![0.0; 12]);
    let scores = KeyScores {
        queries: &queries,
        keys: &keys,
        rows: 2,
        key_count: 3,
        width: 4,
    };
    let mut out = vec![0.0; 6];
    let past = scores
        .write_to(KernelForm::Avx2, 1..4, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        past.contains("2 rows over 3 keys of width 4") && past.contains("1..4"),
        "{past}"
    );
    let short = scores
        .write_to(KernelForm::Avx2, 0..3, &mut out[..5])
        .unwrap_err()
        .to_string();
    assert!(short.contains("5 outputs for 2 rows of 3 keys"), "{short}");
    let many = KeyScores { rows: 17, ..scores };
    let refused = many
        .write_to(KernelForm::Avx2, 0..3, &mut out)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("1 to 16 rows"), "{refused}");
}

#[test]
fn a_rows_scores_are_the_same_to_the_bit_whatever_rows_share_the_pass_and_wherever_parts_split_the_keys(
) {
    let key_count = 203;
    // Rows 7 and 9 of twelve or sixteen, alone (on either side of 8 lanes: AVX2 takes up to 8 rows in
    // one register, more in two), at both head widths of the blocked bodies.
    for (shared, width) in [(12, 64), (16, 64), (12, 128), (16, 128)] {
        let keys = values(key_count * width, 4);
        let many = values(shared * width, 5);
        for row in [7, 9] {
            let alone = many[row * width..(row + 1) * width].to_vec();
            for form in KernelForm::ALL {
                let scores = |queries: &[f32], rows: usize, parts: &[std::ops::Range<usize>]| {
                    let product = KeyScores {
                        queries,
                        keys: &keys,
                        rows,
                        key_count,
                        width,
                    };
                    let mut out = vec![f32::NAN; rows * key_count];
                    for part in parts {
                        product.write_to(form, part.clone(), &mut out).unwrap();
                    }
                    out
                };
                let in_the_pass = scores(&many, shared, &[0..key_count]);
                let on_its_own = scores(&alone, 1, &[0..61, 61..130, 130..key_count]);
                let bits = |scores: &[f32]| scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&in_the_pass[row * key_count..(row + 1) * key_count]),
                    bits(&on_its_own),
                    "row {row} of {shared}, width {width}, {}",
                    form.name()
                );
            }
        }
    }
}
