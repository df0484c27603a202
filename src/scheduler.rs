//! The scheduler: turns queued files into reads and completions into bytes for the consumer.
//!
//! It knows nothing of the kernel: reads go through the [`Io`] trait, which the io_uring
//! backend, the `pread` backend and the tests' scripted completion source implement.
//!
//! Invariants:
//! - Reads are issued in queue order: all of a file's reads before any of the next file's.
//!   So `chunks` (the live reads, in id order) is also in (file, offset) order, and the
//!   current file's chunks are at its front.
//! - A chunk's bytes are readable only once its read completed (`region` is `Some`); while in
//!   flight the region is lent to the backend and the chunk holds nothing to read.
//! - A chunk dropped while in flight becomes an orphan: its region stays lent until its
//!   completion is reaped, and is then freed unread.
//! - A file's `in_flight` counts its live chunks that are in flight; orphans belong to no file.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::mem;
use std::path::Path;
use std::time::Instant;

use crate::builder::{Backend, DIRECT_ALIGN};
use crate::error::Error;
use crate::pool::{Loan, Pool, Region};
use crate::queue::{FdRef, Queue, Source};
use crate::stats::Stats;

/// How many times a read is retried after `EINTR`, `EAGAIN`, `ECANCELED` or `EFAULT` before its file
/// fails.
const MAX_RETRIES: u32 = 16;

/// One read for a backend: `len` bytes of `fd` at `offset`, into `loan` from `buf_off`.
#[derive(Debug)]
pub(crate) struct ReadReq<'a> {
    id: u64,
    fd: FdRef<'a>,
    /// Whether `fd` has `O_DIRECT` (page-cache hints are pointless then).
    direct: bool,
    /// Whether the backend should copy on a kernel worker rather than inline (the bytes are
    /// in the page cache, so the copy can overlap the consumer's work).
    offload: bool,
    offset: u64,
    loan: Loan,
    buf_off: usize,
    len: usize,
}

impl<'a> ReadReq<'a> {
    /// # Panics
    /// If `buf_off + len` does not fit in the loan (the io_uring backend relies on it).
    pub(crate) fn new(
        id: u64,
        (fd, direct): (FdRef<'a>, bool),
        offset: u64,
        loan: Loan,
        buf_off: usize,
        len: usize,
    ) -> Self {
        assert!(
            buf_off <= loan.len() && len <= loan.len() - buf_off,
            "read outside its region"
        );
        assert!(len <= u32::MAX as usize);
        ReadReq {
            id,
            fd,
            direct,
            offload: false,
            offset,
            loan,
            buf_off,
            len,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    pub(crate) fn fd(&self) -> &FdRef<'a> {
        &self.fd
    }
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }
    pub(crate) fn offload(&self) -> bool {
        self.offload
    }
    fn with_offload(mut self, offload: bool) -> Self {
        self.offload = offload;
        self
    }
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address the read writes to: inside the loan, with `len` bytes after it.
    pub(crate) fn buf_ptr(&mut self) -> *mut u8 {
        self.loan.as_mut_ptr().wrapping_add(self.buf_off)
    }

    /// The bytes the read writes, for a backend that writes them itself.
    pub(crate) fn buf_mut(&mut self) -> &mut [u8] {
        let (off, len) = (self.buf_off, self.len);
        &mut self.loan.as_mut_slice()[off..off + len]
    }

    /// The completion of this read: bytes read, or `-errno`.
    pub(crate) fn done(self, result: i32) -> ReadDone<'a> {
        ReadDone {
            id: self.id,
            result,
            offload: self.offload,
            loan: self.loan,
            _fd: self.fd,
        }
    }
}

/// A completed read: its loan comes back with the result (bytes read, or `-errno`).
#[derive(Debug)]
pub(crate) struct ReadDone<'a> {
    pub(crate) id: u64,
    pub(crate) result: i32,
    /// Whether the read was offloaded (see [`ReadReq::offload`]).
    pub(crate) offload: bool,
    pub(crate) loan: Loan,
    /// Keeps the descriptor open until the completion is handled.
    _fd: FdRef<'a>,
}

/// A file set up for reading.
pub(crate) struct Opened<'a> {
    pub(crate) fd: FdRef<'a>,
    pub(crate) direct: bool,
    pub(crate) opened_here: bool,
    pub(crate) size: u64,
}

