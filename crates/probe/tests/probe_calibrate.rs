//! `sharpdraft probe` and `sharpdraft calibrate` as library runs on the tiny llama fixture: the probe
//! writes one row per (layer, head, bin, k) and is reused when finished; calibration writes a schedule
//! that fits the model, a table of betas for every estimator, and both plots. Bad configs name the key.

use sharpdraft_math::{Beta, Estimator, ScaleSchedule};
use sharpdraft_probe::calibrate::{calibrate_probe, CalibrateConfig, ReferenceKind};
use sharpdraft_probe::run::{read_probe, run_config, ProbeConfig};
use sharpdraft_report::table::Table;
use std::path::{Path, PathBuf};

/// The llama fixture with a word-level tokenizer of its 64 ids (words "w0" .. "w63").
fn fixture_with_tokenizer(dir: &Path) -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(source.join(file), model.join(file)).unwrap();
    }
    let vocab: serde_json::Map<String, serde_json::Value> =
        (0..64).map(|i| (format!("w{i}"), i.into())).collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    });
    std::fs::write(model.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    model
}

fn probe_yaml(dir: &Path, extra: &str) -> String {
    format!(
        "target: {}\nmethod: target\nn0: 16\nout: {}\nbins: {{lowest: -1, highest: 2}}\nrows_per_bin: 3\nsequences: 2\n\
         text:\n  - text_file: text.txt\nks: [1, 4]\nscales: {{max: 2.0, step: 0.25}}\nchunk: 32\n{extra}",
        dir.join("model").display(),
        dir.join("probe").display()
    )
}

fn write_text(dir: &Path) {
    fixture_with_tokenizer(dir);
    let text: String = (0..400)
        .map(|i| format!("w{} ", (i * 37) % 61 + 2))
        .collect();
    std::fs::write(dir.join("text.txt"), text).unwrap();
}

#[test]
fn a_probe_then_a_calibration_write_statistics_a_schedule_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    write_text(dir.path());
    let config: ProbeConfig = serde_norway::from_str(&probe_yaml(dir.path(), "")).unwrap();
    let probe = run_config(&config, dir.path()).unwrap();
    let stats = Table::read_parquet(&probe.dir.join("stats.parquet")).unwrap();
    // 2 layers x 4 heads x 4 bins x 2 ks.
    assert_eq!(stats.rows(), 2 * 4 * 4 * 2);
    let again = run_config(&config, dir.path()).unwrap();
    assert_eq!(
        again.bins, probe.bins,
        "a finished probe is read back, not rerun"
    );
    // Retrained weights under the same name: probed again, not read back.
    let weights = dir.path().join("model/model.safetensors");
    let retrained: Vec<(String, tch::Tensor)> = tch::Tensor::read_safetensors(&weights)
        .unwrap()
        .into_iter()
        .map(|(name, t)| (name, t * 1.5))
        .collect();
    tch::Tensor::write_safetensors(&retrained, &weights).unwrap();
    let reprobed = run_config(&config, dir.path()).unwrap();
    assert_ne!(
        reprobed.bins, probe.bins,
        "a probe of other weights is not reused"
    );
    // Other words under the same file name: probed again, not read back.
    let other: String = (0..400)
        .map(|i| format!("w{} ", (i * 11) % 59 + 3))
        .collect();
    std::fs::write(dir.path().join("text.txt"), other).unwrap();
    let over_other_text = run_config(&config, dir.path()).unwrap();
    assert_ne!(
        over_other_text.bins, reprobed.bins,
        "a probe over another text is not reused"
    );
    let calibration = CalibrateConfig {
        probe: None,
        probe_dir: Some(probe.dir.clone()),
        k: 4,
        estimator: Estimator::ExactLeastSquares,
        per_head: true,
        beta_max: 2.0,
        out: dir.path().join("calibration").display().to_string(),
        reference: ReferenceKind::Drafter,
        target_probe: None,
        target_probe_dir: None,
    };
    let out = calibrate_probe(&calibration, &read_probe(&probe.dir).unwrap(), None).unwrap();
    let schedule = ScaleSchedule::load(&out.schedule_path).unwrap();
    schedule.check_shape(2, 4).unwrap();
    assert!(matches!(schedule.beta, Beta::PerHead(_)));
    assert_eq!(schedule.n0, 16.0);
    for file in ["betas.parquet", "mass_vs_n.png", "beta_per_head.png"] {
        assert!(out.dir.join(file).exists(), "{file}");
    }
    let betas = Table::read_parquet(&out.dir.join("betas.parquet")).unwrap();
    assert_eq!(
        betas.rows(),
        out.fits.len() * 8,
        "one row per estimator and head"
    );
}

