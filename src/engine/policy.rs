//! The read policy's decisions: what the read-ahead learned of the page cache, the window of
//! the pool a read may fill, and how a read is sent. Nothing here touches a file, a read or
//! the pool: the scheduler asks, and does what it is told.
//!
//! The policy is fixed, the same in every run (see ARCHITECTURE.md, "The read policy"):
//! - a large buffered read is first copied at once on the consumer's thread, as far as the
//!   page cache holds it ([`Io::read_if_cached`](crate::io::Io::read_if_cached)); what is not
//!   cached goes to the device through the backend, and so do the file's next large reads;
//! - while reads are found cached (or, before any read found out, the first file's next
//!   page), files on a local filesystem are not read ahead at all: the consumer's thread
//!   copies them when it gets there (see `whole.rs`); where the
//!   read-ahead copies cached reads itself, it holds one read (the region just consumed,
//!   still in the CPU's cache, is the next one written), or the small window for small
//!   reads, or for a record parser two reads of `read_size` at least, within the inline
//!   window;
//! - once a read went to the device, the read-ahead holds the cold window for a pool's worth
//!   of bytes, so that the device has depth; `O_DIRECT` reads may fill the pool;
//! - kernel workers copy large cached reads only where the reader was built with
//!   `offload(true)`.

use super::Limits;
use crate::consts::{OFFLOAD_MIN, SMALL_READS_PER_HINT};

/// What the policy learned, and the offloaded reads it let go.
#[derive(Debug, Default)]
pub(super) struct Policy {
    /// Offloaded reads in flight.
    offloaded: usize,
    /// The run of bytes the consumer needs of the current file at once, where the reads
    /// issued so far do not hold it (`fill_buf_at_least`): its reads may then use the whole
    /// pool, where the run is longer than their window (see `window`).
    stretch: Option<usize>,
    /// Whether the consumer reads records (`fill_buf_at_least`): then the reads it copies
    /// itself are of `read_size`, not one read of the whole window, so that a record across
    /// two reads lies in place unless it crosses the window's wrap (then it is copied).
    records: bool,
    /// Bytes consumed before which cached reads keep the warm window, not one read (nor the
    /// records' window): while reads that went to the device may still be ahead, one read's
    /// window would hold every file behind a cached range back.
    cold_until: u64,
    /// Reads below `OFFLOAD_MIN` scheduled so far.
    small_reads: u64,
    /// Whether the last read scheduled was below `OFFLOAD_MIN`.
    small_last: bool,
    /// Whether the last read that found out was served by the page cache (or the first
    /// file, asked before any read: see `whole::learn_from_front`); `None` before any did.
    /// Reads go by it until they find out themselves.
    cached: Option<bool>,
    /// Whether the first file was asked about the page cache (see `cached`).
    first_asked: bool,
    /// The last read that asked the backend whether it is cached: (file id, offset).
    asked: Option<(u64, u64)>,
    /// The file of the read being scheduled: the scheduler asks `should_ask` of every
    /// buffered read before it asks `how` to send it.
    scheduling: u64,
    /// The last file whose reads of only what is cached were refused (`FromCache::Refused`):
    /// its filesystem cannot do them (overlayfs, FUSE, NFS), or a seccomp filter refuses
    /// the call. Only that file's reads stop offering: files elsewhere (or a filter lifted)
    /// are tried again, at the cost of one refused call a file. Reads go in queue order,
    /// so the file whose reads are scheduled is the one to remember.
    nowait_refused: Option<u64>,
    /// The last file a read copied at once found none of its bytes cached in: its next large
    /// reads go straight to the backend, which tries the cache first itself, rather than
    /// each making a call that finds the disk still reading. (One that found some goes on
    /// offering: the kernel's read-ahead may be just ahead of it.)
    missed: Option<u64>,
    /// Whether small files may be copied whole (see `whole.rs`): the backend can copy what
    /// is cached into a buffer, the reads are buffered and cached, and no copy was refused.
    whole: bool,
    /// The last file that could not be copied whole: its copy found its end before its
    /// size. It is read the usual way.
    not_whole: Option<u64>,
}

/// What the scheduler knows of the next read when it asks the policy.
#[derive(Clone, Copy, Debug)]
pub(super) struct Next {
    /// Whether it is expected to find its bytes in the page cache.
    pub(super) cached: bool,
    /// Whether it is below `OFFLOAD_MIN`.
    pub(super) small: bool,
    /// Whether it is an `O_DIRECT` read.
    pub(super) direct: bool,
    /// Whether its file is read without the kernel's readahead, its pages dropped behind
    /// (see `uncached.rs`): as with `O_DIRECT`, the pool is all the depth the device gets.
    pub(super) no_kernel_readahead: bool,
    /// Whether it is the current file's.
    pub(super) current: bool,
}

