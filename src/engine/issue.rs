//! Which read goes next and when: refilling as room opens, waiting, and the window of the
//! pool the read-ahead may hold.
//!
//! The policy is fixed, the same in every run (see ARCHITECTURE.md, "The read policy"):
//! - a large buffered read is first copied at once on the consumer's thread, as far as the
//!   page cache holds it ([`Io::read_if_cached`](crate::io::Io::read_if_cached)); what is not
//!   cached goes to the device through the backend;
//! - while reads are found cached, the read-ahead holds one read (the region just consumed,
//!   still in the CPU's cache, is the next one written), or the small window for small reads;
//! - once a read went to the device, the read-ahead holds the cold window for a pool's worth
//!   of bytes, so that the device has depth; `O_DIRECT` reads may fill the pool;
//! - kernel workers copy large cached reads only where the reader was built with
//!   `offload(true)`.

use std::io;
use std::time::Instant;

use super::{ring_error, Engine};
use crate::consts::{DIRECT_ALIGN, OFFLOAD_MIN, SMALL_READS_PER_HINT};
use crate::io::{FromCache, ReadReq};
use crate::pool::Region;
use crate::source::FdRef;

/// The issue policy's state: what it learned of the page cache, and the offloaded reads.
#[derive(Debug, Default)]
pub(super) struct Policy {
    /// Offloaded reads in flight.
    offloaded: usize,
    /// Whether the consumer is copying a read itself instead of waiting (see `help`).
    helping: bool,
    /// Whether the consumer needs more of the current file at once than the window of
    /// cached reads holds (`fill_buf_at_least`): its reads may then use the whole pool.
    stretch: bool,
    /// Whether the consumer reads records (`fill_buf_at_least`): then the reads it copies
    /// itself keep the warm window, not one read, so that most records lie in adjacent
    /// regions and come out in place rather than copied across a wrap.
    records: bool,
    /// Bytes consumed before which cached reads keep the warm window, not one read: while
    /// reads that went to the device may still be ahead, one read's window would hold every
    /// file behind a cached range back.
    cold_until: u64,
    /// Reads below `OFFLOAD_MIN` scheduled so far.
    small_reads: u64,
    /// Whether the last read scheduled was below `OFFLOAD_MIN`.
    small_last: bool,
    /// Whether the last read that found out was served by the page cache; `None` before
    /// any did. Reads go by it until they find out themselves.
    cached: Option<bool>,
    /// The last read that asked the backend whether it is cached: (file id, offset).
    asked: Option<(u64, u64)>,
    /// Whether the backend refused to read only what is cached (`FromCache::Refused`).
    nowait_refused: bool,
}

impl Policy {
    /// Whether the last read that found out was served by the page cache.
    fn warm(&self) -> bool {
        self.cached == Some(true)
    }

    /// An offloaded read came back.
    pub(super) fn offload_done(&mut self) {
        self.offloaded -= 1;
    }

    /// The consumer reads records: the reads it copies keep the warm window (see `records`).
    pub(super) fn set_records(&mut self) {
        self.records = true;
    }

    /// Whether the current file's reads may use the whole pool (see `stretch`).
    pub(super) fn set_stretch(&mut self, stretch: bool) {
        self.stretch = stretch;
    }
}

/// What one step of scheduling did for the earliest file with work.
enum Step {
    /// A read was issued.
    Issued,
    /// The file was opened here: look at it again.
    Opened,
    /// The backend started opening it: reads wait for that.
    StartedOpen,
    /// Nothing more can go now (depth, pool, window, cap, an open in flight).
    Blocked,
}

impl<'a> Engine<'a> {
    /// Reaps what has completed and issues more reads: called whenever room may have opened.
    pub(super) fn refill(&mut self) -> io::Result<()> {
        if self.io.in_flight() > 0 {
            self.io
                .reap(false, &mut self.done)
                .map_err(ring_error("reap"))?;
            self.handle_done();
        }
        self.schedule_unless_ahead()?;
        self.submit_continuations()
    }

