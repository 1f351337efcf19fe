//! Derivation.md §6: the three calibration estimators on seeded synthetic heads (the §E experiment at a
//! CPU-friendly n0 = 512), pooling and the guards.
mod common;

use common::{planted_row, rng, spread_advantages};
use sharpdraft_math::calibrate::Guard;
use sharpdraft_math::{
    calibrate, BinStats, CalibrationOptions, Estimator, HeadStats, MassReference, PlantedKeys,
    RowLogits, TargetDilution,
};

const N0: usize = 512;
// Bins below n0 start at n0/4: closer to k the dilution rate n/(n - k) drifts away from its value at n0
// and the local regression (ii) measures an average slope instead of the one at n0.
const SHORT: [f64; 3] = [0.25, 0.5, 1.0];
const LONG: [f64; 4] = [2.0, 4.0, 8.0, 16.0];

struct Head {
    k: usize,
    delta: f64,
    spread: f64,
    sigma: f64,
    decay: f64,
}

const HEADS: [Head; 6] = [
    Head {
        k: 4,
        delta: 6.0,
        spread: 0.5,
        sigma: 1.0,
        decay: 0.0,
    },
    Head {
        k: 8,
        delta: 7.0,
        spread: 0.8,
        sigma: 1.3,
        decay: 0.0,
    },
    Head {
        k: 2,
        delta: 5.0,
        spread: 0.3,
        sigma: 0.8,
        decay: 0.0,
    },
    Head {
        k: 16,
        delta: 8.0,
        spread: 1.0,
        sigma: 1.5,
        decay: 0.0,
    },
    Head {
        k: 4,
        delta: 6.5,
        spread: 0.5,
        sigma: 1.2,
        decay: 0.0,
    },
    // RoPE-like decaying background: the Gaussian plug-in is known to over-estimate beta here.
    Head {
        k: 4,
        delta: 5.0,
        spread: 0.5,
        sigma: 1.0,
        decay: 0.5,
    },
];

/// Records `rows` query rows per bin; each query's bins are prefixes of one long row (common random numbers).
fn record(index: usize, head: &Head, rows: usize, seed: u64) -> HeadStats {
    let mut r = rng(seed);
    let relevant = spread_advantages(head.k, head.delta, head.spread);
    let longest = (LONG[LONG.len() - 1] * N0 as f64) as usize;
    let full: Vec<Vec<f64>> = (0..rows)
        .map(|_| planted_row(&mut r, &relevant, longest, head.sigma, head.decay))
        .collect();
    let bins = SHORT
        .iter()
        .chain(LONG.iter())
        .map(|ratio| {
            let n = (ratio * N0 as f64) as usize;
            let bin_rows = full
                .iter()
                .map(|row| RowLogits::from_logits(&row[..n], head.k).unwrap())
                .collect();
            BinStats::from_rows(n as f64, 1.0, bin_rows).unwrap()
        })
        .collect();
    HeadStats {
        layer: 0,
        head: index,
        k: head.k,
        bins,
    }
}

fn config(estimator: Estimator) -> CalibrationOptions {
    CalibrationOptions {
        n0: N0 as f64,
        estimator,
        beta_max: 2.0,
        reference: MassReference::Drafter,
    }
}

fn relative(a: f64, b: f64) -> f64 {
    (a / b - 1.0).abs()
}

#[test]
fn local_estimators_recover_the_tangent_of_stationary_heads() {
    let heads: Vec<HeadStats> = HEADS
        .iter()
        .enumerate()
        .map(|(i, h)| record(i, h, 64, 100 + i as u64))
        .collect();
    let plug_in = calibrate(&heads, &config(Estimator::GaussianPlugIn)).unwrap();
    let local = calibrate(&heads, &config(Estimator::LocalSlope)).unwrap();
    for (i, head) in HEADS.iter().enumerate().filter(|(_, h)| h.decay == 0.0) {
        let truth = PlantedKeys::new(
            spread_advantages(head.k, head.delta, head.spread),
            head.sigma,
            N0 as f64,
        )
        .unwrap()
        .tangent_slope();
        assert!(
            relative(plug_in.heads[i].beta, truth) < 0.15,
            "head {i}: (i) {} vs tangent {truth}",
            plug_in.heads[i].beta
        );
        assert!(
            relative(local.heads[i].beta, truth) < 0.15,
            "head {i}: (ii) {} vs tangent {truth}",
            local.heads[i].beta
        );
    }
}

