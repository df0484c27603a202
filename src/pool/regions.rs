//! Which of the pool's regions are live and which lent (`Regions`, of `Live` regions), with
//! no pointer: the pool checks every token against its bookkeeping before it touches a byte.
//!
//! Invariant, kept by every method here: [`Regions`] holds the live regions in the order they
//! were taken (sorted by `start`); memory is taken back only from the front, so the free space
//! is always one run.

use std::collections::VecDeque;

#[derive(Debug)]
struct Live {
    start: u64,
    len: usize,
    freed: bool,
    lent: bool,
}

/// The live regions, oldest first, with their bytes and which of them are lent.
#[derive(Debug, Default)]
pub(super) struct Regions {
    live: VecDeque<Live>,
    /// Bytes of the live regions, not counting skipped ends.
    live_bytes: usize,
    lent: usize,
    /// Bytes of the lent regions.
    lent_bytes: usize,
}

impl Regions {
    /// How many regions are live (freed ones behind an older live one included).
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    pub(super) fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Bytes of live regions not lent.
    pub(super) fn ready_bytes(&self) -> usize {
        self.live_bytes - self.lent_bytes
    }

    /// How many regions are lent.
    pub(super) fn lent(&self) -> usize {
        self.lent
    }

    /// Notes a region just taken at `start`, after every live one.
    pub(super) fn push(&mut self, start: u64, len: usize) {
        // Starts strictly ordered and regions apart: what `find`'s lookup and every token's
        // exclusive access rest on, so checked in every build.
        assert!(
            self.live
                .back()
                .is_none_or(|l| l.start + l.len as u64 <= start),
            "a region at {start} overlapping the one taken before it"
        );
        self.live_bytes += len;
        self.live.push_back(Live {
            start,
            len,
            freed: false,
            lent: false,
        });
    }

    /// Frees the live region at index `i`, then forgets the freed ones at the front; the
    /// start of the oldest region still live.
    pub(super) fn free(&mut self, i: usize) -> Option<u64> {
        self.live[i].freed = true;
        self.live_bytes -= self.live[i].len;
        while self.live.front().is_some_and(|l| l.freed) {
            self.live.pop_front();
        }
        self.live.front().map(|l| l.start)
    }

    /// Marks the live region at index `i` lent, or back from its loan.
    pub(super) fn set_lent(&mut self, i: usize, lent: bool) {
        let l = &mut self.live[i];
        l.lent = lent;
        if lent {
            self.lent += 1;
            self.lent_bytes += l.len;
        } else {
            self.lent -= 1;
            self.lent_bytes -= l.len;
        }
    }

    /// The index of the live region of `len` bytes at `start`, checked to be live, and lent
    /// or not as `lent` says.
    pub(super) fn find(&self, start: u64, len: usize, lent: bool) -> usize {
        let search = || self.live.binary_search_by_key(&start, |l| l.start);
        // The consumer's region is nearly always the oldest live one, and a region being lent
        // the newest: look there first.
        let i = match (self.live.front(), self.live.back()) {
            (Some(l), _) if l.start == start => 0,
            (_, Some(l)) if l.start == start => self.live.len() - 1,
            _ => search().unwrap_or_else(|_| panic!("region at {start} is not live in this pool")),
        };
        // Starts are unique and ordered (asserted in every build as regions are taken, in
        // `push`); this only checks the shortcut above against the full search.
        debug_assert_eq!(search(), Ok(i), "starts are unique and ordered");
        let live = &self.live[i];
        assert!(!live.freed && live.len == len, "a region freed already");
        assert_eq!(
            live.lent, lent,
            "a region lent: {}, expected {lent}",
            live.lent
        );
        i
    }

    /// Bytes from the start of the live region at index `i` through the regions taken after
    /// it, as far as `want` needs: each must be live, not lent, and follow the one before in
    /// the allocation as `adjacent(end, start)` says (checked, always).
    pub(super) fn run(&self, i: usize, want: usize, adjacent: impl Fn(u64, u64) -> bool) -> usize {
        let mut prev = &self.live[i];
        let mut covered = prev.len;
        for l in self.live.range(i + 1..) {
            if covered >= want {
                break;
            }
            assert!(
                adjacent(prev.start + prev.len as u64, l.start) && !l.freed && !l.lent,
                "a run of bytes across regions that are not adjacent and readable"
            );
            covered += l.len;
            prev = l;
        }
        covered
    }
}
