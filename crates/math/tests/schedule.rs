//! Derivation.md §7: the deployable schedule and its YAML form.
use sharpdraft_math::schedule::{llama4_scale, logn_scale, scale_at, yarn_scale};
use sharpdraft_math::{Beta, ScaleSchedule};

#[test]
fn every_schedule_form_round_trips_through_yaml() {
    for beta in [
        Beta::Global(0.21),
        Beta::PerLayer(vec![0.1, 0.2]),
        Beta::PerHead(vec![vec![0.1, 0.2], vec![0.0, 0.3]]),
    ] {
        let schedule = ScaleSchedule {
            n0: 256.0,
            beta,
            exact: None,
            calibrated_on: None,
        };
        let text = schedule.to_yaml_string().unwrap();
        assert_eq!(
            ScaleSchedule::from_yaml_str(&text).unwrap(),
            schedule,
            "{text}"
        );
    }
}

#[test]
fn the_scale_is_one_up_to_n0_and_grows_with_ln_n_beyond() {
    let schedule = ScaleSchedule::global(256.0, 0.25).unwrap();
    assert_eq!(schedule.scale(10.0, 0, 0), 1.0);
    assert_eq!(schedule.scale(256.0, 0, 0), 1.0);
    assert!((schedule.scale(256.0 * std::f64::consts::E, 0, 0) - 1.25).abs() < 1e-12);
}

#[test]
fn per_head_betas_apply_to_their_own_head() {
    let schedule = ScaleSchedule {
        n0: 100.0,
        beta: Beta::PerHead(vec![vec![0.1, 0.2], vec![0.3, 0.4]]),
        exact: None,
        calibrated_on: None,
    };
    schedule.check_shape(2, 2).unwrap();
    assert_eq!(schedule.beta(1, 0), 0.3);
    assert!((schedule.scale(100.0 * std::f64::consts::E, 0, 1) - 1.2).abs() < 1e-12);
}

#[test]
fn the_logn_rule_is_the_schedule_with_beta_one_over_ln_n0() {
    for n in [100.0, 256.0, 1000.0, 65536.0] {
        assert!((logn_scale(n, 256.0) - scale_at(1.0 / 256f64.ln(), n, 256.0)).abs() < 1e-12);
    }
}

#[test]
fn llama4s_factor_follows_its_formula_at_n0_4n0_and_64n0_and_is_one_below_its_floor() {
    // Llama 4's own constants: 1 + 0.1 ln(floor(n / 8192) + 1), n = pos + 1 keys seen.
    let n0 = 8192.0;
    for (n, expected) in [
        (n0, 1.0 + 0.1 * 2f64.ln()),
        (4.0 * n0, 1.0 + 0.1 * 5f64.ln()),
        (64.0 * n0, 1.0 + 0.1 * 65f64.ln()),
    ] {
        assert!((llama4_scale(n, n0, 0.1) - expected).abs() < 1e-12, "n {n}");
    }
    for n in [1.0, 256.0, 8191.0] {
        assert_eq!(llama4_scale(n, n0, 0.1), 1.0, "below the floor, n {n}");
    }
    // A step function: constant between multiples of the floor.
    assert_eq!(
        llama4_scale(8192.0, n0, 0.1),
        llama4_scale(16383.0, n0, 0.1)
    );
}

#[test]
fn yarns_factor_is_the_square_of_its_mscale_past_n0_and_one_at_or_below_it() {
    let n0 = 256.0;
    for ratio in [4.0f64, 64.0] {
        let m = 1.0 + 0.1 * ratio.ln();
        assert!(
            (yarn_scale(ratio * n0, n0) - m * m).abs() < 1e-12,
            "ratio {ratio}"
        );
    }
    for n in [1.0, 100.0, 256.0] {
        assert_eq!(yarn_scale(n, n0), 1.0, "n {n}");
    }
    // About 1 + 0.2 ln(n / n0) near n0.
    let near = yarn_scale(n0 * 1.01, n0);
    assert!((near - (1.0 + 0.2 * 1.01f64.ln())).abs() < 1e-4, "{near}");
}

#[test]
fn bad_schedules_are_errors_that_name_the_key() {
    let unknown = ScaleSchedule::from_yaml_str("n0: 256\nbeta: 0.2\nbta: 1\n")
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("bta"), "{unknown}");
    let nan = ScaleSchedule::from_yaml_str("n0: 256\nbeta: [0.1, .nan]\n")
        .unwrap_err()
        .to_string();
    assert!(nan.contains("beta[1] = NaN"), "{nan}");
    let n0 = ScaleSchedule::from_yaml_str("n0: -3\nbeta: 0.1\n")
        .unwrap_err()
        .to_string();
    assert!(n0.contains("n0 = -3"), "{n0}");
    let shape = ScaleSchedule {
        n0: 1.0,
        beta: Beta::PerLayer(vec![0.1]),
        exact: None,
        calibrated_on: None,
    }
    .check_shape(2, 4)
    .unwrap_err()
    .to_string();
    assert!(
        shape.contains("1 entries, the drafter has 2 layers"),
        "{shape}"
    );
}

#[test]
fn saving_is_atomic_and_loading_names_the_file() {
    let dir = std::env::temp_dir().join(format!("sharpdraft-schedule-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("schedule.yaml");
    let schedule = ScaleSchedule::global(512.0, 0.3).unwrap();
    schedule.save(&path).unwrap();
    assert_eq!(ScaleSchedule::load(&path).unwrap(), schedule);
    assert!(!path.with_extension("yaml.tmp").exists());
    let missing = ScaleSchedule::load(&dir.join("nope.yaml"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope.yaml"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn exact_scales_interpolate_in_log_length_and_extrapolate_the_last_segment() {
    let text = "n0: 100\nbeta: 0.2\nexact:\n  n: [200, 400]\n  s: [[[1.2, 1.6]]]\n";
    let schedule = ScaleSchedule::from_yaml_str(text).unwrap();
    schedule.check_shape(1, 1).unwrap();
    let at = |n: f64| schedule.exact_scale(n, 0, 0).unwrap();
    assert_eq!(at(50.0), 1.0);
    assert!((at(200.0) - 1.2).abs() < 1e-12);
    assert!(
        (at(200.0 * 2f64.sqrt()) - 1.4).abs() < 1e-12,
        "half way in ln n between the bins"
    );
    assert!(
        (at(800.0) - 2.0).abs() < 1e-12,
        "the last segment continues"
    );
    assert!(ScaleSchedule::global(100.0, 0.2)
        .unwrap()
        .exact_scale(800.0, 0, 0)
        .is_none());
}

#[test]
fn a_malformed_exact_table_is_an_error_that_names_the_entry() {
    let short = ScaleSchedule::from_yaml_str(
        "n0: 100\nbeta: 0.2\nexact:\n  n: [200, 400]\n  s: [[[1.2]]]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(short.contains("exact.s[0][0] has 1 bins"), "{short}");
    let below =
        ScaleSchedule::from_yaml_str("n0: 100\nbeta: 0.2\nexact:\n  n: [50]\n  s: [[[1.2]]]\n")
            .unwrap_err()
            .to_string();
    assert!(below.contains("above n0"), "{below}");
    let heads =
        ScaleSchedule::from_yaml_str("n0: 100\nbeta: 0.2\nexact:\n  n: [200]\n  s: [[[1.2]]]\n")
            .unwrap();
    assert!(heads
        .check_shape(1, 2)
        .unwrap_err()
        .to_string()
        .contains("exact.s[0] has 1 heads"));
}
