//! A GGUF file's structure checked against its own size before any reader trusts it.
//!
//! candle's GGUF reader allocates whatever a length field says (a string of 2^60 bytes, an array of
//! 2^60 values, 2^32 dimensions) and multiplies dimensions without overflow checks, so a corrupt or
//! hostile file aborts the process. This walk reads the header with the same layout (GGUF v1: 32-bit
//! lengths; v2 and v3: 64-bit) but allocates nothing a length asks for: every length is compared with the
//! bytes left in the file first, and every tensor's data range must lie inside the file. A file that
//! passes can be handed to candle; one that fails gets an error naming the field and its offset.

use crate::error::{Result, StoreError};
use std::io::{BufReader, Read};
use std::path::Path;

const GGUF_MAGIC: u32 = 0x4655_4747;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
const DEFAULT_ALIGNMENT: u64 = 32;

/// Elements per block and bytes per block of each ggml type candle reads (ggml's type ids).
pub fn ggml_type_layout(id: u32) -> Option<(u64, u64)> {
    Some(match id {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        30 => (1, 2),     // BF16
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        _ => return None,
    })
}

struct Walker<'a, R> {
    reader: R,
    position: u64,
    size: u64,
    wide: bool,
    path: &'a Path,
}

impl<R: Read> Walker<'_, R> {
    /// Tensor entry `index` of the tensor table: its name, data offset and size in bytes, once its
    /// dimensions, ggml type and block count are ones a tensor can have.
    fn tensor_entry(&mut self, index: u64) -> Result<(String, u64, u64)> {
        let name = self.string(&format!("the name of tensor {index}"))?;
        let name = String::from_utf8_lossy(&name).into_owned();
        let dims = self.u32(&format!("the dimension count of tensor {name}"))?;
        if dims > MAX_DIMS {
            return Err(self.error(format!(
                "tensor {name} has {dims} dimensions (ggml allows at most {MAX_DIMS})"
            )));
        }
        let mut elements: u64 = 1;
        for _ in 0..dims {
            let dim = self.length(&format!("a dimension of tensor {name}"))?;
            elements = elements.checked_mul(dim).ok_or_else(|| {
                self.error(format!("tensor {name}: its dimensions overflow 64 bits"))
            })?;
        }
        // An empty tensor has no data to read (and candle's reader would make a misaligned slice of it).
        if elements == 0 {
            return Err(self.error(format!("tensor {name} has a dimension of 0")));
        }
        let type_id = self.u32(&format!("the type of tensor {name}"))?;
        let (block, block_bytes) = ggml_type_layout(type_id)
            .ok_or_else(|| self.error(format!("tensor {name}: unknown ggml type {type_id}")))?;
        if elements % block != 0 {
            return Err(self.error(format!(
                "tensor {name}: {elements} elements are not a whole number of blocks of {block}"
            )));
        }
        let offset = self.u64(&format!("the data offset of tensor {name}"))?;
        let bytes = (elements / block)
            .checked_mul(block_bytes)
            .ok_or_else(|| self.error(format!("tensor {name}: its size overflows 64 bits")))?;
        Ok((name, offset, bytes))
    }

    fn error(&self, what: impl std::fmt::Display) -> StoreError {
        StoreError::io(
            self.path,
            format!("not a valid GGUF file: {what} (at byte {})", self.position),
        )
    }

    fn left(&self) -> u64 {
        self.size.saturating_sub(self.position)
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut buffer = [0u8; N];
        self.reader
            .read_exact(&mut buffer)
            .map_err(|_| self.error(format!("the file ends inside {what}")))?;
        self.position += N as u64;
        Ok(buffer)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes::<4>(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes::<8>(what)?))
    }

    /// A count or length field: 32 bits in GGUF v1, 64 bits after.
    fn length(&mut self, what: &str) -> Result<u64> {
        if self.wide {
            self.u64(what)
        } else {
            self.u32(what).map(u64::from)
        }
    }

    /// Skips `n` bytes that the file must hold.
    fn skip(&mut self, n: u64, what: &str) -> Result<()> {
        if n > self.left() {
            return Err(self.error(format!(
                "{what} claims {n} bytes, but only {} are left in the file",
                self.left()
            )));
        }
        let copied = std::io::copy(&mut (&mut self.reader).take(n), &mut std::io::sink())
            .map_err(|e| self.error(e))?;
        if copied != n {
            return Err(self.error(format!("the file ends inside {what}")));
        }
        self.position += n;
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<Vec<u8>> {
        let len = self.length(what)?;
        if len > self.left() {
            return Err(self.error(format!(
                "{what}: a string of {len} bytes, but only {} are left in the file",
                self.left()
            )));
        }
        let mut out = vec![0u8; len as usize];
        self.reader
            .read_exact(&mut out)
            .map_err(|_| self.error(format!("the file ends inside {what}")))?;
        self.position += len;
        Ok(out)
    }

    /// Skips one metadata value of `value_type`; returns it as an integer when it is one (alignment).
    fn value(&mut self, value_type: u32, what: &str, depth: usize) -> Result<Option<u64>> {
        let fixed = match value_type {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        };
        if let Some(width) = fixed {
            if width > self.left() {
                return Err(self.error(format!("the file ends inside {what}")));
            }
            let mut buffer = [0u8; 8];
            self.reader
                .read_exact(&mut buffer[..width as usize])
                .map_err(|_| self.error(format!("the file ends inside {what}")))?;
            self.position += width;
            let integer = u64::from_le_bytes(buffer);
            return Ok(match value_type {
                0 | 2 | 4 | 10 => Some(integer),
                _ => None,
            });
        }
        match value_type {
            8 => {
                self.string(what)?;
                Ok(None)
            }
            9 => {
                if depth > 2 {
                    return Err(self.error(format!("{what}: arrays nested too deep")));
                }
                let element_type = self.u32(what)?;
                let count = self.length(what)?;
                // The smallest encoding of one element bounds the count by the bytes left.
                let smallest = match element_type {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => {
                        if self.wide {
                            8
                        } else {
                            4
                        }
                    }
                    9 => {
                        if self.wide {
                            12
                        } else {
                            8
                        }
                    }
                    other => {
                        return Err(
                            self.error(format!("{what}: unknown array element type {other}"))
                        )
                    }
                };
                if count.saturating_mul(smallest) > self.left() {
                    return Err(self.error(format!(
                        "{what}: an array of {count} values, more than the {} bytes left in the file can hold",
                        self.left()
                    )));
                }
                if fixed_width(element_type) {
                    self.skip(count * smallest, what)?;
                } else {
                    for _ in 0..count {
                        self.value(element_type, what, depth + 1)?;
                    }
                }
                Ok(None)
            }
            other => Err(self.error(format!("{what}: unknown value type {other}"))),
        }
    }
}

