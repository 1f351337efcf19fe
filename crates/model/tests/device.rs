//! Device selection, and the same tensor statistics on CUDA when a GPU is present.
use sharpdraft_model::{cuda_available, parse_device};
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
        sharpdraft_testing::skip_for_this_machine("no CUDA device visible to libtorch");
        return;
    }
    let device = parse_device("cuda").unwrap();
    tch::manual_seed(5);
    let logits = Tensor::randn([32, 4096], (Kind::Float, Device::Cpu)) * 2.0;
    // The top-16 softmax mass of each row at scale 1.4: [32] per device, in f64.
    let mass = |logits: &Tensor| {
        (logits.to_kind(Kind::Double) * 1.4)
            .softmax(-1, Kind::Double)
            .topk(16, -1, true, true)
            .0
            .sum_dim_intlist(-1, false, Kind::Double)
    };
    let cpu = mass(&logits);
    let gpu = mass(&logits.to_device(device));
    let diff = (cpu - gpu.to_device(Device::Cpu))
        .abs()
        .max()
        .double_value(&[]);
    assert!(diff < 1e-9, "max |M_cpu - M_cuda| = {diff}");
}