    /// Submits what handling completions queued (the rest of short reads, retries), which
    /// the scheduling after it submits only if it issued reads of its own: else they would
    /// wait in the submission queue until the consumer next blocks, with the device idle.
    /// Nothing is entered where nothing is queued.
    fn submit_continuations(&mut self) -> io::Result<()> {
        self.io.submit().map_err(ring_error("submit"))
    }

    /// Issues what the pipeline has room for, unless enough is read ahead already.
    pub(super) fn schedule_unless_ahead(&mut self) -> io::Result<()> {
        if self.ahead_enough() {
            return Ok(());
        }
        self.schedule()
    }

    /// Whether so much is read ahead of the consumer that more can wait: while small reads
    /// of cached files complete at once, issuing them one by one as the consumer moves on
    /// would cost a submission (and an open) per file; waiting until half the window is
    /// consumed sends them in batches.
    fn ahead_enough(&self) -> bool {
        self.policy.warm()
            && self.policy.small_last
            && self.pool.ready_bytes() >= self.small_reads_window() / 2
    }

    /// The window of small cached reads. Where kernel workers copy large reads, the window
    /// must hold those in flight too, or a small file behind a large one would stall the
    /// pipeline; else a smaller one keeps the copies in the CPU's cache until consumed.
    fn small_reads_window(&self) -> usize {
        if self.limits.offload {
            self.limits.warm_window
        } else {
            self.limits.small_window
        }
    }

    /// Blocks until a read completes, then handles what came back and refills.
    pub(super) fn wait(&mut self) -> io::Result<()> {
        debug_assert!(
            self.io.in_flight() > 0,
            "waiting with nothing in flight would hang"
        );
        if self.help() {
            return self.refill();
        }
        let start = Instant::now();
        self.reap_waiting(start)?;
        self.stats.waits += 1;
        self.stats.wait_time += start.elapsed();
        self.handle_done();
        self.schedule()?;
        self.submit_continuations()
    }

    /// Rather than block while kernel workers copy, copies one more cached read itself
    /// (submitted without `IOSQE_ASYNC`, it completes on this thread); whether it did.
    /// Where the consumer is quicker than the workers this shares the copying out; where
    /// it is slower, it never waits, so never helps.
    fn help(&mut self) -> bool {
        if self.policy.offloaded == 0 {
            return false;
        }
        let reads = self.stats.reads;
        self.policy.helping = true;
        let issued =
            self.schedule_up_to(self.io.in_flight() + 1).is_ok() && self.stats.reads > reads;
        self.policy.helping = false;
        issued
    }

    /// Issues reads, earliest file first, while depth and pool allow; then submits them.
    pub(super) fn schedule(&mut self) -> io::Result<()> {
        self.schedule_up_to(self.limits.depth)
    }

    /// `schedule`, with at most `in_flight` reads and opens in flight (at most the depth).
    fn schedule_up_to(&mut self, in_flight: usize) -> io::Result<()> {
        let in_flight = in_flight.min(self.limits.depth);
        let mut issued = false;
        let mut started = false;
        while self.io.in_flight() < in_flight {
            let Some(idx) = self.queue.next_with_work() else {
                break;
            };
            match self.step(idx) {
                Step::Issued => issued = true,
                Step::Opened => {}
                Step::StartedOpen => {
                    started = true;
                    break;
                }
                Step::Blocked => break,
            }
        }
        started |= self.open_ahead();
        if issued {
            let in_flight = self.io.in_flight() as u64;
            let pool_bytes = self.pool.live_bytes() as u64;
            self.stats.peak_in_flight = self.stats.peak_in_flight.max(in_flight);
            self.stats.peak_pool_bytes = self.stats.peak_pool_bytes.max(pool_bytes);
        }
        if issued || started {
            self.io.submit().map_err(ring_error("submit"))?;
        }
        Ok(())
    }