impl Next {
    /// Whether kernel workers are to copy it (`offload(true)`, and a large cached read).
    pub(super) fn offload(self, limits: &Limits) -> bool {
        limits.offload && self.cached && !self.small
    }
}

impl Policy {
    /// Whether the last read that found out was served by the page cache.
    pub(super) fn warm(&self) -> bool {
        self.cached == Some(true)
    }

    /// Whether the first file is yet to be asked about the page cache (see
    /// `whole::learn_from_front`): no read found out, it was not asked, whatever the answer,
    /// and files may be copied on the consumer's thread at all (see `copy_whole`).
    pub(super) fn may_learn(&self) -> bool {
        self.cached.is_none() && !self.first_asked && self.whole
    }

    /// The first file was asked about the page cache: it is not asked again, even where
    /// the kernel could not tell.
    pub(super) fn first_asked(&mut self) {
        self.first_asked = true;
    }

    /// The consumer reads records: the reads it copies are of `read_size` (see `records`).
    pub(super) fn set_records(&mut self) {
        self.records = true;
    }

    /// Whether the consumer reads records (see `records`).
    pub(super) fn records(&self) -> bool {
        self.records
    }

    /// The run the consumer needs at once, if any: the current file's reads may then use
    /// the whole pool (see `stretch`, `window`).
    pub(super) fn set_stretch(&mut self, run: Option<usize>) {
        self.stretch = run;
    }

    /// Whether so much is read ahead of the consumer (`ready` bytes, in `held` reads issued
    /// or read and not consumed) that more can wait. While small reads of cached files
    /// complete at once, issuing them one by one as the consumer moves on would cost a
    /// submission (and an open) per file; waiting until half the window is consumed sends
    /// them in batches. Small reads from the device, likewise: each submission that starts
    /// some notifies the device once, so while three quarters of the depth are issued or
    /// read, more wait until a quarter is consumed, and go in one submission.
    pub(super) fn ahead_enough(&self, limits: &Limits, ready: usize, held: usize) -> bool {
        if !self.small_last {
            return false;
        }
        if self.warm() {
            return ready >= limits.small_reads_window() / 2;
        }
        held > limits.depth - limits.depth / 4
    }

    /// The window of the pool the read-ahead may hold with the `next` read, `consumed`
    /// bytes into the reader's life: the whole pool for the current file's reads while the
    /// consumer needs a run longer than the window (see `stretch`). A run the window could
    /// hold gets no read past it: the window is full (which is why the run is not all
    /// issued), and its straddling bytes are copied as the consumer moves on. Past the
    /// window, each such read would start where the last one ended, and a consumer that keeps
    /// straddling reads not yet issued would march through the whole pool, first touching
    /// memory its window never needs.
    pub(super) fn window(&self, limits: &Limits, next: Next, consumed: u64) -> PoolWindow {
        let window = self.window_unstretched(limits, next, consumed);
        match self.stretch {
            Some(run) if next.current && run > window.bytes(limits, usize::MAX) => PoolWindow::Pool,
            _ => window,
        }
    }

    /// [`window`](Self::window), whatever run the consumer needs.
    fn window_unstretched(&self, limits: &Limits, next: Next, consumed: u64) -> PoolWindow {
        let settled = consumed >= self.cold_until;
        match (next.cached, next.small, next.offload(limits)) {
            (true, true, _) => PoolWindow::Small,
            (true, false, true) => PoolWindow::Warm,
            // Copied on this thread as far ahead as one read would be, in reads that lie
            // together.
            (true, false, false) if settled && self.records => PoolWindow::Records,
            // Copied on this thread into the region just consumed, still in its cache.
            (true, false, false) if settled => PoolWindow::OneRead,
            (true, false, false) => PoolWindow::Warm,
            (false, _, _) if next.direct || next.no_kernel_readahead => PoolWindow::Pool,
            // Buffered reads from the device are copied by the CPU too, as the device
            // delivers them: too far ahead of the consumer, they leave its cache unread.
            (false, _, _) => PoolWindow::Cold,
        }
    }

    /// How the `next` read goes, once it has room; `None`: it waits, as kernel workers
    /// already copy as many reads as they may (but where the consumer is `helping`).
    pub(super) fn how(&mut self, limits: &Limits, next: Next, helping: bool) -> Option<How> {
        let offload = next.offload(limits);
        self.small_last = next.small;
        if offload && self.offloaded >= limits.offload_depth && !helping {
            return None;
        }
        let how = match (
            offload && !helping,
            next.direct || next.small || self.refused_here() || self.missed_here(),
        ) {
            (true, _) => How::Offload,
            (false, false) => How::CachedFirst,
            (false, true) => How::Ring,
        };
        Some(how)
    }

    /// An offloaded read was sent.
    pub(super) fn offload_sent(&mut self) {
        self.offloaded += 1;
    }

    /// Offloaded reads in flight.
    pub(super) fn offloaded(&self) -> usize {
        self.offloaded
    }

