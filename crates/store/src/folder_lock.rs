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
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(StoreError::Refused(format!(
                    "{} is in use by another sharpdraft command ({}): wait for it to end, or work in another folder",
                    folder.display(),
                    if holder.is_empty() { "holder unknown" } else { holder }
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(StoreError::failed(format!("locking {}", path.display()), e))
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
