//! The probe's statistics agree with the scalar reference of sharpdraft-math, rows land in their length
//! bins, and a real forward pass yields one record per (layer, head, bin, k).

use sharpdraft_math::mass::{split_top_k, top_k_mass};
use sharpdraft_model::CausalLm;
use sharpdraft_probe::row_statistics::row_statistics;
use sharpdraft_probe::{
    head_stats, probe_sequence, LengthBins, ProbeRecorder, ProbeSettings, RowFilter, Subject,
};
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};

#[test]
fn row_statistics_match_the_scalar_reference_including_invisible_keys() {
    tch::manual_seed(7);
    let (heads, rows, keys) = (2, 3, 40);
    let logits = Tensor::randn([heads, rows, keys], (Kind::Float, Device::Cpu)) * 2.0;
    // Row 1 sees only its first 25 keys.
    let _ = logits
        .narrow(1, 1, 1)
        .narrow(2, 25, 15)
        .fill_(f64::NEG_INFINITY);
    let scales = [1.0, 1.5, 2.0];
    let stats = row_statistics(&logits, &[1, 4], &scales);
    assert_eq!(stats.n, vec![40.0, 25.0, 40.0]);
    for h in 0..heads {
        for r in 0..rows {
            let row: Vec<f64> = Vec::<f32>::try_from(logits.get(h).get(r))
                .unwrap()
                .into_iter()
                .filter(|l| l.is_finite())
                .map(f64::from)
                .collect();
            let i = (h * rows + r) as usize;
            for k in &stats.per_k {
                let reference = top_k_mass(&row, k.k as usize, 1.0).unwrap();
                assert!(
                    (k.mass[i] - reference.mass).abs() < 1e-9,
                    "M_{} head {h} row {r}",
                    k.k
                );
                assert!(
                    (k.top_mean[i] - k.weighted_background_mean[i] - reference.dlogit_ds).abs()
                        < 1e-9,
                    "gap"
                );
                let (_, background) = split_top_k(&row, k.k as usize).unwrap();
                let mean = background.iter().sum::<f64>() / background.len() as f64;
                let var = background.iter().map(|l| (l - mean).powi(2)).sum::<f64>()
                    / background.len() as f64;
                assert!(
                    (k.background_mean[i] - mean).abs() < 1e-9
                        && (k.background_var[i] - var).abs() < 1e-9,
                    "background moments"
                );
                for (s, at) in scales.iter().zip(&k.mass_at_scale) {
                    assert!(
                        (at[i] - top_k_mass(&row, k.k as usize, *s).unwrap().mass).abs() < 1e-9,
                        "M at s = {s}"
                    );
                }
            }
            let lse = row.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l));
            let z: f64 = row.iter().map(|l| (l - lse).exp()).sum();
            let p0 = (row[0] - lse).exp() / z;
            assert!((stats.sink_share[i] - p0).abs() < 1e-9, "sink share");
        }
    }
}

#[test]
fn sampled_counts_fall_in_their_bins() {
    let bins = LengthBins {
        n0: 64.0,
        lowest: -2,
        highest: 3,
    };
    let counts = bins.sample_counts(4, 17, 400);
    assert!(counts.windows(2).all(|w| w[0] < w[1]));
    assert!(counts
        .iter()
        .all(|&n| (17..=400).contains(&n) && bins.bin_of(n as f64).is_some()));
    for bin in -2..=2 {
        assert_eq!(
            counts
                .iter()
                .filter(|&&n| bins.bin_of(n as f64) == Some(bin))
                .count(),
            4,
            "bin {bin}"
        );
    }
    assert_eq!(bins.bin_of(64.0 * 8.0), Some(3));
    assert_eq!(bins.bin_of(64.0 * 16.0), None);
}

