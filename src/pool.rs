//! The buffer pool: one page-aligned allocation, handed out as regions in FIFO order.
//!
//! Positions are virtual: `u64`s that only grow, mapped onto the allocation modulo its
//! capacity. A region never wraps: where it would, the rest of the allocation is skipped.
//!
//! Invariants, kept by every method here:
//! - `free_pos <= alloc_pos <= free_pos + capacity`, so live regions never overlap.
//! - Every live region lies inside the allocation (`start % capacity + len <= capacity`).
//! - `live` holds the live regions in the order they were taken (sorted by `start`); memory
//!   is taken back only from the front, so the free space is always one run.
//! - A region is reachable through exactly one token, and every token names its pool (each
//!   method checks it, and that the region is live, always, not only in debug builds):
//!   - a [`Region`]: the consumer's, readable through [`Pool::bytes`];
//!   - a [`Loan`]: lent to a backend that writes it itself (`pread`), through
//!     [`Loan::as_mut_slice`];
//!   - a [`KernelLoan`]: handed to the kernel, which writes it asynchronously. It gives no
//!     access to the bytes at all, and turns back into a `Loan` only through the `unsafe`
//!     [`KernelLoan::reaped`], once the kernel's completion for it has been reaped.
//!
//!   While a region is lent, nothing here reads, hands out or frees it.
//! - The allocation is freed only when no loan is outstanding; a pool dropped with loans out
//!   leaks its memory instead, since the kernel may still write into it.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::consts::PAGE;
use crate::sys;

/// The identity of the next pool built: tokens carry it, so a token of one pool is never
/// taken for a region of another.
static NEXT_POOL: AtomicU64 = AtomicU64::new(0);

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

// SAFETY: a `Loan` is the only handle to its bytes (pool invariant: one token per region), so
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

#[derive(Debug)]
struct Live {
    start: u64,
    len: usize,
    freed: bool,
    lent: bool,
}

/// One page-aligned allocation handed out as FIFO regions. See the module docs.
pub(crate) struct Pool {
    /// Carried by every token of this pool.
    id: u64,
    ptr: NonNull<u8>,
    capacity: usize,
    alloc_pos: u64,
    free_pos: u64,
    live: VecDeque<Live>,
    /// Bytes of the live regions, not counting skipped ends.
    live_bytes: usize,
    lent: usize,
    /// Bytes of the lent regions.
    lent_bytes: usize,
    /// The memory `ptr` points into (`None` for `Pool::empty`): freed when the pool is
    /// dropped, or leaked where loans are still out.
    mapping: Option<sys::Mapping>,
}

// SAFETY: the pool owns its allocation; the raw pointer is not shared with anything that is
// not moved along with it (loans are `Send` on their own terms above).
unsafe impl Send for Pool {}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("used", &self.used())
            .field("capacity", &self.capacity)
            .field("regions", &self.live.len())
            .field("lent", &self.lent)
            .finish()
    }
}

