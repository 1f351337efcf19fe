//! Calibration cost: estimator (iii) over 64 heads x 16 length bins, as `sharpdraft calibrate` runs it on
//! probe output (8 rows per bin, long rows summarised as top-k + a 256-bin background histogram).
use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use sharpdraft_math::{calibrate, BinStats, CalibrationOptions, Estimator, HeadStats, RowLogits};

const N0: f64 = 256.0;
const HEADS: usize = 64;
const BINS: usize = 16;
const ROWS: usize = 8;
const K: usize = 8;

fn synthetic_heads() -> Vec<HeadStats> {
    let mut rng = StdRng::seed_from_u64(0);
    let noise = Normal::new(0.0, 1.0).unwrap();
    (0..HEADS)
        .map(|h| {
            let sigma = 0.8 + 0.01 * h as f64;
            let bins = (0..BINS)
                .map(|b| {
                    // 0.25 n0 ... 64 n0, log-spaced.
                    let n =
                        (N0 * 0.25 * 256f64.powf(b as f64 / (BINS - 1) as f64)).round() as usize;
                    let rows = (0..ROWS)
                        .map(|_| {
                            let mut row: Vec<f64> = (0..K).map(|i| 6.0 + 0.1 * i as f64).collect();
                            row.extend((K..n).map(|_| sigma * noise.sample(&mut rng)));
                            RowLogits::summarize(&row, K, 256).unwrap()
                        })
                        .collect();
                    BinStats::from_rows(n as f64, 1.0, rows).unwrap()
                })
                .collect();
            HeadStats {
                layer: h / 8,
                head: h % 8,
                k: K,
                bins,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let heads = synthetic_heads();
    let config = CalibrationOptions {
        n0: N0,
        estimator: Estimator::ExactLeastSquares,
        beta_max: 2.0,
        reference: Default::default(),
    };
    let mut group = c.benchmark_group("calibrate");
    group.sample_size(20);
    group.bench_function("exact_ls_64_heads_x_16_bins", |b| {
        b.iter(|| calibrate(&heads, &config).unwrap())
    });
    group.bench_function("local_slope_64_heads_x_16_bins", |b| {
        let config = CalibrationOptions {
            estimator: Estimator::LocalSlope,
            ..config.clone()
        };
        b.iter(|| calibrate(&heads, &config).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
