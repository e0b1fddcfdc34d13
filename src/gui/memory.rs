//! Gives the heap a run freed back to the system. glibc keeps freed memory
//! in its arenas for reuse, so after a run of 2,000 streams is replaced by
//! a small one the app still held 72 MB it no longer used (measured with
//! `benches/app_memory.sh`; see docs/PERFORMANCE.md). Elsewhere the
//! allocator's own policy stands.

/// Returns the free heap to the system, on a thread of its own (it walks
/// every arena, which the UI should not wait for).
#[allow(unsafe_code)]
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // Without a thread, the memory is only kept longer.
        let _ = std::thread::Builder::new().name("stallscope-trim".into()).spawn(|| {
            // SAFETY: malloc_trim takes no pointers and only returns free
            // pages of glibc's arenas to the kernel.
            unsafe { libc::malloc_trim(0) };
        });
    }
}