/// What the scheduler needs of a backend.
pub(crate) trait Io<'a>: Send {
    /// `IoUring` or `Sync`.
    fn backend(&self) -> Backend;
    /// Queues a read. The backend owns the loan until it returns it in a [`ReadDone`].
    fn read(&mut self, req: ReadReq<'a>);
    /// Asks for a queued or in-flight read to be cancelled; its completion still comes back.
    fn cancel(&mut self, id: u64);
    /// Starts what is queued, without waiting.
    fn submit(&mut self) -> io::Result<()>;
    /// Collects completions; with `wait`, blocks until at least one read has completed.
    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()>;
    /// Reads handed over and not yet returned.
    fn in_flight(&self) -> usize;
    /// Cancels everything and waits until every read has come back.
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>) -> io::Result<()>;
    /// Opens (if it is a path) and sizes a queued file.
    fn open(&mut self, source: &Source<'a>, direct: bool) -> Result<Opened<'a>, Error> {
        crate::sync::open_source(source, direct)
    }
    /// Starts opening a queued path (with `sync::open_flags`) without blocking; `false`
    /// where the backend cannot, and the path is opened with [`open`](Self::open) instead.
    /// The result comes back through [`take_opened`](Self::take_opened), after a `reap`.
    fn start_open(&mut self, _file: u64, _path: &Path, _direct: bool) -> bool {
        false
    }
    /// Opens started by `start_open` that completed: (file id, the file or `errno`).
    fn take_opened(&mut self, _out: &mut Vec<(u64, Result<File, i32>)>) {}
    /// Whether the pool is registered with the kernel (reads are `READ_FIXED`).
    fn registered(&self) -> bool {
        false
    }
    /// Whether `len` bytes of `fd` at `offset` are all in the page cache; `None` where the
    /// backend cannot tell.
    fn cached(&mut self, _fd: &FdRef<'a>, _offset: u64, _len: u64) -> Option<bool> {
        None
    }
    /// Switches a file that refused `O_DIRECT` reads to buffered ones.
    fn reopen_buffered(&mut self, source: &Source<'a>) -> Result<Opened<'a>, Error> {
        crate::sync::open_source(source, false)
    }
}

/// Settings the scheduler works by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) read_size: usize,
    pub(crate) direct: bool,
    pub(crate) depth: usize,
    pub(crate) max_open: usize,
    /// Pool bytes the read-ahead may hold while the files ahead are in the page cache.
    pub(crate) warm_window: usize,
    /// Offloaded reads in flight at most.
    pub(crate) offload_depth: usize,
}

/// Reads smaller than this are never offloaded: handing them to a kernel worker costs more
/// than copying them.
const OFFLOAD_MIN: usize = 64 << 10;

/// How often reads below `OFFLOAD_MIN` ask whether the page cache holds what they read.
const SMALL_READS_PER_HINT: u64 = 16;

/// One read's region and what came back into it.
#[derive(Debug)]
struct Chunk {
    id: u64,
    file: u64,
    /// File offset of the region's first byte.
    offset: u64,
    /// Bytes asked for.
    want: usize,
    /// Bytes the completed reads wrote, from the region's start.
    filled: usize,
    /// Where in the region the read in flight starts (after a short read).
    from: usize,
    /// Bytes the consumer has taken.
    pos: usize,
    /// `None` while lent to the backend.
    region: Option<Region>,
    retries: u32,
}

impl Chunk {
    /// Bytes of this chunk the consumer may see: what was read, up to the file's end.
    fn valid(&self, file_end: u64) -> usize {
        (self.filled as u64).min(file_end.saturating_sub(self.offset)) as usize
    }
}