#[test]
fn the_exact_estimator_recovers_the_range_slope_including_a_decaying_head() {
    for (i, head) in HEADS.iter().enumerate() {
        // "Truth": the same estimator on a large independent sample; the calibration run records 16 rows.
        let truth = calibrate(
            &[record(i, head, 96, 500 + i as u64)],
            &config(Estimator::ExactLeastSquares),
        )
        .unwrap();
        let short_run = record(i, head, 16, 900 + i as u64);
        let fitted = calibrate(
            std::slice::from_ref(&short_run),
            &config(Estimator::ExactLeastSquares),
        )
        .unwrap();
        assert!(
            relative(fitted.pooled, truth.pooled) < 0.10,
            "head {i}: (iii) {} vs {}",
            fitted.pooled,
            truth.pooled
        );
        assert_eq!(fitted.heads[0].bin_scales.len(), LONG.len());
        if head.decay > 0.0 {
            let plug_in = calibrate(&[short_run], &config(Estimator::GaussianPlugIn)).unwrap();
            assert!(
                plug_in.pooled > 1.3 * truth.pooled,
                "plug-in {} should over-estimate {}",
                plug_in.pooled,
                truth.pooled
            );
        }
    }
}

#[test]
fn the_pooled_exact_slope_is_the_weighted_least_squares_over_all_heads_and_bins() {
    let mut heads: Vec<HeadStats> = HEADS[..3]
        .iter()
        .enumerate()
        .map(|(i, h)| record(i, h, 8, 40 + i as u64))
        .collect();
    // Decoding spends more steps at some lengths than others: weight bins by 1/n.
    let weight = |n: f64| 1.0 / n;
    for bin in heads.iter_mut().flat_map(|h| h.bins.iter_mut()) {
        bin.weight = weight(bin.n);
    }
    let fit = calibrate(&heads, &config(Estimator::ExactLeastSquares)).unwrap();
    let (mut num, mut den) = (0.0, 0.0);
    for head in &fit.heads {
        let (mut head_num, mut head_den) = (0.0, 0.0);
        for (n, s) in &head.bin_scales {
            let x = (n / N0 as f64).ln();
            head_num += weight(*n) * x * (s.unwrap() - 1.0);
            head_den += weight(*n) * x * x;
        }
        assert!(
            (head.beta - head_num / head_den).abs() < 1e-12,
            "per-head weighted LS"
        );
        num += head_num;
        den += head_den;
    }
    assert!(
        (fit.pooled - num / den).abs() < 1e-12,
        "pooled over every (head, bin)"
    );
}

fn handmade_head(top_mean: f64, background_var: f64) -> HeadStats {
    let bin = |n: f64, mass: f64| BinStats {
        n,
        weight: 1.0,
        mass,
        mass_gap: 0.1,
        top_mean,
        background_mean: 0.0,
        background_var,
        rows: Vec::new(),
        curve: Vec::new(),
    };
    HeadStats {
        layer: 2,
        head: 5,
        k: 4,
        bins: vec![bin(256.0, 0.3), bin(512.0, 0.2)],
    }
}

#[test]
fn a_head_outside_the_sharpening_regime_gets_beta_zero() {
    let fit = calibrate(
        &[handmade_head(1.0, 2.0)],
        &config(Estimator::GaussianPlugIn),
    )
    .unwrap();
    assert_eq!(fit.heads[0].beta, 0.0);
    assert_eq!(fit.heads[0].guard, Some(Guard::NotSharpening));
}

