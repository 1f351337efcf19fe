//! Seeded synthetic attention rows shared by the numerical tests.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `count` i.i.d. N(mean, sigma^2) logits.
pub fn gaussian(rng: &mut StdRng, count: usize, mean: f64, sigma: f64) -> Vec<f64> {
    let normal = Normal::new(mean, sigma).unwrap();
    (0..count).map(|_| normal.sample(rng)).collect()
}

/// One Model A row: `relevant` planted logits followed by a background drawn by distance r = 1, 2, ...
/// with mean `-decay * ln(1 + r / 512)` (0 for a stationary head). Prefixes of a long row are rows at
/// shorter lengths with common random numbers, as in derivation-check.py §E.
pub fn planted_row(
    rng: &mut StdRng,
    relevant: &[f64],
    n: usize,
    sigma: f64,
    decay: f64,
) -> Vec<f64> {
    let mut row = relevant.to_vec();
    let noise = gaussian(rng, n - relevant.len(), 0.0, sigma);
    row.extend(
        noise
            .iter()
            .enumerate()
            .map(|(r, z)| z - decay * (1.0 + (r + 1) as f64 / 512.0).ln()),
    );
    row
}

/// `k` advantages spread evenly over `delta +- spread` (derivation-check.py `head_rel`).
pub fn spread_advantages(k: usize, delta: f64, spread: f64) -> Vec<f64> {
    if k == 1 {
        return vec![delta];
    }
    (0..k)
        .map(|i| delta - spread + 2.0 * spread * i as f64 / (k - 1) as f64)
        .collect()
}

pub fn assert_close(actual: f64, expected: f64, tol: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= tol,
        "{what}: got {actual:.6}, expected {expected:.6} (tolerance {tol:e})"
    );
}