/// The queue, the pool and a backend, worked together.
pub(crate) struct Engine<'a> {
    // Drop order: `Drop for Engine` first takes every loan back from `io` (cancelling and
    // waiting); then `io` is dropped (closing the ring) before `pool` (freeing the memory).
    io: Box<dyn Io<'a> + 'a>,
    pool: Pool,
    queue: Queue<'a>,
    chunks: VecDeque<Chunk>,
    /// Reads in flight no longer wanted, by chunk id: the id of their file where the reader
    /// opened it (its descriptor stays open until they come back).
    orphans: HashMap<u64, Option<u64>>,
    /// Files the reader opened that only orphans hold open now (or still), by id: how many.
    orphan_fds: HashMap<u64, usize>,
    next_chunk: u64,
    done: Vec<ReadDone<'a>>,
    limits: Limits,
    stats: Stats,
    /// Bytes the last `fill_buf` returned that are not consumed yet: what `consume` may
    /// take. Anything that changes the current file sets it to 0.
    exposed: usize,
    /// Offloaded reads in flight.
    offloaded: usize,
    /// Whether the consumer is copying a read itself instead of waiting (see `help`).
    helping: bool,
    /// Reads below `OFFLOAD_MIN` scheduled so far.
    small_reads: u64,
    /// Whether the last read scheduled was below `OFFLOAD_MIN`.
    small_last: bool,
    /// The last answer of `io.cached`: (file id, offset, cached). Reads that do not ask go
    /// by it.
    hint: Option<(u64, u64, bool)>,
    /// Opens the backend has started and not yet returned.
    opens_in_flight: usize,
    /// Opens returned by the backend, being handled.
    opened: Vec<(u64, Result<File, i32>)>,
    /// Tests fill every region with this byte before it is read into, to catch bytes
    /// exposed that no read wrote.
    #[cfg(test)]
    pub(crate) poison: Option<u8>,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(io: Box<dyn Io<'a> + 'a>, pool: Pool, limits: Limits) -> Self {
        Engine {
            io,
            pool,
            queue: Queue::default(),
            chunks: VecDeque::new(),
            orphans: HashMap::new(),
            orphan_fds: HashMap::new(),
            next_chunk: 0,
            done: Vec::new(),
            limits,
            stats: Stats::default(),
            exposed: 0,
            offloaded: 0,
            helping: false,
            small_reads: 0,
            small_last: false,
            hint: None,
            opens_in_flight: 0,
            opened: Vec::new(),
            #[cfg(test)]
            poison: None,
        }
    }

    pub(crate) fn backend(&self) -> Backend {
        self.io.backend()
    }

    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    pub(crate) fn file_offset(&self) -> u64 {
        self.queue.front().map_or(0, |f| f.consumed)
    }

    /// Queues a file; it becomes current if the queue was empty.
    pub(crate) fn push(&mut self, source: Source<'a>, limit: u64) -> io::Result<()> {
        self.queue.push(source, limit);
        if self.queue.len() == 1 {
            self.refill()?;
        }
        Ok(())
    }

    /// The current file's next bytes, `&[]` at its end.
    pub(crate) fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.exposed = 0;
        loop {
            let Some(front) = self.queue.front() else {
                return Ok(&[]);
            };
            match self.chunks.front() {
                Some(c) if c.file == front.id && c.region.is_some() => {
                    if c.pos < c.valid(front.end) {
                        break;
                    }
                    self.pop_chunk();
                    self.refill()?;
                }
                Some(c) if c.file == front.id => self.wait()?,
                _ => {
                    if let Some(e) = &front.error {
                        return Err(e.duplicate().into());
                    }
                    if front.all_issued() {
                        return Ok(&[]);
                    }
                    self.schedule()?;
                    let issued = self
                        .chunks
                        .front()
                        .is_some_and(|c| c.file == front_id(&self.queue));
                    let failed = self.queue.front().is_some_and(|f| f.error.is_some());
                    if !issued && !failed {
                        if self.io.in_flight() == 0 {
                            return Err(io::Error::other("readahead: no read could be issued for the current file (this is a bug)"));
                        }
                        self.wait()?;
                    }
                }
            }
        }
        let (Some(front), Some(c)) = (self.queue.front(), self.chunks.front()) else {
            unreachable!("the loop breaks only on a readable chunk")
        };
        let region = c.region.as_ref().expect("checked readable");
        let bytes = self.pool.bytes(region, c.pos..c.valid(front.end));
        self.exposed = bytes.len();
        Ok(bytes)
    }

    /// Marks `amt` bytes of the last `fill_buf` as read; clamps to what it returned.
    pub(crate) fn consume(&mut self, amt: usize) {
        let (Some(front), Some(c)) = (self.queue.front_mut(), self.chunks.front_mut()) else {
            return;
        };
        if c.file != front.id || c.region.is_none() {
            return;
        }
        let amt = amt.min(self.exposed);
        debug_assert!(c.pos + amt <= c.valid(front.end));
        self.exposed -= amt;
        c.pos += amt;
        front.consumed += amt as u64;
        self.stats.bytes_consumed += amt as u64;
    }

    /// Drops the rest of the current file; whether another file is now current.
    pub(crate) fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.exposed = 0;
        if self.queue.is_empty() {
            return Ok(false);
        }
        self.drop_front_file();
        self.refill()?;
        Ok(!self.queue.is_empty())
    }

    /// Makes the caller's `(file, limit)` current; see `SequentialFileReader::activate_file`.
    pub(crate) fn activate(&mut self, file: &'a File, limit: u64) -> io::Result<()> {
        self.exposed = 0;
        use std::os::fd::AsRawFd;
        match self.queue.position(file.as_raw_fd(), limit) {
            Some(i) => {
                for _ in 0..i {
                    self.drop_front_file();
                }
                let front = self.queue.front().expect("found at i");
                if front.consumed > 0 || front.error.is_some() {
                    self.restart();
                }
            }
            None => {
                while !self.queue.is_empty() {
                    self.drop_front_file();
                }
                self.queue.push(Source::Borrowed(file), limit);
            }
        }
        self.refill()
    }

    /// Reaps what has completed and issues more reads: called whenever room may have opened.
    fn refill(&mut self) -> io::Result<()> {
        if self.io.in_flight() > 0 {
            self.io
                .reap(false, &mut self.done)
                .map_err(ring_error("reap"))?;
            self.handle_done();
        }
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
        self.warm() && self.small_last && self.pool.ready_bytes() >= self.limits.warm_window / 2
    }

    /// Blocks until a read completes, then handles what came back and refills.
    fn wait(&mut self) -> io::Result<()> {
        debug_assert!(
            self.io.in_flight() > 0,
            "waiting with nothing in flight would hang"
        );
        if self.help() {
            return self.refill();
        }
        let start = Instant::now();
        self.io
            .reap(true, &mut self.done)
            .map_err(ring_error("wait"))?;
        self.stats.waits += 1;
        self.stats.wait_time += start.elapsed();
        self.handle_done();
        self.schedule()
    }

    /// Rather than block while kernel workers copy, copies one more cached read itself
    /// (submitted without `IOSQE_ASYNC`, it completes on this thread); whether it did.
    /// Where the consumer is quicker than the workers this shares the copying out; where
    /// it is slower, it never waits, so never helps.
    fn help(&mut self) -> bool {
        if self.offloaded == 0 {
            return false;
        }
        let reads = self.stats.reads;
        self.helping = true;
        let issued =
            self.schedule_up_to(self.io.in_flight() + 1).is_ok() && self.stats.reads > reads;
        self.helping = false;
        issued
    }

    /// Issues reads, earliest file first, while depth and pool allow; then submits them.
    fn schedule(&mut self) -> io::Result<()> {
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
            let entry = self.queue.get_mut(idx).expect("index from the queue");
            if entry.fd.is_none() {
                // Reads go in queue order: the next ones wait for this file's open.
                if entry.opening {
                    break;
                }
                if idx > 0 && self.descriptors() >= self.limits.max_open {
                    break;
                }
                if self.start_open(idx) {
                    started = true;
                    break;
                }
                if !self.open_entry(idx) {
                    break;
                }
                continue;
            }
            let len = (entry.end - entry.next_read).min(self.limits.read_size as u64) as usize;
            let read_len = if entry.direct {
                len.next_multiple_of(DIRECT_ALIGN)
            } else {
                len
            };
            let (file, offset, direct) = (entry.id, entry.next_read, entry.direct);
            let fd = entry.fd.clone().expect("checked open");
            // While the files ahead are in the page cache, the read-ahead stays within a small
            // window (its bytes are still in the CPU's cache when consumed) and large reads
            // are copied by kernel workers; otherwise it may fill the pool, for depth.
            let cached = !direct && self.cached(file, &fd, offset, len);
            let limit = if cached {
                self.limits.warm_window
            } else {
                self.pool.capacity()
            };
            let held = self.pool.live_bytes();
            if held > 0 && held + read_len > limit {
                break;
            }
            let offload = cached && read_len >= OFFLOAD_MIN;
            self.small_last = read_len < OFFLOAD_MIN;
            if offload && self.offloaded >= self.limits.offload_depth && !self.helping {
                break;
            }
            let offload = offload && !self.helping;
            #[cfg_attr(not(test), allow(unused_mut))]
            let Some(mut region) = self.pool.alloc_below(read_len, limit) else {
                break;
            };
            #[cfg(test)]
            if let Some(byte) = self.poison {
                self.pool.bytes_mut(&mut region).fill(byte);
            }
            let entry = self.queue.get_mut(idx).expect("index from the queue");
            let id = self.next_chunk;
            self.next_chunk += 1;
            entry.next_read += len as u64;
            entry.in_flight += 1;
            self.chunks.push_back(Chunk {
                id,
                file: entry.id,
                offset,
                want: read_len,
                filled: 0,
                from: 0,
                pos: 0,
                region: None,
                retries: 0,
            });
            let loan = self.pool.lend(region);
            let req = ReadReq::new(id, (fd, direct), offset, loan, 0, read_len);
            self.io.read(req.with_offload(offload));
            self.stats.reads += 1;
            if offload {
                self.offloaded += 1;
                self.stats.reads_offloaded += 1;
            }
            issued = true;
        }
        started |= self.open_ahead();
        if issued {
            self.stats.peak_in_flight = self.stats.peak_in_flight.max(self.io.in_flight() as u64);
            self.stats.peak_pool_bytes = self
                .stats
                .peak_pool_bytes
                .max(self.pool.live_bytes() as u64);
        }
        if issued || started {
            self.io.submit().map_err(ring_error("submit"))?;
        }
        Ok(())
    }

    /// Whether a read of `len` bytes of `file` at `offset` will find them in the page cache.
    /// Small reads are not worth the question each time: they go by the last answer, asked
    /// again every `SMALL_READS_PER_HINT` of them.
    fn cached(&mut self, file: u64, fd: &FdRef<'a>, offset: u64, len: usize) -> bool {
        if len < OFFLOAD_MIN {
            self.small_reads += 1;
            if self.small_reads % SMALL_READS_PER_HINT != 1 {
                return self.warm();
            }
        }
        match self.hint {
            Some((f, o, cached)) if (f, o) == (file, offset) => cached,
            _ => {
                let cached = self.io.cached(fd, offset, len as u64).unwrap_or(false);
                self.hint = Some((file, offset, cached));
                cached
            }
        }
    }

    /// Whether the last range asked about was in the page cache.
    fn warm(&self) -> bool {
        self.hint.is_some_and(|(_, _, cached)| cached)
    }

    /// Descriptors the reader holds or is opening. A file whose orphans are still in flight
    /// counts until they come back, even while it is also counted as open (the cap is a
    /// bound, and this keeps it one).
    fn descriptors(&self) -> usize {
        self.queue.open_here + self.opens_in_flight + self.orphan_fds.len()
    }

    /// Starts opening the path at `idx` through the backend, if it can; whether it did.
    fn start_open(&mut self, idx: usize) -> bool {
        let direct = self.limits.direct;
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let Source::Path(path) = &entry.source else {
            return false;
        };
        if !self.io.start_open(entry.id, path, direct) {
            return false;
        }
        entry.opening = true;
        self.opens_in_flight += 1;
        true
    }

    /// Starts opening the paths queued after the read-ahead, so that their opening overlaps,
    /// while the cap on descriptors allows; whether it started any.
    fn open_ahead(&mut self) -> bool {
        let mut i = self.queue.open_cursor.max(self.queue.cursor);
        let mut started = false;
        while self.descriptors() < self.limits.max_open {
            let Some(entry) = self.queue.get_mut(i) else {
                break;
            };
            if entry.wants_open() {
                if !self.start_open(i) {
                    break;
                }
                started = true;
            }
            i += 1;
        }
        self.queue.open_cursor = i;
        started
    }

    /// Takes the result of an open the backend did for the file at `idx`.
    fn finish_open(&mut self, idx: usize, result: Result<File, i32>) {
        let direct = self.limits.direct;
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let Source::Path(path) = &entry.source else {
            unreachable!("only paths are opened by the backend")
        };
        debug_assert!(entry.opening);
        entry.opening = false;
        let opened = match result {
            Ok(file) => crate::sync::finish_open(file, direct, path),
            Err(libc::EMFILE | libc::ENFILE) => {
                self.out_of_descriptors(idx);
                return;
            }
            // Refused O_NOATIME (not the owner) or O_DIRECT (the filesystem): opened here,
            // which goes on without them.
            Err(libc::EPERM | libc::EINVAL) => self.io.open(&entry.source, direct),
            Err(errno) => Err(Error::Open {
                path: entry.name(),
                source: io::Error::from_raw_os_error(errno),
            }),
        };
        self.set_opened(idx, opened);
    }

    /// The process ran out of descriptors opening the file at `idx`: the reader keeps fewer
    /// open from now on, and opens the file again later. The current file is opened again
    /// at once, after closing files opened ahead that nothing was read from yet; it fails
    /// only if the process has no descriptor left for it.
    fn out_of_descriptors(&mut self, idx: usize) {
        self.queue.open_cursor = self.queue.open_cursor.min(idx);
        if idx > 0 {
            self.limits.max_open = self.descriptors().max(1);
            return;
        }
        // What the process let the reader hold: the cap from now on.
        let held = self.descriptors();
        for i in 1..self.queue.len() {
            let e = self.queue.get_mut(i).expect("in range");
            if e.opened_here && e.next_read == 0 && e.in_flight == 0 {
                self.queue.release_fd(i);
            }
        }
        self.queue.open_cursor = 1;
        self.limits.max_open = held.max(1);
        let entry = self.queue.get_mut(0).expect("the current file");
        let opened = self.io.open(&entry.source, self.limits.direct);
        self.set_opened(0, opened);
    }

    /// Opens and sizes the file at `idx` here, or records why it cannot be read.
    ///
    /// Returns `false` where the process is out of descriptors (`EMFILE`/`ENFILE`) while the
    /// reader holds some: the file stays queued, and the reader keeps fewer open from then on.
    fn open_entry(&mut self, idx: usize) -> bool {
        let held = self.descriptors();
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let opened = self.io.open(&entry.source, self.limits.direct);
        match opened {
            Err(e) if idx > 0 && held > 0 && is_out_of_descriptors(&e) => {
                self.limits.max_open = held;
                false
            }
            opened => {
                self.set_opened(idx, opened);
                true
            }
        }
    }

    /// Records the outcome of opening the file at `idx`.
    fn set_opened(&mut self, idx: usize, opened: Result<Opened<'a>, Error>) {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        match opened {
            Ok(opened) => {
                entry.fd = Some(opened.fd);
                entry.direct = opened.direct;
                entry.opened_here = opened.opened_here;
                entry.set_size(opened.size);
                if opened.opened_here {
                    self.queue.open_here += 1;
                    self.stats.files_opened += 1;
                }
                if self
                    .queue
                    .get_mut(idx)
                    .expect("still there")
                    .reads_finished()
                {
                    self.queue.release_fd(idx);
                }
            }
            Err(e) => {
                entry.error = Some(Box::new(e));
                self.stats.files_failed += 1;
            }
        }
    }

    fn handle_done(&mut self) {
        let mut done = mem::take(&mut self.done);
        for d in done.drain(..) {
            self.complete(d);
        }
        self.done = done;
        let mut opened = mem::take(&mut self.opened);
        self.io.take_opened(&mut opened);
        for (id, result) in opened.drain(..) {
            self.opens_in_flight -= 1;
            // A file moved past while it was being opened is closed here (dropped).
            if let Some(idx) = self.queue.index_of(id) {
                self.finish_open(idx, result);
            }
        }
        self.opened = opened;
    }

    /// Takes one completion: bytes for the consumer, a continuation, a retry or an error.
    fn complete(&mut self, done: ReadDone<'a>) {
        let ReadDone {
            id,
            result,
            offload,
            loan,
            _fd: read_fd,
        } = done;
        if offload {
            self.offloaded -= 1;
        }
        let region = self.pool.reclaim(loan);
        if let Some(file) = self.orphans.remove(&id) {
            if let Some(file) = file {
                let left = self
                    .orphan_fds
                    .get_mut(&file)
                    .expect("counted when orphaned");
                *left -= 1;
                if *left == 0 {
                    self.orphan_fds.remove(&file);
                }
            }
            self.pool.free(region);
            self.stats.reads_discarded += 1;
            if result > 0 {
                self.stats.bytes_read += result as u64;
            }
            return;
        }
        let i = self
            .chunks
            .binary_search_by_key(&id, |c| c.id)
            .expect("a completion is either an orphan's or a live chunk's");
        let chunk = &mut self.chunks[i];
        let file = chunk.file;
        let entry = self
            .queue
            .by_id_mut(file)
            .expect("a live chunk's file is queued");
        debug_assert!(
            chunk.region.is_none(),
            "completion for a chunk not in flight"
        );
        if result > 0 {
            let n = result as usize;
            self.stats.bytes_read += n as u64;
            chunk.filled = chunk.from + n;
            debug_assert!(chunk.filled <= chunk.want);
            let to_end = entry.end.saturating_sub(chunk.offset);
            let short = chunk.filled < chunk.want && (chunk.filled as u64) < to_end;
            // O_DIRECT reads come back short only at the end of the file, and a read
            // continued from an unaligned offset would be refused: the file ends there.
            let at_end = entry.direct && !chunk.filled.is_multiple_of(DIRECT_ALIGN);
            if short && !at_end {
                // A short read before the end: read the rest into the same region.
                self.stats.short_reads += 1;
                chunk.from = chunk.filled;
                let fd = entry.fd.clone().expect("open while reads are in flight");
                self.resubmit(i, region, fd);
                return;
            }
            chunk.region = Some(region);
            entry.in_flight -= 1;
            if short {
                entry.end = entry.end.min(chunk.offset + chunk.filled as u64);
                self.drop_chunks_after(i);
            }
        } else {
            let region = if result < 0 {
                match self.retry(i, result, region, read_fd.raw()) {
                    Some(region) => region,
                    None => return,
                }
            } else {
                region
            };
            // End of file (or an error) at `from`: the file ends there.
            let chunk = &mut self.chunks[i];
            let entry = self.queue.by_id_mut(chunk.file).expect("checked above");
            chunk.filled = chunk.from;
            chunk.region = Some(region);
            let at = chunk.offset + chunk.from as u64;
            entry.end = entry.end.min(at);
            entry.in_flight -= 1;
            if result < 0 {
                entry.error = Some(Box::new(Error::Read {
                    path: entry.name(),
                    offset: at,
                    source: io::Error::from_raw_os_error(-result),
                }));
                self.stats.files_failed += 1;
            }
            self.drop_chunks_after(i);
        }
        self.release_if_finished(file);
    }

    /// Retries a failed read where the error is passing (`None`: resubmitted); gives the
    /// region back where the file must fail.
    fn retry(&mut self, i: usize, result: i32, region: Region, read_fd: i32) -> Option<Region> {
        let chunk = &mut self.chunks[i];
        let file = chunk.file;
        // EFAULT too: the pool is always mapped, so it comes from the kernel finishing a read
        // for a thread that has exited since it submitted it (the reader moved threads);
        // submitted again from this thread, the read goes through.
        let passing = matches!(
            -result,
            libc::EINTR | libc::EAGAIN | libc::ECANCELED | libc::EFAULT
        );
        if passing && chunk.retries < MAX_RETRIES {
            chunk.retries += 1;
            self.stats.retries += 1;
            let fd = self
                .queue
                .by_id_mut(file)
                .and_then(|e| e.fd.clone())
                .expect("open while reads are in flight");
            self.resubmit(i, region, fd);
            return None;
        }
        let entry = self
            .queue
            .by_id_mut(file)
            .expect("a live chunk's file is queued");
        let current = entry.fd.clone().expect("open while reads are in flight");
        if -result == libc::EINVAL && current.raw() != read_fd {
            // Issued on a descriptor the file has since replaced (O_DIRECT was refused).
            self.resubmit(i, region, current);
            return None;
        }
        if -result == libc::EINVAL && entry.direct {
            // The filesystem refused O_DIRECT for this read: go on buffered.
            if let Ok(opened) = self.io.reopen_buffered(&entry.source) {
                entry.direct = false;
                entry.fd = Some(opened.fd.clone());
                self.resubmit(i, region, opened.fd);
                return None;
            }
        }
        Some(region)
    }

    /// Reads the rest of chunk `i` (from its `from`) again.
    fn resubmit(&mut self, i: usize, region: Region, fd: FdRef<'a>) {
        let chunk = &self.chunks[i];
        let direct = self.queue.by_id_mut(chunk.file).is_some_and(|e| e.direct);
        let loan = self.pool.lend(region);
        let req = ReadReq::new(
            chunk.id,
            (fd, direct),
            chunk.offset + chunk.from as u64,
            loan,
            chunk.from,
            chunk.want - chunk.from,
        );
        self.io.read(req);
        self.stats.reads += 1;
    }

    /// Drops the chunks of chunk `i`'s file that come after it (past the file's new end).
    fn drop_chunks_after(&mut self, i: usize) {
        let file = self.chunks[i].file;
        while self.chunks.get(i + 1).is_some_and(|c| c.file == file) {
            let c = self.chunks.remove(i + 1).expect("checked");
            self.drop_chunk(c);
        }
    }

    /// Frees a chunk's region, or orphans it if its read is in flight.
    fn drop_chunk(&mut self, c: Chunk) {
        match c.region {
            Some(region) => self.pool.free(region),
            None => {
                let mut holds_fd = false;
                if let Some(e) = self.queue.by_id_mut(c.file) {
                    e.in_flight -= 1;
                    holds_fd = e.opened_here;
                }
                if holds_fd {
                    *self.orphan_fds.entry(c.file).or_default() += 1;
                }
                self.orphans.insert(c.id, holds_fd.then_some(c.file));
                self.io.cancel(c.id);
            }
        }
    }

    /// Pops the consumed front chunk.
    fn pop_chunk(&mut self) {
        let c = self.chunks.pop_front().expect("a front chunk");
        self.pool
            .free(c.region.expect("a consumed chunk is not in flight"));
    }

    /// Drops the current file and whatever was read or is in flight for it.
    fn drop_front_file(&mut self) {
        let id = front_id(&self.queue);
        while self.chunks.front().is_some_and(|c| c.file == id) {
            let c = self.chunks.pop_front().expect("checked");
            self.drop_chunk(c);
        }
        self.queue.pop_front();
    }

    /// Forgets every read and reads every queued file again from its start.
    fn restart(&mut self) {
        while let Some(c) = self.chunks.pop_front() {
            self.drop_chunk(c);
        }
        self.queue.rewind_all();
    }

    /// Closes the descriptor of file `file` if the reader opened it and is done with it.
    fn release_if_finished(&mut self, file: u64) {
        let Some(idx) = self.queue.index_of(file) else {
            return;
        };
        if self
            .queue
            .get_mut(idx)
            .is_some_and(|e| e.opened_here && e.reads_finished())
        {
            self.queue.release_fd(idx);
        }
    }

    #[cfg(test)]
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }
}

