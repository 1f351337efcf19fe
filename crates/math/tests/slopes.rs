//! Derivation.md §5: fixed slopes, Theorem 2, and the deployed (per ln(n/n0)) slopes.
mod common;

use common::assert_close;
use sharpdraft_math::mass::expit;
use sharpdraft_math::slopes::{deployed_error, deployed_max_error};
use sharpdraft_math::{DeployedSlopes, ModelA, SlopesInC};

const N0: f64 = 2048.0;

struct Case {
    model: ModelA,
    tangent: f64,
    secant: f64,
    minimax: f64,
    ls: f64,
    minimax_error: f64,
    /// M/M0 at 64 n0: none, tangent, secant, minimax.
    ratios: [f64; 4],
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            model: ModelA::new(8.0, 7.0, 1.0, N0).unwrap(),
            tangent: 0.16667,
            secant: 0.17761,
            minimax: 0.17552,
            ls: 0.17466,
            minimax_error: 0.04580,
            ratios: [0.0540, 0.9299, 1.0, 0.9872],
        },
        Case {
            model: ModelA::new(4.0, 6.0, 1.2, N0).unwrap(),
            tangent: 0.21930,
            secant: 0.26567,
            minimax: 0.25457,
            ls: 0.25103,
            minimax_error: 0.13859,
            ratios: [0.0215, 0.6277, 1.0, 0.9030],
        },
        Case {
            model: ModelA::new(4.0, 4.0, 1.0, N0).unwrap(),
            tangent: 0.33333,
            secant: 0.52306,
            minimax: 0.44931,
            ls: 0.44016,
            minimax_error: 0.29983,
            ratios: [0.0166, 0.3971, 1.0, 0.7528],
        },
    ]
}

fn c_range(model: &ModelA) -> SlopesInC {
    SlopesInC::new(*model, model.dilution(64.0 * N0).unwrap()).unwrap()
}

#[test]
fn the_closed_form_slopes_reproduce_the_section_5_tables() {
    for case in cases() {
        let slopes = c_range(&case.model);
        assert_close(slopes.tangent(), case.tangent, 5e-6, "tangent");
        assert_close(slopes.secant().unwrap(), case.secant, 5e-6, "secant");
        assert_close(slopes.minimax().unwrap(), case.minimax, 5e-6, "minimax");
        assert_close(
            slopes.least_squares().unwrap(),
            case.ls,
            5e-6,
            "least squares",
        );
        assert_close(
            slopes.minimax_max_error().unwrap(),
            case.minimax_error,
            5e-6,
            "max |E| of minimax",
        );
        let g0 = case.model.logit_mass(N0, 1.0).unwrap();
        let m0 = expit(g0);
        let ratio_at_end = |beta: f64| expit(g0 + slopes.error(slopes.c_end, beta)) / m0;
        for (beta, expected) in [
            0.0,
            slopes.tangent(),
            slopes.secant().unwrap(),
            slopes.minimax().unwrap(),
        ]
        .into_iter()
        .zip(case.ratios)
        {
            assert_close(ratio_at_end(beta), expected, 5e-5, "M/M0 at 64 n0");
        }
    }
}

#[test]
fn theorem_2_gives_the_exact_logit_error_of_any_slope() {
    for case in cases() {
        let slopes = c_range(&case.model);
        let g0 = case.model.logit_mass(N0, 1.0).unwrap();
        for c in [0.1, 1.0, 3.0, 4.0] {
            let n = case.model.k + (N0 - case.model.k) * f64::exp(c);
            for beta in [0.0, 0.1, 0.3, 0.7] {
                let direct = case.model.logit_mass(n, 1.0 + beta * c).unwrap() - g0;
                assert_close(slopes.error(c, beta), direct, 1e-10, "E(c; beta)");
            }
            assert_close(
                slopes.error(c, slopes.tangent()),
                -case.model.sigma.powi(2) * c * c / (2.0 * case.model.d().powi(2)),
                1e-12,
                "tangent error",
            );
        }
    }
}

