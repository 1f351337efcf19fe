//! The command line allocates through mimalloc, libtorch's tensors included: glibc's malloc searched
//! a fragmented heap for a fifth of a decoding cycle (crates/cli/src/allocator.rs). A build without
//! the default `mimalloc` feature keeps the system's malloc, and has nothing here to check.
#![cfg(feature = "mimalloc")]
use std::process::Command;

const TARGET: &str = "smollm2-135m-instruct";

#[test]
fn libtorch_tensors_in_the_command_line_come_from_mimalloc() {
    if sharpdraft_model::store::registry::resolve(TARGET).is_err() {
        eprintln!("skipped: {TARGET} is not fetched (make test fetches it)");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args([
            "bench",
            "rows",
            "--target",
            TARGET,
            "--rows",
            "1",
            "--context",
            "16",
            "--repeats",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let allocator = &report["allocator"];
    assert!(
        allocator["name"].as_str().unwrap().starts_with("mimalloc "),
        "{allocator}"
    );
    assert_eq!(allocator["libtorch_tensors"], true, "{allocator}");
}

#[test]
fn the_check_tells_mimallocs_memory_from_memory_it_did_not_allocate() {
    // This test binary links the command line's library, so its Rust allocations are mimalloc's.
    let _linked = sharpdraft::allocator::report;
    let block = vec![0u8; 1 << 20];
    // SAFETY: the addresses are only compared with mimalloc's regions; the mapping is released
    // after the check.
    unsafe {
        assert!(libmimalloc_sys::mi_is_in_heap_region(block.as_ptr().cast()));
        let len = 1 << 20;
        let mapped = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(mapped, libc::MAP_FAILED);
        let in_heap = libmimalloc_sys::mi_is_in_heap_region(mapped);
        libc::munmap(mapped, len);
        assert!(
            !in_heap,
            "memory mapped outside mimalloc counted as its heap"
        );
    }
}
