//! Derivation.md §2 (Model A, Theorem 1) checked against its closed forms, its tables and seeded Monte Carlo.
mod common;

use common::{assert_close, gaussian, rng, spread_advantages};
use proptest::prelude::*;
use sharpdraft_math::schedule::logn_scale;
use sharpdraft_math::{CorrectionReach, ModelA, PlantedKeys};

const N0: f64 = 2048.0;

fn a1() -> ModelA {
    ModelA::new(4.0, 4.0, 1.0, N0).unwrap()
}

#[test]
fn the_exact_correction_reproduces_the_a1_table() {
    let model = a1();
    for (ratio, expected) in [
        (1.0, 1.0),
        (2.0, 1.24106),
        (4.0, 1.50511),
        (8.0, 1.80052),
        (16.0, 2.14227),
        (32.0, 2.56308),
        (64.0, 3.17636),
    ] {
        let s = model.exact_scale(ratio * N0).unwrap().unwrap();
        assert_close(s, expected, 5e-6, &format!("A1 s*({ratio} n0)"));
    }
}

#[test]
fn the_exact_correction_restores_the_training_length_logit() {
    let model = ModelA::new(8.0, 6.0, 1.5, N0).unwrap();
    let target = model.logit_mass(N0, 1.0).unwrap();
    for ratio in [1.5, 2.0, 4.0, 8.0, 16.0] {
        let s = model.exact_scale(ratio * N0).unwrap().unwrap();
        assert_close(
            model.logit_mass(ratio * N0, s).unwrap(),
            target,
            1e-10,
            "G_A(n, s*)",
        );
    }
}

#[test]
fn dilution_follows_the_odds_of_one_over_n_minus_k() {
    let model = a1();
    assert_close(model.mass(N0, 1.0).unwrap(), 0.06086, 5e-6, "M at n0");
    assert_close(
        model.mass(16.0 * N0, 1.0).unwrap(),
        0.00403,
        5e-6,
        "M at 16 n0",
    );
    assert_close(
        model.mass(64.0 * N0, 1.0).unwrap(),
        0.00101,
        5e-6,
        "M at 64 n0",
    );
}

#[test]
fn the_existence_bound_matches_the_table_and_no_root_lies_beyond_it() {
    for (k, delta, sigma, ratio) in [
        (4.0, 4.0, 1.0, 89.84),
        (8.0, 6.0, 1.5, 22.67),
        (4.0, 3.0, 1.0, 7.38),
    ] {
        let model = ModelA::new(k, delta, sigma, N0).unwrap();
        let CorrectionReach::UpTo(n_max) = model.reach() else {
            panic!("expected a finite n_max")
        };
        assert_close(n_max / N0, ratio, 5e-3, "n_max / n0");
        assert!(model.exact_scale(n_max * 0.999).unwrap().is_some());
        assert!(model.exact_scale(n_max * 1.001).unwrap().is_none());
    }
    assert_eq!(
        ModelA::new(4.0, 4.0, 0.0, N0).unwrap().reach(),
        CorrectionReach::Unbounded
    );
    assert_eq!(
        ModelA::new(4.0, 1.0, 1.0, N0).unwrap().reach(),
        CorrectionReach::NotSharpening
    );
    assert_eq!(
        ModelA::new(4.0, 1.0, 1.0, N0)
            .unwrap()
            .exact_scale(2.0 * N0)
            .unwrap(),
        None
    );
}

#[test]
fn the_tangent_slope_matches_the_table_and_a_finite_difference() {
    for (k, delta, sigma, expected) in [
        (4.0, 4.0, 1.0, 0.333986),
        (8.0, 6.0, 1.5, 0.267712),
        (4.0, 3.0, 1.0, 0.50098),
    ] {
        let model = ModelA::new(k, delta, sigma, N0).unwrap();
        assert_close(model.tangent_slope(), expected, 5e-6, "beta_tan");
        let h = 1e-5;
        let fd = (model.exact_scale(N0 * f64::exp(h)).unwrap().unwrap()
            - model.exact_scale(N0 * f64::exp(-h)).unwrap().unwrap())
            / (2.0 * h);
        assert_close(model.tangent_slope(), fd, 1e-6, "finite difference");
    }
}

