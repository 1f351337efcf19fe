//! Derivation.md §3 (Model B: top-k of n i.i.d. Gaussians).
mod common;

use common::{assert_close, gaussian, rng};
use sharpdraft_math::mass::{logit, split_top_k};
use sharpdraft_math::roots::brent_root;
use sharpdraft_math::{ModelB, RowLogits};

const N0: f64 = 2048.0;

fn model() -> ModelB {
    ModelB::new(8, 2.0, N0).unwrap()
}

#[test]
fn the_semi_analytic_correction_reproduces_the_table() {
    let m = model();
    for (ratio, expected) in [
        (2.0, 1.122),
        (4.0, 1.236),
        (8.0, 1.345),
        (16.0, 1.448),
        (32.0, 1.547),
        (64.0, 1.642),
    ] {
        assert_close(
            m.exact_scale(ratio * N0).unwrap(),
            expected,
            5e-4,
            &format!("s_B2({ratio} n0)"),
        );
    }
}

#[test]
fn the_slopes_reproduce_the_table() {
    let m = model();
    assert_close(m.refined_slope(), 0.187, 5e-4, "refined closed form");
    assert_close(
        m.crude_slope(),
        0.128,
        5e-4,
        "crude 1/(sigma sqrt(2 ln n0))",
    );
    assert_close(
        m.semi_analytic_slope().unwrap(),
        0.181,
        5e-4,
        "semi-analytic",
    );
    assert_close(
        m.crude_scale(64.0 * N0).unwrap(),
        1.475,
        5e-4,
        "crude s at 64 n0",
    );
}

#[test]
fn the_semi_analytic_correction_tracks_seeded_monte_carlo_roots() {
    // Exact correction of the expected value-ranked top-k mass of i.i.d. N(0, 4) rows.
    let m = model();
    let mut r = rng(11);
    let rows = |r: &mut rand::rngs::StdRng, n: usize, count: usize| -> Vec<RowLogits> {
        (0..count)
            .map(|_| RowLogits::from_logits(&gaussian(r, n, 0.0, 2.0), 8).unwrap())
            .collect()
    };
    let mean = |rows: &[RowLogits], s: f64| {
        rows.iter().map(|x| x.mass(s).mass).sum::<f64>() / rows.len() as f64
    };
    let reference = rows(&mut r, N0 as usize, 600);
    let target = mean(&reference, 1.0);
    for (ratio, table_mc) in [(2usize, 1.119), (4, 1.229)] {
        let long = rows(&mut r, ratio * N0 as usize, 120);
        let root = brent_root(
            "mean M",
            |s| logit(mean(&long, s)) - logit(target),
            0.5,
            4.0,
            1e-10,
        )
        .unwrap();
        assert_close(root, table_mc, 0.02, &format!("MC root at {ratio} n0"));
        let semi = m.exact_scale((ratio as f64) * N0).unwrap();
        assert!(
            (semi - root).abs() < 0.12 * (root - 1.0),
            "semi-analytic {semi} vs MC {root}"
        );
    }
    // Sanity of the helper: split_top_k keeps the k largest.
    let (top, bg) = split_top_k(&[3.0, 1.0, 2.0], 1).unwrap();
    assert_eq!((top, bg), (vec![3.0], vec![2.0, 1.0]));
}

#[test]
fn model_b_rejects_a_zero_spread_by_name() {
    assert!(ModelB::new(8, 0.0, N0)
        .unwrap_err()
        .to_string()
        .contains("invalid sigma = 0"));
    assert!(ModelB::new(8, 1.0, 8.0)
        .unwrap_err()
        .to_string()
        .contains("invalid n0 = 8"));
}
