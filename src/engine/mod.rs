//! The engine: turns queued files into reads and completions into bytes for the consumer.
//!
//! It knows nothing of the kernel: reads go through the [`Io`] trait, which the io_uring
//! backend, the `pread` backend and the tests' scripted completion source implement.
//! Its work is split by job, each file with the state it owns:
//!
//! | file | job | state |
//! |---|---|---|
//! | `stream` | the consumer's side: queue, `fill_buf`, `consume`, move on, activate | `exposed` |
//! | `records` | `fill_buf_at_least` (in place, or copied) and `skip` | [`records::Spill`] |
//! | `issue` | which read goes next, when to wait, the windows, what to offload | [`issue::Policy`] |
//! | `complete` | completions: bytes, continuations, retries, errors | - |
//! | `opens` | descriptors: opening ahead, the cap, running out | [`opens::Opens`] |
//! | `chunks` | reads in flight or waiting, and orphans | [`chunks::Chunks`] |
//! | `hung` | reads never completed: the bounded wait, giving the engine up | `hung` |
//!
//! Invariants:
//! - Reads are issued in queue order: all of a file's reads before any of the next file's.
//!   So the live chunks (in id order) are also in (file, offset) order, and the current
//!   file's chunks are at their front.
//! - A chunk's bytes are readable only once its read completed (`region` is `Some`); while in
//!   flight the region is lent to the backend and the chunk holds nothing to read.
//! - A chunk dropped while in flight becomes an orphan: its region stays lent until its
//!   completion is reaped, and is then freed unread.
//! - A file's `in_flight` counts its live chunks that are in flight; orphans belong to no file.

mod chunks;
mod complete;
mod core;
mod issue;
mod opens;
mod policy;
mod records;
mod stream;
mod wait;

use std::io;
use std::mem;
#[cfg(test)]
use std::path::Path;
use std::time::Duration;

use crate::consts::Backend;
use crate::error::Error;
use crate::io::{Detached, Io};
#[cfg(test)]
use crate::io::{Opened, ReadDone, ReadReq};
use crate::pool::Pool;
use crate::queue::Queue;
#[cfg(test)]
use crate::source::{FdRef, Source};
use crate::stats::{self, Stats};

use chunks::Chunks;
use complete::Completions;
use issue::Scheduler;
use records::Spill;
pub(crate) use wait::Unread;

/// Settings the engine works by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) read_size: usize,
    pub(crate) direct: bool,
    pub(crate) depth: usize,
    pub(crate) max_open: usize,
    /// Pool bytes the read-ahead may hold while reads of the files ahead go to the disk
    /// through the page cache (`O_DIRECT` reads may fill the pool).
    pub(crate) cold_window: usize,
    /// Pool bytes the read-ahead may hold while the files ahead are in the page cache and
    /// kernel workers copy their large reads.
    pub(crate) warm_window: usize,
    /// The same while the consumer's thread copies them: the copies land this far ahead of
    /// the consumer at most, in the same few pages each time.
    pub(crate) inline_window: usize,
    /// The same while those reads are small (below `OFFLOAD_MIN`): they are copied on the
    /// consumer's thread, so this is how far ahead of it the copies land.
    pub(crate) small_window: usize,
    /// Offloaded reads in flight at most.
    pub(crate) offload_depth: usize,
    /// Whether kernel workers copy large reads of cached files (`offload(true)`).
    pub(crate) offload: bool,
    /// The longest the reads in flight are waited for when the engine is dropped, rebound or
    /// closed (see `drain`).
    pub(crate) drain_timeout: Duration,
}

impl Limits {
    /// From now on, nothing in flight is waited for (a hung read was given up on).
    pub(super) fn stop_waiting(&mut self) {
        self.drain_timeout = Duration::ZERO;
    }

    /// The window of small cached reads. Where kernel workers copy large reads, the window
    /// must hold those in flight too, or a small file behind a large one would stall the
    /// pipeline; else a smaller one keeps the copies in the CPU's cache until consumed.
    pub(super) fn small_reads_window(&self) -> usize {
        if self.offload {
            self.warm_window
        } else {
            self.small_window
        }
    }
}

/// The queue, the pool and a backend, worked together.
pub(crate) struct Engine<'a> {
    core: Core<'a>,
    sched: Scheduler,
    completions: Completions<'a>,
    /// Bytes the last `fill_buf` returned that are not consumed yet: what `consume` may
    /// take. Anything that changes the current file sets it to 0.
    exposed: usize,
    /// Bytes of the current file copied out of the pool, read before the pool's.
    spill: Spill,
    /// The first error of a file dropped before any caller was given it (see
    /// `unread_error`), until the reader's `take_unread_error` takes it.
    unread: Option<Error>,
    /// Whether a wait gave up on a read that may never complete (see `hung`).
    hung: bool,
}

