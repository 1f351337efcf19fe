//! A model's linear weights as the GGUF file it was imported from stores them (the dtype `gguf`): the
//! blocks `sharpdraft import gguf` keeps in `model.blocks.safetensors`, mapped, and multiplied as they
//! are into every pass on the CPU (`sharpdraft_kernel::quantized`), so a decode step or a verification
//! of a few drafts reads the file's bytes, not the f32 weights' four to eight times as many. A prompt's
//! prefill ([`prompt`]) of more than [`BLOCK_ROWS`] rows multiplies the f32 weights the same import
//! wrote, dequantized from the same blocks: libtorch's GEMM, fast on many rows. Every other pass takes
//! the blocks whatever its row count, and the kernel computes each row alone, so a decode step and a
//! verification (of any proposal, a tree of hundreds of drafts included) agree exactly, and greedy
//! speculative output is the model's own.

use crate::error::{ModelError, Result};
use crate::layers::Linear;
use sharpdraft_kernel::quantized::{product, BlockFormat, QuantizedWeight};
use std::path::Path;
use std::sync::Arc;
use tch::{Device, Kind, Tensor};

/// The file an import writes beside `model.safetensors` (`sharpdraft_store::gguf::BLOCKS`).
pub const BLOCKS_FILE: &str = "model.blocks.safetensors";

/// The most rows a prompt's prefill multiplies by the blocks; more take the f32 weights.
pub const BLOCK_ROWS: i64 = 16;

thread_local! {
    /// Inside [`prompt`] on this thread.
    static PROMPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is inside [`prompt`].
pub fn in_prompt() -> bool {
    PROMPT.with(std::cell::Cell::get)
}

/// Runs `prefill`, the passes over a prompt: those of more than [`BLOCK_ROWS`] rows multiply the f32
/// weights rather than the blocks (the prompt is prefilled once, for the target alone and every
/// drafting arm alike, so its numerics are shared).
pub fn prompt<T>(prefill: impl FnOnce() -> T) -> T {
    crate::cpu::few_rows::with_setting(&PROMPT, true, prefill)
}

/// One weight's blocks: where they lie in the mapped file, their type and the matrix they form.
pub struct WeightBlocks {
    file: Arc<memmap2::Mmap>,
    start: usize,
    len: usize,
    pub format: BlockFormat,
    pub outputs: usize,
    pub inputs: usize,
}

impl WeightBlocks {
    pub fn bytes(&self) -> &[u8] {
        &self.file[self.start..self.start + self.len]
    }

    fn weight(&self) -> QuantizedWeight<'_> {
        QuantizedWeight {
            format: self.format,
            data: self.bytes(),
            outputs: self.outputs,
            inputs: self.inputs,
        }
    }

    /// `x W^T` for `x [.., inputs]` (any kind, taken as f32) on the CPU, `[.., outputs]` f32; `None`
    /// for another device, or more than [`BLOCK_ROWS`] rows of a prompt (the f32 weight serves those).
    pub fn product(&self, x: &Tensor) -> Option<Tensor> {
        let size = x.size();
        let inputs = *size.last()?;
        if x.device() != Device::Cpu || inputs != self.inputs as i64 || x.requires_grad() {
            return None;
        }
        let rows = x.numel() as i64 / inputs.max(1);
        if rows < 1 || (rows > BLOCK_ROWS && PROMPT.with(std::cell::Cell::get)) {
            return None;
        }
        let started = std::time::Instant::now();
        let x = x.to_kind(Kind::Float).contiguous().view([rows, inputs]);
        let out = Tensor::empty([rows, self.outputs as i64], (Kind::Float, Device::Cpu));
        // SAFETY: `x` and `out` are contiguous f32 CPU tensors of exactly these lengths, alive here.
        let (xs, ys) = unsafe {
            (
                std::slice::from_raw_parts(x.data_ptr() as *const f32, (rows * inputs) as usize),
                std::slice::from_raw_parts_mut(
                    out.data_ptr() as *mut f32,
                    rows as usize * self.outputs,
                ),
            )
        };
        let threads = crate::cpu::few_rows::kernel_threads()
            .unwrap_or_else(crate::cpu::few_rows::threads_outside_a_pass);
        product(
            &self.weight(),
            xs,
            rows as usize,
            ys,
            threads,
            sharpdraft_kernel::form::current(),
        )
        .ok()?;
        crate::cpu::few_rows::count_kernel_time(started);
        let mut shape = size;
        *shape.last_mut()? = self.outputs as i64;
        Some(out.view(shape.as_slice()))
    }
}

/// A model folder's blocks file, mapped, with the type each linear weight is stored in.
pub struct BlocksFile {
    file: Arc<memmap2::Mmap>,
    path: std::path::PathBuf,
    /// Every linear weight's stored type (`Q4_K`, `F32` ...), from the file's metadata.
    types: std::collections::HashMap<String, String>,
    /// Each weight kept as blocks: (byte range in the file, `[outputs, bytes of a row]`).
    tensors: std::collections::HashMap<String, (usize, usize, usize)>,
}

