//! The harness's allocator: the system's, with every large allocation starting on a page
//! boundary, so that std's `BufReader` buffer lies where the reader's pool does.
//!
//! On the AMD EPYC host of BENCHMARKS.md, the kernel's copy out of the page cache runs about
//! eight times slower into a destination 1-31 bytes further into its page than the source
//! (1.8 GB/s against 13-16 GB/s; a 1 MiB `pread` of a cached file). glibc puts a chunk it maps
//! on its own 16 bytes into a page, and a chunk from its heap wherever the heap's earlier
//! allocations left off, so std's speed hung on the command line's length: the same std run
//! read 256 MiB warm at 1.15 GiB/s or 3.3 GiB/s with its paths spelled two ways. The reader's
//! pool is page-aligned; with this allocator, std's buffer is too, and both copy at the
//! same speed.
//!
//! On Linux a large block is mapped on its own, as glibc maps one, and grown by moving its
//! pages (`mremap`), as glibc grows one: a reader's queue of 20,000 files, doubling as they
//! are queued, is not copied at each step.
//!
//! A large block freed is kept (a few, process-wide) and handed out again for the next of its
//! size: std's `BufReader`s of 1 MiB, one a file, reuse one block as they reuse one from
//! glibc's heap once it has raised its threshold for mapping a block on its own, which a
//! block asked aligned never raises (each file's buffer was otherwise 256 pages mapped and
//! first touched anew).
//!
//! A large block asked zeroed is zeroed only where it is a kept one: a new mapping is zero
//! already, page by page as it is first touched, and glibc's `calloc` does not clear a block
//! it maps on its own either. (Cleared each time, the reader's 1 MiB buffer for cached files,
//! asked zeroed, was written whole before its first use: 256 pages touched and 1 MiB set in a
//! run that std's buffer, asked uninitialized, never paid.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::{Mutex, PoisonError};

/// Allocations of at least this many bytes start on a page boundary.
const LARGE: usize = 64 << 10;
/// The boundary.
const PAGE: usize = 4096;

/// The system's allocator, with large allocations page-aligned and a few kept once freed
/// (see the module's doc).
pub struct PageAlignedLarge;

#[global_allocator]
static ALLOCATOR: PageAlignedLarge = PageAlignedLarge;

/// Large blocks kept once freed, at most: one for each of a scan's threads of std, and one
/// for each large buffer of a reader's.
const KEEP: usize = 4;

/// Large blocks freed and kept, and the slot to give up next where all are taken, in turn.
struct Kept {
    /// (size, address); 0 where a slot is free.
    blocks: [(usize, usize); KEEP],
    next: usize,
}

/// Taking the lock allocates nothing large, so never comes back here for it.
static KEPT: Mutex<Kept> = Mutex::new(Kept {
    blocks: [(0, 0); KEEP],
    next: 0,
});

/// A kept block of `size` bytes, taken out of `KEPT`.
fn take_kept(size: usize) -> Option<*mut u8> {
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let slot = (kept.blocks.iter_mut()).find(|(s, addr)| *s == size && *addr != 0)?;
    let (_, addr) = std::mem::take(slot);
    Some(addr as *mut u8)
}

/// Keeps the block at `ptr` of `size` bytes in `KEPT`, in a free slot or else in the slots'
/// turn (round robin); the block given up for it, if any, to free.
fn keep(ptr: *mut u8, size: usize) -> Option<(*mut u8, usize)> {
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let i = match kept.blocks.iter().position(|&(_, addr)| addr == 0) {
        Some(free) => free,
        None => {
            let turn = kept.next;
            kept.next = (turn + 1) % KEEP;
            turn
        }
    };
    let (size_out, addr_out) = std::mem::replace(&mut kept.blocks[i], (size, ptr as usize));
    (addr_out != 0).then_some((addr_out as *mut u8, size_out))
}

/// Whether a block of `layout` is large: page-aligned, and kept once freed.
fn large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

/// Large blocks on Linux: mapped on their own, as glibc maps a large block, so that a block
/// grown (a queue of many files, doubling) is moved by `mremap`, its bytes not copied, as
/// glibc grows one. Asked of `System` page-aligned, a grown block would be copied each time.
#[cfg(target_os = "linux")]
mod large_blocks {
    use super::PAGE;

    /// The bytes mapped for a block of `size`: whole pages.
    fn mapped(size: usize) -> usize {
        size.div_ceil(PAGE) * PAGE
    }

    /// A new block of `size` bytes, zeroed, or null.
    pub fn map(size: usize) -> *mut u8 {
        let (prot, flags) = (
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        );
        // SAFETY: a new anonymous mapping, which touches no memory of the process's.
        let at = unsafe { libc::mmap(std::ptr::null_mut(), mapped(size), prot, flags, -1, 0) };
        if at == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        at.cast()
    }

    /// A new block of `size` bytes, zeroed, or null: a new mapping is.
    pub fn map_zeroed(size: usize) -> *mut u8 {
        map(size)
    }

    /// Unmaps the block at `ptr` of `size` bytes.
    ///
    /// # Safety
    ///
    /// `ptr` came from `map` or `remap` for `size`, and is not used again.
    pub unsafe fn unmap(ptr: *mut u8, size: usize) {
        // SAFETY: the caller's: the whole mapping, unused from now on.
        unsafe { libc::munmap(ptr.cast(), mapped(size)) };
    }

    /// The block at `ptr` of `size` bytes grown or shrunk to `new_size`, moved where it must
    /// be, its bytes kept; null where it cannot be (the block is left as it was).
    ///
    /// # Safety
    ///
    /// As `unmap`'s, for the block given; the block returned is for `new_size`.
    pub unsafe fn remap(ptr: *mut u8, size: usize, new_size: usize) -> *mut u8 {
        let (old, new) = (mapped(size), mapped(new_size));
        // SAFETY: the caller's: the whole mapping, which may move.
        let at = unsafe { libc::mremap(ptr.cast(), old, new, libc::MREMAP_MAYMOVE) };
        if at == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        at.cast()
    }
}