#[test]
fn the_three_term_series_holds_for_small_dilution() {
    let model = a1();
    let (d, s2) = (model.d(), model.sigma * model.sigma);
    for (c, expected) in [(0.05, 1.01671322), (0.2, 1.06742434)] {
        let n = model.k + (model.n0 - model.k) * f64::exp(c);
        let exact = model.exact_scale(n).unwrap().unwrap();
        assert_close(exact, expected, 5e-8, "s* at c");
        let series =
            1.0 + c / d + s2 * c * c / (2.0 * d.powi(3)) + s2 * s2 * c.powi(3) / (2.0 * d.powi(5));
        assert_close(exact, series, 2.0 * (c / d).powi(4), "series to O(c^4)");
    }
}

#[test]
fn the_sensitivity_identity_holds() {
    let model = ModelA::new(8.0, 6.0, 1.5, N0).unwrap();
    for ratio in [2.0, 8.0, 16.0] {
        let s = model.exact_scale(ratio * N0).unwrap().unwrap();
        let c = model.dilution(ratio * N0).unwrap();
        let lhs = model.delta - model.sigma.powi(2) * s;
        assert_close(
            lhs,
            (model.d().powi(2) - 2.0 * model.sigma.powi(2) * c).sqrt(),
            1e-12,
            "Delta - sigma^2 s*",
        );
    }
}

#[test]
fn without_background_noise_the_correction_is_linear_in_c() {
    let model = ModelA::new(4.0, 5.0, 0.0, N0).unwrap();
    for ratio in [2.0, 64.0, 1e6] {
        let c = model.dilution(ratio * N0).unwrap();
        assert_close(
            model.exact_scale(ratio * N0).unwrap().unwrap(),
            1.0 + c / 5.0,
            1e-12,
            "s* at sigma = 0",
        );
    }
    // ... and the sigma -> 0 limit of the noisy formula is continuous.
    let noisy = ModelA::new(4.0, 5.0, 1e-6, N0).unwrap();
    let quiet = ModelA::new(4.0, 5.0, 0.0, N0).unwrap();
    assert_close(
        noisy.exact_scale(32.0 * N0).unwrap().unwrap(),
        quiet.exact_scale(32.0 * N0).unwrap().unwrap(),
        1e-9,
        "limit",
    );
}

#[test]
fn qwens_logn_rule_is_the_one_key_noiseless_special_case() {
    let model = ModelA::new(1.0, N0.ln(), 0.0, N0).unwrap();
    for ratio in [2.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
        let exact = model.exact_scale(ratio * N0).unwrap().unwrap();
        assert_close(exact, logn_scale(ratio * N0, N0), 1e-3, "s* vs log_n0(n)");
    }
    assert_close(
        model.exact_scale(64.0 * N0).unwrap().unwrap(),
        1.54552,
        5e-6,
        "table value",
    );
}

#[test]
fn d_recovered_from_the_measured_mass_equals_the_models_d() {
    let model = ModelA::new(8.0, 6.0, 1.5, N0).unwrap();
    let m0 = model.mass(N0, 1.0).unwrap();
    let fitted = ModelA::from_measured(8.0, N0, m0, 1.5).unwrap();
    assert_close(fitted.d(), model.d(), 1e-10, "D from (M0, k, sigma)");
}

#[test]
fn seeded_monte_carlo_agrees_with_the_closed_form_where_annealing_is_valid() {
    // Mass of the k planted keys (logit Delta) among n - k background N(0, sigma^2) keys, averaged over rows.
    let model = a1();
    let mut r = rng(7);
    let mc_mass = |r: &mut rand::rngs::StdRng, n: usize, s: f64, rows: usize| {
        (0..rows)
            .map(|_| {
                let z_b: f64 = gaussian(r, n - 4, 0.0, 1.0)
                    .iter()
                    .map(|x| (s * x).exp())
                    .sum();
                let a = 4.0 * (s * model.delta).exp();
                a / (a + z_b)
            })
            .sum::<f64>()
            / rows as f64
    };
    let target = mc_mass(&mut r, N0 as usize, 1.0, 400);
    assert_close(
        target / model.mass(N0, 1.0).unwrap(),
        1.0,
        0.005,
        "annealed M(n0,1) vs MC",
    );
    for ratio in [2usize, 8] {
        let n = ratio * N0 as usize;
        let s = model.exact_scale(n as f64).unwrap().unwrap();
        let at_s = mc_mass(&mut r, n, s, 120);
        assert_close(
            at_s / target,
            1.0,
            0.02,
            &format!("MC mass at closed-form s*({ratio} n0)"),
        );
        // Jensen: the quenched mean mass is never below the annealed one.
        assert!(mc_mass(&mut r, n, 1.0, 120) >= 0.995 * model.mass(n as f64, 1.0).unwrap());
    }
}