impl BlocksFile {
    /// Maps `dir`'s blocks file; refuses a folder without one, naming what makes it.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(BLOCKS_FILE);
        let file = std::fs::File::open(&path).map_err(|e| {
            ModelError::io(
                &path,
                format!(
                    "{e}: dtype gguf runs a model's weights as its GGUF file stores them, which `sharpdraft fetch` (of a model imported from GGUF) and `sharpdraft import gguf` keep there; fetch or import it again"
                ),
            )
        })?;
        // SAFETY: the blocks file is written whole by an import and never changed in place; the mapping
        // is read-only and kept alive by every weight that reads it.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ModelError::io(&path, e))?;
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| ModelError::io(&path, format!("not a safetensors file: {e}")))?;
        let types = metadata.metadata().clone().unwrap_or_default();
        let views = safetensors::SafeTensors::deserialize(&map)
            .map_err(|e| ModelError::io(&path, format!("not a safetensors file: {e}")))?;
        let base = map.as_ptr() as usize;
        let mut tensors = std::collections::HashMap::new();
        for (name, view) in views.tensors() {
            let shape = view.shape();
            let start = view.data().as_ptr() as usize - base;
            if shape.len() != 2 || view.dtype() != safetensors::Dtype::U8 {
                return Err(ModelError::tensor(
                    name,
                    format!(
                        "blocks {:?} {shape:?}: bytes [outputs, row] expected",
                        view.dtype()
                    ),
                ));
            }
            tensors.insert(name, (start, view.data().len(), shape[0]));
        }
        Ok(Self {
            file: Arc::new(map),
            path,
            types,
            tensors,
        })
    }

    /// The blocks of weight `name` `[outputs, inputs]`: `Ok(None)` for a weight stored as plain floats
    /// (it runs as the f32 weight), an error naming the weight and its type for a block type the
    /// kernel does not multiply, or for a weight the file does not list.
    pub fn blocks(
        &self,
        name: &str,
        outputs: usize,
        inputs: usize,
    ) -> Result<Option<WeightBlocks>> {
        let stored = self.types.get(name).ok_or_else(|| {
            ModelError::tensor(
                name,
                format!("{} lists no such weight", self.path.display()),
            )
        })?;
        if matches!(stored.as_str(), "F32" | "F16" | "BF16") {
            return Ok(None);
        }
        let format = BlockFormat::from_name(stored).ok_or_else(|| {
            let runs: Vec<&str> = BlockFormat::ALL.iter().map(|f| f.name()).collect();
            ModelError::tensor(
                name,
                format!(
                    "stored as {stored}, a block type dtype gguf does not run ({}); load it as f32 or bf16",
                    runs.join(", ")
                ),
            )
        })?;
        let &(start, len, rows) = self.tensors.get(name).ok_or_else(|| {
            ModelError::tensor(
                name,
                format!(
                    "{} records it as {stored} but holds no blocks for it",
                    self.path.display()
                ),
            )
        })?;
        let blocks = WeightBlocks {
            file: self.file.clone(),
            start,
            len,
            format,
            outputs,
            inputs,
        };
        if rows != outputs {
            return Err(ModelError::tensor(
                name,
                format!("{rows} rows of blocks for a weight of {outputs} outputs"),
            ));
        }
        QuantizedWeight::new(format, blocks.bytes(), outputs, inputs)
            .map_err(|e| ModelError::tensor(name, e.to_string()))?;
        Ok(Some(blocks))
    }

    /// Attaches to `linear` its blocks, where it is stored as blocks.
    pub fn attach(&self, linear: &Linear) -> Result<()> {
        let size = linear.weight.size();
        let (outputs, inputs) = (size[0] as usize, size[1] as usize);
        if let Some(blocks) = self.blocks(linear.name(), outputs, inputs)? {
            linear
                .attach_blocks(blocks)
                .map_err(|reason| ModelError::tensor(linear.name(), reason))?;
        }
        Ok(())
    }
}

/// Writes `dir`'s blocks file from its f32 weights, each linear weight (and the LM head, or the tied
/// embedding) quantized to Q8_0 blocks (round to nearest, each block's largest magnitude at 127): a
/// model made here, not imported from GGUF (a tiny test model, a drafter trained here), then runs as
/// stored too. Refuses a folder that already has one.
pub fn write_q8_0_blocks(dir: &Path) -> Result<()> {
    let path = dir.join(BLOCKS_FILE);
    if path.exists() {
        return Err(ModelError::io(&path, "already there: not overwritten"));
    }
    let model = crate::CausalLm::load(dir, Device::Cpu, Kind::Float)?;
    let mut weights: Vec<(String, Tensor)> = model
        .net
        .linears()
        .into_iter()
        .map(|l| (l.name().to_string(), l.weight.shallow_clone()))
        .collect();
    if model.net.config.tie_word_embeddings {
        weights.push((
            "model.embed_tokens.weight".into(),
            model.net.lm_head_weight().shallow_clone(),
        ));
    }
    let mut blocks = Vec::new();
    let mut types = std::collections::HashMap::new();
    for (name, weight) in &weights {
        let (outputs, inputs) = (weight.size()[0] as usize, weight.size()[1] as usize);
        if !inputs.is_multiple_of(32) {
            types.insert(name.clone(), "F32".to_string());
            continue;
        }
        let values = Vec::<f32>::try_from(weight.to_kind(Kind::Float).contiguous().view(-1))
            .map_err(|e| ModelError::tensor(name, e.to_string()))?;
        let mut bytes = Vec::with_capacity(outputs * inputs / 32 * 34);
        for block in values.chunks_exact(32) {
            let largest = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = half::f16::from_f32(largest / 127.0);
            let inverse = if scale.to_f32() > 0.0 {
                1.0 / scale.to_f32()
            } else {
                0.0
            };
            bytes.extend(scale.to_le_bytes());
            bytes.extend(
                block
                    .iter()
                    .map(|v| (v * inverse).round().clamp(-127.0, 127.0) as i8 as u8),
            );
        }
        types.insert(name.clone(), "Q8_0".to_string());
        blocks.push((name.clone(), vec![outputs, inputs / 32 * 34], bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = blocks
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::U8, shape.clone(), bytes)
                .map(|view| (name.clone(), view))
                .map_err(|e| ModelError::tensor(name, e.to_string()))
        })
        .collect::<Result<_>>()?;
    safetensors::serialize_to_file(views, Some(types), &path).map_err(|e| ModelError::io(&path, e))
}
