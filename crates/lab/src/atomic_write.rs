//! Files written whole: into a temporary file beside the target, then renamed over it, so a reader (or a
//! run resumed after a crash) sees the old content or the new, never a part.

use crate::error::{Context, Result};
use std::path::Path;

/// Writes `contents` to `path` through `<path>.tmp` and a rename.
pub fn write_whole(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
