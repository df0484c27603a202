//! What the crate asks of the CPU itself rather than of the kernel: a prefetch.
#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line at `p` into its caches, without waiting for it. A
/// hint: it reads nothing the program sees and never faults, whatever `p` points at. A
/// no-op off x86-64.
pub(crate) fn prefetch<T>(p: *const T) {
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has; it dereferences nothing
    // (an address outside the process is ignored).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
