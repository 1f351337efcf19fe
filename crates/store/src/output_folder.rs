//! Folders the workbench writes, and the proof that a folder is one of them.
//!
//! Every command that writes a folder (`import gguf`, `fetch`, `init`, `train`, `probe`, `calibrate`)
//! leaves a marker file, [`MARKER`], naming the command that wrote it, whether its work is finished, and
//! the size, modification time and sha256 of each file it wrote. The rules every writer follows:
//!
//! - A command writes only to a folder that does not exist, an empty folder, or a folder whose marker
//!   says the same command wrote it ([`claim`]). Anything else is refused with the folder's name and what
//!   is in it: a command never deletes or overwrites what it did not create.
//! - Never the current folder or one above it, and never a folder that holds one of the command's inputs.
//! - Results that replace an earlier one are written whole into a staging folder next to the output and
//!   renamed into place ([`Staging::commit`]): a reader sees the old result or the new one, never a mix.
//! - A folder whose marker says `finished: false` (a training run that has not reached its last step)
//!   is refused by every command that loads it unless told otherwise ([`ensure_finished`]).

use crate::error::{Result, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The marker file's name, inside every folder the workbench wrote.
pub const MARKER: &str = ".sharpdraft-output.json";

/// What one written file looked like when its writer finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FileFingerprint {
    pub bytes: u64,
    /// Modification time in nanoseconds since the Unix epoch: the cheap check.
    pub modified_ns: u128,
    /// The strong check, made when the cheap one fails.
    pub sha256: String,
}

/// What makes a marker proof that the workbench wrote the folder it lies in, where a copy of it is not:
/// the folder's device and inode when the marker was written (a copied folder, or a marker copied into
/// another folder, has others; a renamed folder keeps them), and an id the workbench keeps a record of
/// under `$SHARPDRAFT_HOME/outputs/` (a hand-written marker names none it knows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    pub id: String,
    pub device: u64,
    pub inode: u64,
}

/// The marker: which command wrote the folder, whether it is finished, and its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// The writing command: `import`, `fetch`, `init`, `train`, `probe`, `calibrate`.
    pub kind: String,
    /// False while a resumable run (training) has not reached its end.
    pub finished: bool,
    /// What the folder holds, in the writer's words (a model name, a config path).
    #[serde(default)]
    pub about: String,
    /// Every file the writer left, by path relative to the folder. Empty for folders written in place
    /// over time (training), whose files change at every checkpoint.
    #[serde(default)]
    pub files: BTreeMap<String, FileFingerprint>,
    pub sharpdraft_version: String,
    /// Set by [`Marker::write`]; absent in markers of older versions, which prove nothing.
    #[serde(default)]
    pub proof: Option<Proof>,
}

impl Marker {
    pub fn new(kind: &str, finished: bool, about: impl Into<String>) -> Self {
        Self {
            kind: kind.to_string(),
            finished,
            about: about.into(),
            files: BTreeMap::new(),
            sharpdraft_version: env!("CARGO_PKG_VERSION").to_string(),
            proof: None,
        }
    }

