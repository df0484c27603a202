//! The buffer pool: one page-aligned allocation, handed out as regions in FIFO order.
//!
//! Positions are virtual: `u64`s that only grow, mapped onto the allocation modulo its
//! capacity. A region never wraps: where it would, the rest of the allocation is skipped.
//!
//! Invariants, kept by every method here:
//! - Live regions never overlap, each lies inside the allocation, and memory is taken back
//!   in the order it was handed out, so the free space is always one run: the bookkeeping
//!   of [`positions`] and [`regions`] keeps that, and knows no pointer.
//! - A region is reachable through exactly one token, and every token names its pool (each
//!   method checks it, and that the region is live, always, not only in debug builds):
//!   - a [`Region`]: the consumer's, readable through a [`Span`] of one or more adjacent
//!     regions ([`Pool::span`], which checks them once, then [`Pool::span_bytes`]);
//!   - a [`Loan`]: lent to a backend that writes it itself (`pread`), through
//!     [`Loan::as_mut_slice`];
//!   - a [`KernelLoan`]: handed to the kernel, which writes it asynchronously. It gives no
//!     access to the bytes at all, and turns back into a `Loan` only through the `unsafe`
//!     [`KernelLoan::reaped`], once the kernel's completion for it has been reaped.
//!
//!   While a region is lent, nothing here reads, hands out or frees it.
//! - Bytes are written only through a loan, and every loan is counted as it is made
//!   ([`Pool::lend`]): a `Span` checked before the count last moved is read no more, so a
//!   region freed and taken again is never read through an old span while it is written.
//!   (`lend` also writes a byte of each page no region reached before, in the region it
//!   lends: the 0 a new mapping holds already, so no byte's value changes.)
//! - The allocation is freed only when no loan is outstanding; a pool dropped with loans out
//!   leaks its memory instead, since the kernel may still write into it.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::consts::PAGE;
use crate::sys;

mod positions;
mod regions;

use positions::Positions;
use regions::Regions;

/// The identity of the next pool built: tokens carry it, so a token of one pool is never
/// taken for a region of another. None is 0, which a default [`Span`] names.
static NEXT_POOL: AtomicU64 = AtomicU64::new(1);

/// A live region of the pool, held by the consumer side. Not `Clone`: one token per region.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pool: u64,
    start: u64,
    len: usize,
}

impl Region {
    /// The region's length in bytes (a multiple of the page size).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// A region lent to a backend that writes it on this side of the kernel (`pread`, scripted
/// tests). It is never in the kernel's hands: to hand a region to the kernel, turn the loan
/// into a [`KernelLoan`] with [`into_kernel`](Self::into_kernel).
///
/// Holds a raw pointer into the pool, so the pool must outlive it; [`Pool`]'s `Drop` leaks
/// the memory rather than free it while a loan is out.
#[derive(Debug)]
pub(crate) struct Loan {
    ptr: NonNull<u8>,
    region: Region,
}

// SAFETY: a `Loan` is the only token of its bytes (pool invariant: one token per region), so
// moving it to another thread moves exclusive access with it.
unsafe impl Send for Loan {}

impl Loan {
    /// The region's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.region.len
    }

    /// The region's bytes, for a backend that writes them itself.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr+len` lies inside the pool's allocation (pool invariant: live regions
        // lie inside it), the allocation outlives the loan (it is leaked, never freed, while
        // loans are out), and the loan is the only token for these bytes, borrowed mutably
        // here; a `Loan` is never in the kernel's hands (only a `KernelLoan` is).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.region.len) }
    }

    /// Hands the region to the kernel: the address it may write `len()` bytes at, and the
    /// token that stands for the region until the kernel's completion is reaped.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn into_kernel(self) -> (KernelLoan, *mut u8) {
        let ptr = self.ptr.as_ptr();
        (
            KernelLoan {
                ptr: self.ptr,
                region: self.region,
            },
            ptr,
        )
    }
}