#[test]
fn no_nearby_slope_beats_the_minimax_worst_case() {
    for case in cases() {
        let slopes = c_range(&case.model);
        let worst = |beta: f64| {
            (0..=4000)
                .map(|i| slopes.error(slopes.c_end * i as f64 / 4000.0, beta).abs())
                .fold(0.0, f64::max)
        };
        let best = slopes.minimax().unwrap();
        assert_close(
            worst(best),
            slopes.minimax_max_error().unwrap(),
            1e-6,
            "grid max |E|",
        );
        for delta in [-1e-2, -1e-3, 1e-3, 1e-2] {
            assert!(
                worst(best + delta) > worst(best),
                "beta {} beats the minimax {}",
                best + delta,
                best
            );
        }
    }
}

#[test]
fn the_least_squares_slope_minimises_the_squared_scale_error() {
    for case in cases() {
        let slopes = c_range(&case.model);
        let sse = |beta: f64| {
            (1..=2000)
                .map(|i| {
                    let c = slopes.c_end * (i as f64 - 0.5) / 2000.0;
                    let n = case.model.k + (N0 - case.model.k) * c.exp();
                    (1.0 + beta * c - case.model.exact_scale(n).unwrap().unwrap()).powi(2)
                })
                .sum::<f64>()
        };
        let best = slopes.least_squares().unwrap();
        assert!(sse(best - 1e-3) > sse(best) && sse(best + 1e-3) > sse(best));
    }
}

#[test]
fn deployed_slopes_match_their_definitions() {
    for case in cases() {
        let model = case.model;
        let deployed = DeployedSlopes::new(&model, 64.0 * N0).unwrap();
        let x_end = 64f64.ln();
        assert_close(
            deployed.tangent,
            N0 / ((N0 - model.k) * model.d()),
            1e-12,
            "tangent per ln n",
        );
        // The secant is exact at the range end.
        let s_end = model.exact_scale(64.0 * N0).unwrap().unwrap();
        assert_close(
            1.0 + deployed.secant.unwrap() * x_end,
            s_end,
            1e-12,
            "secant hits s*(n_end)",
        );
        assert_close(
            deployed_error(&model, x_end, deployed.secant.unwrap()),
            0.0,
            1e-10,
            "secant error at end",
        );
        // The minimax is not beaten by nearby slopes.
        let worst = |b: f64| deployed_max_error(&model, x_end, b);
        for delta in [-1e-3, 1e-3] {
            assert!(worst(deployed.minimax + delta) > worst(deployed.minimax));
        }
        // With n0 >> k the deployed slopes differ from the slopes per unit c by O(k / n0).
        let in_c = c_range(&model);
        assert_close(
            deployed.minimax,
            in_c.minimax().unwrap(),
            0.02 * deployed.minimax,
            "minimax x vs c",
        );
        assert_close(
            deployed.least_squares.unwrap(),
            in_c.least_squares().unwrap(),
            0.02 * deployed.minimax,
            "LS x vs c",
        );
    }
}

#[test]
fn deployed_slopes_degrade_gracefully_at_the_edges_of_their_domain() {
    let not_sharpening = ModelA::new(4.0, 1.0, 1.0, N0).unwrap();
    let zero = DeployedSlopes::new(&not_sharpening, 8.0 * N0).unwrap();
    assert_eq!((zero.tangent, zero.minimax), (0.0, 0.0));
    let a3 = ModelA::new(4.0, 3.0, 1.0, N0).unwrap();
    let beyond = DeployedSlopes::new(&a3, 64.0 * N0).unwrap();
    assert_eq!(
        beyond.secant, None,
        "no exact root at 64 n0 > n_max = 7.4 n0"
    );
    assert_eq!(beyond.least_squares, None);
    // Beyond n_max the best a fixed slope can do at the range end is to sit on the peak of G_A,
    // s = Delta / sigma^2; the minimax finds it.
    assert!((1.0 + beyond.minimax * 64f64.ln() - a3.delta / a3.sigma.powi(2)).abs() < 1e-6);
    let empty = DeployedSlopes::new(&a3, N0).unwrap();
    assert_eq!(empty.minimax, empty.tangent);
}