    /// Reads `dir`'s marker: `None` when there is none, an error naming the file when it is unreadable.
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(MARKER);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StoreError::io(&path, format!("not a sharpdraft output marker: {e}")))
    }

    /// Writes the marker into `dir` atomically (temporary file, then rename), with its [`Proof`]: the
    /// folder's device and inode, and an id recorded under `$SHARPDRAFT_HOME/outputs/` (the id of the
    /// marker it replaces when that one is proven, so rewriting a marker adds no record).
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MARKER);
        let tmp = dir.join(format!("{MARKER}.tmp"));
        let (device, inode) = folder_identity(dir)?;
        let id = match Marker::read(dir).ok().flatten() {
            Some(old) if old.proven(dir) => old.proof.map(|p| p.id),
            _ => None,
        };
        // A marker read from elsewhere (a copy) brings no id along: only a proven one is kept.
        let id = match id {
            Some(id) => id,
            None => new_proof_id(dir)?,
        };
        let mut proven = self.clone();
        proven.proof = Some(Proof { id, device, inode });
        let text = serde_json::to_string_pretty(&proven).map_err(|e| StoreError::io(&path, e))?;
        std::fs::write(&tmp, text).map_err(|e| StoreError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))
    }

    /// Records every file under `dir` (except the marker) with its size, time and sha256.
    pub fn record_files(&mut self, dir: &Path) -> Result<()> {
        self.files.clear();
        for relative in files_under(dir)? {
            let fingerprint = fingerprint(&dir.join(&relative), true)?;
            self.files.insert(relative, fingerprint);
        }
        Ok(())
    }

    /// Whether this marker proves that the workbench wrote `dir` ([`Proof`]).
    pub fn proven(&self, dir: &Path) -> bool {
        let Some(proof) = &self.proof else {
            return false;
        };
        folder_identity(dir).is_ok_and(|id| id == (proof.device, proof.inode))
            && proof_record(&proof.id).is_file()
    }

    /// Files under `dir` this marker does not record (the marker itself left out): what a user added to
    /// the folder after the command wrote it. Empty for a marker that records no files (a folder
    /// written in place over time), which lists nothing to compare with.
    pub fn unrecorded_files(&self, dir: &Path) -> Result<Vec<String>> {
        if self.files.is_empty() {
            return Ok(Vec::new());
        }
        Ok(files_under(dir)?
            .into_iter()
            .filter(|f| !self.files.contains_key(f))
            .collect())
    }

    /// Checks the files recorded at writing time against `dir`: `Ok(())` when all are there unchanged
    /// (size and time, or else sha256), else the list of what differs. Updates the recorded times of
    /// files whose content is unchanged (a copied folder has new times), so the next check is cheap.
    pub fn verify(&mut self, dir: &Path, rehash: bool) -> Result<Vec<String>> {
        let mut differences = Vec::new();
        let mut times_changed = false;
        for (relative, recorded) in self.files.iter_mut() {
            let path = dir.join(relative);
            if !path.is_file() {
                differences.push(format!("{relative} is missing"));
                continue;
            }
            let cheap = fingerprint(&path, false)?;
            if cheap.bytes != recorded.bytes {
                differences.push(format!(
                    "{relative} has {} bytes, {} when written",
                    cheap.bytes, recorded.bytes
                ));
                continue;
            }
            if cheap.modified_ns == recorded.modified_ns && !rehash {
                continue;
            }
            let full = fingerprint(&path, true)?;
            if full.sha256 != recorded.sha256 {
                differences.push(format!("{relative} was modified since it was written"));
            } else if full.modified_ns != recorded.modified_ns {
                recorded.modified_ns = full.modified_ns;
                times_changed = true;
            }
        }
        for relative in files_under(dir)? {
            if !self.files.contains_key(&relative) {
                differences.push(format!("{relative} was added since"));
            }
        }
        // Only a proven marker is rewritten: rewriting a copied one would make it proof.
        if differences.is_empty() && times_changed && self.proven(dir) {
            self.write(dir)?;
        }
        Ok(differences)
    }
}

/// Size, modification time and (when `hash`) sha256 of one file.
pub fn fingerprint(path: &Path, hash: bool) -> Result<FileFingerprint> {
    let meta = std::fs::metadata(path).map_err(|e| StoreError::io(path, e))?;
    let modified_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let sha256 = if hash {
        sha256_of(path)?
    } else {
        String::new()
    };
    Ok(FileFingerprint {
        bytes: meta.len(),
        modified_ns,
        sha256,
    })
}

/// The sha256 of a file, streamed.
pub fn sha256_of(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| StoreError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file
            .read(&mut buffer)
            .map_err(|e| StoreError::io(path, e))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// A digest of what `dir` holds: the sha256 of every file under it (hidden files and the marker left
/// out) with its relative path, in order. A file the marker recorded, found with the recorded size and
/// modification time, is taken at its recorded sha256 without being read again: the digest of a large
/// imported model costs a directory listing.
pub fn content_digest(dir: &Path) -> Result<String> {
    Ok(digest_of(&digests_of_files(
        dir,
        Marker::read(dir)?.as_ref(),
    )?))
}

/// Every file under `dir` that [`content_digest`] covers, with the sha256 of its content read now,
/// whatever its marker recorded (what a run seals its inputs with, so a file replaced under the same
/// size and modification time still shows): (path relative to `dir`, sha256), sorted by path.
pub fn file_digests(dir: &Path) -> Result<Vec<(String, String)>> {
    digests_of_files(dir, None)
}

/// The digest [`content_digest`] gives, of files already hashed ([`file_digests`]).
pub fn digest_of(files: &[(String, String)]) -> String {
    let mut hasher = Sha256::new();
    for (relative, sha256) in files {
        hasher.update(relative.as_bytes());
        hasher.update([0]);
        hasher.update(sha256.as_bytes());
        hasher.update([0]);
    }
    format!("{:x}", hasher.finalize())
}

/// (relative path, sha256) of every file under `dir` but hidden ones; a file `marker` recorded, found
/// with the recorded size and modification time, is taken at its recorded sha256.
fn digests_of_files(dir: &Path, marker: Option<&Marker>) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for relative in files_under(dir)? {
        let hidden = Path::new(&relative)
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        let path = dir.join(&relative);
        let sha256 = match marker.and_then(|m| m.files.get(&relative)) {
            Some(recorded) => {
                let cheap = fingerprint(&path, false)?;
                if cheap.bytes == recorded.bytes && cheap.modified_ns == recorded.modified_ns {
                    recorded.sha256.clone()
                } else {
                    sha256_of(&path)?
                }
            }
            None => sha256_of(&path)?,
        };
        out.push((relative, sha256));
    }
    Ok(out)
}