#[test]
fn bad_probe_and_calibrate_configs_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.yaml");
    std::fs::write(&path, probe_yaml(dir.path(), "rows_per_bn: 3\n")).unwrap();
    let err = format!("{:#}", ProbeConfig::load(&path).unwrap_err());
    assert!(err.contains("rows_per_bn"), "{err}");
    std::fs::write(&path, probe_yaml(dir.path(), "").replace("n0: 16\n", "")).unwrap();
    let err = format!("{:#}", ProbeConfig::load(&path).unwrap_err());
    assert!(err.contains("n0"), "{err}");
    std::fs::write(
        &path,
        probe_yaml(dir.path(), "").replace("lowest: -1", "lowest: 4"),
    )
    .unwrap();
    let err = format!("{:#}", ProbeConfig::load(&path).unwrap_err());
    assert!(err.contains("bins"), "{err}");
    let calibrate = dir.path().join("calibrate.yaml");
    std::fs::write(&calibrate, "out: x\nk: 4\n").unwrap();
    let err = format!("{:#}", CalibrateConfig::load(&calibrate).unwrap_err());
    assert!(err.contains("probe"), "{err}");
    std::fs::write(&calibrate, "probe_dir: p\nout: x\nestimator: bogus\n").unwrap();
    let err = format!("{:#}", CalibrateConfig::load(&calibrate).unwrap_err());
    assert!(err.contains("estimator"), "{err}");
}

#[test]
fn a_probe_whose_tables_changed_after_writing_is_refused_not_paired_with_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    write_text(dir.path());
    let config: ProbeConfig = serde_norway::from_str(&probe_yaml(dir.path(), "")).unwrap();
    let probe = run_config(&config, dir.path()).unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(probe.dir.join("stats.parquet"), other.join("stats.parquet")).unwrap();
    // Another probe's table in this probe's folder: a different file under the same name.
    let mut bytes = std::fs::read(probe.dir.join("mass_curves.parquet")).unwrap();
    bytes.push(0);
    std::fs::write(probe.dir.join("mass_curves.parquet"), bytes).unwrap();
    let err = read_probe(&probe.dir).err().unwrap().to_string();
    assert!(
        err.contains("mass_curves.parquet") && err.contains("run the probe again"),
        "{err}"
    );
}

#[test]
fn a_new_probe_that_fails_leaves_the_finished_probe_in_its_folder_whole() {
    let dir = tempfile::tempdir().unwrap();
    write_text(dir.path());
    let config: ProbeConfig = serde_norway::from_str(&probe_yaml(dir.path(), "")).unwrap();
    let first = run_config(&config, dir.path()).unwrap();
    // Another config into the same folder, which fails after the model is loaded (too little text).
    let longer: ProbeConfig =
        serde_norway::from_str(&probe_yaml(dir.path(), "skip_tokens: 100000\n")).unwrap();
    assert!(run_config(&longer, dir.path()).is_err());
    let again = read_probe(&first.dir).unwrap();
    assert_eq!(again.bins, first.bins, "the finished probe is untouched");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("staging")),
        "no staging folder is left: {names:?}"
    );
}