#[test]
fn betas_are_clipped_to_the_configured_maximum() {
    let tiny_gap = handmade_head(1.01, 1.0);
    let fit = calibrate(
        &[tiny_gap],
        &CalibrationOptions {
            beta_max: 0.5,
            ..config(Estimator::GaussianPlugIn)
        },
    )
    .unwrap();
    assert_eq!(fit.heads[0].beta, 0.5);
    assert_eq!(fit.heads[0].guard, Some(Guard::Clipped));
    assert!(fit.heads[0].raw > 0.5);
}

#[test]
fn missing_inputs_are_errors_that_name_the_head() {
    let mut far = handmade_head(5.0, 1.0);
    far.bins.retain(|b| b.n < 300.0);
    let err = calibrate(&[far], &config(Estimator::GaussianPlugIn))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layer 2 head 5") && err.contains("n0 = 512"),
        "{err}"
    );
    let mut one_bin = handmade_head(5.0, 1.0);
    one_bin.bins.remove(0);
    let err = calibrate(&[one_bin], &config(Estimator::LocalSlope))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least two bins"), "{err}");
    let mut no_rows = handmade_head(5.0, 1.0);
    no_rows.bins.push(BinStats {
        n: 1024.0,
        ..no_rows.bins[1].clone()
    });
    // The reference bin keeps its rows-free mean mass; the long bin cannot be root-solved without rows.
    let err = calibrate(&[no_rows], &config(Estimator::ExactLeastSquares))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bin n = 1024 has no recorded rows"), "{err}");
}

/// A head with no kept rows: at n0 = 256 its mass `reference.0` with the recorded curve `reference.1`
/// of `(s, mean M_k)`, at n = 1024 mass `long.0` with the curve `long.1`.
fn head_with_curves(reference: (f64, Vec<(f64, f64)>), long: (f64, Vec<(f64, f64)>)) -> HeadStats {
    let mut head = handmade_head(5.0, 1.0);
    let short = BinStats {
        n: 256.0,
        mass: reference.0,
        curve: reference.1,
        ..head.bins[0].clone()
    };
    let long = BinStats {
        n: 1024.0,
        mass: long.0,
        curve: long.1,
        ..head.bins[1].clone()
    };
    head.bins = vec![short, long];
    head
}

/// Estimator (iii) at n0 = 256 with beta at most 4, held at the drafter's own mass or at `reference`.
fn exact_config(reference: MassReference) -> CalibrationOptions {
    CalibrationOptions {
        n0: 256.0,
        estimator: Estimator::ExactLeastSquares,
        beta_max: 4.0,
        reference,
    }
}

#[test]
fn the_exact_estimator_solves_on_a_recorded_mass_curve_when_no_rows_are_kept() {
    // Reference mass 0.3 at n0 = 256; the long bin (n = 1024) reaches 0.3 at s = 1.5 on its curve.
    let head = head_with_curves(
        (0.3, vec![(1.0, 0.3), (2.0, 0.6)]),
        (0.2, vec![(1.0, 0.2), (1.5, 0.3), (2.0, 0.4)]),
    );
    let fit = calibrate(&[head], &exact_config(MassReference::Drafter)).unwrap();
    let (n, s) = fit.heads[0].bin_scales[0];
    assert_eq!(n, 1024.0);
    assert!((s.unwrap() - 1.5).abs() < 1e-9, "{s:?}");
    assert!((fit.heads[0].beta - 0.5 / 4f64.ln()).abs() < 1e-9);
}

