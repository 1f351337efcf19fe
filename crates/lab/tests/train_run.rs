//! `sharpdraft train` end to end on the real default target (when fetched; `make test` fetches it): a
//! short PARD run writes a loadable drafter, its loss curve as parquet and PNG, resumes, and refuses to
//! mix two configs in one folder.
use sharpdraft_draft::PardDrafter;
use sharpdraft_lab::table::Table;
use sharpdraft_lab::train;
use sharpdraft_model::{registry, CausalLm};
use tch::{Device, Kind};

const CONFIG: &str = "target: smollm2-135m-instruct
method: pard
out: OUT
n0: 32
windows: 2
steps: 4
checkpoint_every: 2
data:
  - text_file: corpus.txt
pard: {layers: 1, mask_token: 16, copies: 3}
";

#[test]
fn a_short_training_run_writes_a_drafter_and_its_loss_curve_and_resumes() {
    let Ok(target_dir) = registry::resolve("smollm2-135m-instruct") else {
        eprintln!("skipped: smollm2-135m-instruct is not fetched (run `sharpdraft fetch smollm2-135m-instruct`)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("drafter");
    std::fs::write(
        dir.path().join("corpus.txt"),
        "It was the best of times, it was the worst of times, it was the age of wisdom. ".repeat(8),
    )
    .unwrap();
    let config = dir.path().join("train.yaml");
    std::fs::write(&config, CONFIG.replace("OUT", out.to_str().unwrap())).unwrap();
    assert_eq!(train::run(&config).unwrap(), out);

    let curve = Table::read_parquet(&out.join("loss.parquet")).unwrap();
    assert_eq!(curve.i64s("step").unwrap(), &[1, 2, 3, 4]);
    assert!(curve
        .f64s("loss")
        .unwrap()
        .iter()
        .all(|l| l.is_finite() && *l > 0.0));
    assert!(std::fs::read(out.join("loss.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    let target = CausalLm::load(&target_dir, Device::Cpu, Kind::Float).unwrap();
    let drafter = PardDrafter::new(
        CausalLm::load(&out, Device::Cpu, Kind::Float).unwrap(),
        &target,
        4,
        64,
    )
    .unwrap();
    assert_eq!(
        (drafter.mask_token(), drafter.training_length()),
        (16, Some(32))
    );

    // More steps continue the run; the first four are kept.
    std::fs::write(
        &config,
        CONFIG
            .replace("OUT", out.to_str().unwrap())
            .replace("steps: 4", "steps: 6"),
    )
    .unwrap();
    train::run(&config).unwrap();
    let resumed = Table::read_parquet(&out.join("loss.parquet")).unwrap();
    assert_eq!(
        resumed.f64s("loss").unwrap()[..4],
        curve.f64s("loss").unwrap()[..]
    );
    assert_eq!(resumed.rows(), 6);

    // Another config in the same folder is refused before any compute.
    std::fs::write(
        &config,
        CONFIG
            .replace("OUT", out.to_str().unwrap())
            .replace("layers: 1", "layers: 2"),
    )
    .unwrap();
    let err = format!("{:#}", train::run(&config).unwrap_err());
    assert!(err.contains("holds a run of another config"), "{err}");
}