/// What every part of the engine works on: the backend, the pool, the queued files and the
/// reads issued for them, and the counters. Each has its own interface; `core.rs` has what
/// takes several of them at once (dropping reads, sending them).
pub(super) struct Core<'a> {
    // Drop order: `Drop for Engine` first takes every loan back from `io` (cancelling and
    // waiting); then `io` is dropped (closing the ring) before `pool` (freeing the memory).
    // Where the wait gives up, `drain` leaks both instead, putting empty ones in their place.
    io: Box<dyn Io<'a> + 'a>,
    pool: Pool,
    queue: Queue<'a>,
    chunks: Chunks,
    stats: Stats,
    /// Tests fill every region with this byte before it is read into, to catch bytes
    /// exposed that no read wrote.
    #[cfg(test)]
    poison: Option<u8>,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(io: Box<dyn Io<'a> + 'a>, pool: Pool, limits: Limits) -> Self {
        let core = Core {
            io,
            pool,
            queue: Queue::default(),
            chunks: Chunks::default(),
            stats: Stats::default(),
            #[cfg(test)]
            poison: None,
        };
        Engine {
            core,
            sched: Scheduler::new(limits),
            completions: Completions::default(),
            exposed: 0,
            spill: Spill::default(),
            unread: None,
            hung: false,
        }
    }

    /// Drops every queued file, waits for every read in flight, and returns the same
    /// backend and pool, free to read files of another lifetime. Counters carry on.
    pub(crate) fn rebind<'b>(mut self) -> io::Result<Engine<'b>> {
        self.exposed = 0;
        self.spill.clear();
        while !self.core.queue.is_empty() {
            self.drop_front_file();
        }
        self.drain()?;
        let io = mem::replace(&mut self.core.io, Box::new(Detached)).rebind();
        let pool = mem::replace(&mut self.core.pool, Pool::empty());
        // A fresh engine, then what carries on: the counters and the spill's allocation (a
        // cap on descriptors lowered here is not: the new engine starts as configured).
        let mut engine = Engine::new(io, pool, *self.sched.limits());
        engine.core.stats = self.core.stats;
        engine.spill = mem::take(&mut self.spill);
        #[cfg(test)]
        {
            engine.core.poison = self.core.poison;
        }
        Ok(engine)
    }

    /// Shuts the engine down: the reader's `close`, which says only whether the drain
    /// failed (see [`drain`](Self::drain)); file errors nobody read are
    /// [`unread_error`](Self::unread_error)'s.
    pub(crate) fn close(mut self) -> io::Result<()> {
        self.drain()
    }

    /// Cancels what is in flight and waits, up to `drain_timeout`, for all of it to come
    /// back, freeing what does. Where the wait times out or the ring fails with something
    /// still in flight, the kernel may yet write into the pool and post into the ring: both
    /// are leaked (the ring stays open and mapped, with every descriptor its reads name; the
    /// pool stays mapped), replaced by a backend and a pool of nothing, and the process-wide
    /// count of drains abandoned goes up. A backend without reads in the kernel (`pread`)
    /// returns at once.
    fn drain(&mut self) -> io::Result<()> {
        let mut done = Vec::new();
        let drained = self
            .core
            .io
            .shutdown(&mut done, self.sched.limits().drain_timeout);
        for d in done {
            let region = self.core.pool.reclaim(d.loan);
            self.core.pool.free(region);
        }
        let Err(e) = drained else {
            return Ok(());
        };
        let left = self.core.io.in_flight();
        if left > 0 {
            mem::forget(mem::replace(&mut self.core.io, Box::new(Detached)));
            mem::forget(mem::replace(&mut self.core.pool, Pool::empty()));
            stats::count_abandoned_drain();
        }
        Err(drain_error(e, left, self.sched.limits().drain_timeout))
    }

    /// Drops the current file and whatever was read or is in flight for it, keeping its
    /// first error if no caller was given it.
    pub(super) fn drop_front_file(&mut self) {
        let unreported = self.core.drop_front_file();
        if self.unread.is_none() {
            self.unread = unreported;
        }
    }

    /// The first file error no caller was given: of a file moved past (or dropped) before its
    /// error was read, else of a queued file that failed and was not read yet. Taken: each
    /// is returned once.
    pub(crate) fn unread_error(&mut self) -> Option<io::Error> {
        if let Some(e) = self.unread.take() {
            return Some(e.into());
        }
        self.core.queue.take_first_unreported()
    }

    /// The bytes the queued files have left to read, as far as known (one page for a file
    /// not opened yet).
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.core.queue.bytes_left(crate::consts::PAGE as u64)
    }

    /// The current file's length in bytes once it is open: its range's, cut at the size it
    /// had then.
    pub(crate) fn current_len(&self) -> Option<u64> {
        self.core.queue.front()?.status().sized_len()
    }

    /// A descriptor of the ring, where it has a submission thread others may share.
    pub(crate) fn sq_poll_ring(&self) -> Option<std::fs::File> {
        self.core.io.sq_poll_ring()
    }

    pub(crate) fn backend(&self) -> Backend {
        self.core.io.backend()
    }

    /// This engine's counters.
    pub(crate) fn stats(&self) -> Stats {
        self.core.stats
    }

    /// The pool's size in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.core.pool.capacity()
    }

    #[cfg(test)]
    pub(crate) fn pool(&self) -> &Pool {
        &self.core.pool
    }

    /// Tests: every region is filled with `byte` before it is read into.
    #[cfg(test)]
    pub(crate) fn set_poison(&mut self, byte: u8) {
        self.core.poison = Some(byte);
    }
}

/// Wraps a failure of the backend itself (not of one file's read) so it names the operation.
fn ring_error(op: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |source| Error::Ring { op, source }.into()
}

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
    ring_error("drain")(source)
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialFileReader")
            .field("backend", &self.backend())
            .field("files_queued", &self.core.queue.len())
            .field("file_offset", &self.file_offset())
            .field("reads_in_flight", &self.core.io.in_flight())
            .field(
                "pool",
                &format_args!(
                    "{}/{} bytes",
                    self.core.pool.live_bytes(),
                    self.core.pool.capacity()
                ),
            )
            .field("registered_buffers", &self.core.io.registered())
            .finish_non_exhaustive()
    }
}

impl Drop for Engine<'_> {
    fn drop(&mut self) {
        let drained = self.drain();
        // A drain that gave up leaked the pool (see `drain`). Had a loan stayed out anyway,
        // `Pool`'s drop would leak its memory rather than free it under the kernel.
        debug_assert!(drained.is_err() || std::thread::panicking() || self.core.pool.lent() == 0);
    }
}

#[cfg(test)]
pub(crate) mod tests;
