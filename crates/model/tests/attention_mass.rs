//! The tensor top-k mass agrees with the reference implementation in sharpdraft-math.
use sharpdraft_math::top_k_mass;
use sharpdraft_model::top_k_mass_batch;
use tch::{Device, Kind, Tensor};

#[test]
fn batched_tensor_mass_equals_the_per_row_reference() {
    tch::manual_seed(3);
    let logits = Tensor::randn([16, 300], (Kind::Float, Device::Cpu)) * 1.7;
    for s in [0.5, 1.0, 2.0] {
        let batch = top_k_mass_batch(&logits, 8, s).unwrap();
        for row in 0..16 {
            let values: Vec<f64> = Vec::<f32>::try_from(logits.get(row))
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect();
            let reference = top_k_mass(&values, 8, s).unwrap();
            let got = |t: &Tensor| t.double_value(&[row]);
            assert!((got(&batch.mass) - reference.mass).abs() < 1e-12);
            assert!((got(&batch.logit) - reference.logit).abs() < 1e-10);
            assert!((got(&batch.gap) - reference.dlogit_ds).abs() < 1e-10);
        }
    }
}

#[test]
fn invisible_keys_given_as_minus_infinity_do_not_count() {
    let visible = Tensor::from_slice(&[3.0f64, 1.0, 0.5, -1.0]).view([1, 4]);
    let padded =
        Tensor::from_slice(&[3.0f64, 1.0, f64::NEG_INFINITY, 0.5, -1.0, f64::NEG_INFINITY])
            .view([1, 6]);
    let a = top_k_mass_batch(&visible, 1, 1.3).unwrap();
    let b = top_k_mass_batch(&padded, 1, 1.3).unwrap();
    assert!((a.logit.double_value(&[0]) - b.logit.double_value(&[0])).abs() < 1e-12);
    assert!((a.gap.double_value(&[0]) - b.gap.double_value(&[0])).abs() < 1e-12);
}

#[test]
fn a_bad_shape_or_k_names_the_tensor() {
    let flat = Tensor::zeros([5], (Kind::Float, Device::Cpu));
    assert!(top_k_mass_batch(&flat, 1, 1.0)
        .err()
        .unwrap()
        .to_string()
        .contains("tensor logits: expected [rows, n]"));
    let rows = Tensor::zeros([2, 4], (Kind::Float, Device::Cpu));
    assert!(top_k_mass_batch(&rows, 4, 1.0)
        .err()
        .unwrap()
        .to_string()
        .contains("k = 4 must lie in [1, n = 4)"));
}