    /// Opens the file at `idx` (the earliest with work) or issues its next read.
    fn step(&mut self, idx: usize) -> Step {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        if entry.fd().is_some() {
            return self.issue_read(idx);
        }
        // Reads go in queue order: the next ones wait for this file's open.
        if entry.status().is_opening() || (idx > 0 && self.descriptors() >= self.max_open()) {
            return Step::Blocked;
        }
        if self.start_open(idx) {
            return Step::StartedOpen;
        }
        if self.open_entry(idx) {
            Step::Opened
        } else {
            Step::Blocked
        }
    }

    /// Issues the next read of the open file at `idx`, if the pool, the window and the
    /// offload depth allow.
    fn issue_read(&mut self, idx: usize) -> Step {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let left = entry.stop() - entry.progress().next_read();
        let len = left.min(self.limits.read_size as u64) as usize;
        let read_len = if entry.direct() {
            len.next_multiple_of(DIRECT_ALIGN)
        } else {
            len
        };
        let (file, offset, direct) = (entry.id, entry.progress().next_read(), entry.direct());
        let fd = entry.fd().cloned().expect("checked open");
        let small = read_len < OFFLOAD_MIN;
        let cached = !direct && self.cached(file, &fd, offset, len);
        let offload = self.limits.offload && cached && !small;
        let limit = self.window(idx, (cached, small, offload, direct));
        let (len, read_len) = if limit == Window::OneRead {
            // One copy of a whole window costs less per byte than several of `read_size`
            // (`cached` is true only once a read was found cached).
            let len = left.min(self.limits.inline_window as u64) as usize;
            (len, len)
        } else {
            (len, read_len)
        };
        let limit = limit.bytes(self);
        let held = self.pool.live_bytes();
        if held > 0 && held + read_len > limit {
            return Step::Blocked;
        }
        self.policy.small_last = small;
        let helping = self.policy.helping;
        if offload && self.policy.offloaded >= self.limits.offload_depth && !helping {
            return Step::Blocked;
        }
        let Some(region) = self.pool.alloc_below(read_len, limit) else {
            return Step::Blocked;
        };
        let how = match (
            offload && !helping,
            direct || small || self.policy.nowait_refused,
        ) {
            (true, _) => How::Offload,
            (false, false) => How::CachedFirst,
            (false, true) => How::Ring,
        };
        self.send_read(idx, (fd, direct), region, (len, read_len), how);
        Step::Issued
    }

    /// The window of the pool the read-ahead may hold with the next read of the file at
    /// `idx`: `cached`, `small` (below `OFFLOAD_MIN`), to be offloaded, or `O_DIRECT`.
    fn window(
        &self,
        idx: usize,
        (cached, small, offload, direct): (bool, bool, bool, bool),
    ) -> Window {
        let stretch = idx == 0 && self.policy.stretch;
        let one_read = !self.policy.records && self.stats.bytes_consumed >= self.policy.cold_until;
        match (cached && !stretch, small, offload) {
            (true, true, _) => Window::Small,
            (true, false, true) => Window::Warm,
            // Copied on this thread into the region just consumed, still in its cache.
            (true, false, false) if one_read => Window::OneRead,
            (true, false, false) => Window::Warm,
            (false, _, _) if direct || stretch => Window::Pool,
            // Buffered reads from the device are copied by the CPU too, as the device
            // delivers them: too far ahead of the consumer, they leave its cache unread.
            (false, _, _) => Window::Cold,
        }
    }

