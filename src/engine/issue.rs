//! Which read goes next and when: refilling as room opens, waiting, the read-ahead window
//! of cached files, and reads offloaded to kernel workers.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::offload::{Copier, Offload, Offloading};
use super::{ring_error, Engine};
use crate::consts::{DIRECT_ALIGN, OFFLOAD_MIN, SMALL_READS_PER_HINT};
use crate::io::ReadReq;
use crate::pool::Region;
use crate::source::FdRef;

/// The issue policy's state: what it learned of the page cache, and the offloaded reads.
#[derive(Debug, Default)]
pub(super) struct Policy {
    /// Offloaded reads in flight.
    pub(super) offloaded: usize,
    /// Whether the consumer is copying a read itself instead of waiting (see `help`).
    helping: bool,
    /// Whether the consumer needs more of the current file at once than the window of
    /// cached reads holds (`fill_buf_at_least`): its reads may then use the whole pool.
    pub(super) stretch: bool,
    /// Whether the consumer reads records (`fill_buf_at_least`): then the reads it copies
    /// itself keep the warm window, not one read, so that most records lie in adjacent
    /// regions and come out in place rather than copied across a wrap. Measured on account
    /// storage files, records on 2 threads: 1.10x the time with one read (1.09x with 1 MiB).
    pub(super) records: bool,
    /// Bytes consumed before which reads copied on this thread keep the warm window, not
    /// one read: while reads that went to the disk may still be ahead, the read-ahead needs
    /// depth, and one read's window would hold every file behind a cached range back.
    /// Measured on 1 GiB of files after `drop_caches`: one read's window there took 1.08x
    /// the time of the 4 MiB window.
    cold_until: u64,
    /// Reads below `OFFLOAD_MIN` scheduled so far.
    small_reads: u64,
    /// Whether the last read scheduled was below `OFFLOAD_MIN`.
    small_last: bool,
    /// The last answer of `io.cached`: (file id, offset, cached). Reads that do not ask go
    /// by it.
    hint: Option<(u64, u64, bool)>,
    /// This reader, counted among the readers that share the CPUs while it lives (where
    /// `Limits::readers` names a count).
    counted: Option<Counted>,
    /// Who copies large cached reads while a CPU is left over (see `offload`).
    offload: Offload,
}

/// The readers alive that share some CPUs with the kernel workers copying for them.
#[derive(Debug)]
pub(crate) struct Readers {
    alive: AtomicUsize,
    /// How many CPUs they share; 0 for as many as this process may run on.
    cpus: usize,
}

/// Every reader of this process.
pub(crate) static READERS: Readers = Readers::new(0);

impl Readers {
    /// No reader yet, sharing `cpus` CPUs (0: as many as this process may run on).
    pub(crate) const fn new(cpus: usize) -> Self {
        Readers {
            alive: AtomicUsize::new(0),
            cpus,
        }
    }

    fn cpus(&self) -> usize {
        static PROCESS_CPUS: OnceLock<usize> = OnceLock::new();
        match self.cpus {
            0 => *PROCESS_CPUS
                .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            n => n,
        }
    }

    /// Whether a CPU is left over for kernel workers: fewer readers are alive than there are
    /// CPUs. With a reader per CPU, every CPU is busy consuming, so a copy handed to a worker
    /// only moves work between them and adds a wake-up on each side.
    fn cpu_to_spare(&self) -> bool {
        self.alive.load(Ordering::Relaxed) < self.cpus()
    }
}

