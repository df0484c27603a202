//! Where the pool's regions lie in its allocation (`Positions`), with no pointer: the pool
//! checks every token against its bookkeeping before it touches a byte.
//!
//! Invariants, kept by every method here:
//! - `free_pos <= alloc_pos <= free_pos + capacity`, so live regions never overlap.
//! - Every region taken lies inside the allocation (`start % capacity + len <= capacity`).

use crate::consts::PAGE;

/// Where the next region goes and where the free run starts: positions that only grow,
/// mapped onto the allocation modulo its capacity. A region never wraps: where it would,
/// the rest of the allocation is skipped.
#[derive(Debug)]
pub(super) struct Positions {
    capacity: usize,
    alloc_pos: u64,
    free_pos: u64,
}

impl Positions {
    pub(super) fn new(capacity: usize) -> Self {
        Positions {
            capacity,
            alloc_pos: 0,
            free_pos: 0,
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes taken by live regions and by skipped ends.
    pub(super) fn used(&self) -> usize {
        (self.alloc_pos - self.free_pos) as usize
    }

    /// Takes `len` bytes (whole pages) from the free end, within the first `limit` bytes of
    /// the allocation where they fit there (see `Pool::alloc_below`); where they start, or
    /// `None` if there is not that much room in one run. `empty`: no region is live.
    pub(super) fn take(&mut self, len: usize, limit: usize, empty: bool) -> Option<u64> {
        if len > self.capacity {
            return None;
        }
        let cap = self.capacity as u64;
        if empty {
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
        self.alloc_pos = start + len as u64;
        assert!(
            self.alloc_pos - self.free_pos <= cap,
            "live regions spanning more than the pool"
        );
        Some(start)
    }

    /// Takes the memory back up to `front`, the start of the oldest live region (`None`:
    /// none is live, so all of it).
    pub(super) fn free_to(&mut self, front: Option<u64>) {
        self.free_pos = front.unwrap_or(self.alloc_pos);
    }

    /// The offset in the allocation of the region of `len` bytes at `start`, checked to be
    /// taken and not freed, and to lie inside the allocation.
    pub(super) fn phys(&self, start: u64, len: usize) -> usize {
        let phys = (start % self.capacity as u64) as usize;
        assert!(
            start >= self.free_pos
                && start + len as u64 <= self.alloc_pos
                && phys + len <= self.capacity,
            "region at {start} of {len} bytes is not a live region of this pool"
        );
        phys
    }

    /// Whether a region starting at `next` follows one ending at `end` in the allocation as
    /// well (not across its wrap).
    pub(super) fn adjacent(&self, end: u64, next: u64) -> bool {
        next == end && !end.is_multiple_of(self.capacity as u64)
    }
}