/// A region the kernel may be writing. It gives no access to the bytes; dropping it leaks
/// the region (the pool then never frees its memory), which is safe.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
pub(crate) struct KernelLoan {
    ptr: NonNull<u8>,
    region: Region,
}

// SAFETY: as for `Loan`; and a `KernelLoan` gives no access to its bytes.
unsafe impl Send for KernelLoan {}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
impl KernelLoan {
    /// The loan back from the kernel.
    ///
    /// # Safety
    ///
    /// The completion of the one kernel operation this region was handed to (with the
    /// address from [`Loan::into_kernel`]) has been reaped: the kernel writes it no more.
    pub(crate) unsafe fn reaped(self) -> Loan {
        Loan {
            ptr: self.ptr,
            region: self.region,
        }
    }
}

/// One page-aligned allocation handed out as FIFO regions. See the module docs.
pub(crate) struct Pool {
    /// Carried by every token of this pool.
    id: u64,
    ptr: NonNull<u8>,
    /// Where the regions lie in the allocation.
    at: Positions,
    /// Which regions are live, and which lent.
    regions: Regions,
    /// The memory `ptr` points into: freed when the pool is dropped, or taken and leaked
    /// where loans are still out (see `Drop`).
    mapping: Option<sys::Mapping>,
    /// Loans made so far: a [`Span`] checked before the last one may no longer be read.
    loans: u64,
    /// How far into the allocation its pages were written first here (`first_touch`): every
    /// region ever lent ends at or below it. A mark, not a set: the engine lends each region
    /// as it takes it, so the regions lent follow each other from the allocation's start,
    /// and no page below it was skipped (one that was is faulted by the kernel instead).
    touched: usize,
}

/// A run of bytes checked once to lie in live regions that are not lent, readable through
/// [`Pool::span_bytes`] without checking the regions again until the pool lends a region:
/// what the consumer's record after record is read from, as std's `BufReader` reads its
/// buffer. Only lent regions are ever written (but for the 0s `lend` writes where they
/// are already), so bytes that were not lent when checked stay as they were until the
/// next loan.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    /// The pool it was checked in (0 for none), and that pool's loans then.
    pool: u64,
    loans: u64,
    phys: usize,
    len: usize,
}

impl Span {
    /// The same span less its first `n` bytes.
    pub(crate) fn after(self, n: usize) -> Span {
        assert!(n <= self.len, "past the span's end");
        Span {
            phys: self.phys + n,
            len: self.len - n,
            ..self
        }
    }

    /// The span's length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the pool owns its allocation; the raw pointer is not shared with anything that is
// not moved along with it (loans are `Send` on their own terms above).
unsafe impl Send for Pool {}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("used", &self.used())
            .field("capacity", &self.capacity())
            .field("regions", &self.regions.len())
            .field("lent", &self.lent())
            .finish()
    }
}

