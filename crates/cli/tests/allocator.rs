//! The allocator's check itself: it tells mimalloc's memory from memory mimalloc did not allocate
//! (that the command line's libtorch tensors come from mimalloc is checked end to end in
//! speculative.rs). A build without the default `mimalloc` feature keeps the system's malloc, and has
//! nothing here to check.
#![cfg(feature = "mimalloc")]

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