/// The fixture probed as the target and calibrated against its own pooled dilution: at every bin, a head
/// is sharpened no more than against its own n0 wherever the target's pooled mass falls, and no less
/// wherever it rises.
#[test]
fn a_calibration_against_the_target_follows_the_targets_own_dilution() {
    use sharpdraft_math::{calibrate, CalibrationOptions, MassReference, TargetDilution};
    let dir = tempfile::tempdir().unwrap();
    write_text(dir.path());
    let target: ProbeConfig = serde_norway::from_str(&probe_yaml(dir.path(), "")).unwrap();
    let target_probe = run_config(&target, dir.path()).unwrap();
    let calibrate_yaml = |extra: &str| {
        format!(
            "probe_dir: {}\nk: 4\nout: {}\n{extra}",
            target_probe.dir.display(),
            dir.path().join("calibration").display()
        )
    };
    let path = dir.path().join("calibrate.yaml");
    std::fs::write(
        &path,
        calibrate_yaml(&format!(
            "reference: target\ntarget_probe_dir: {}\n",
            target_probe.dir.display()
        )),
    )
    .unwrap();
    let config = CalibrateConfig::load(&path).unwrap();
    let out = calibrate_probe(
        &config,
        &read_probe(&target_probe.dir).unwrap(),
        Some(&target_probe),
    )
    .unwrap();
    ScaleSchedule::load(&out.schedule_path)
        .unwrap()
        .check_shape(2, 4)
        .unwrap();
    // Against the drafter's own n0, on the same statistics, head by head.
    let heads = sharpdraft_probe::head_stats(&target_probe.bins, &target_probe.curves, 4);
    let dilution = TargetDilution::from_heads(&heads).unwrap();
    let own = calibrate(
        &heads,
        &CalibrationOptions {
            n0: 16.0,
            estimator: Estimator::ExactLeastSquares,
            beta_max: 2.0,
            reference: MassReference::Drafter,
        },
    )
    .unwrap();
    let against_target = out
        .fits
        .iter()
        .find(|f| f.estimator == Estimator::ExactLeastSquares)
        .unwrap();
    let mut compared = 0;
    for (own_head, target_head) in own.heads.iter().zip(&against_target.heads) {
        for ((n, s_own), (_, s_target)) in own_head.bin_scales.iter().zip(&target_head.bin_scales) {
            let (Some(s_own), Some(s_target)) = (s_own, s_target) else {
                continue;
            };
            let shift = dilution.shift(16.0, *n).unwrap();
            if shift < 0.0 {
                assert!(
                    s_target <= s_own,
                    "n {n}: the target dilutes, yet {s_target} > {s_own}"
                );
            } else {
                assert!(
                    s_target >= s_own,
                    "n {n}: the target sharpens, yet {s_target} < {s_own}"
                );
            }
            compared += 1;
        }
    }
    assert!(compared > 0);
    // A target reference without the target's probe, or on another estimator, is refused by name.
    std::fs::write(&path, calibrate_yaml("reference: target\n")).unwrap();
    let err = CalibrateConfig::load(&path).unwrap_err().to_string();
    assert!(err.contains("target_probe"), "{err}");
    std::fs::write(
        &path,
        calibrate_yaml(&format!(
            "reference: target\nestimator: local_slope\ntarget_probe_dir: {}\n",
            target_probe.dir.display()
        )),
    )
    .unwrap();
    let err = CalibrateConfig::load(&path).unwrap_err().to_string();
    assert!(err.contains("exact_least_squares"), "{err}");
}

#[test]
fn a_probe_names_its_subject_and_kind_and_the_old_method_key_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.yaml");
    let load = |yaml: String| {
        std::fs::write(&path, yaml).unwrap();
        ProbeConfig::load(&path)
    };
    let old = load(probe_yaml(dir.path(), "")).unwrap();
    let new =
        load(probe_yaml(dir.path(), "").replace("method: target", "subject: target")).unwrap();
    assert_eq!(old, new);
    assert_eq!(new.drafter_kind(), None);
    let drafter = |spelling: &str| {
        load(
            probe_yaml(dir.path(), "drafter: d\n")
                .replace("method: target", spelling)
                .replace("n0: 16\n", ""),
        )
    };
    let old = drafter("method: dflash").unwrap();
    let new = drafter("subject: drafter\nkind: dflash").unwrap();
    assert_eq!(old, new);
    assert_eq!(
        new.drafter_kind(),
        Some(sharpdraft_draft::DrafterKind::Dflash)
    );
    for (spelling, named) in [
        ("method: dflash\nsubject: drafter", "old spelling"),
        ("subject: drafter", "kind"),
        ("kind: dflash", "subject"),
    ] {
        let err = format!("{:#}", drafter(spelling).unwrap_err());
        assert!(err.contains(named), "{spelling}: {err}");
    }
}