#[test]
fn probing_a_causal_model_records_every_layer_head_bin_and_k() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    let model = CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let tokens: Vec<i64> = (0..120).map(|i| (i * 7 + 3) % 60 + 2).collect();
    let bins = LengthBins {
        n0: 32.0,
        lowest: -1,
        highest: 1,
    };
    let settings = ProbeSettings {
        bins,
        ks: vec![1, 4],
        scales: vec![1.0, 1.5, 2.0],
    };
    let mut recorder = ProbeRecorder::new(settings, RowFilter::All, None);
    let counts = bins.sample_counts(3, 5, 120);
    let mut seen = 0;
    probe_sequence(
        Subject::Causal(&model.net),
        &model.net,
        &tokens,
        &counts,
        16,
        &mut recorder,
        &mut |done| seen = done,
    )
    .unwrap();
    assert_eq!(seen, 120);
    let (records, curves) = recorder.records();
    let c = &model.net.config;
    assert_eq!(records.len(), c.num_layers * c.num_heads as usize * 3 * 2);
    assert_eq!(curves.len(), records.len() * 3);
    for r in &records {
        assert_eq!(r.rows, 3);
        let (lo, hi) = bins.range(r.bin);
        assert!(r.n >= lo && r.n < hi, "{r:?}");
        assert!(r.mass > 0.0 && r.mass < 1.0 && r.sink_share > 0.0 && r.entropy > 0.0);
    }
    // The value-ranked top-k mass grows with the scale (Lemma 1).
    for w in curves.windows(2).filter(|w| {
        w[0].layer == w[1].layer
            && w[0].head == w[1].head
            && w[0].bin == w[1].bin
            && w[0].k == w[1].k
    }) {
        assert!(w[1].mass > w[0].mass, "{w:?}");
    }
    let heads = head_stats(&records, &curves, 4);
    assert_eq!(heads.len(), c.num_layers * c.num_heads as usize);
    assert!(heads
        .iter()
        .all(|h| h.bins.len() == 3 && h.bins.iter().all(|b| b.curve.len() == 3)));
}

#[test]
fn eagle3_and_dflash_drafters_are_probed_on_the_targets_features() {
    use sharpdraft_draft::dflash::{write_random_dflash, RandomDFlashOptions};
    use sharpdraft_draft::eagle3::{write_random_head, RandomHeadOptions};
    use sharpdraft_draft::{DFlashDrafter, Eagle3Drafter, TreeShape};
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    let target = CausalLm::load(&fixture, Device::Cpu, Kind::Float).unwrap();
    let tokens: Vec<i64> = (0..100).map(|i| (i * 11 + 5) % 60 + 2).collect();
    let bins = LengthBins {
        n0: 32.0,
        lowest: -1,
        highest: 1,
    };
    let counts = bins.sample_counts(2, 8, 100);
    let settings = ProbeSettings {
        bins,
        ks: vec![1, 4],
        scales: vec![1.0, 2.0],
    };
    let dir = tempfile::tempdir().unwrap();

    write_random_head(
        &dir.path().join("eagle"),
        &target.net,
        &RandomHeadOptions::default(),
    )
    .unwrap();
    let mut eagle = Eagle3Drafter::load(
        &dir.path().join("eagle"),
        &target.net,
        TreeShape::chain(2),
        sharpdraft_model::Sampling::greedy(),
        128,
    )
    .unwrap();
    let mut recorder = ProbeRecorder::new(settings.clone(), RowFilter::All, None);
    probe_sequence(
        Subject::Eagle3(&mut eagle),
        &target.net,
        &tokens,
        &counts,
        32,
        &mut recorder,
        &mut |_| {},
    )
    .unwrap();
    let (records, _) = recorder.records();
    // One layer of 4 heads, 3 bins, 2 k; every sampled count recorded once per head.
    assert_eq!(records.len(), 4 * 3 * 2);
    assert_eq!(
        records
            .iter()
            .filter(|r| r.k == 1 && r.head == 0)
            .map(|r| r.rows)
            .sum::<usize>(),
        counts.len()
    );

    let options = RandomDFlashOptions {
        layers: 2,
        block_size: 4,
        sliding_window: None,
        mask_token: 63,
        seed: 1,
    };
    write_random_dflash(&dir.path().join("dflash"), &target.net, &options).unwrap();
    let mut dflash = DFlashDrafter::load(&dir.path().join("dflash"), &target.net, 128).unwrap();
    let mut recorder = ProbeRecorder::new(settings, RowFilter::All, None);
    probe_sequence(
        Subject::DFlash(&mut dflash),
        &target.net,
        &tokens,
        &counts,
        32,
        &mut recorder,
        &mut |_| {},
    )
    .unwrap();
    let (records, _) = recorder.records();
    assert_eq!(records.len(), 2 * 4 * 3 * 2, "two layers");
    // Every block contributes its 4 rows, all seeing p + B keys (exactly the sampled count).
    assert_eq!(
        records
            .iter()
            .filter(|r| r.k == 1 && r.head == 0 && r.layer == 0)
            .map(|r| r.rows)
            .sum::<usize>(),
        counts.len() * 4
    );
}
