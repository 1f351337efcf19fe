//! The probe's statistics on CUDA: `kernels/attention_stats.cu`, compiled at run time by NVRTC (through
//! cudarc) and launched on libtorch's own tensors. It returns what [`crate::row_statistics`] returns for
//! the same rows, but streams over the keys: no `[H, rows, L]` logits tile is ever stored.
//!
//! Sharing with libtorch: the kernel runs in the device's primary context (the one libtorch uses) on the
//! legacy default stream, and reads and writes libtorch's device memory through `data_ptr`, so no copy
//! and no extra synchronisation are needed. The default stream is libtorch's current stream: the
//! workbench never sets another (tch exposes no stream guard), so the kernel is ordered after the
//! passes that wrote its inputs and before the copy that reads its output.
//!
//! Nothing here needs the CUDA toolkit to build: cudarc opens `libnvrtc` and `libcuda` on first use.

use crate::error::{ProbeError, Result};
use crate::row_statistics::{RowStatistics, TopKStatistics};
use cudarc::driver::{CudaContext, CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use sharpdraft_model::AttentionView;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use tch::{Device, Kind, Tensor};

/// The kernel's CUDA C source, embedded at build time.
pub const SOURCE: &str = include_str!("../../../kernels/attention_stats.cu");
const FUNCTION: &str = "attention_stats";
/// Threads per block, and the limits of the kernel's fixed-size buffers (`STATS_*` in the source).
const THREADS: u32 = 128;
pub const MAX_K: i64 = 64;
pub const MAX_KS: usize = 16;
pub const MAX_SCALES: usize = 64;
pub const MAX_HEAD_DIM: i64 = 256;
/// The fields per row before the per-k blocks, and per k before the scale curve.
const ROW_FIELDS: usize = 4;
const K_FIELDS: usize = 5;

/// How the kernel's `[heads, rows, fields]` f64 output is laid out (see the source's header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLayout {
    pub ks: usize,
    pub scales: usize,
}

impl OutputLayout {
    pub fn fields(&self) -> usize {
        ROW_FIELDS + self.ks * (K_FIELDS + self.scales)
    }

    /// The statistics of `heads x rows` rows from the kernel's output, in [`RowStatistics`]' head-major
    /// order (`n` from head 0, as the CPU reference gives it).
    pub fn unpack(&self, out: &[f64], heads: usize, rows: usize, ks: &[i64]) -> RowStatistics {
        let fields = self.fields();
        assert_eq!(out.len(), heads * rows * fields, "kernel output size");
        let field = |f: usize| -> Vec<f64> { out.chunks(fields).map(|row| row[f]).collect() };
        let per_k = ks
            .iter()
            .enumerate()
            .map(|(c, &k)| {
                let base = ROW_FIELDS + c * (K_FIELDS + self.scales);
                TopKStatistics {
                    k,
                    mass: field(base),
                    background_mean: field(base + 1),
                    background_var: field(base + 2),
                    top_mean: field(base + 3),
                    weighted_background_mean: field(base + 4),
                    mass_at_scale: (0..self.scales)
                        .map(|i| field(base + K_FIELDS + i))
                        .collect(),
                }
            })
            .collect();
        RowStatistics {
            n: field(0)[..rows].to_vec(),
            entropy: field(1),
            lse: field(2),
            sink_share: field(3),
            per_k,
        }
    }
}

/// Where NVRTC may be besides the loader's own search path: `$SHARPDRAFT_NVRTC_DIR`, then the CUDA
/// library folder beside the libtorch this binary was built against (`make deps` installs PyPI's
/// `nvidia-cuda-nvrtc` there, where a pip-installed torch keeps its CUDA libraries too).
fn nvrtc_folders() -> Vec<PathBuf> {
    let mut folders = Vec::new();
    if let Some(dir) = std::env::var_os("SHARPDRAFT_NVRTC_DIR") {
        folders.push(PathBuf::from(dir));
    }
    if let Some(lib) = option_env!("SHARPDRAFT_LIBTORCH_LIB") {
        folders.push(PathBuf::from(lib).join("../../nvidia/cu13/lib"));
    }
    folders
}

