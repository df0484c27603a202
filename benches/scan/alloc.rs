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
//! A large block freed is kept (a few, process-wide) and handed out again for the next of its
//! size: std's `BufReader`s of 1 MiB, one a file, reuse one block as they reuse one from
//! glibc's heap once it has raised its threshold for mapping a block on its own, which a
//! block asked aligned never raises (each file's buffer was otherwise 256 pages mapped and
//! first touched anew).

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

/// The layout asked of the system for `layout`: page-aligned where it is large.
fn adjusted(layout: Layout) -> Layout {
    if large(layout) {
        Layout::from_size_align(layout.size(), PAGE).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: each method hands `System` the layout `adjusted` makes of the caller's, the same
// one for a block's allocation and its release (`adjusted` depends on the layout alone), and
// that layout is at least as aligned as the caller's: the block `System` returns fits it. A
// large block kept is handed out only for a layout of its size, and large, so whose
// `adjusted` layout is the one it was allocated with. `alloc_zeroed` is the trait's: `alloc`,
// then zeroes, so that a kept block is zeroed too.
unsafe impl GlobalAlloc for PageAlignedLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(kept) = large(layout).then(|| take_kept(layout.size())).flatten() {
            return kept; // A block `System` gave for `adjusted(layout)`, freed since.
        }
        // SAFETY: `adjusted` changes no size, and the caller's is non-zero (`GlobalAlloc`).
        unsafe { System.alloc(adjusted(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let (ptr, layout) = match large(layout) {
            // Kept, to be handed out again by `alloc` for a layout of its size; one kept
            // before it may be given up.
            true => match keep(ptr, layout.size()) {
                Some((out, size)) => (out, Layout::from_size_align(size, 1).unwrap_or(layout)),
                None => return,
            },
            false => (ptr, layout),
        };
        // SAFETY: `ptr` came from `System` with `adjusted(layout)` (for a kept block given
        // up, its size is large: `adjusted` makes the layout it was allocated with).
        unsafe { System.dealloc(ptr, adjusted(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align(new_size, layout.align()).unwrap_or(layout);
        let (old_asked, new_asked) = (adjusted(layout), adjusted(new));
        if old_asked.align() == new_asked.align() {
            // SAFETY: `ptr` came from `System` with `old_asked`, and the new block keeps its
            // alignment, which `adjusted(new)` asks.
            return unsafe { System.realloc(ptr, old_asked, new_size) };
        }
        // Across the boundary of `LARGE`: a new block, the bytes copied, the old one freed.
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
        assert_eq!(
            adjusted(Layout::new::<[u8; 64]>()),
            Layout::new::<[u8; 64]>()
        );
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
