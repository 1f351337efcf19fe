//! Files written whole: into a temporary file beside the target, then renamed over it, so a reader (or a
//! run resumed after a crash) sees the old content or the new, never a part.

use crate::error::{Result, StoreError};
use std::io::ErrorKind;
use std::path::Path;

/// Writes `contents` to `path` through `<path>.tmp` and a rename. A failed write removes its
/// temporary file and says what stopped it and the way out.
pub fn write_whole(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    let tmp = temporary_beside(path);
    let written = std::fs::write(&tmp, contents).and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        StoreError::failed(
            format!("writing {}", path.display()),
            format!("{e}{}", way_out(&e)),
        )
    })
}

/// The temporary file a whole write goes through: `<path>.tmp`, in the same folder so the rename
/// stays on one filesystem.
pub fn temporary_beside(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::path::PathBuf::from(tmp)
}

/// What to do about a failed write, by its cause.
pub fn way_out(error: &std::io::Error) -> &'static str {
    match error.kind() {
        ErrorKind::StorageFull => {
            " (the disk is full: free space, or give the output a folder on another disk; a run resumes with --resume)"
        }
        ErrorKind::FileTooLarge => {
            " (a file-size limit stopped the write: raise it (ulimit -f) and run again; a run resumes with --resume)"
        }
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
            " (no permission to write there: give the output a folder you can write)"
        }
        _ => "",
    }
}
