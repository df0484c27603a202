//! The pool's and the spill's memory on Unix: an anonymous mapping of their own.
#![allow(unsafe_code)]

use std::ptr::NonNull;

/// An anonymous private mapping: page-aligned, and zero-filled by the kernel page by page as
/// it is first touched, so every byte is initialised without a memset of the whole. Unmapped
/// when dropped: whoever hands out pointers into it must `mem::forget` it instead while any
/// may still be used (the pool does, while loans are out), and reads and writes it through
/// those pointers alone; an owner that hands out none uses its slices.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping owns its memory; moving it to another thread moves that ownership.
unsafe impl Send for Mapping {}

impl Mapping {
    /// A fresh mapping of `len` bytes (a multiple of the page size), asking for transparent
    /// huge pages where `huge`; `None` if the kernel refuses it.
    pub(crate) fn new(len: usize, huge: bool) -> Option<Mapping> {
        // SAFETY: a fresh anonymous mapping aliases nothing of ours; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Transparent huge pages where the system gives them on request: a pool that reads
        // fill whole is walked over and over, and 2 MiB pages spare the TLB and the page
        // faults of 4 KiB ones. Where the kernel does not place the mapping on a 2 MiB
        // boundary, the pages at its ends stay small. A hint: refused, it changes nothing.
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = huge; // The advice is Linux's.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if huge {
            // SAFETY: advice on the mapping just made, of its own length; it changes neither
            // the mapping's addresses nor its contents.
            unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        }
        let ptr = NonNull::new(ptr.cast::<u8>())?;
        Some(Mapping { ptr, len })
    }

    /// The address of its first byte.
    pub(crate) fn as_mut_ptr(&mut self) -> NonNull<u8> {
        self.ptr
    }

    /// Its bytes, for an owner that hands out no pointers into it.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable at `ptr`, each initialised (zero-filled by the
        // kernel, or written since); the borrow of `self` keeps them mapped, and an owner
        // that calls this holds no other pointer into them (see the type's docs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Its bytes, to write, for an owner that hands out no pointers into it.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and mapped writable; the mutable borrow of `self` makes
        // this the only reference to them.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length and unmapped once, here; nothing reaches
        // the memory any more (see the type's docs: it is forgotten, not dropped, otherwise).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
