//! kernels/attention_stats.cu against the libtorch reference (`row_statistics`): compiled by NVRTC here,
//! its arithmetic run on the host through a small CUDA emulation (kernel_on_host/), and on a CUDA device
//! where there is one (skipped, saying so, where there is none).

use sharpdraft_model::AttentionObserver;
use sharpdraft_model::AttentionView;
use sharpdraft_probe::attention_stats_kernel::{self, OutputLayout};
use sharpdraft_probe::row_statistics::{row_statistics, RowStatistics};
use sharpdraft_probe::{AttentionStatsKernel, LengthBins, ProbeRecorder, ProbeSettings, RowFilter};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{Device, Kind, Tensor};

const KS: [i64; 4] = [1, 4, 8, 16];

fn scales() -> Vec<f64> {
    (0..9).map(|i| 1.0 + 0.125 * i as f64).collect()
}

/// One layer's attention as the engine offers it: 6 query heads over 2 KV heads, head dim 64.
struct Attention {
    queries: Tensor,
    keys: Tensor,
    visible: Option<Tensor>,
    softmax_scale: f64,
}

impl Attention {
    /// `rows` query rows over `keys` keys; causal (row t sees keys 0..=keys - rows + t) when `causal`,
    /// else a random mask that also hides key 0 from some rows. Logits spread like a trained head's.
    fn random(rows: i64, keys: i64, causal: bool, device: Device) -> Self {
        tch::manual_seed(7);
        let queries = Tensor::randn([6, rows, 64], (Kind::Float, Device::Cpu)) * 2.0;
        let keys_tensor = Tensor::randn([2, keys, 64], (Kind::Float, Device::Cpu));
        let visible = if causal {
            let key = Tensor::arange(keys, (Kind::Int64, Device::Cpu)).unsqueeze(0);
            let row = Tensor::arange(rows, (Kind::Int64, Device::Cpu)).unsqueeze(1) + (keys - rows);
            key.le_tensor(&row)
        } else {
            let mask = Tensor::rand([rows, keys], (Kind::Float, Device::Cpu)).gt(0.3);
            // Keep at least 17 keys per row visible (above the largest k).
            let _filled = mask.narrow(1, keys - 17, 17).fill_(1);
            mask
        };
        Self {
            queries: queries.to_device(device),
            keys: keys_tensor.to_device(device),
            visible: Some(visible.to_device(device)),
            softmax_scale: 1.0 / 8.0,
        }
    }

    /// As the engine hands them over: queries a permuted `[T, H, D]` buffer, keys the first `keys` slots of
    /// a larger cache, visibility rows of a larger mask; every key visible when `masked` is false.
    fn strided(rows: i64, keys: i64, masked: bool, device: Device) -> Self {
        let causal = Self::random(rows, keys, true, device);
        let queries = causal.queries.transpose(0, 1).contiguous().transpose(0, 1); // [H, T, D] view
        let cache = Tensor::cat(
            &[
                &causal.keys,
                &Tensor::zeros([2, 100, 64], (Kind::Float, device)),
            ],
            1,
        );
        let wide_mask = Tensor::cat(
            &[
                causal.visible.as_ref().unwrap(),
                &Tensor::ones([rows, 50], (Kind::Bool, device)),
            ],
            1,
        );
        assert!(
            queries.stride()[1] != 64,
            "the queries are not [H, T, D]-contiguous"
        );
        Self {
            queries,
            keys: cache.narrow(1, 0, keys),
            visible: masked.then(|| wide_mask.narrow(1, 0, keys)),
            softmax_scale: causal.softmax_scale,
        }
    }

    /// Keys repeated six times: logits tie at every top-k threshold.
    fn tied(rows: i64, device: Device) -> Self {
        let causal = Self::random(rows, 300, true, device);
        let distinct = causal.keys.narrow(1, 0, 50);
        Self {
            keys: Tensor::cat(&[&distinct; 6], 1),
            ..causal
        }
    }

