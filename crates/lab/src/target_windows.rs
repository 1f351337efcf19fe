//! The target's training windows (its features at the drafter's layers and its top-k next tokens),
//! kept beside an unfinished training run so that a run resumed after a kill reads them back instead of
//! running the target over its whole text again: about 30 min of a 2-hour recipe for
//! Qwen2.5-Coder-1.5B on 2 cores.
//!
//! The file is the run's own: written (whole, through a temporary file) once the windows are extracted,
//! read only when its key matches the run's (target, text, layers, window length and count, top-k), and
//! removed when the run reaches its last step, since a finished drafter's folder is what users copy.
//! A file of that name the run did not write is never read, overwritten or removed.

use crate::error::{Context, LabError, Result};
use sha2::{Digest, Sha256};
use sharpdraft_draft::training::{Divergence, TrainWindow};
use sharpdraft_model::Tap;
use sharpdraft_store::atomic_write::{temporary_beside, way_out};
use std::io::Read;
use std::path::Path;
use tch::{Device, Tensor};

/// The file's name inside the run's folder.
pub const FILE: &str = "target_windows.safetensors";

/// The name of the tensor that marks the file as a training run's windows; the key follows it, so the
/// header alone says whose windows the file holds.
const KEY_PREFIX: &str = "sharpdraft.target_windows.";

/// What the windows were extracted from; two runs with the same key extract the same windows.
pub struct WindowsKey<'a> {
    pub target: &'a str,
    /// The training text as target token ids.
    pub stream: &'a [i64],
    pub taps: &'a [Tap],
    pub n0: i64,
    pub max_windows: usize,
    pub top_k: i64,
}

impl WindowsKey<'_> {
    /// sha256 (hex) over every field.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.target.as_bytes());
        hasher.update(format!(
            "|{:?}|{}|{}|{}|",
            self.taps, self.n0, self.max_windows, self.top_k
        ));
        for id in self.stream {
            hasher.update(id.to_le_bytes());
        }
        format!("{:x}", hasher.finalize())
    }
}

/// What lies at [`FILE`] in a run's folder.
#[derive(Debug, PartialEq, Eq)]
pub enum Kept {
    /// No file.
    None,
    /// Windows a run wrote under this key.
    Windows { key: String },
    /// A file the workbench did not write (or cannot read as one it wrote): left alone.
    Foreign,
}

/// Reads the header of `dir`'s windows file to say what it holds, without loading its tensors.
pub fn kept(dir: &Path) -> Result<Kept> {
    let path = dir.join(FILE);
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kept::None),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    // safetensors: an 8-byte little-endian header length, then the header as JSON.
    let mut length = [0u8; 8];
    if file.read_exact(&mut length).is_err() {
        return Ok(Kept::Foreign);
    }
    let length = u64::from_le_bytes(length);
    if length > 64 << 20 {
        return Ok(Kept::Foreign);
    }
    let mut header = vec![0u8; length as usize];
    if file.read_exact(&mut header).is_err() {
        return Ok(Kept::Foreign);
    }
    let Ok(serde_json::Value::Object(entries)) = serde_json::from_slice(&header) else {
        return Ok(Kept::Foreign);
    };
    Ok(entries
        .keys()
        .find_map(|name| name.strip_prefix(KEY_PREFIX))
        .map_or(Kept::Foreign, |key| Kept::Windows {
            key: key.to_string(),
        }))
}

/// The windows kept in `dir` under `key`, on `device`; `None` when there are none under that key.
pub fn load(dir: &Path, key: &str, device: Device) -> Result<Option<Vec<TrainWindow>>> {
    if kept(dir)? != (Kept::Windows { key: key.into() }) {
        return Ok(None);
    }
    let path = dir.join(FILE);
    let named: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .into_iter()
        .collect();
    let count = named.len().saturating_sub(1);
    let mut windows = Vec::new();
    for index in 0.. {
        let name = |part: &str| format!("{index:05}.{part}");
        let Some(tokens) = named.get(&name("tokens")) else {
            break;
        };
        let tensor = |part: &str| -> Result<Tensor> {
            named
                .get(&name(part))
                .map(|t| t.to_device(device))
                .ok_or_else(|| {
                    LabError::Invalid(format!(
                        "{}: tensor {} is missing (delete the file; the run extracts the windows again)",
                        path.display(),
                        name(part)
                    ))
                })
        };
        windows.push(TrainWindow {
            tokens: Vec::<i64>::try_from(tokens)
                .with_context(|| format!("{}: tensor {}", path.display(), name("tokens")))?,
            features: named.get(&name("features")).map(|t| t.to_device(device)),
            top_ids: tensor("top_ids")?,
            top_probs: tensor("top_probs")?,
            row_weights: None,
            divergence: Divergence::ForwardKl,
        });
    }
    let per_window = 3 + usize::from(windows.first().is_some_and(|w| w.features.is_some()));
    if windows.is_empty() || windows.len() * per_window != count {
        return Err(LabError::Invalid(format!(
            "{}: {count} tensors do not make {} whole windows (delete the file; the run extracts the windows again)",
            path.display(),
            windows.len()
        )));
    }
    Ok(Some(windows))
}

/// Writes `windows` into `dir` under `key`, through a temporary file; leaves a file of that name that
/// the workbench did not write as it is (and says so).
pub fn save(dir: &Path, key: &str, windows: &[TrainWindow]) -> Result<()> {
    let path = dir.join(FILE);
    if kept(dir)? == Kept::Foreign {
        eprintln!(
            "{} is not a file this run wrote: the target's windows are not kept (a resumed run extracts them again)",
            path.display()
        );
        return Ok(());
    }
    let mut named: Vec<(String, Tensor)> = vec![(
        format!("{KEY_PREFIX}{key}"),
        Tensor::zeros([1], (tch::Kind::Uint8, Device::Cpu)),
    )];
    for (index, window) in windows.iter().enumerate() {
        let name = |part: &str| format!("{index:05}.{part}");
        named.push((name("tokens"), Tensor::from_slice(&window.tokens)));
        if let Some(features) = &window.features {
            named.push((name("features"), features.to_device(Device::Cpu)));
        }
        named.push((name("top_ids"), window.top_ids.to_device(Device::Cpu)));
        named.push((name("top_probs"), window.top_probs.to_device(Device::Cpu)));
    }
    let tmp = temporary_beside(&path);
    let written = Tensor::write_safetensors(&named, &tmp)
        .map_err(LabError::from)
        .and_then(|()| std::fs::rename(&tmp, &path).map_err(LabError::from));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        let hint = match &e {
            LabError::Io(io) => way_out(io),
            _ => "",
        };
        return Err(e).with_context(|| format!("writing {}{hint}", path.display()));
    }
    Ok(())
}

/// Removes the windows a run kept in `dir`; a file of that name the workbench did not write stays.
pub fn remove(dir: &Path) -> Result<()> {
    let path = dir.join(FILE);
    if let Kept::Windows { .. } = kept(dir)? {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}
