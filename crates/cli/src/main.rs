//! `sharpdraft`: the SharpDraft workbench command line.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // A file-size limit (`ulimit -f`) kills a process that writes past it with SIGXFSZ, silently and
    // mid-write. Ignored, the write fails with EFBIG instead, and the error names the file.
    // SAFETY: setting a signal's disposition to SIG_IGN before any thread starts has no other effect.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    sharpdraft::run(sharpdraft::Cli::parse())
}