/// Relative paths of every file under `dir` (recursively), the marker excluded, sorted.
fn files_under(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(sub) = pending.pop() {
        let folder = dir.join(&sub);
        for entry in std::fs::read_dir(&folder).map_err(|e| StoreError::io(&folder, e))? {
            let entry = entry.map_err(|e| StoreError::io(&folder, e))?;
            let relative = sub.join(entry.file_name());
            let kind = entry.file_type().map_err(|e| StoreError::io(&folder, e))?;
            if kind.is_dir() {
                pending.push(relative);
            } else if relative != Path::new(MARKER) {
                out.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `path` made absolute and free of `.`, `..` and symbolic links, as far as it exists, meaning the
/// folder the OS means by it: a `..` after a symbolic link goes up from the link's target, as the OS
/// goes ([`crate::paths::normalized`]), never lexically back over the link. The part that does not
/// exist yet is appended as written. Every check, lock and write of a command goes through this one
/// reading, so a path names one folder.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    let cwd = std::env::current_dir().map_err(|e| StoreError::io(Path::new("."), e))?;
    let physical = crate::paths::normalized(&cwd.join(path));
    // Resolve links in the longest existing prefix.
    let mut existing = physical.clone();
    let mut tail = Vec::new();
    while !existing.exists() {
        match existing.file_name() {
            Some(name) => {
                tail.push(name.to_os_string());
                existing.pop();
            }
            None => break,
        }
    }
    let mut resolved = existing.canonicalize().unwrap_or(existing);
    for name in tail.into_iter().rev() {
        resolved.push(name);
    }
    Ok(resolved)
}

/// Whether `out` may be written by the command `kind`.
#[derive(Debug)]
pub enum Claim {
    /// Nothing there, or an empty folder: the command creates it.
    Fresh,
    /// The same command's earlier output (finished or not), with its marker.
    Own(Marker),
}

/// Decides whether command `kind` may write `out`, given the paths it reads (`inputs`). See the module
/// documentation for the rules; every refusal names the folder and the reason.
pub fn claim(out: &Path, kind: &str, inputs: &[&Path]) -> Result<Claim> {
    let target = absolute(out)?;
    if target.parent().is_none() {
        return Err(StoreError::io(out, "refusing to write the root folder"));
    }
    let cwd = absolute(Path::new("."))?;
    if cwd.starts_with(&target) {
        return Err(StoreError::io(
            out,
            format!(
                "refusing to write here: it is the current folder or one above it ({}); name a new folder",
                cwd.display()
            ),
        ));
    }
    for input in inputs {
        let input_abs = absolute(input)?;
        if input_abs.starts_with(&target) {
            return Err(StoreError::io(
                out,
                format!(
                    "refusing to write here: it holds {}, which this command reads; name a new folder",
                    input.display()
                ),
            ));
        }
    }
    // An output inside another command's output would be moved, replaced or hashed with it.
    for ancestor in target.ancestors().skip(1) {
        if let Some(marker) = Marker::read(ancestor).ok().flatten() {
            return Err(StoreError::io(
                out,
                format!(
                    "refusing to write here: it lies inside {}, the output of `sharpdraft {}`{}; name a folder outside it",
                    ancestor.display(),
                    marker.kind,
                    if marker.about.is_empty() { String::new() } else { format!(" ({})", marker.about) }
                ),
            ));
        }
    }
    let meta = match std::fs::symlink_metadata(&target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Claim::Fresh),
        Err(e) => return Err(StoreError::io(out, e)),
    };
    if !meta.is_dir() {
        return Err(StoreError::io(
            out,
            "exists and is not a folder; name a new folder",
        ));
    }
    let mut entries = std::fs::read_dir(&target)
        .map_err(|e| StoreError::io(out, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    if entries.is_empty() {
        return Ok(Claim::Fresh);
    }
    match Marker::read(&target)? {
        Some(marker) if marker.kind == kind && !marker.proven(&target) => Err(StoreError::io(
            out,
            format!(
                "holds a marker of `sharpdraft {kind}` that does not prove sharpdraft wrote this folder (copied from another folder, written by hand, or by an older version): refusing to change it; name a new folder, or move this one away yourself (mv {} {}.old)",
                out.display(),
                out.display()
            ),
        )),
        Some(marker) if marker.kind == kind => {
            refuse_unrecorded(&target, &marker)?;
            Ok(Claim::Own(marker))
        }
        Some(marker) => Err(StoreError::io(
            out,
            format!(
                "holds the output of `sharpdraft {}`{}, not of `sharpdraft {kind}`: refusing to change it; name a new folder",
                marker.kind,
                if marker.about.is_empty() { String::new() } else { format!(" ({})", marker.about) }
            ),
        )),
        None => {
            let shown = first_few(&mut entries);
            Err(StoreError::io(
                out,
                format!(
                    "exists and was not written by sharpdraft (no {MARKER}; it holds {shown}): refusing to change it; name a new folder or move this one away yourself"
                ),
            ))
        }
    }
}

/// The first five of `names` in order, and how many more: `a, b, c, d, e and 3 more`.
fn first_few(names: &mut [String]) -> String {
    names.sort();
    let shown = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        format!("{shown} and {} more", names.len() - 5)
    } else {
        shown
    }
}

/// The entries of `dir` named `<prefix><rest>` whose `rest` names, through `pid_of`, a process that no
/// longer runs: what a killed command left behind under a name only this workbench gives. Empty where
/// `/proc` does not exist (liveness cannot be told there), and never this process's own.
pub fn left_by_dead_processes(
    dir: &Path,
    prefix: &str,
    pid_of: impl Fn(&str) -> Option<u32>,
) -> Vec<std::fs::DirEntry> {
    if !Path::new("/proc/self").exists() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_prefix(prefix)
                .and_then(&pid_of)
                .is_some_and(|pid| {
                    pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
                })
        })
        .collect()
}

/// The device and inode of folder `dir`.
fn folder_identity(dir: &Path) -> Result<(u64, u64)> {
    let meta = std::fs::metadata(dir).map_err(|e| StoreError::io(dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Ok((0, 0))
    }
}

/// Where the workbench records a proof id: `$SHARPDRAFT_HOME/outputs/<id>`.
fn proof_record(id: &str) -> PathBuf {
    let safe = !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit());
    crate::registry::home()
        .join("outputs")
        .join(if safe { id } else { "invalid" })
}

/// A new id for a marker about to be written into `dir`, recorded (with the folder's path, for a
/// reader) under `$SHARPDRAFT_HOME/outputs/`.
fn new_proof_id(dir: &Path) -> Result<String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut hasher = Sha256::new();
    hasher.update(format!(
        "{nanos} {} {} {}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed),
        dir.display()
    ));
    let id: String = format!("{:x}", hasher.finalize())[..32].to_string();
    let record = proof_record(&id);
    let parent = record.parent().expect("records lie in a folder");
    std::fs::create_dir_all(parent).map_err(|e| StoreError::io(parent, e))?;
    std::fs::write(&record, format!("{}\n", absolute(dir)?.display()))
        .map_err(|e| StoreError::io(&record, e))?;
    Ok(id)
}