/// Opens NVRTC once: from [`nvrtc_folders`] by full path when it is there (its builtins library first,
/// which NVRTC itself opens by name), else wherever the loader finds it. Returns why not when it cannot.
pub fn load_nvrtc() -> std::result::Result<(), String> {
    static LOADED: OnceLock<std::result::Result<Vec<libloading::Library>, String>> =
        OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        let mut libraries = Vec::new();
        for folder in nvrtc_folders() {
            let (builtins, nvrtc) = (
                folder.join("libnvrtc-builtins.so.13.0"),
                folder.join("libnvrtc.so.13"),
            );
            if builtins.is_file() && nvrtc.is_file() {
                for path in [builtins, nvrtc] {
                    // Safety: NVRTC's initialisers only register the library.
                    let library = unsafe { libloading::Library::new(&path) }
                        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                    libraries.push(library);
                }
                break;
            }
        }
        // Safety: only dlopen; no symbol is called.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            Ok(libraries)
        } else {
            Err(format!(
                "NVRTC (libnvrtc.so.13) was not found in {:?} nor on the library path: run `make deps`, \
                 or set SHARPDRAFT_NVRTC_DIR or LD_LIBRARY_PATH to the folder holding it",
                nvrtc_folders()
            ))
        }
    });
    loaded.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Compiles the kernel to PTX with NVRTC; needs no GPU. `arch` as NVRTC takes it (`compute_90`), or
/// NVRTC's default.
pub fn compile(arch: Option<&'static str>) -> Result<Ptx> {
    load_nvrtc().map_err(|e| ProbeError::Invalid(format!("probe: {e}")))?;
    let options = CompileOptions {
        arch,
        name: Some("attention_stats.cu".into()),
        ..Default::default()
    };
    compile_ptx_with_opts(SOURCE, options).map_err(|e| {
        ProbeError::Invalid(format!(
            "probe: kernels/attention_stats.cu does not compile: {e}"
        ))
    })
}

fn cuda_error(what: &str) -> impl Fn(cudarc::driver::DriverError) -> ProbeError + '_ {
    move |e| ProbeError::Invalid(format!("probe: CUDA {what}: {e}"))
}

/// Input the kernel cannot take, named.
fn input(what: String) -> ProbeError {
    ProbeError::Invalid(format!("probe: attention statistics kernel: {what}"))
}

/// The sizes of one attention view: queries `[heads, query_rows, dim]`, keys `[kv_heads, key_count, dim]`.
struct ViewShape {
    heads: i64,
    kv_heads: i64,
    query_rows: i64,
    key_count: i64,
    dim: i64,
}

/// The view's tensors as the kernel reads them: f32 queries and keys whose last axis is contiguous
/// (other strides are passed through) and a one-byte `[T, L]` visibility mask.
fn kernel_layout(
    queries: &Tensor,
    keys: &Tensor,
    visible: Option<&Tensor>,
    query_rows: i64,
    key_count: i64,
) -> Result<(Tensor, Tensor, Option<Tensor>)> {
    // The kernel reads f32 rows whose last axis is contiguous; other strides are passed through.
    let as_rows = |t: &Tensor| {
        let t = t.to_kind(Kind::Float);
        if t.stride()[2] == 1 {
            t
        } else {
            t.contiguous()
        }
    };
    let visible = match visible {
        None => None,
        Some(mask) => {
            if mask.size() != [query_rows, key_count] {
                return Err(input(format!(
                    "visibility is {:?}, not [T, L] = [{query_rows}, {key_count}]",
                    mask.size()
                )));
            }
            // Bool is one byte of 0 or 1: the kernel's `unsigned char`.
            let mask = mask.to_kind(Kind::Bool);
            Some(if mask.stride()[1] == 1 {
                mask
            } else {
                mask.contiguous()
            })
        }
    };
    Ok((as_rows(queries), as_rows(keys), visible))
}