fn is_out_of_descriptors(e: &Error) -> bool {
    matches!(e, Error::Open { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)))
}

/// Wraps a failure of the backend itself (not of one file's read) so it names the operation.
fn ring_error(op: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |source| Error::Ring { op, source }.into()
}

fn front_id(queue: &Queue<'_>) -> u64 {
    queue.front().map_or(u64::MAX, |f| f.id)
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialFileReader")
            .field("backend", &self.backend())
            .field("files_queued", &self.queue.len())
            .field("file_offset", &self.file_offset())
            .field("reads_in_flight", &self.io.in_flight())
            .field(
                "pool",
                &format_args!("{}/{} bytes", self.pool.live_bytes(), self.pool.capacity()),
            )
            .field("registered_buffers", &self.io.registered())
            .finish_non_exhaustive()
    }
}

impl Drop for Engine<'_> {
    fn drop(&mut self) {
        let mut done = Vec::new();
        let drained = self.io.shutdown(&mut done);
        for d in done {
            let region = self.pool.reclaim(d.loan);
            self.pool.free(region);
        }
        // If the drain failed, some loans are still out: `Pool`'s drop then leaks its memory
        // instead of freeing it under the kernel.
        debug_assert!(drained.is_err() || std::thread::panicking() || self.pool.lent() == 0);
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
pub(crate) mod tests;