/// Refuses to replace `dir` when it holds files its marker does not record: they are the user's, and
/// replacing the folder would remove them.
fn refuse_unrecorded(dir: &Path, marker: &Marker) -> Result<()> {
    let mut extra = marker.unrecorded_files(dir)?;
    if extra.is_empty() {
        return Ok(());
    }
    let shown = first_few(&mut extra);
    Err(StoreError::io(
        dir,
        format!(
            "holds files `sharpdraft {}` did not write ({shown}): refusing to replace the folder and lose them; move them out, or name a new folder",
            marker.kind
        ),
    ))
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A folder next to the output, private to this process, where a result is written whole before it
/// replaces the output in one rename. Dropped without [`Staging::commit`], it removes itself (it is
/// this process's own) and leaves the output as it was.
pub struct Staging {
    dir: PathBuf,
    out: PathBuf,
    committed: bool,
}

impl Staging {
    /// Creates the staging folder beside `out` (whose parent is created when missing).
    pub fn new(out: &Path) -> Result<Self> {
        let out = absolute(out)?;
        let parent = out
            .parent()
            .ok_or_else(|| StoreError::io(&out, "has no parent folder"))?
            .to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|e| StoreError::io(&parent, e))?;
        let name = out.file_name().unwrap_or_default().to_string_lossy();
        remove_dead_stagings(&parent, &name);
        let dir = parent.join(format!(
            ".{name}.staging-{}-{}",
            std::process::id(),
            UNIQUE.fetch_add(1, Ordering::Relaxed)
        ));
        // create_dir, not create_dir_all: the name must be new, so nothing of anyone else's is used.
        std::fs::create_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(Self {
            dir,
            out,
            committed: false,
        })
    }

    /// Where to write the result.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Records the staged files in `marker`, writes it, and puts the staging folder in the output's
    /// place. An earlier output is replaced only if [`claim`] found it to be this command's own (the
    /// caller's duty); an empty folder is removed first. The old output is renamed aside and deleted
    /// after the new one is in place, so a crash in between leaves one complete result under `out`.
    pub fn commit(mut self, marker: &mut Marker, record_files: bool) -> Result<PathBuf> {
        if record_files {
            marker.record_files(&self.dir)?;
        }
        marker.write(&self.dir)?;
        let aside = self.dir.with_file_name(format!(
            "{}.replaced",
            self.dir.file_name().unwrap_or_default().to_string_lossy()
        ));
        let had_old = match std::fs::symlink_metadata(&self.out) {
            Ok(_) => {
                // Checked again at the last moment: a file added while the command ran is kept too.
                // Every command that replaces its output records its files, so an old output whose
                // marker records none lists nothing this command may remove.
                if let Some(mut old) = Marker::read(&self.out)? {
                    if old.files.is_empty() {
                        old.files.insert(String::new(), FileFingerprint::default());
                    }
                    refuse_unrecorded(&self.out, &old)?;
                }
                // An empty folder goes away with remove_dir (which fails on anything non-empty).
                if std::fs::remove_dir(&self.out).is_err() {
                    std::fs::rename(&self.out, &aside).map_err(|e| StoreError::io(&self.out, e))?;
                    true
                } else {
                    false
                }
            }
            Err(_) => false,
        };
        std::fs::rename(&self.dir, &self.out).map_err(|e| StoreError::io(&self.out, e))?;
        self.committed = true;
        if had_old {
            std::fs::remove_dir_all(&aside).map_err(|e| StoreError::io(&aside, e))?;
        }
        Ok(self.out.clone())
    }
}

