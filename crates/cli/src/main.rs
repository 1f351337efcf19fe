//! `sharpdraft`: the SharpDraft workbench command line.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // A file-size limit (`ulimit -f`) kills a process that writes past it with SIGXFSZ, silently and
    // mid-write. Ignored, the write fails with EFBIG instead, and the error names the file.
    // A reader that closes the pipe early (`sharpdraft fetch --list | head -1`) ends a printing command
    // the way it ends any Unix tool: SIGPIPE's default, exit status 141, no panic. (Rust ignores SIGPIPE,
    // so every `println!` after the reader left would panic.)
    // SAFETY: setting signals' dispositions before any thread starts has no other effect.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Any other failure to print (a full device: `derive > /dev/full`) is an error naming stdout, not a
    // panic: `println!` panics with this message, and the hook turns it into one line and exit 1.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(cause) = message.strip_prefix("failed printing to stdout: ") {
            eprintln!("Error: writing to stdout: {cause}");
            std::process::exit(1);
        }
        default_hook(info);
    }));
    sharpdraft::run(sharpdraft::Cli::parse())
}