    /// Queries 40x as long: a head that puts all its mass, to f64 precision, on a few keys.
    fn saturated(rows: i64, device: Device) -> Self {
        let causal = Self::random(rows, 300, true, device);
        Self {
            queries: &causal.queries * 40.0,
            ..causal
        }
    }

    fn view(&self) -> AttentionView<'_> {
        AttentionView {
            queries: &self.queries,
            keys: &self.keys,
            visible: self.visible.as_ref(),
            past: 0,
            softmax_scale: self.softmax_scale,
        }
    }

    /// The libtorch statistics of `rows`, one logits row at a time.
    fn reference(&self, rows: &[i64]) -> RowStatistics {
        let view = self.view();
        let keys = self.keys.size()[1];
        let logits: Vec<Tensor> = rows
            .iter()
            .map(|&r| view.logits(r..r + 1, 0..keys))
            .collect();
        row_statistics(&Tensor::cat(&logits, 1), &KS, &scales())
    }
}

fn assert_close(what: &str, kernel: &[f64], reference: &[f64]) {
    assert_eq!(kernel.len(), reference.len(), "{what}: length");
    for (i, (&a, &b)) in kernel.iter().zip(reference).enumerate() {
        let tolerance = 1e-4 + 1e-4 * b.abs();
        assert!(
            (a - b).abs() <= tolerance,
            "{what}[{i}]: kernel {a}, libtorch {b}"
        );
    }
}

fn assert_same_statistics(kernel: &RowStatistics, reference: &RowStatistics) {
    assert_close("n", &kernel.n, &reference.n);
    assert_close("entropy", &kernel.entropy, &reference.entropy);
    assert_close("lse", &kernel.lse, &reference.lse);
    assert_close("sink share", &kernel.sink_share, &reference.sink_share);
    for (a, b) in kernel.per_k.iter().zip(&reference.per_k) {
        let k = b.k;
        assert_close(&format!("M_{k}"), &a.mass, &b.mass);
        assert_close(
            &format!("background mean k={k}"),
            &a.background_mean,
            &b.background_mean,
        );
        assert_close(
            &format!("background var k={k}"),
            &a.background_var,
            &b.background_var,
        );
        assert_close(&format!("top mean k={k}"), &a.top_mean, &b.top_mean);
        assert_close(
            &format!("weighted background mean k={k}"),
            &a.weighted_background_mean,
            &b.weighted_background_mean,
        );
        for (s, (x, y)) in a.mass_at_scale.iter().zip(&b.mass_at_scale).enumerate() {
            assert_close(&format!("M_{k} at scale {s}"), x, y);
        }
    }
}

#[test]
fn the_kernel_compiles_with_nvrtc_without_a_gpu() {
    if let Err(why) = attention_stats_kernel::load_nvrtc() {
        // `make test` installs NVRTC: there a missing NVRTC fails.
        sharpdraft_testing::skip(why);
        return;
    }
    let ptx = attention_stats_kernel::compile(Some("compute_90")).expect("the kernel compiles");
    assert!(
        ptx.to_src().contains(".entry attention_stats"),
        "the PTX defines the attention_stats entry point"
    );
}

/// The workspace this test was built in, or `$SHARPDRAFT_SOURCE_ROOT` for a test binary carried to another
/// machine (scripts/gpu-check.sh).
fn workspace_root() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match std::env::var_os("SHARPDRAFT_SOURCE_ROOT") {
        Some(root) if !built.join("kernels").is_dir() => PathBuf::from(root),
        _ => built,
    }
}