/// A drafter head at n0 = 256 with mass 0.3, whose mass falls to 0.2 at n = 1024 unscaled and reaches 0.3
/// again at s = 1.5 (its recorded curve), calibrated against a target that dilutes by `target_at_1024`
/// (its pooled mass 0.3 at 256).
fn against_target(target_at_1024: f64) -> sharpdraft_math::calibrate::HeadBeta {
    let head = head_with_curves(
        (0.3, vec![(1.0, 0.3), (2.0, 0.6)]),
        (0.2, vec![(1.0, 0.2), (1.25, 0.25), (1.5, 0.3), (2.0, 0.4)]),
    );
    let dilution = TargetDilution::from_points(&[(256.0, 0.3), (1024.0, target_at_1024)]).unwrap();
    let fit = calibrate(&[head], &exact_config(MassReference::Target(dilution))).unwrap();
    fit.heads[0].clone()
}

#[test]
fn against_a_target_that_does_not_dilute_the_exact_estimator_holds_the_mass_at_n0_as_before() {
    let head = against_target(0.3);
    assert!((head.bin_scales[0].1.unwrap() - 1.5).abs() < 1e-9);
    assert!((head.beta - 0.5 / 4f64.ln()).abs() < 1e-9);
}

#[test]
fn against_a_target_that_dilutes_as_much_as_the_drafter_beta_is_zero_and_says_why() {
    for target_at_1024 in [0.2, 0.1] {
        let head = against_target(target_at_1024);
        assert_eq!(head.bin_scales[0].1, Some(1.0), "{target_at_1024}");
        assert_eq!(head.beta, 0.0);
        assert_eq!(head.guard, Some(Guard::FollowsTarget));
    }
}

#[test]
fn against_a_target_that_dilutes_half_as_much_the_drafter_is_sharpened_less() {
    // logit 0.25 lies about halfway between logit 0.2 and logit 0.3: the target-referenced mass at 1024.
    let head = against_target(0.25);
    let s = head.bin_scales[0].1.unwrap();
    assert!(s > 1.0 && s < 1.5, "{s}");
    assert!(head.beta > 0.0 && head.beta < 0.5 / 4f64.ln());
    assert_eq!(head.guard, None);
}

#[test]
fn a_target_dilution_pools_its_heads_and_refuses_lengths_it_never_saw() {
    let head = |m256: f64, m1024: f64| {
        let mut h = handmade_head(5.0, 1.0);
        h.bins[0].n = 256.0;
        h.bins[0].mass = m256;
        h.bins[1].n = 1024.0;
        h.bins[1].mass = m1024;
        h
    };
    let dilution = TargetDilution::from_heads(&[head(0.4, 0.2), head(0.6, 0.3)]).unwrap();
    let logit = |p: f64| (p / (1.0 - p)).ln();
    let want = (logit(0.2) + logit(0.3)) / 2.0 - (logit(0.4) + logit(0.6)) / 2.0;
    assert!((dilution.shift(256.0, 1024.0).unwrap() - want).abs() < 1e-12);
    assert_eq!(dilution.shift(256.0, 256.0).unwrap(), 0.0);
    let err = dilution.shift(256.0, 65536.0).unwrap_err().to_string();
    assert!(
        err.contains("beyond the target probe's longest bin"),
        "{err}"
    );
}

#[test]
fn the_exact_estimator_calibrates_a_head_whose_mass_saturates_at_one() {
    // A head that attends one-hot: mass 0.999 at n0, 0.99 at 4 n0, and exactly 1 in f64 from s = 1.5 on
    // (as a probe of the EAGLE heads records it). The root lies just above s = 1; no infinity reaches
    // the root finder.
    let head = head_with_curves(
        (0.999, vec![(1.0, 0.999), (2.0, 1.0)]),
        (0.99, vec![(1.0, 0.99), (1.5, 1.0), (2.0, 1.0)]),
    );
    let fit =
        calibrate(&[head], &exact_config(MassReference::Drafter)).unwrap_or_else(|e| panic!("{e}"));
    let s = fit.heads[0].bin_scales[0].1.unwrap();
    assert!(s > 1.0 && s < 1.1, "{s}");
    assert!(
        fit.heads[0].beta > 0.0 && fit.heads[0].beta < 0.1,
        "{:?}",
        fit.heads[0]
    );
}