impl Pool {
    /// Maps a pool of `capacity` bytes rounded up to a page (see `sys::Mapping`).
    /// `None` if the mapping fails.
    pub(crate) fn with_capacity(capacity: usize) -> Option<Pool> {
        let capacity = capacity.max(1).checked_next_multiple_of(PAGE)?;
        let mut mapping = sys::Mapping::new(capacity)?;
        let ptr = mapping.as_mut_ptr();
        Some(Pool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            ptr,
            capacity,
            alloc_pos: 0,
            free_pos: 0,
            live: VecDeque::new(),
            live_bytes: 0,
            lent: 0,
            lent_bytes: 0,
            mapping: Some(mapping),
        })
    }

    /// A pool of no bytes that maps nothing: what an engine keeps once its pool has moved to
    /// a rebound engine.
    pub(crate) fn empty() -> Pool {
        Pool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            ptr: NonNull::dangling(),
            capacity: 0,
            alloc_pos: 0,
            free_pos: 0,
            live: VecDeque::new(),
            live_bytes: 0,
            lent: 0,
            lent_bytes: 0,
            mapping: None,
        }
    }

    /// The pool's size in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes taken by live regions and by skipped ends.
    pub(crate) fn used(&self) -> usize {
        (self.alloc_pos - self.free_pos) as usize
    }

    /// Bytes of the live regions: what the read-ahead holds, skipped ends not counted.
    pub(crate) fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// The whole allocation, for registering it with a ring: (address, length).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn as_raw_parts(&self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.capacity)
    }

    /// Takes a region of at least `len` bytes (rounded up to a page) from the free end, or
    /// `None` if there is not that much room in one run.
    #[cfg(test)]
    pub(crate) fn alloc(&mut self, len: usize) -> Option<Region> {
        self.alloc_below(len, self.capacity)
    }

    /// Like `alloc`, but keeps the region within the first `limit` bytes of the allocation
    /// where it fits there, skipping to the start instead of going past `limit`. A small
    /// read-ahead window so cycles through the same few pages, which stay mapped and cached.
    pub(crate) fn alloc_below(&mut self, len: usize, limit: usize) -> Option<Region> {
        let len = len.max(1).next_multiple_of(PAGE);
        if len > self.capacity {
            return None;
        }
        let cap = self.capacity as u64;
        if self.live.is_empty() {
            // Nothing is live: start again at the allocation's start, so a region of up to the
            // whole capacity fits without waiting for a skipped end to come back.
            self.alloc_pos = self.alloc_pos.next_multiple_of(cap);
            self.free_pos = self.alloc_pos;
        }
        let wrap_at = if len <= limit {
            limit.next_multiple_of(PAGE).min(self.capacity)
        } else {
            self.capacity
        };
        let phys = (self.alloc_pos % cap) as usize;
        let start = if phys + len > wrap_at {
            self.alloc_pos.next_multiple_of(cap)
        } else {
            self.alloc_pos
        };
        if start + len as u64 - self.free_pos > cap {
            return None;
        }
        // Starts strictly ordered and regions apart: what `index_of`'s lookup and every
        // token's exclusive access rest on, so checked in every build.
        assert!(
            self.live
                .back()
                .is_none_or(|l| l.start + l.len as u64 <= start),
            "a region at {start} overlapping the one taken before it"
        );
        self.alloc_pos = start + len as u64;
        self.live_bytes += len;
        self.live.push_back(Live {
            start,
            len,
            freed: false,
            lent: false,
        });
        assert!(
            self.alloc_pos - self.free_pos <= cap,
            "live regions spanning more than the pool"
        );
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
        self.live[i].freed = true;
        self.live_bytes -= region.len;
        while self.live.front().is_some_and(|l| l.freed) {
            self.live.pop_front();
        }
        self.free_pos = self.live.front().map_or(self.alloc_pos, |l| l.start);
    }

    /// The bytes `range` of a region that is not lent.
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

    /// Whether region `b` starts where region `a` ends, in the allocation as well (not across
    /// its wrap), so that a run of bytes may span both.
    pub(crate) fn adjacent(&self, a: &Region, b: &Region) -> bool {
        let end = a.start + a.len as u64;
        a.pool == b.pool && b.start == end && !end.is_multiple_of(self.capacity as u64)
    }

    /// `len` bytes from `start` bytes into `first`, running on into the regions taken after
    /// it; every region the run touches must be live, not lent and adjacent to the one before
    /// (checked, always).
    pub(crate) fn span(&self, first: &Region, start: usize, len: usize) -> &[u8] {
        let i = self.index_of(first, false);
        assert!(start <= first.len, "a run starting past its region");
        let phys = self.phys(first) + start;
        let mut covered = first.len;
        let mut prev = &self.live[i];
        for l in self.live.range(i + 1..) {
            if covered >= start + len {
                break;
            }
            let end = prev.start + prev.len as u64;
            assert!(
                l.start == end && !end.is_multiple_of(self.capacity as u64) && !l.freed && !l.lent,
                "a run of bytes across regions that are not adjacent and readable"
            );
            covered += l.len;
            prev = l;
        }
        assert!(start + len <= covered, "a run past the regions taken");
        // SAFETY: the run starts inside `first` (a live region of this pool, checked by
        // `index_of`) and every byte of it lies in `first` or in the live, unlent regions
        // right after it, checked adjacent in the allocation (none wraps), so it lies inside
        // the allocation and nothing writes it while the shared borrow of `self` lives; the
        // mapping is zero-filled, so every byte is initialised.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(phys), len) }
    }

    /// The bytes of a region that is not lent, writable (to fill it with a sentinel in tests).
    #[cfg(test)]
    pub(crate) fn bytes_mut(&mut self, region: &mut Region) -> &mut [u8] {
        self.index_of(region, false);
        let phys = self.phys(region);
        // SAFETY: as in `bytes`, and the exclusive borrow of `self` means no other slice of the
        // pool is alive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(phys), region.len) }
    }

    /// Hands a region to a backend. Until [`reclaim`](Self::reclaim) gets it back, nothing
    /// here touches its bytes.
    pub(crate) fn lend(&mut self, region: Region) -> Loan {
        let i = self.index_of(&region, false);
        self.live[i].lent = true;
        let phys = self.phys(&region);
        self.lent += 1;
        self.lent_bytes += region.len;
        // SAFETY: `phys < capacity` (checked by `phys`), so the pointer stays inside the
        // allocation.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(phys)) };
        Loan { ptr, region }
    }

    /// Takes back a region whose backend is done with it (its completion was reaped).
    pub(crate) fn reclaim(&mut self, loan: Loan) -> Region {
        let i = self.index_of(&loan.region, true);
        assert_eq!(
            loan.ptr.as_ptr() as usize,
            self.ptr.as_ptr() as usize + self.phys(&loan.region),
            "a loan that does not point at its region"
        );
        self.live[i].lent = false;
        self.lent -= 1;
        self.lent_bytes -= loan.region.len;
        loan.region
    }

    /// Bytes of live regions not lent: read, and not yet freed.
    pub(crate) fn ready_bytes(&self) -> usize {
        self.live_bytes - self.lent_bytes
    }

    /// How many regions are lent.
    pub(crate) fn lent(&self) -> usize {
        self.lent
    }

    /// The index in `live` of a token's region, checked to be a live region of this pool,
    /// lent or not as `lent` says.
    fn index_of(&self, region: &Region, lent: bool) -> usize {
        assert_eq!(region.pool, self.id, "a token of another pool");
        let search = || self.live.binary_search_by_key(&region.start, |l| l.start);
        // The consumer's region is nearly always the oldest live one, and a region being lent
        // the newest: look there first.
        let i = match (self.live.front(), self.live.back()) {
            (Some(l), _) if l.start == region.start => 0,
            (_, Some(l)) if l.start == region.start => self.live.len() - 1,
            _ => search()
                .unwrap_or_else(|_| panic!("region at {} is not live in this pool", region.start)),
        };
        // Starts are unique and ordered (asserted in every build as regions are taken, in
        // `alloc_below`); this only checks the shortcut above against the full search.
        debug_assert_eq!(search(), Ok(i), "starts are unique and ordered");
        let live = &self.live[i];
        assert!(
            !live.freed && live.len == region.len,
            "a region freed already"
        );
        assert_eq!(
            live.lent, lent,
            "a region lent: {}, expected {lent}",
            live.lent
        );
        i
    }

    /// The offset in the allocation of a live region, checked to lie inside it.
    fn phys(&self, region: &Region) -> usize {
        let phys = (region.start % self.capacity as u64) as usize;
        assert!(
            region.start >= self.free_pos
                && region.start + region.len as u64 <= self.alloc_pos
                && phys + region.len <= self.capacity,
            "region {region:?} is not a live region of this pool"
        );
        phys
    }

    #[cfg(test)]
    pub(crate) fn live_regions(&self) -> usize {
        self.live.len()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.lent > 0 {
            // A backend still holds regions (its completions were never reaped), so the kernel
            // may still write here: leak the memory rather than free it under the kernel.
            std::mem::forget(self.mapping.take());
        }
        // Otherwise no loan is out, so neither the kernel nor any token can reach the memory:
        // the mapping is freed as it drops.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_page_aligned_and_fifo() {
        let mut p = Pool::with_capacity(4 * PAGE).unwrap();
        let a = p.alloc(100).unwrap();
        let b = p.alloc(PAGE + 1).unwrap();
        assert_eq!(a.len, PAGE);
        assert_eq!(b.len, 2 * PAGE);
        assert_eq!(p.used(), 3 * PAGE);
        assert!(p.alloc(2 * PAGE).is_none(), "only one page is left");
        let c = p.alloc(PAGE).unwrap();
        assert!(p.alloc(1).is_none());
        // Freeing out of order takes nothing back until the oldest is back.
        p.free(b);
        assert_eq!(p.used(), 4 * PAGE);
        p.free(a);
        assert_eq!(p.used(), PAGE);
        p.free(c);
        assert_eq!(p.used(), 0);
        assert_eq!(p.live_regions(), 0);
    }

    #[test]
    fn a_region_never_wraps() {
        let mut p = Pool::with_capacity(4 * PAGE).unwrap();
        let a = p.alloc(2 * PAGE).unwrap();
        let b = p.alloc(PAGE).unwrap();
        p.free(a);
        // One page is free at the end and two at the start: a two-page region skips the end.
        let c = p.alloc(2 * PAGE).unwrap();
        assert_eq!(p.phys(&c), 0);
        assert_eq!(
            p.used(),
            4 * PAGE,
            "the skipped page counts until b is back"
        );
        p.free(b);
        assert_eq!(p.used(), 2 * PAGE);
        p.free(c);
        assert_eq!(p.used(), 0);
    }

    #[test]
    fn an_empty_pool_fits_a_region_of_its_whole_size() {
        let mut p = Pool::with_capacity(4 * PAGE).unwrap();
        let a = p.alloc(PAGE).unwrap();
        p.free(a);
        // Three pages are free after the first, one before it: only a restart at 0 fits four.
        let b = p.alloc(4 * PAGE).unwrap();
        assert_eq!(p.phys(&b), 0);
        p.free(b);
        let c = p.alloc(3 * PAGE).unwrap();
        let d = p.alloc(PAGE).unwrap();
        assert!(p.alloc(1).is_none());
        p.free(c);
        p.free(d);
    }

    #[test]
    fn a_limit_keeps_regions_in_the_first_pages() {
        let mut p = Pool::with_capacity(8 * PAGE).unwrap();
        let mut held = VecDeque::new();
        for _ in 0..20 {
            while held.len() >= 3 {
                p.free(held.pop_front().unwrap());
            }
            let r = p.alloc_below(PAGE, 3 * PAGE).unwrap();
            assert!(p.phys(&r) + PAGE <= 3 * PAGE, "stays below the limit");
            held.push_back(r);
        }
        assert_eq!(p.live_bytes(), 3 * PAGE);
        // Nothing fits below the limit while three pages are live there: none is taken.
        assert!(p.alloc_below(PAGE, 3 * PAGE).is_none());
        while let Some(r) = held.pop_front() {
            p.free(r);
        }
        assert_eq!((p.used(), p.live_bytes()), (0, 0));
        // A region larger than the limit goes past it.
        let a = p.alloc_below(2 * PAGE, 3 * PAGE).unwrap();
        let big = p.alloc_below(4 * PAGE, 3 * PAGE).unwrap();
        assert_eq!((p.phys(&a), p.phys(&big)), (0, 2 * PAGE));
        assert_eq!(p.live_bytes(), 6 * PAGE);
        p.free(a);
        p.free(big);
    }

    #[test]
    fn lend_and_reclaim_keep_bytes() {
        let mut p = Pool::with_capacity(2 * PAGE).unwrap();
        let r = p.alloc(10).unwrap();
        let mut loan = p.lend(r);
        assert_eq!(p.lent(), 1);
        loan.as_mut_slice()[..3].copy_from_slice(b"abc");
        let r = p.reclaim(loan);
        assert_eq!(p.lent(), 0);
        assert_eq!(p.bytes(&r, 0..3), b"abc");
        p.free(r);
    }

    #[test]
    fn dropping_with_a_loan_out_leaks_instead_of_freeing() {
        let mut p = Pool::with_capacity(PAGE).unwrap();
        let r = p.alloc(1).unwrap();
        let loan = p.lend(r);
        drop(p);
        // The loan's memory is still mapped: writing through it must not fault.
        let mut loan = loan;
        loan.as_mut_slice()[0] = 1;
    }

    #[test]
    #[should_panic(expected = "a token of another pool")]
    fn a_region_of_another_pool_is_refused() {
        let mut a = Pool::with_capacity(PAGE).unwrap();
        let mut b = Pool::with_capacity(PAGE).unwrap();
        let r = a.alloc(1).unwrap();
        // `b` has a live region at the same position, so only the identity tells them apart.
        let _same_place = b.alloc(1).unwrap();
        let _ = b.bytes(&r, 0..1);
    }

    #[test]
    #[should_panic(expected = "a token of another pool")]
    fn a_loan_of_another_pool_is_not_taken_back() {
        let mut a = Pool::with_capacity(PAGE).unwrap();
        let mut b = Pool::with_capacity(PAGE).unwrap();
        let loan = {
            let r = a.alloc(1).unwrap();
            a.lend(r)
        };
        let _ = {
            let r = b.alloc(1).unwrap();
            b.lend(r)
        };
        b.reclaim(loan);
    }

    #[test]
    fn a_kernel_loan_comes_back_with_what_was_written() {
        let mut p = Pool::with_capacity(PAGE).unwrap();
        let (kernel, ptr) = {
            let r = p.alloc(3).unwrap();
            p.lend(r)
        }
        .into_kernel();
        // Stands in for the kernel writing through the address it was given.
        // SAFETY: `ptr` points at a live region of at least 3 bytes no token can reach now.
        unsafe { ptr.copy_from_nonoverlapping(b"xyz".as_ptr(), 3) };
        // SAFETY: no kernel operation was ever handed this region.
        let loan = unsafe { kernel.reaped() };
        let r = p.reclaim(loan);
        assert_eq!(p.bytes(&r, 0..3), b"xyz");
        p.free(r);
    }

    #[test]
    fn a_kernel_loan_dropped_leaks_the_pool_rather_than_free_it() {
        let mut p = Pool::with_capacity(PAGE).unwrap();
        let r = p.alloc(1).unwrap();
        // The kernel loan is dropped at once, never reaped.
        let (_, ptr) = p.lend(r).into_kernel();
        assert_eq!(
            p.lent(),
            1,
            "the region stays lent, so the pool's drop leaks it"
        );
        drop(p);
        // Stands in for the kernel finishing the read late: the memory must still be mapped.
        // SAFETY: the pool was dropped with a loan out, so it leaked its mapping: `ptr` points
        // at a live byte of it that no token can reach any more.
        unsafe { ptr.write(1) };
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn bytes_past_a_region_panic() {
        let mut p = Pool::with_capacity(PAGE).unwrap();
        let r = p.alloc(1).unwrap();
        let _ = p.bytes(&r, 0..PAGE + 1);
    }

    #[test]
    fn churn_keeps_accounting() {
        let mut p = Pool::with_capacity(8 * PAGE).unwrap();
        let mut held = VecDeque::new();
        for i in 0..1000usize {
            let len = 1 + (i * 7919) % (3 * PAGE);
            while p.alloc(len).map(|r| held.push_back(r)).is_none() {
                p.free(held.pop_front().unwrap());
            }
            assert!(p.used() <= p.capacity());
        }
        while let Some(r) = held.pop_front() {
            p.free(r);
        }
        assert_eq!(p.used(), 0);
    }
}