fn fixed_width(value_type: u32) -> bool {
    matches!(value_type, 0..=7 | 10..=12)
}

/// Checks the structure of the GGUF file at `path`: header, metadata, tensor table and tensor data
/// ranges, against the file's size. See the module documentation.
pub fn check_gguf(path: &Path) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| StoreError::io(path, e))?;
    let size = file.metadata().map_err(|e| StoreError::io(path, e))?.len();
    let mut walker = Walker {
        reader: BufReader::new(file),
        position: 0,
        size,
        wide: true,
        path,
    };
    let magic = walker.u32("the magic number")?;
    if magic != GGUF_MAGIC {
        return Err(walker.error(format!("magic 0x{magic:08x} is not GGUF's")));
    }
    let version = walker.u32("the version")?;
    walker.wide = match version {
        1 => false,
        2 | 3 => true,
        other => return Err(walker.error(format!("version {other} is not 1, 2 or 3"))),
    };
    let tensor_count = walker.length("the tensor count")?;
    let kv_count = walker.length("the metadata count")?;
    // A key-value pair takes at least a length, a type and one byte; a tensor entry a name length,
    // a dimension count, a type and an offset.
    let length_bytes = if walker.wide { 8 } else { 4 };
    if kv_count.saturating_mul(length_bytes + 5) > walker.left() {
        return Err(walker.error(format!(
            "{kv_count} metadata entries cannot fit in the file"
        )));
    }
    if tensor_count.saturating_mul(length_bytes + 16) > walker.left() {
        return Err(walker.error(format!(
            "{tensor_count} tensor entries cannot fit in the file"
        )));
    }
    let mut alignment = DEFAULT_ALIGNMENT;
    for index in 0..kv_count {
        let key = walker.string(&format!("the key of metadata entry {index}"))?;
        let key = String::from_utf8_lossy(&key).into_owned();
        let value_type = walker.u32(&format!("the type of metadata key {key}"))?;
        let integer = walker.value(value_type, &format!("metadata key {key}"), 0)?;
        if key == "general.alignment" {
            match integer {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => alignment = a,
                _ => {
                    return Err(
                        walker.error("general.alignment must be a power of two of at most 1 MiB")
                    )
                }
            }
        }
    }
    let mut tensors = Vec::with_capacity(tensor_count.min(1 << 16) as usize);
    for index in 0..tensor_count {
        tensors.push(walker.tensor_entry(index)?);
    }
    let data_start = walker.position.div_ceil(alignment) * alignment;
    for (name, offset, bytes) in tensors {
        let end = data_start
            .checked_add(offset)
            .and_then(|start| start.checked_add(bytes));
        match end {
            Some(end) if end <= size => {}
            _ => {
                return Err(StoreError::io(
                    path,
                    format!(
                        "not a valid GGUF file: tensor {name} claims {bytes} bytes at data offset {offset}, beyond the file's {size} bytes (truncated?)"
                    ),
                ))
            }
        }
    }
    Ok(())
}
