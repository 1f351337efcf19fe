//! Device selection, and the same tensor statistics on CUDA when a GPU is present.
use sharpdraft_model::{cuda_available, parse_device, top_k_mass_batch};
use tch::{Device, Kind, Tensor};

#[test]
fn cpu_is_always_available_and_bad_names_are_named() {
    assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
    let err = parse_device("tpu").unwrap_err().to_string();
    assert!(
        err.contains("\"tpu\"") && err.contains("expected cpu, cuda or cuda:N"),
        "{err}"
    );
}

#[test]
fn asking_for_a_missing_cuda_device_is_an_error_not_a_crash() {
    let err = parse_device("cuda:99").unwrap_err().to_string();
    assert!(
        err.contains("\"cuda:99\"") && err.contains("CUDA device"),
        "{err}"
    );
}

#[test]
fn cuda_gives_the_same_top_k_mass_as_cpu() {
    if !cuda_available() {
        eprintln!("skipped: no CUDA device visible to libtorch");
        return;
    }
    let device = parse_device("cuda").unwrap();
    tch::manual_seed(5);
    let logits = Tensor::randn([32, 4096], (Kind::Float, Device::Cpu)) * 2.0;
    let cpu = top_k_mass_batch(&logits, 16, 1.4).unwrap();
    let gpu = top_k_mass_batch(&logits.to_device(device), 16, 1.4).unwrap();
    let diff = (cpu.logit - gpu.logit.to_device(Device::Cpu))
        .abs()
        .max()
        .double_value(&[]);
    assert!(diff < 1e-9, "max |G_cpu - G_cuda| = {diff}");
}