/// One reader counted in its `Readers` for as long as it lives.
#[derive(Debug)]
struct Counted(&'static Readers);

impl Counted {
    fn new(readers: &'static Readers) -> Self {
        readers.alive.fetch_add(1, Ordering::Relaxed);
        Counted(readers)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Policy {
    /// A policy for a reader, counted among `readers` where given.
    pub(super) fn new(readers: Option<&'static Readers>) -> Self {
        Policy {
            counted: readers.map(Counted::new),
            ..Policy::default()
        }
    }

    /// A fresh policy for the same reader (rebound to new files), which stays counted once.
    pub(super) fn renewed(&mut self) -> Self {
        Policy {
            counted: self.counted.take(),
            offload: self.offload,
            ..Policy::default()
        }
    }

    /// Whether large cached reads may go to kernel workers now: a CPU is left over.
    pub(super) fn may_offload(&self) -> bool {
        self.counted.as_ref().is_none_or(|c| c.0.cpu_to_spare())
    }

    /// Whether large cached reads go to kernel workers now, without moving the trial on.
    fn offloading(&self, how: Offloading) -> bool {
        self.may_offload()
            && match how {
                Offloading::Never => false,
                Offloading::Tried => self.offload.copier() == Copier::Workers,
                Offloading::Always => true,
            }
    }

    /// Whether the next large read goes to kernel workers, `consumed` bytes into the
    /// stream: where a CPU is left over and the file is cached, as `how` says.
    fn offload_next(&mut self, cached: bool, how: Offloading, consumed: u64) -> bool {
        if how == Offloading::Never || !self.may_offload() {
            return false;
        }
        if !cached {
            self.offload.uncached(consumed);
            return false;
        }
        how == Offloading::Always || self.offload.next(consumed, Instant::now) == Copier::Workers
    }

    /// Whether the last range asked about was in the page cache.
    fn warm(&self) -> bool {
        self.hint.is_some_and(|(_, _, cached)| cached)
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

    /// The window of small cached reads. While kernel workers may copy large reads, the
    /// window must hold those in flight too, or a small file behind a large one would stall
    /// the pipeline; while the consumer's thread does every copy (a reader per CPU), a
    /// smaller window keeps the copies in its CPU's cache until it gets to them.
    fn small_reads_window(&self) -> usize {
        if self.policy.offloading(self.limits.offload) {
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
        self.reap_waiting()?;
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
            self.submit_timed()?;
        }
        Ok(())
    }

    /// Submits what was issued; where the offload trial times the consumer's own copies, the
    /// time the submission took is theirs: the cached reads complete inside it.
    fn submit_timed(&mut self) -> io::Result<()> {
        let start = self.policy.offload.times_copies().then(Instant::now);
        self.io.submit().map_err(ring_error("submit"))?;
        if let Some(start) = start {
            self.policy.offload.copied(start.elapsed());
        }
        Ok(())
    }

    /// Opens the file at `idx` (the earliest with work) or issues its next read.
    fn step(&mut self, idx: usize) -> Step {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        if entry.fd.is_some() {
            return self.issue_read(idx);
        }
        // Reads go in queue order: the next ones wait for this file's open.
        if entry.is_opening() || (idx > 0 && self.descriptors() >= self.limits.max_open) {
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

    /// Issues the next read of the open file at `idx`, if the pool, the window of cached
    /// reads and the offload depth allow.
    fn issue_read(&mut self, idx: usize) -> Step {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let len = (entry.stop() - entry.next_read).min(self.limits.read_size as u64) as usize;
        let read_len = if entry.direct {
            len.next_multiple_of(DIRECT_ALIGN)
        } else {
            len
        };
        let (file, offset, direct) = (entry.id, entry.next_read, entry.direct);
        let fd = entry.fd.clone().expect("checked open");
        // While the files ahead are in the page cache, the read-ahead stays within a small
        // window, so its bytes are still in the CPU's cache when consumed: one read where
        // this thread copies it (into the region just consumed), the warm window where
        // kernel workers copy, records are parsed or disk reads may still be ahead, the
        // small window for small reads. Reads that go to the disk through the page cache
        // stay within the cold window, for the same reason (the CPU copies them too, as
        // the disk delivers them); `O_DIRECT` reads, and a record longer than the windows,
        // may fill the pool.
        let cached = !direct && self.cached(file, &fd, offset, len);
        let small = read_len < OFFLOAD_MIN;
        let consumed = self.stats.bytes_consumed;
        let offload = !small
            && self
                .policy
                .offload_next(cached, self.limits.offload, consumed);
        self.place_workers();
        if !cached && !direct {
            self.policy.cold_until = consumed + self.pool.capacity() as u64;
        }
        let one_read = !self.policy.records && consumed >= self.policy.cold_until;
        let stretch = idx == 0 && self.policy.stretch;
        let limit = match (cached && !stretch, small, offload) {
            (true, true, _) => self.small_reads_window(),
            (true, false, true) => self.limits.warm_window,
            (true, false, false) if one_read => self.limits.inline_window,
            (true, false, false) => self.limits.warm_window,
            (false, _, _) if direct || stretch => self.pool.capacity(),
            (false, _, _) => self.limits.cold_window,
        };
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
        self.send_read(
            idx,
            (fd, direct),
            region,
            (len, read_len),
            offload && !helping,
        );
        Step::Issued
    }

    /// Where an offload trial just started, asks the backend to keep its kernel workers off
    /// the CPU the consumer runs on now (from the consumer's thread, which may not be the
    /// one that built the reader), and tells the trial whether they are.
    fn place_workers(&mut self) {
        if self.policy.offload.trial_started() {
            let apart = self.io.keep_workers_off_this_cpu();
            self.policy.offload.workers_apart(apart);
        }
    }

    /// Hands the backend the next read of the file at `idx`: `len` bytes of it, asked as
    /// `read_len` (rounded up for O_DIRECT), into `region`.
    fn send_read(
        &mut self,
        idx: usize,
        (fd, direct): (FdRef<'a>, bool),
        #[cfg_attr(not(test), allow(unused_mut))] mut region: Region,
        (len, read_len): (usize, usize),
        offload: bool,
    ) {
        #[cfg(test)]
        if let Some(byte) = self.poison {
            self.pool.bytes_mut(&mut region).fill(byte);
        }
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let (file, offset) = (entry.id, entry.next_read);
        // Past the start of the region only where `skip` jumped into an aligned O_DIRECT read.
        let pos = entry.consumed.saturating_sub(offset) as usize;
        entry.next_read += len as u64;
        entry.in_flight += 1;
        let id = self.chunks.push(file, offset, read_len, pos);
        let loan = self.pool.lend(region);
        let req = ReadReq::new(id, (fd, direct), offset, loan, 0, read_len);
        self.io.read(req.with_offload(offload));
        self.stats.reads += 1;
        self.stats.reads_direct += u64::from(direct);
        if offload {
            self.policy.offloaded += 1;
            self.stats.reads_offloaded += 1;
        }
    }

    /// Whether a read of `len` bytes of `file` at `offset` will find them in the page cache.
    /// Small reads are not worth the question each time: they go by the last answer, asked
    /// again every `SMALL_READS_PER_HINT` of them.
    fn cached(&mut self, file: u64, fd: &FdRef<'a>, offset: u64, len: usize) -> bool {
        let policy = &mut self.policy;
        if len < OFFLOAD_MIN {
            policy.small_reads += 1;
            if policy.small_reads % SMALL_READS_PER_HINT != 1 {
                return policy.warm();
            }
        }
        match policy.hint {
            Some((f, o, cached)) if (f, o) == (file, offset) => cached,
            _ => {
                let cached = self.io.cached(fd, offset, len as u64).unwrap_or(false);
                self.policy.hint = Some((file, offset, cached));
                cached
            }
        }
    }
}
