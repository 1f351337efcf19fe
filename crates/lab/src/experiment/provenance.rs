//! Where a run's rows come from: the config hash, the checkout's revision, the machine, and the
//! timing setting (kernel form, libtorch threads) a unit's record carries (`sharpdraft_report::records`).

use super::config::Experiment;
use sharpdraft_report::records::{Provenance, DIRTY};
use std::path::Path;

/// The provenance fields that do not change during a run of `experiment`.
pub fn provenance(experiment: &Experiment) -> Provenance {
    Provenance {
        config_hash: experiment.hash().to_string(),
        git_revision: git_revision(experiment.header.file.parent().unwrap_or(Path::new("."))),
        machine: machine(),
        device: experiment.header.device.clone(),
        dtype: experiment.header.dtype.clone(),
        sharpdraft_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix: 0,
        kernel: sharpdraft_kernel::form::current().name().to_string(),
        threads: process_threads(),
    }
}

/// libtorch's CPU threads as this process set out with, read once, before its first decode: libtorch
/// keeps the count per thread (OpenMP's), and a decoding loop holds its own thread's at one.
fn process_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(sharpdraft_model::cpu::few_rows::threads_outside_a_pass)
}

fn git_revision(folder: &Path) -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(folder)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "HEAD"]) {
        Some(head) => match run(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => format!("{head}{DIRTY}"),
            _ => head,
        },
        None => "unknown".into(),
    }
}

fn machine() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown".into()));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{host}; {cpu}; {cores} cores")
}