    /// An offloaded read came back.
    pub(super) fn offload_done(&mut self) {
        self.offloaded -= 1;
    }

    /// Whether a read of `len` bytes of `file` at `offset` should ask the backend whether
    /// the page cache holds it; where not, it goes by [`warm`](Self::warm). A large read
    /// finds out itself as it is sent (`How::CachedFirst`); small reads go to the backend in
    /// batches, every `SMALL_READS_PER_HINT`-th asking (one system call). Each large read
    /// asks where kernel workers copy (only a cached read is offloaded) or where reads of
    /// only what is cached are refused. A read held back by the window asks once.
    pub(super) fn should_ask(
        &mut self,
        limits: &Limits,
        (file, offset): (u64, u64),
        len: usize,
    ) -> bool {
        self.scheduling = file;
        if len < OFFLOAD_MIN {
            self.small_reads += 1;
            if self.small_reads % SMALL_READS_PER_HINT != 1 {
                return false;
            }
        } else if !limits.offload && !self.refused_here() {
            return false;
        }
        self.asked.replace((file, offset)) != Some((file, offset))
    }

    /// Learns whether a read was served by the page cache, `consumed` bytes into the
    /// reader's life: the next reads go by it. After one that was not, the read-ahead keeps
    /// depth for `pool` bytes more (see `cold_until`).
    pub(super) fn found_cached(&mut self, cached: bool, consumed: u64, pool: usize) {
        self.cached = Some(cached);
        if !cached {
            self.cold_until = consumed + pool as u64;
        }
    }

    /// Whether file `file`, small and next for the consumer, is to be copied whole at once
    /// rather than read ahead (see `whole.rs`): while reads find the cache warm.
    pub(super) fn copies_whole(&self, file: u64) -> bool {
        self.whole && self.warm() && self.not_whole != Some(file)
    }

    /// Whether files may be copied on the consumer's thread at all (see `whole.rs`); `false`
    /// for good once a copy was refused (the kernel or a filesystem cannot copy only what is
    /// cached).
    pub(super) fn copy_whole(&mut self, whole: bool) {
        self.whole = whole;
    }

    /// File `file` could not be copied whole: it is read the usual way.
    pub(super) fn not_whole(&mut self, file: u64) {
        self.not_whole = Some(file);
    }

    /// The backend refused to read only what is cached: the large reads of the file being
    /// scheduled ask the cache from now on, instead of offering.
    pub(super) fn nowait_refused(&mut self) {
        self.nowait_refused = Some(self.scheduling);
    }

    /// Whether reads of only what is cached were refused for the file being scheduled.
    fn refused_here(&self) -> bool {
        self.nowait_refused == Some(self.scheduling)
    }

    /// A read of the file being scheduled, copied at once, found none of its bytes cached.
    pub(super) fn missed(&mut self) {
        self.missed = Some(self.scheduling);
    }

    /// Whether a read of the file being scheduled found none of its bytes cached.
    fn missed_here(&self) -> bool {
        self.missed == Some(self.scheduling)
    }
}

/// How much of the pool the read-ahead may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PoolWindow {
    /// One read copied on the consumer's thread, as large as `inline_window`.
    OneRead,
    /// Small cached reads (see `Limits::small_reads_window`).
    Small,
    /// Cached reads of records copied on the consumer's thread: `inline_window`, or two
    /// reads where `read_size` is larger, in reads of `read_size`. A wider window lands the
    /// copies beyond the CPU's cache before the consumer parses them (BENCHMARKS.md has the
    /// measurements).
    Records,
    /// Cached reads copied by kernel workers, or copied on the consumer's thread just after
    /// reads went to the device: `warm_window`.
    Warm,
    /// Buffered reads from the device: `cold_window`.
    Cold,
    /// `O_DIRECT` reads, or the reads of a record longer than their window: the whole pool.
    Pool,
}

impl PoolWindow {
    /// The window in bytes, of a pool of `pool` bytes.
    pub(super) fn bytes(self, limits: &Limits, pool: usize) -> usize {
        match self {
            PoolWindow::OneRead => limits.inline_window,
            // Two reads at least, so that the next is read while the consumer parses one.
            PoolWindow::Records => limits.inline_window.max(2 * limits.read_size),
            PoolWindow::Small => limits.small_reads_window(),
            PoolWindow::Warm => limits.warm_window,
            PoolWindow::Cold => limits.cold_window,
            PoolWindow::Pool => pool,
        }
    }
}

/// How a read is sent to the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum How {
    /// Copied at once on this thread as far as the page cache holds it, the rest through the
    /// backend: large buffered reads.
    CachedFirst,
    /// To kernel workers, to copy from the page cache while the consumer works
    /// (`offload(true)`).
    Offload,
    /// Through the backend as it is: small reads, which go in batches, and `O_DIRECT` ones.
    Ring,
}
