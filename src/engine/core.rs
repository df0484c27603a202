//! The engine's core (`Core`), and what takes several of its parts at once: dropping reads
//! no longer wanted (freeing their regions, or cancelling them in flight as orphans) and
//! files with them, continuing a read, and draining what is in flight before the pool goes.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::mem;
use std::time::Duration;

use super::backend_error;
use super::chunks::{Chunk, Chunks};
use crate::error::Error;
use crate::io::{size_local, Io, OpenStart, Opened, ReadReq, ThreadOpens};
use crate::pool::{Pool, Region};
use crate::queue::{CacheUse, FileEntry, Queue};
use crate::source::{FdRef, Source};
use crate::stats::{self, Stats};
use crate::sys::{self, SizeError};

/// What the engine's other types work on: the backend, the pool, the queued files and the
/// reads issued for them, and the counters. Each has its own interface; the methods here
/// take several of them at once (dropping reads).
pub(super) struct Core<'a> {
    // Drop order: `Drop for ReadAhead` first takes every loan back from `io` (cancelling and
    // waiting); then `io` is dropped (closing the ring) before `pool` (freeing the memory).
    // Both are `None` once moved to a rebound engine, or leaked by a drain that gave up (see
    // `drain`): the engine is then only dropped.
    io: Option<Box<dyn Io<'a> + 'a>>,
    pool: Option<Pool>,
    pub(super) queue: Queue<'a>,
    pub(super) chunks: Chunks,
    pub(super) stats: Stats,
    /// Whether the engine never blocks (see `Engine::set_nonblocking`): every file, handed
    /// in or not, is opened through the backend's opens that answer later.
    pub(super) nonblocking: bool,
}

impl<'a> Core<'a> {
    pub(super) fn new(io: Box<dyn Io<'a> + 'a>, pool: Pool) -> Self {
        Core {
            io: Some(io),
            pool: Some(pool),
            queue: Queue::default(),
            chunks: Chunks::default(),
            stats: Stats::default(),
            nonblocking: false,
        }
    }

    /// The backend: the core's until moved to a rebound engine or leaked by a drain that gave
    /// up, after which the engine is only dropped.
    pub(super) fn io(&self) -> &(dyn Io<'a> + 'a) {
        self.io.as_deref().expect(GONE)
    }

    pub(super) fn io_mut(&mut self) -> &mut (dyn Io<'a> + 'a) {
        self.io.as_deref_mut().expect(GONE)
    }

    /// The pool: the core's as long as the backend is.
    #[inline]
    pub(super) fn pool(&self) -> &Pool {
        self.pool.as_ref().expect(GONE)
    }

    pub(super) fn pool_mut(&mut self) -> &mut Pool {
        self.pool.as_mut().expect(GONE)
    }

    /// Regions lent to the backend: none where the pool is gone.
    pub(super) fn pool_lent(&self) -> usize {
        self.pool.as_ref().map_or(0, Pool::lent)
    }

    /// Moves the backend and the pool out, to a rebound engine: this core then only drops.
    pub(super) fn take_io_and_pool(&mut self) -> (Box<dyn Io<'a> + 'a>, Pool) {
        (self.io.take().expect(GONE), self.pool.take().expect(GONE))
    }

