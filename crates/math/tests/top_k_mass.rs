//! Derivation.md §1: the top-k mass, identity (I1) and Lemma 1 (monotonicity).
mod common;

use common::{assert_close, gaussian, rng};
use proptest::prelude::*;
use sharpdraft_math::mass::{scale_for_mass, split_top_k};
use sharpdraft_math::{top_k_mass, MathError};

#[test]
fn the_logit_derivative_equals_the_top_minus_background_tilted_mean() {
    let mut r = rng(1);
    for _ in 0..20 {
        let row = gaussian(&mut r, 300, 0.0, 1.5);
        for s in [0.3, 1.0, 2.5] {
            let h = 1e-5;
            let numeric = (top_k_mass(&row, 8, s + h).unwrap().logit
                - top_k_mass(&row, 8, s - h).unwrap().logit)
                / (2.0 * h);
            let at = top_k_mass(&row, 8, s).unwrap();
            assert_close(at.dlogit_ds, numeric, 1e-6, "dG/ds");
            let second = (top_k_mass(&row, 8, s + h).unwrap().dlogit_ds
                - top_k_mass(&row, 8, s - h).unwrap().dlogit_ds)
                / (2.0 * h);
            assert_close(at.d2logit_ds2, second, 1e-5, "d2G/ds2");
        }
    }
}

#[test]
fn at_zero_scale_the_mass_is_k_over_n() {
    let row = gaussian(&mut rng(2), 100, 0.0, 2.0);
    assert_close(
        top_k_mass(&row, 4, 0.0).unwrap().mass,
        0.04,
        1e-12,
        "M_k(n, 0)",
    );
}

#[test]
fn the_logit_stays_exact_when_the_mass_rounds_to_one() {
    let mut row = vec![0.0; 50];
    row[0] = 1000.0;
    let m = top_k_mass(&row, 1, 1.0).unwrap();
    assert_close(
        m.logit,
        1000.0 - 49f64.ln(),
        1e-9,
        "G with one dominant key",
    );
}

#[test]
fn the_per_row_correction_recovers_the_scale_that_produced_a_mass() {
    let row = gaussian(&mut rng(3), 500, 0.0, 1.0);
    for s in [0.5, 1.0, 1.7, 3.0] {
        let target = top_k_mass(&row, 4, s).unwrap().mass;
        assert_close(
            scale_for_mass(&row, 4, target).unwrap(),
            s,
            1e-8,
            "root of M_k(s) = target",
        );
    }
}

#[test]
fn bad_rows_are_errors_that_name_the_value() {
    let err = top_k_mass(&[1.0, 2.0, 3.0], 3, 1.0).unwrap_err();
    assert!(
        matches!(err, MathError::InvalidParameter { name: "n", .. }),
        "{err}"
    );
    let err = top_k_mass(&[1.0, f64::NAN, 3.0], 1, 1.0).unwrap_err();
    assert!(err.to_string().contains("logit = NaN"), "{err}");
    let err = top_k_mass(&[1.0, 2.0], 0, 1.0).unwrap_err();
    assert!(err.to_string().contains("invalid k = 0"), "{err}");
    let err = top_k_mass(&[1.0, 2.0], 1, -1.0).unwrap_err();
    assert!(err.to_string().contains("invalid s = -1"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Lemma 1: for the value-ranked top-k, s -> M_k(n, s) is strictly increasing.
    #[test]
    fn the_value_ranked_top_k_mass_increases_with_the_scale(
        row in prop::collection::vec(-20.0f64..20.0, 3..200),
        k_frac in 0.0f64..1.0,
        s in 0.0f64..5.0,
        ds in 0.01f64..2.0,
    ) {
        let k = 1 + ((row.len() - 2) as f64 * k_frac) as usize;
        let (top, background) = split_top_k(&row, k).unwrap();
        prop_assume!(top.last().unwrap() > background.first().unwrap());
        let lower = top_k_mass(&row, k, s).unwrap();
        let upper = top_k_mass(&row, k, s + ds).unwrap();
        prop_assert!(upper.logit > lower.logit, "G({}) = {} <= G({}) = {}", s + ds, upper.logit, s, lower.logit);
        prop_assert!(lower.dlogit_ds >= 0.0);
    }

    #[test]
    fn the_mass_lies_between_k_over_n_and_one(
        row in prop::collection::vec(-20.0f64..20.0, 3..100),
        s in 0.0f64..5.0,
    ) {
        let m = top_k_mass(&row, 1, s).unwrap().mass;
        prop_assert!(m >= 1.0 / row.len() as f64 - 1e-12 && m <= 1.0);
    }
}