/// Removes the staging folders of `name` left in `parent` by processes that no longer run (killed
/// before they could remove their own): `.<name>.staging-<pid>-<n>`. A folder set aside during a
/// replacement (`.replaced`) is never touched, as it may hold the only copy of an output.
fn remove_dead_stagings(parent: &Path, name: &str) {
    let staging_pid = |rest: &str| {
        let (pid, counter) = rest.split_once('-')?;
        counter.parse::<u64>().ok()?;
        pid.parse::<u32>().ok()
    };
    for entry in left_by_dead_processes(parent, &format!(".{name}.staging-"), staging_pid) {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Set once by the command line (`--allow-unfinished`): load unfinished training runs anyway.
static ALLOW_UNFINISHED: AtomicBool = AtomicBool::new(false);

pub fn set_allow_unfinished(allow: bool) {
    ALLOW_UNFINISHED.store(allow, Ordering::Relaxed);
}

/// Whether `dir` holds the marker of a writer that has not finished (a training run killed or still
/// running); false for a folder with no marker or one that cannot be read.
pub fn is_unfinished(dir: &Path) -> bool {
    matches!(Marker::read(dir), Ok(Some(marker)) if !marker.finished)
}

/// Refuses a folder whose marker says its writer has not finished (a training run killed or still
/// running), unless `--allow-unfinished` was given.
pub fn ensure_finished(dir: &Path) -> Result<()> {
    match Marker::read(dir)? {
        Some(marker) if !marker.finished && !ALLOW_UNFINISHED.load(Ordering::Relaxed) => {
            Err(StoreError::io(
                dir,
                format!(
                    "is an unfinished `sharpdraft {}` run{}: its weights are not trained to the end; resume it (run the same command again) or pass --allow-unfinished to use it as it is",
                    marker.kind,
                    if marker.about.is_empty() { String::new() } else { format!(" ({})", marker.about) }
                ),
            ))
        }
        _ => Ok(()),
    }
}