    /// Opens the queued file at `idx` here, with `O_DIRECT` where `direct`.
    pub(super) fn open_queued(&mut self, idx: usize, direct: bool) -> Result<Opened<'a>, Error> {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        self.io
            .as_deref_mut()
            .expect(GONE)
            .open(&entry.source, direct)
    }

    /// Starts opening the queued file at `idx` through the backend, if it can and the file
    /// was queued by path (or the engine never blocks): see [`OpenStart`].
    pub(super) fn start_open_queued(&mut self, idx: usize, direct: bool) -> OpenStart<'a> {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let io = self.io.as_deref_mut().expect(GONE);
        match &entry.source {
            Source::Path(path) => io.start_open(entry.id, path, direct),
            // A file handed in is sized on the spot (on a helper thread where it may hang,
            // waited for), unless the engine must never wait.
            source if self.nonblocking && io.start_open_any(entry.id, source, direct) => {
                OpenStart::Started
            }
            _ => OpenStart::Refused,
        }
    }

    /// Reads the rest of chunk `i` (from its `from`) again, into `region`.
    pub(super) fn resubmit(&mut self, i: usize, region: Region, fd: FdRef<'a>) {
        let chunk = &self.chunks[i];
        let (id, at, from, want) = (chunk.id(), chunk.resume_at(), chunk.from(), chunk.want());
        let entry = self.queue.by_id_mut(chunk.file_id());
        let direct = entry.as_ref().is_some_and(|e| e.direct());
        let uncached = entry.is_some_and(|e| e.cache_use() == CacheUse::Uncached);
        let loan = self.pool_mut().lend(region);
        let req = ReadReq::new(id, (fd, direct), at, loan, from, want - from);
        self.io_mut().read(req.with_uncached(uncached));
        self.stats.read_resent(uncached);
    }

    /// Sizes the file at `idx`, open and left unsized by its open (see `Opened::size`): by a
    /// seek, or `fstat`, which fails it where it cannot be read ahead.
    pub(super) fn size_open(&mut self, idx: usize) {
        self.size_open_by(idx, size_local);
    }

    /// `size_open`, by `fstat` alone.
    pub(super) fn size_by_fstat(&mut self, idx: usize) {
        self.size_open_by(idx, |file| sys::size_and_device(file).map(|(size, _)| size));
    }

    /// Sizes the open, unsized file at `idx` by `size` of its descriptor.
    fn size_open_by(&mut self, idx: usize, size: impl FnOnce(&File) -> Result<u64, SizeError>) {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let size = size(entry.fd().expect("open").file());
        self.set_size(idx, size, 1);
    }

    /// Records the size of the open file at `idx` (its reads aligned to `align`), or fails
    /// it with the reason it cannot be sized; closes it where that leaves nothing to read.
    pub(super) fn set_size(&mut self, idx: usize, size: Result<u64, SizeError>, align: u64) {
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        if entry.error().is_some() {
            return; // Failed while open (timed out): its error stays.
        }
        let failed = match size {
            Ok(size) => entry.set_size(size, align),
            Err(e) => {
                let at = entry.progress().consumed();
                entry.fail(e.naming(entry.name()), at)
            }
        };
        if failed {
            self.stats.file_failed();
        }
        if entry.reads_finished() {
            self.release_fd(idx);
        }
    }

    /// Closes the descriptor of file `file` if the reader opened it and is done with it.
    pub(super) fn release_if_finished(&mut self, file: u64) {
        let Some(idx) = self.queue.index_of(file) else {
            return;
        };
        if self
            .queue
            .get_mut(idx)
            .is_some_and(|e| e.opened_here() && e.reads_finished())
        {
            self.release_fd(idx);
        }
    }

    /// Closes the descriptor of the queued file at `idx`, if the reader opened it.
    pub(super) fn release_fd(&mut self, idx: usize) {
        if let Some(fd) = self.queue.release_fd(idx) {
            self.close(fd);
        }
    }

    /// Descriptors of files done with that the backend closes later, together (see
    /// `Spares`): still held.
    pub(super) fn closing(&self) -> usize {
        self.io().thread_opens().map_or(0, ThreadOpens::closing)
    }

    /// Closes the descriptors of files done with now; whether there were any.
    pub(super) fn close_done(&mut self) -> bool {
        self.io_mut()
            .thread_opens_mut()
            .is_some_and(ThreadOpens::close_done)
    }

    /// Closes a descriptor the queue let go of, through the opens of the backend, which keep
    /// its allocation for the next file opened (see `Spares`).
    fn close(&mut self, fd: FdRef<'a>) {
        match self.io_mut().thread_opens_mut() {
            Some(opens) => opens.close(fd),
            None => drop(fd),
        }
    }

    /// Cancels what is in flight and waits, up to `timeout`, for all of it to come back,
    /// freeing what does. Where the wait times out or the ring fails with something still
    /// in flight, the kernel may yet write into the pool and post into the ring: both are
    /// leaked (the ring stays open and mapped, with every descriptor its reads name; the
    /// pool stays mapped), the core is left with neither, and the process-wide count of
    /// drains abandoned goes up. A backend without reads in the kernel (`pread`) returns at
    /// once, as does a core whose backend is gone.
    pub(super) fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        let (Some(io), Some(pool)) = (self.io.as_deref_mut(), self.pool.as_mut()) else {
            return Ok(());
        };
        let mut done = Vec::new();
        let drained = io.shutdown(&mut done, timeout);
        for d in done {
            let region = pool.reclaim(d.loan);
            pool.free(region);
        }
        let Err(e) = drained else {
            return Ok(());
        };
        let left = io.in_flight();
        if left > 0 {
            mem::forget(self.io.take());
            mem::forget(self.pool.take());
            stats::count_abandoned_drain();
        }
        Err(drain_error(e, left, timeout))
    }

    /// Counts the peaks of reads in flight and pool bytes held, after reads were issued.
    pub(super) fn note_peaks(&mut self) {
        // The backend's count has the opens in flight too.
        let reads = self.chunks.reads_in_flight() as u64;
        let held = self.pool().live_bytes() as u64;
        self.stats.peaks(reads, held);
    }

    /// Frees a chunk's region, or orphans it if its read is in flight.
    pub(super) fn drop_chunk(&mut self, c: Chunk) {
        let (id, file) = (c.id(), c.file_id());
        match c.into_region() {
            Some(region) => self.pool_mut().free(region),
            None => {
                let mut holds_fd = false;
                if let Some(e) = self.queue.by_id_mut(file) {
                    e.progress_mut().read_done();
                    holds_fd = e.opened_here();
                }
                self.chunks.orphan(id, holds_fd.then_some(file));
                self.io_mut().cancel(id);
            }
        }
    }

    /// Pops the consumed front chunk.
    pub(super) fn pop_chunk(&mut self) {
        let c = self.chunks.pop_front().expect("a front chunk");
        let region = c.into_region();
        self.pool_mut()
            .free(region.expect("a consumed chunk is not in flight"));
    }

    /// Drops the chunks of chunk `i`'s file that come after it (past the file's new end).
    pub(super) fn drop_chunks_after(&mut self, i: usize) {
        let file = self.chunks[i].file_id();
        while let Some(c) = self.chunks.remove_of(i + 1, file) {
            self.drop_chunk(c);
        }
    }

    /// Drops the current file and whatever was read or is in flight for it; its first
    /// error, if no caller was given it.
    pub(super) fn drop_front_file(&mut self) -> Option<Error> {
        self.pop_front_file().and_then(|f| f.into_unreported())
    }

    /// Takes the current file out of the queue, dropping whatever was read or is in flight
    /// for it, and closing the descriptor the reader opened for it.
    pub(super) fn pop_front_file(&mut self) -> Option<FileEntry<'a>> {
        let id = self.queue.front()?.id;
        while let Some(c) = self.chunks.pop_front_of(id) {
            self.drop_chunk(c);
        }
        self.release_fd(0);
        self.queue.pop_front()
    }

    /// Drops the file queued last, `id`, and whatever was issued for it (its chunks are the
    /// last ones: chunks are in queue order).
    pub(super) fn drop_back_file(&mut self, id: u64) {
        while let Some(c) = self.chunks.pop_back_of(id) {
            self.drop_chunk(c);
        }
        self.queue.pop_back(id);
    }

    /// Forgets what was read of the current file, to read it again from its start. Files
    /// behind it keep their read-ahead.
    pub(super) fn restart_front(&mut self) {
        let id = self.queue.front().map_or(u64::MAX, |f| f.id);
        while let Some(c) = self.chunks.pop_front_of(id) {
            self.drop_chunk(c);
        }
        self.queue.rewind(0);
    }

    /// Drops what was read ahead for the files behind the current one, which are read
    /// again later: the current file, restarted, needs the room. Whether there was any.
    pub(super) fn drop_read_ahead(&mut self) -> bool {
        let front = self.queue.front().map_or(u64::MAX, |f| f.id);
        let Some(first) = self.chunks.iter().position(|c| c.file_id() != front) else {
            return false;
        };
        let behind: Vec<Chunk> = self.chunks.split_off(first);
        let files: BTreeSet<u64> = behind.iter().map(|c| c.file_id()).collect();
        for c in behind {
            self.drop_chunk(c);
        }
        for file in files {
            if let Some(idx) = self.queue.index_of(file) {
                self.queue.rewind(idx);
            }
        }
        true
    }
}

/// Why an accessor found the backend or the pool gone.
const GONE: &str = "the backend and the pool are gone only from an engine that is being dropped";

/// A drain's failure, saying what it leaves behind: `left` operations still in the kernel's
/// hands after waiting up to `timeout`.
fn drain_error(e: io::Error, left: usize, timeout: Duration) -> io::Error {
    let leaked = if left > 0 {
        "; the reader's buffer pool and ring are leaked, not freed, since the kernel may still write into them"
    } else {
        ""
    };
    let source = if e.kind() == io::ErrorKind::TimedOut {
        io::Error::new(
            e.kind(),
            format!(
                "gave up after {timeout:?} waiting for {left} cancelled reads or opens the kernel has not completed (a hung device or mount?){leaked}"
            ),
        )
    } else if left > 0 {
        io::Error::new(e.kind(), format!("{e}{leaked}"))
    } else {
        e
    };
    backend_error("drain")(source)
}