    /// Hands the backend the next read of the file at `idx`: `len` bytes of it, asked as
    /// `read_len` (rounded up for O_DIRECT), into `region`, sent `how`.
    fn send_read(
        &mut self,
        idx: usize,
        (fd, direct): (FdRef<'a>, bool),
        #[cfg_attr(not(test), allow(unused_mut))] mut region: Region,
        (len, read_len): (usize, usize),
        how: How,
    ) {
        #[cfg(test)]
        if let Some(byte) = self.poison {
            self.pool.bytes_mut(&mut region).fill(byte);
        }
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let (file, offset) = (entry.id, entry.progress().next_read());
        // Past the start of the region only where `skip` jumped into an aligned O_DIRECT read.
        let pos = entry.progress().consumed().saturating_sub(offset) as usize;
        entry.progress_mut().issued(len);
        let id = self.chunks.push(file, offset, read_len, pos);
        let loan = self.pool.lend(region);
        let req = ReadReq::new(id, (fd, direct), offset, loan, 0, read_len);
        self.stats.reads += 1;
        self.stats.reads_direct += u64::from(direct);
        match how {
            How::Ring => self.io.read(req),
            How::Offload => {
                self.io.read(req.with_offload(true));
                self.policy.offloaded += 1;
                self.stats.reads_offloaded += 1;
            }
            How::CachedFirst => match self.io.read_if_cached(req) {
                FromCache::Taken { all } => {
                    self.stats.reads_cached += 1;
                    self.found_cached(all);
                }
                FromCache::Missed(req) => {
                    self.found_cached(false);
                    self.io.read(req);
                }
                // Says nothing of the cache: later reads ask it (`cached`).
                FromCache::Refused(req) => {
                    self.policy.nowait_refused = true;
                    self.io.read(req);
                }
            },
        }
    }

    /// Learns whether a read was served by the page cache: the next reads go by it. After
    /// one that was not, the read-ahead keeps depth for a pool's worth of bytes (see
    /// `Policy::cold_until`).
    fn found_cached(&mut self, cached: bool) {
        self.policy.cached = Some(cached);
        if !cached {
            self.policy.cold_until = self.stats.bytes_consumed + self.pool.capacity() as u64;
        }
    }

    /// Whether a read of `len` bytes of `fd` at `offset` is expected to find them in the
    /// page cache: as the last read that found out said, and not before any did. A large read
    /// finds out itself as it is sent (`How::CachedFirst`). Small reads go to the backend in
    /// batches: every `SMALL_READS_PER_HINT`-th asks it (one system call). Each large read
    /// asks where kernel workers copy (only a cached read is offloaded) or where reads of
    /// only what is cached are refused. A backend that cannot tell changes nothing.
    fn cached(&mut self, file: u64, fd: &FdRef<'a>, offset: u64, len: usize) -> bool {
        let policy = &mut self.policy;
        if len < OFFLOAD_MIN {
            policy.small_reads += 1;
            if policy.small_reads % SMALL_READS_PER_HINT != 1 {
                return policy.warm();
            }
        } else if !self.limits.offload && !policy.nowait_refused {
            return policy.warm();
        }
        // A read held back by the window is asked about once.
        if policy.asked.replace((file, offset)) == Some((file, offset)) {
            return policy.warm();
        }
        if let Some(cached) = self.io.cached(fd, offset, len as u64) {
            self.found_cached(cached);
        }
        self.policy.warm()
    }
}

/// How much of the pool the read-ahead may hold (see `Engine::window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    /// One read copied on the consumer's thread, as large as `inline_window`.
    OneRead,
    /// Small cached reads (see `Engine::small_reads_window`).
    Small,
    /// Cached reads copied by kernel workers, or records: `warm_window`.
    Warm,
    /// Buffered reads from the device: `cold_window`.
    Cold,
    /// `O_DIRECT` reads, or a record longer than any window: the whole pool.
    Pool,
}

impl Window {
    fn bytes(self, engine: &Engine<'_>) -> usize {
        match self {
            Window::OneRead => engine.limits.inline_window,
            Window::Small => engine.small_reads_window(),
            Window::Warm => engine.limits.warm_window,
            Window::Cold => engine.limits.cold_window,
            Window::Pool => engine.pool.capacity(),
        }
    }
}

/// How a read is sent to the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// Copied at once on this thread as far as the page cache holds it, the rest through the
    /// backend: large buffered reads.
    CachedFirst,
    /// To kernel workers, to copy from the page cache while the consumer works
    /// (`offload(true)`).
    Offload,
    /// Through the backend as it is: small reads, which go in batches, and `O_DIRECT` ones.
    Ring,
}
