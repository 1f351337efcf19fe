//! The kernel's softmax of attention's score rows against the exact one (f64), on hidden keys, and on
//! the shapes it refuses.

mod common;

use common::values;
use sharpdraft_kernel::softmax::{has_body, softmax_rows};
use sharpdraft_kernel::KernelForm;

/// The form with a softmax body that this CPU runs, or `None` (the test then says it skipped).
fn form_with_a_body() -> Option<KernelForm> {
    let form = common::forms_this_cpu_runs()
        .into_iter()
        .find(|f| has_body(*f));
    if form.is_none() {
        sharpdraft_testing::skip_for_this_machine(
            "this CPU has no softmax body (AVX2 + FMA); attention keeps libtorch's",
        );
    }
    form
}

/// The softmax of `row` in f64 from its f32 differences to the maximum (which any f32 softmax rounds
/// first: for scores of tens that rounding alone is worth some 16 ulp of a weight).
fn exact(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let exps: Vec<f64> = row.iter().map(|&x| ((x - max) as f64).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

/// The spacing of f32 values at `x`'s magnitude (2^-23 times the power of 2 at or below it).
fn ulp(x: f64) -> f64 {
    let x = x as f32;
    if x == 0.0 || !x.is_normal() {
        return f32::MIN_POSITIVE as f64 * f32::EPSILON as f64;
    }
    f32::from_bits(x.to_bits() & 0x7f80_0000) as f64 * f32::EPSILON as f64
}

#[test]
fn every_weight_is_within_10_ulp_of_the_exact_softmax_whatever_the_rows_length_and_spread() {
    let Some(form) = form_with_a_body() else {
        return;
    };
    for (length, spread) in [
        (1, 1.0),
        (7, 3.0),
        (8, 10.0),
        (9, 30.0),
        (4096, 12.0),
        (4100, 90.0),
    ] {
        let original: Vec<f32> = values(3 * length, length as u64)
            .iter()
            .map(|v| v * spread)
            .collect();
        let mut rows = original.clone();
        assert!(softmax_rows(form, &mut rows, length).expect("whole rows"));
        for (row, got) in original.chunks(length).zip(rows.chunks(length)) {
            let total: f64 = got.iter().map(|&p| p as f64).sum();
            assert!(
                (total - 1.0).abs() < 1e-5,
                "{length} values, spread {spread}: sum {total}"
            );
            for (p, want) in got.iter().zip(exact(row)) {
                // 10 ulp of the weight (an ulp: the spacing of f32 values at its magnitude; the
                // worst here is about 9, the sum's rounding and the exponential's together); below
                // f32's normal range the exact weight rounds to 0 or a subnormal.
                let tolerance = 10.0 * ulp(want) + 1e-37;
                assert!(
                    (*p as f64 - want).abs() <= tolerance,
                    "{length} values, spread {spread}: {p} against {want}"
                );
            }
        }
    }
}

#[test]
fn hidden_keys_and_keys_far_below_the_maximum_get_weight_exactly_zero() {
    let Some(form) = form_with_a_body() else {
        return;
    };
    // 20 values: two vectors of 8 and a tail of 4, hidden keys in each.
    let mut row: Vec<f32> = values(20, 3);
    for hidden in [0, 9, 17] {
        row[hidden] = f32::NEG_INFINITY;
    }
    row[5] = -200.0;
    let mut probs = row.clone();
    assert!(softmax_rows(form, &mut probs, 20).expect("a whole row"));
    for i in [0, 5, 9, 17] {
        assert_eq!(probs[i].to_bits(), 0, "key {i}: {}", probs[i]);
    }
    assert!(probs.iter().all(|p| p.is_finite()));
}

#[test]
fn a_rows_softmax_is_the_same_to_the_bit_alone_or_among_other_rows() {
    let Some(form) = form_with_a_body() else {
        return;
    };
    // Not a multiple of 8: the tail goes through its own lanes.
    let length = 1003;
    let together_in: Vec<f32> = values(4 * length, 5).iter().map(|v| v * 8.0).collect();
    let mut together = together_in.clone();
    softmax_rows(form, &mut together, length).expect("whole rows");
    for (r, row) in together_in.chunks(length).enumerate() {
        let mut alone = row.to_vec();
        softmax_rows(form, &mut alone, length).expect("a whole row");
        let same = alone
            .iter()
            .zip(&together[r * length..(r + 1) * length])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "row {r}");
    }
}

#[test]
fn a_row_that_sees_no_key_or_holds_a_nan_gives_nan_as_libtorchs_softmax_does() {
    let Some(form) = form_with_a_body() else {
        return;
    };
    let mut unseen = vec![f32::NEG_INFINITY; 12];
    softmax_rows(form, &mut unseen, 12).expect("a whole row");
    assert!(unseen.iter().all(|p| p.is_nan()));
    let mut broken = values(19, 6);
    broken[3] = f32::NAN;
    softmax_rows(form, &mut broken, 19).expect("a whole row");
    assert!(broken.iter().all(|p| p.is_nan()), "{broken:?}");
}

#[test]
fn keys_hidden_at_the_end_of_a_row_leave_the_other_weights_the_same_to_the_bit() {
    let Some(form) = form_with_a_body() else {
        return;
    };
    // A decode step's row over 1001 keys, and a verification's over the same keys and 6 more that
    // this row does not see (its later drafts): whole vectors and tails of different lengths.
    let seen: Vec<f32> = values(1001, 10).iter().map(|v| v * 9.0).collect();
    let mut alone = seen.clone();
    softmax_rows(form, &mut alone, 1001).expect("a whole row");
    let mut longer = seen.clone();
    longer.extend([f32::NEG_INFINITY; 6]);
    softmax_rows(form, &mut longer, 1007).expect("a whole row");
    assert!(longer[1001..].iter().all(|p| *p == 0.0));
    let same = alone
        .iter()
        .zip(&longer)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "a hidden key changed a seen key's weight");
}

#[test]
fn forms_without_a_body_decline_and_leave_the_rows_as_they_were() {
    let original = values(24, 7);
    for form in [KernelForm::Neon, KernelForm::Libtorch] {
        let mut rows = original.clone();
        assert!(!softmax_rows(form, &mut rows, 8).expect("whole rows"));
        assert_eq!(rows, original, "{}", form.name());
    }
}

#[test]
fn rows_that_are_not_whole_are_refused_with_their_shape() {
    let mut rows = values(10, 8);
    let error = softmax_rows(KernelForm::Avx2, &mut rows, 4).expect_err("10 values in rows of 4");
    assert_eq!(
        error.to_string(),
        "softmax of rows of 4 over 10 values: rows must be whole and not empty"
    );
    assert!(softmax_rows(KernelForm::Avx2, &mut rows, 0).is_err());
}