/// The compiled kernel, loaded on one CUDA device.
pub struct AttentionStatsKernel {
    context: Arc<CudaContext>,
    function: CudaFunction,
    device: Device,
}

impl AttentionStatsKernel {
    /// Compiles the kernel for CUDA device `ordinal` (its own compute capability) and loads it there.
    pub fn new(ordinal: usize) -> Result<Self> {
        load_nvrtc().map_err(|e| ProbeError::Invalid(format!("probe: {e}")))?;
        // Safety: only dlopen; no symbol is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(ProbeError::Invalid(
                "the CUDA driver library (libcuda.so.1) was not found".into(),
            ));
        }
        let context = CudaContext::new(ordinal).map_err(cuda_error("context"))?;
        let (major, minor) = context
            .compute_capability()
            .map_err(cuda_error("compute capability"))?;
        // NVRTC takes an architecture name with a static lifetime; there are few, so leaking one is fine.
        let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
        let module = context
            .load_module(compile(Some(arch))?)
            .map_err(cuda_error("module load"))?;
        let function = module
            .load_function(FUNCTION)
            .map_err(cuda_error("function lookup"))?;
        Ok(Self {
            context,
            function,
            device: Device::Cuda(ordinal),
        })
    }

    /// Checks a view and the asked-for rows, ks and scales against what the kernel can compute (grouped
    /// heads, head dim, ks and scales it holds, rows inside the view, every tensor on its device).
    fn check_view(
        &self,
        view: &AttentionView<'_>,
        rows: &[i64],
        ks: &[i64],
        scales: &[f64],
    ) -> Result<ViewShape> {
        let (queries, keys, visible) = (view.queries, view.keys, view.visible);
        let (heads, query_rows, dim) = queries
            .size3()
            .map_err(|_| input(format!("queries are {:?}, not [H, T, D]", queries.size())))?;
        let (kv_heads, key_count, key_dim) = keys
            .size3()
            .map_err(|_| input(format!("keys are {:?}, not [Hkv, L, D]", keys.size())))?;
        if key_dim != dim || kv_heads == 0 || heads % kv_heads != 0 {
            return Err(input(format!(
                "queries {:?} and keys {:?} do not form grouped-query attention",
                queries.size(),
                keys.size()
            )));
        }
        if dim > MAX_HEAD_DIM {
            return Err(input(format!("head dim {dim} is above {MAX_HEAD_DIM}")));
        }
        if ks.is_empty() || ks.len() > MAX_KS || ks.iter().any(|&k| !(1..=MAX_K).contains(&k)) {
            return Err(input(format!(
                "ks {ks:?}: 1 to {MAX_KS} values, each in 1..={MAX_K}"
            )));
        }
        if scales.len() > MAX_SCALES {
            return Err(input(format!(
                "{} scales; the kernel holds at most {MAX_SCALES}",
                scales.len()
            )));
        }
        if let Some(&row) = rows.iter().find(|&&r| !(0..query_rows).contains(&r)) {
            return Err(input(format!("row {row} is outside 0..{query_rows}")));
        }
        for (name, tensor) in [("queries", queries), ("keys", keys)]
            .into_iter()
            .chain(visible.map(|mask| ("visibility", mask)))
        {
            if tensor.device() != self.device {
                return Err(input(format!(
                    "{name} are on {:?}, the kernel on {:?}",
                    tensor.device(),
                    self.device
                )));
            }
        }
        Ok(ViewShape {
            heads,
            kv_heads,
            query_rows,
            key_count,
            dim,
        })
    }

    /// The kernel's index arguments on its device: `rows` and `ks` as int32 `[R]` and `[K]`, `scales`
    /// as f64 `[S]` (`[1.0]` when there are none, so the pointer is valid).
    fn arguments_on_device(
        &self,
        rows: &[i64],
        ks: &[i64],
        scales: &[f64],
    ) -> (Tensor, Tensor, Tensor) {
        let on_device = |t: Tensor| t.to_device(self.device);
        let int32 = |v: &[i64]| {
            on_device(Tensor::from_slice(
                &v.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            ))
        };
        let scales = if scales.is_empty() {
            &[1.0][..]
        } else {
            scales
        };
        (
            int32(rows),
            int32(ks),
            on_device(Tensor::from_slice(scales)),
        )
    }

    /// The statistics of query rows `rows` (indices into the view's T) for each k of `ks` and each scale
    /// of `scales`, from the view's queries `[H, T, D]`, keys `[Hkv, L, D]` and visibility `[T, L]`, all
    /// on this kernel's device: the same numbers as [`crate::row_statistics`] over the rows' logits.
    pub fn row_statistics(
        &self,
        view: &AttentionView<'_>,
        rows: &[i64],
        ks: &[i64],
        scales: &[f64],
    ) -> Result<RowStatistics> {
        let (queries, keys, visible, softmax_scale) =
            (view.queries, view.keys, view.visible, view.softmax_scale);
        let ViewShape {
            heads,
            kv_heads,
            query_rows,
            key_count,
            dim,
        } = self.check_view(view, rows, ks, scales)?;
        if rows.is_empty() {
            return Ok(OutputLayout {
                ks: ks.len(),
                scales: scales.len(),
            }
            .unpack(&[], heads as usize, 0, ks));
        }

        let (queries, keys, visible) =
            kernel_layout(queries, keys, visible, query_rows, key_count)?;
        let (row_index, ks_tensor, scale_tensor) = self.arguments_on_device(rows, ks, scales);
        let layout = OutputLayout {
            ks: ks.len(),
            scales: scales.len(),
        };
        let out = Tensor::zeros(
            [heads * rows.len() as i64 * layout.fields() as i64],
            (Kind::Double, self.device),
        );

        let pointer = |t: &Tensor| t.data_ptr() as u64;
        let (q_ptr, k_ptr, out_ptr) = (pointer(&queries), pointer(&keys), pointer(&out));
        let (mask_ptr, mask_stride) = match &visible {
            Some(mask) => (pointer(mask), mask.stride()[0]),
            None => (0u64, 0i64),
        };
        let (row_ptr, ks_ptr, scales_ptr) = (
            pointer(&row_index),
            pointer(&ks_tensor),
            pointer(&scale_tensor),
        );
        let (q_strides, k_strides) = (queries.stride(), keys.stride());
        let (heads32, kv_heads32, keys32, dim32) =
            (heads as i32, kv_heads as i32, key_count as i32, dim as i32);
        let (scale32, nk, ns) = (softmax_scale as f32, ks.len() as i32, scales.len() as i32);
        let stream = self.context.default_stream();
        let mut launch = stream.launch_builder(&self.function);
        launch
            .arg(&q_ptr)
            .arg(&q_strides[0])
            .arg(&q_strides[1])
            .arg(&k_ptr)
            .arg(&k_strides[0])
            .arg(&k_strides[1])
            .arg(&mask_ptr)
            .arg(&mask_stride)
            .arg(&row_ptr)
            .arg(&heads32)
            .arg(&kv_heads32)
            .arg(&keys32)
            .arg(&dim32)
            .arg(&scale32)
            .arg(&ks_ptr)
            .arg(&nk)
            .arg(&scales_ptr)
            .arg(&ns)
            .arg(&out_ptr);
        let config = LaunchConfig {
            grid_dim: (rows.len() as u32, heads as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // Safety: the argument list matches the kernel's signature, every pointer is a live libtorch
        // allocation on this device of the size the kernel reads or writes (checked above), and the
        // tensors outlive the launch: the copy to the host below waits for it on the same stream.
        unsafe { launch.launch(config) }.map_err(cuda_error("launch"))?;
        // A fault in the kernel surfaces here, at the first synchronising call: an error, not a panic.
        let host = out
            .f_to_device(Device::Cpu)
            .map_err(|e| input(format!("the kernel failed: {e}")))
            .and_then(|t| {
                Vec::<f64>::try_from(t).map_err(|e| input(format!("reading the output: {e}")))
            })?;
        Ok(layout.unpack(&host, heads as usize, rows.len(), ks))
    }
}