#[test]
fn heterogeneous_advantages_reduce_to_model_a_when_equal() {
    let planted = PlantedKeys::new(vec![4.0; 4], 1.0, N0).unwrap();
    let model = a1();
    for ratio in [0.5, 2.0, 16.0, 64.0] {
        let s = planted.exact_scale(ratio * N0).unwrap().unwrap();
        assert_close(
            s,
            model.exact_scale(ratio * N0).unwrap().unwrap(),
            1e-9,
            "H-root vs Theorem 1",
        );
    }
    assert_close(
        planted.tangent_slope(),
        model.tangent_slope(),
        1e-12,
        "tangent",
    );
    assert_eq!(
        planted.exact_scale(100.0 * N0).unwrap(),
        None,
        "beyond n_max"
    );
}

#[test]
fn heterogeneous_advantages_use_the_attention_weighted_advantage() {
    let advantages = spread_advantages(8, 7.0, 0.8);
    let planted = PlantedKeys::new(advantages.clone(), 1.3, N0).unwrap();
    let weights: Vec<f64> = advantages.iter().map(|a| a.exp()).collect();
    let weighted = advantages
        .iter()
        .zip(&weights)
        .map(|(a, w)| a * w)
        .sum::<f64>()
        / weights.iter().sum::<f64>();
    assert_close(
        planted.tangent_slope(),
        N0 / ((N0 - 8.0) * (weighted - 1.69)),
        1e-12,
        "tangent",
    );
    let h = 1e-5;
    let fd = (planted.exact_scale(N0 * f64::exp(h)).unwrap().unwrap()
        - planted.exact_scale(N0 * f64::exp(-h)).unwrap().unwrap())
        / (2.0 * h);
    assert_close(planted.tangent_slope(), fd, 1e-5, "finite difference");
}

#[test]
fn invalid_parameters_are_errors_that_name_the_value() {
    let cases = [
        (
            ModelA::new(4.0, 4.0, 1.0, 4.0).unwrap_err().to_string(),
            "invalid n0 = 4",
        ),
        (
            ModelA::new(4.0, 4.0, -1.0, N0).unwrap_err().to_string(),
            "invalid sigma = -1",
        ),
        (
            ModelA::new(0.0, 4.0, 1.0, N0).unwrap_err().to_string(),
            "invalid k = 0",
        ),
        (
            ModelA::new(4.0, f64::NAN, 1.0, N0).unwrap_err().to_string(),
            "invalid delta = NaN",
        ),
        (
            a1().exact_scale(3.0).unwrap_err().to_string(),
            "invalid n = 3",
        ),
        (
            ModelA::from_measured(4.0, N0, 1.5, 1.0)
                .unwrap_err()
                .to_string(),
            "invalid mass_at_n0 = 1.5",
        ),
    ];
    for (message, expected) in cases {
        assert!(
            message.contains(expected),
            "{message:?} should contain {expected:?}"
        );
    }
}

proptest! {
    /// s* grows with n, and faster than the tangent line (the curve is convex in c).
    #[test]
    fn the_exact_correction_increases_with_n_and_lies_above_its_tangent(
        delta in 2.0f64..10.0, sigma in 0.0f64..1.5, ratio in 1.01f64..50.0, k in 1.0f64..16.0,
    ) {
        let model = ModelA::new(k, delta, sigma, N0).unwrap();
        prop_assume!(model.d() > 0.1);
        let n = ratio * N0;
        if let (Some(s1), Some(s2)) = (model.exact_scale(n).unwrap(), model.exact_scale(n * 1.1).unwrap()) {
            prop_assert!(s2 > s1 && s1 > 1.0);
            let c = model.dilution(n).unwrap();
            prop_assert!(s1 >= 1.0 + c / model.d() - 1e-12);
        }
    }
}