impl Pool {
    /// Maps a pool of `capacity` bytes rounded up to a page (see `sys::Mapping`), of huge
    /// pages where `huge`. `None` if the mapping fails.
    pub(crate) fn with_capacity(capacity: usize, huge: bool) -> Option<Pool> {
        let capacity = capacity.max(1).checked_next_multiple_of(PAGE)?;
        let mut mapping = sys::Mapping::new(capacity, huge)?;
        Some(Pool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            ptr: mapping.as_mut_ptr(),
            at: Positions::new(capacity),
            regions: Regions::default(),
            mapping: Some(mapping),
            loans: 0,
            touched: 0,
        })
    }

    /// The pool's size in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.at.capacity()
    }

    /// Bytes taken by live regions and by skipped ends.
    pub(crate) fn used(&self) -> usize {
        self.at.used()
    }

    /// Bytes of the live regions: what the read-ahead holds, skipped ends not counted.
    pub(crate) fn live_bytes(&self) -> usize {
        self.regions.live_bytes()
    }

    /// Bytes of live regions not lent: read, and not yet freed.
    pub(crate) fn ready_bytes(&self) -> usize {
        self.regions.ready_bytes()
    }

    /// How many regions are lent.
    pub(crate) fn lent(&self) -> usize {
        self.regions.lent()
    }

    /// The whole allocation, for registering it with a ring: (address, length).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn as_raw_parts(&self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.capacity())
    }

    /// Takes a region of at least `len` bytes (rounded up to a page) from the free end, or
    /// `None` if there is not that much room in one run.
    #[cfg(test)]
    pub(crate) fn alloc(&mut self, len: usize) -> Option<Region> {
        self.alloc_below(len, self.capacity())
    }

    /// Like `alloc`, but keeps the region within the first `limit` bytes of the allocation
    /// where it fits there, skipping to the start instead of going past `limit`. A small
    /// read-ahead window so cycles through the same few pages, which stay mapped and cached.
    pub(crate) fn alloc_below(&mut self, len: usize, limit: usize) -> Option<Region> {
        let len = len.max(1).next_multiple_of(PAGE);
        let empty = self.regions.len() == 0;
        let start = self.at.take(len, limit, empty)?;
        self.regions.push(start, len);
        Some(Region {
            pool: self.id,
            start,
            len,
        })
    }

    /// Gives a region back. Its memory is reused once every region taken before it is back
    /// too.
    pub(crate) fn free(&mut self, region: Region) {
        let i = self.index_of(&region, false);
        let front = self.regions.free(i);
        self.at.free_to(front);
    }

    /// Whether region `b` starts where region `a` ends, in the allocation as well (not across
    /// its wrap), so that a run of bytes may span both.
    pub(crate) fn adjacent(&self, a: &Region, b: &Region) -> bool {
        a.pool == b.pool && self.at.adjacent(a.start + a.len as u64, b.start)
    }

    /// The index of a token's region, checked to be a live region of this pool, lent or not
    /// as `lent` says.
    fn index_of(&self, region: &Region, lent: bool) -> usize {
        assert_eq!(region.pool, self.id, "a token of another pool");
        self.regions.find(region.start, region.len, lent)
    }

    /// The offset in the allocation of a live region, checked to lie inside it.
    fn phys(&self, region: &Region) -> usize {
        self.at.phys(region.start, region.len)
    }

    #[cfg(test)]
    pub(crate) fn live_regions(&self) -> usize {
        self.regions.len()
    }
}