/// Large blocks elsewhere: asked of `System` page-aligned, and copied when grown.
#[cfg(not(target_os = "linux"))]
mod large_blocks {
    use std::alloc::{GlobalAlloc, Layout, System};

    use super::PAGE;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, PAGE).expect("a size the caller's layout had")
    }

    pub fn map(size: usize) -> *mut u8 {
        // SAFETY: a large size is non-zero.
        unsafe { System.alloc(layout(size)) }
    }

    pub fn map_zeroed(size: usize) -> *mut u8 {
        // SAFETY: a large size is non-zero.
        unsafe { System.alloc_zeroed(layout(size)) }
    }

    /// # Safety
    ///
    /// `ptr` came from `map` for `size`, and is not used again.
    pub unsafe fn unmap(ptr: *mut u8, size: usize) {
        // SAFETY: the caller's; `map` asked for this layout.
        unsafe { System.dealloc(ptr, layout(size)) }
    }

    /// Null: the caller copies.
    ///
    /// # Safety
    ///
    /// None needed: nothing is done.
    pub unsafe fn remap(_ptr: *mut u8, _size: usize, _new_size: usize) -> *mut u8 {
        std::ptr::null_mut()
    }
}

// SAFETY: a large block (`large`: at most page-aligned, at least `LARGE` bytes) comes from
// `large_blocks`, page-aligned, and goes back there with its size; it is kept on release and
// handed out again only for a layout of the same size, and large. Every other block is
// `System`'s, with the caller's layout. `alloc_zeroed` zeroes a kept block, and hands out a
// new one as `large_blocks` made it, zeroed.
unsafe impl GlobalAlloc for PageAlignedLarge {
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !large(layout) {
            // SAFETY: the caller's layout, of non-zero size (`GlobalAlloc`).
            return unsafe { System.alloc_zeroed(layout) };
        }
        match take_kept(layout.size()) {
            Some(ptr) => {
                // SAFETY: a kept block of this size, taken out of `KEPT`: no one else has it.
                unsafe { ptr.write_bytes(0, layout.size()) };
                ptr
            }
            None => large_blocks::map_zeroed(layout.size()),
        }
    }

    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !large(layout) {
            // SAFETY: the caller's layout, of non-zero size (`GlobalAlloc`).
            return unsafe { System.alloc(layout) };
        }
        take_kept(layout.size()).unwrap_or_else(|| large_blocks::map(layout.size()))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !large(layout) {
            // SAFETY: `ptr` came from `System` with `layout`.
            return unsafe { System.dealloc(ptr, layout) };
        }
        // Kept, to be handed out again by `alloc` for a layout of its size; one kept before
        // it may be given up.
        if let Some((out, size)) = keep(ptr, layout.size()) {
            // SAFETY: a large block, from `large_blocks` for `size`, no longer kept.
            unsafe { large_blocks::unmap(out, size) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A size the caller may ask (`GlobalAlloc::realloc`'s contract): else, no block.
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        match (large(layout), large(new)) {
            // SAFETY: `ptr` came from `System` with `layout`; small stays small.
            (false, false) => return unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                // SAFETY: `ptr` came from `large_blocks` for `layout.size()`.
                let moved = unsafe { large_blocks::remap(ptr, layout.size(), new_size) };
                if !moved.is_null() {
                    return moved;
                }
            }
            _ => {}
        }
        // Across the boundary of `LARGE` (or where a large block cannot be remapped): a new
        // block, the bytes copied, the old one freed.
        // SAFETY: `new` has the caller's non-zero size and alignment.
        let moved = unsafe { self.alloc(new) };
        if !moved.is_null() {
            // SAFETY: both blocks hold at least the smaller size and do not overlap; `ptr`
            // came from `alloc` with `layout`.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_start_on_a_page_and_small_ones_are_left_alone() {
        let large = vec![0u8; LARGE];
        assert_eq!(large.as_ptr() as usize % PAGE, 0);
        let reader = std::io::BufReader::with_capacity(1 << 20, std::io::empty());
        assert_eq!(reader.buffer().as_ptr() as usize % PAGE, 0);
    }

    #[test]
    fn blocks_kept_and_given_up_come_back_aligned_and_zeroed_where_asked() {
        // More sizes than slots: some are kept, some given up, some taken again.
        let sizes: Vec<usize> = (0..KEEP + 2).map(|i| LARGE + i * PAGE).collect();
        for round in 0..3u8 {
            let blocks: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![round + 1; n]).collect();
            for block in &blocks {
                assert_eq!(block.as_ptr() as usize % PAGE, 0);
            }
            drop(blocks);
            let zeroed: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            assert!(zeroed.iter().all(|b| b.iter().all(|&x| x == 0)));
        }
        let mut grown: Vec<u8> = (0..LARGE).map(|i| i as u8).collect();
        grown.reserve_exact(4 * LARGE);
        assert_eq!(grown.as_ptr() as usize % PAGE, 0);
        assert!(grown.iter().enumerate().all(|(i, &x)| x == i as u8));
    }

    #[test]
    fn a_buffer_grown_and_shrunk_across_the_boundary_keeps_its_bytes() {
        let mut v: Vec<u8> = (0..100u8).collect();
        v.reserve_exact(LARGE);
        assert_eq!(v.as_ptr() as usize % PAGE, 0);
        assert!(v.iter().copied().eq(0..100u8));
        v.shrink_to_fit();
        assert!(v.iter().copied().eq(0..100u8));
    }
}