/// Builds kernel_on_host/attention_stats_main.cpp with the kernel, or says why not.
fn host_kernel(folder: &Path) -> Result<PathBuf, String> {
    let root = workspace_root();
    let source = root.join("kernels/attention_stats.cu");
    let main = root.join("crates/probe/tests/kernel_on_host/attention_stats_main.cpp");
    if !source.is_file() || !main.is_file() {
        return Err(format!(
            "{} or {} not found (set SHARPDRAFT_SOURCE_ROOT to the workspace)",
            source.display(),
            main.display()
        ));
    }
    let binary = folder.join("attention_stats_host");
    let output = Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread"])
        .arg(format!("-DATTENTION_STATS_SOURCE=\"{}\"", source.display()))
        .arg(main)
        .arg("-o")
        .arg(&binary)
        .output()
        .map_err(|e| format!("g++ cannot be run: {e}"))?;
    assert!(
        output.status.success(),
        "the kernel does not compile as host C++:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(binary)
}

/// Runs the kernel's arithmetic on the host over `rows` of `attention` (on the CPU).
fn run_on_host(binary: &Path, folder: &Path, attention: &Attention, rows: &[i64]) -> RowStatistics {
    let (heads, query_rows, dim) = attention.queries.size3().unwrap();
    let (kv_heads, keys, _) = attention.keys.size3().unwrap();
    let mut input = Vec::new();
    let header = [
        heads,
        kv_heads,
        query_rows,
        keys,
        dim,
        rows.len() as i64,
        KS.len() as i64,
        scales().len() as i64,
        attention.visible.is_some() as i64,
    ];
    for v in header {
        input.extend_from_slice(&v.to_le_bytes());
    }
    input.extend_from_slice(&attention.softmax_scale.to_le_bytes());
    for t in [&attention.queries, &attention.keys] {
        for v in Vec::<f32>::try_from(t.flatten(0, -1)).unwrap() {
            input.extend_from_slice(&v.to_le_bytes());
        }
    }
    if let Some(visible) = &attention.visible {
        input.extend(Vec::<u8>::try_from(visible.to_kind(Kind::Uint8).flatten(0, -1)).unwrap());
    }
    for &r in rows {
        input.extend_from_slice(&(r as i32).to_le_bytes());
    }
    for k in KS {
        input.extend_from_slice(&(k as i32).to_le_bytes());
    }
    for s in scales() {
        input.extend_from_slice(&s.to_le_bytes());
    }
    let (input_path, output_path) = (folder.join("input.bin"), folder.join("output.bin"));
    std::fs::File::create(&input_path)
        .unwrap()
        .write_all(&input)
        .unwrap();
    let status = Command::new(binary)
        .arg(&input_path)
        .arg(&output_path)
        .status()
        .unwrap();
    assert!(status.success(), "the host kernel run failed");
    let bytes = std::fs::read(&output_path).unwrap();
    let out: Vec<f64> = bytes
        .chunks(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    OutputLayout {
        ks: KS.len(),
        scales: scales().len(),
    }
    .unpack(&out, heads as usize, rows.len(), &KS)
}

#[test]
fn the_kernel_run_on_the_host_gives_the_libtorch_statistics() {
    let folder = tempfile::tempdir().unwrap();
    let binary = match host_kernel(folder.path()) {
        Ok(binary) => binary,
        Err(why) => {
            sharpdraft_testing::skip(why);
            return;
        }
    };
    // Causal rows late in a long context (most keys visible, key 0 too), some rows skipped.
    let causal = Attention::random(24, 700, true, Device::Cpu);
    let rows = [0, 3, 4, 5, 17, 23];
    assert_same_statistics(
        &run_on_host(&binary, folder.path(), &causal, &rows),
        &causal.reference(&rows),
    );
    // A scattered mask (as EAGLE trees and DFlash blocks give), key 0 hidden from some rows.
    let masked = Attention::random(5, 300, false, Device::Cpu);
    let rows = [0, 1, 2, 3, 4];
    let hidden_sink = Vec::<bool>::try_from(masked.visible.as_ref().unwrap().select(1, 0)).unwrap();
    assert!(hidden_sink.contains(&false), "some row does not see key 0");
    assert_same_statistics(
        &run_on_host(&binary, folder.path(), &masked, &rows),
        &masked.reference(&rows),
    );
    // Ties at the thresholds; a head whose top-k mass rounds to 1 (its background mean stays defined).
    let rows = [0, 2, 5];
    let tied = Attention::tied(6, Device::Cpu);
    assert_same_statistics(
        &run_on_host(&binary, folder.path(), &tied, &rows),
        &tied.reference(&rows),
    );
    let saturated = Attention::saturated(6, Device::Cpu);
    let reference = saturated.reference(&rows);
    assert!(
        reference.per_k.iter().any(|k| k.mass.contains(&1.0)),
        "some row's M_k rounds to 1 in f64"
    );
    for k in &reference.per_k {
        assert!(
            k.weighted_background_mean.iter().all(|v| v.is_finite()),
            "k = {}",
            k.k
        );
    }
    assert_same_statistics(
        &run_on_host(&binary, folder.path(), &saturated, &rows),
        &reference,
    );
    // Every key visible (no mask), the inputs strided as the engine hands them over.
    let unmasked = Attention::strided(6, 400, false, Device::Cpu);
    let rows = [1, 5];
    assert_same_statistics(
        &run_on_host(&binary, folder.path(), &unmasked, &rows),
        &unmasked.reference(&rows),
    );
}

fn cuda_or_skip() -> Option<Device> {
    if tch::Cuda::is_available() {
        Some(Device::Cuda(0))
    } else {
        sharpdraft_testing::skip_for_this_machine("libtorch sees no CUDA device");
        None
    }
}

#[test]
fn the_kernel_on_cuda_gives_the_libtorch_statistics() {
    let Some(device) = cuda_or_skip() else { return };
    let kernel = AttentionStatsKernel::new(0).expect("the kernel loads on CUDA device 0");
    for (attention, rows) in [
        (
            Attention::random(32, 4096, true, device),
            vec![0, 1, 2, 9, 30, 31],
        ),
        (Attention::random(8, 777, false, device), (0..8).collect()),
        (Attention::strided(16, 1500, true, device), vec![2, 3, 15]),
        (Attention::strided(4, 300, false, device), vec![0, 3]),
        (Attention::tied(6, device), vec![0, 2, 5]),
        (Attention::saturated(6, device), vec![0, 2, 5]),
    ] {
        let stats = kernel
            .row_statistics(&attention.view(), &rows, &KS, &scales())
            .expect("the kernel runs");
        assert_same_statistics(&stats, &attention.reference(&rows));
    }
}

#[test]
fn the_probe_on_cuda_records_what_it_records_on_the_cpu() {
    let Some(device) = cuda_or_skip() else { return };
    let settings = ProbeSettings {
        bins: LengthBins {
            n0: 64.0,
            lowest: -2,
            highest: 6,
        },
        ks: KS.to_vec(),
        scales: scales(),
    };
    let record = |device: Device| {
        let attention = Attention::random(40, 2048, true, device);
        let mut recorder = ProbeRecorder::new(settings.clone(), RowFilter::All, None);
        recorder.observe(0, &attention.view());
        (recorder.statistics_path(), recorder.records())
    };
    let (cuda_path, (cuda_bins, _)) = record(device);
    let (cpu_path, (cpu_bins, _)) = record(Device::Cpu);
    assert_eq!((cuda_path, cpu_path), ("cuda kernel", "libtorch"));
    assert_eq!(cuda_bins.len(), cpu_bins.len());
    for (a, b) in cuda_bins.iter().zip(&cpu_bins) {
        assert_eq!(
            (a.layer, a.head, a.bin, a.k, a.rows),
            (b.layer, b.head, b.bin, b.k, b.rows)
        );
        assert_close(
            "bin mass",
            &[a.mass, a.gap, a.lse, a.entropy],
            &[b.mass, b.gap, b.lse, b.entropy],
        );
    }
}