/// The pool's bytes, and its loans: every access to the memory is here.
impl Pool {
    /// The bytes `range` of a region that is not lent.
    #[cfg(test)]
    pub(crate) fn bytes(&self, region: &Region, range: std::ops::Range<usize>) -> &[u8] {
        assert!(
            range.start <= range.end && range.end <= region.len,
            "range {range:?} outside a region of {} bytes",
            region.len
        );
        self.index_of(region, false);
        let phys = self.phys(region);
        // SAFETY: `phys + region.len <= capacity` (checked by `phys`), so the range lies inside
        // the allocation; the region is a live one of this pool and not lent (checked by
        // `index_of`), so nothing writes these bytes while the shared borrow of `self` lives;
        // the mapping is zero-filled, so every byte is initialised.
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().add(phys + range.start), range.len())
        }
    }

    /// `len` bytes from `start` bytes into `first`, running on into the regions taken after
    /// it, checked (always) to be live, not lent, and each adjacent to the one before: a
    /// [`Span`] to read them through until the next loan.
    pub(crate) fn span(&self, first: &Region, start: usize, len: usize) -> Span {
        let i = self.index_of(first, false);
        assert!(start <= first.len, "a run starting past its region");
        let covered = self
            .regions
            .run(i, start + len, |end, next| self.at.adjacent(end, next));
        assert!(start + len <= covered, "a run past the regions taken");
        Span {
            pool: self.id,
            loans: self.loans,
            phys: self.phys(first) + start,
            len,
        }
    }

    /// Whether `span` may still be read: it was checked in this pool, and no region was lent
    /// since.
    #[inline]
    pub(crate) fn holds(&self, span: &Span) -> bool {
        span.pool == self.id && span.loans == self.loans
    }

    /// The bytes of `span` from `from` bytes into it.
    #[inline]
    pub(crate) fn span_bytes(&self, span: &Span, from: usize) -> &[u8] {
        assert!(
            self.holds(span),
            "a span checked before a loan, or in another pool"
        );
        assert!(from <= span.len, "past the span's end");
        // SAFETY: when `span` was made, every byte of it lay inside the allocation, in live
        // regions that were not lent (checked by `span`); bytes are written only through loans
        // (and by `lend`, which cannot run while `self` is borrowed), and no loan was made
        // since (`loans` unchanged), so nothing writes them while the shared borrow of `self`
        // lives; the mapping is zero-filled, so every byte is initialised.
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().add(span.phys + from), span.len - from)
        }
    }

    /// Hands a region to a backend. Until [`reclaim`](Self::reclaim) gets it back, nothing
    /// here touches its bytes.
    pub(crate) fn lend(&mut self, region: Region) -> Loan {
        let i = self.index_of(&region, false);
        let phys = self.phys(&region);
        self.first_touch(phys, region.len);
        self.regions.set_lent(i, true);
        self.loans += 1;
        // SAFETY: `phys < capacity` (checked by `phys`), so the pointer stays inside the
        // allocation.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(phys)) };
        Loan { ptr, region }
    }

    /// Writes a byte of each page of the region at `phys` of `len` bytes that no region
    /// lent before reached, before the region is lent, so that the reader's thread takes
    /// the page's first fault. Taken in the kernel instead (as it copies a read into the
    /// page, or a helper thread's `pread` does), the fault locks the process's memory map
    /// (`mmap_lock`, shared), and queues behind any thread that maps or unmaps memory
    /// meanwhile (a new thread's stack, the allocator's arenas, another reader's pool); from
    /// user space, Linux (6.4 and later) takes it under the lock of its own mapping alone.
    /// On 64 threads of small cold files, the readers' faults queued so hundreds of times a
    /// run (BENCHMARKS.md, "The scan on 64 threads").
    /// A pool registered with the ring (its pages pinned, so in memory) or on Windows
    /// (written as it is made) takes no fault here.
    fn first_touch(&mut self, phys: usize, len: usize) {
        let end = phys + len;
        for page in (self.touched.max(phys)..end).step_by(PAGE) {
            // SAFETY: `page` lies inside the allocation (`phys + len <= capacity`, checked by
            // `phys`), in the region about to be lent, past every region lent before
            // (`touched`): no loan or kernel operation reaches it, and no slice of the pool's
            // bytes is out while `self` is borrowed mutably. The byte holds 0 already (a new
            // mapping, never written since), so even a span checked over it reads the same.
            unsafe { self.ptr.as_ptr().add(page).write_volatile(0) };
        }
        self.touched = self.touched.max(end);
    }

    /// Takes back a region whose backend is done with it (its completion was reaped).
    pub(crate) fn reclaim(&mut self, loan: Loan) -> Region {
        let i = self.index_of(&loan.region, true);
        assert_eq!(
            loan.ptr.as_ptr() as usize,
            self.ptr.as_ptr() as usize + self.phys(&loan.region),
            "a loan that does not point at its region"
        );
        self.regions.set_lent(i, false);
        loan.region
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.lent() > 0 {
            // A backend still holds regions (its completions were never reaped), so the kernel
            // may still write here: leak the memory rather than free it under the kernel.
            std::mem::forget(self.mapping.take());
        }
        // Otherwise no loan is out, so neither the kernel nor any token can reach the memory:
        // the mapping is freed as it drops.
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
