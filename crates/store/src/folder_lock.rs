//! One command at a time per folder: `run` (fresh or `--resume`), `merge` and `report` each hold an
//! exclusive lock on the run folders they write or read, `train` on its output and `fetch` on the model
//! (and schedule) folders it installs, and a second command on the same folder is refused at once,
//! naming the holder. The lock is an advisory `flock` on a file under
//! `$SHARPDRAFT_HOME/locks/` named after the folder's absolute path, so nothing is added beside the
//! user's files, and the kernel drops it when its process ends (a killed run leaves no stale lock).
//! It covers commands that share `$SHARPDRAFT_HOME` on one machine.

use crate::error::{Result, StoreError};
use crate::output_folder::absolute;
use crate::registry;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Held while the command runs; dropping it releases the folder.
#[derive(Debug)]
pub struct FolderLock {
    file: File,
}

/// The lock file of `folder` (absolute, links resolved as far as the path exists).
pub fn lock_path(folder: &Path) -> Result<PathBuf> {
    lock_path_under(&registry::home(), folder)
}

/// The lock file of `folder` for the commands whose `$SHARPDRAFT_HOME` is `home`.
pub fn lock_path_under(home: &Path, folder: &Path) -> Result<PathBuf> {
    let folder = absolute(folder)?;
    let digest = Sha256::digest(folder.as_os_str().as_encoded_bytes());
    let name: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    Ok(home.join("locks").join(format!("{name}.lock")))
}

impl FolderLock {
    /// Locks `folder` for `command` (e.g. `run`), or refuses naming the process that holds it.
    pub fn acquire(folder: &Path, command: &str) -> Result<Self> {
        Self::acquire_with(folder, command, false)
    }

    /// [`Self::acquire`], except that a folder held by another run of the same `command` is waited
    /// for (said on stderr): two `fetch`es of one model, or two `run`s that each fetch their target,
    /// take turns, the second finding the first's import; a folder any other command holds (a `train`
    /// writing it) is refused as by `acquire`.
    pub fn acquire_after_same(folder: &Path, command: &str) -> Result<Self> {
        Self::acquire_with(folder, command, true)
    }

    fn acquire_with(folder: &Path, command: &str, wait_for_same: bool) -> Result<Self> {
        let path = lock_path(folder)?;
        let parent = path.parent().expect("a lock file lies in a folder");
        std::fs::create_dir_all(parent).map_err(|e| {
            StoreError::failed(format!("creating the lock folder {}", parent.display()), e)
        })?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::failed(format!("opening lock {}", path.display()), e))?;
        let locking = |e: std::io::Error| StoreError::failed(format!("locking {}", path.display()), e);
        // A holder writes its line just after it locks: an empty line is read again for a moment.
        let mut unnamed_reads = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.rewind().and_then(|()| file.read_to_string(&mut holder));
                    let holder = holder.trim();
                    if holder.is_empty() && unnamed_reads < 20 {
                        unnamed_reads += 1;
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        continue;
                    }
                    if wait_for_same && holder.starts_with(&format!("`sharpdraft {command}`")) {
                        eprintln!(
                            "{} is being written by another {holder}; waiting for it to end",
                            folder.display()
                        );
                        file.lock().map_err(locking)?;
                        break;
                    }
                    return Err(StoreError::Refused(format!(
                        "{} is in use by another sharpdraft command ({}): wait for it to end, or work in another folder",
                        folder.display(),
                        if holder.is_empty() { "holder unknown" } else { holder }
                    )));
                }
                Err(TryLockError::Error(e)) => return Err(locking(e)),
            }
        }
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let about = format!(
            "`sharpdraft {command}`, process {} since Unix time {since}, folder {}",
            std::process::id(),
            folder.display()
        );
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(about.as_bytes()))
            .map_err(|e| StoreError::failed(format!("writing lock {}", path.display()), e))?;
        Ok(Self { file })
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // The holder's line goes first, so a reader never names a process that has let go.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}
