//! The engine: turns queued files into reads and completions into bytes for the consumer.
//!
//! Reads go through the [`Io`] trait, which the io_uring backend, the `pread` backend and
//! the tests' scripted completion source implement; the engine knows no ring. It asks
//! `sys` only about a file's pages and flags (`cachestat`, `fadvise`, `O_DIRECT`, in
//! `uncached.rs` and `completions.rs`), never to read.
//!
//! It is four types, each owning the next (an order of ownership, not of calls, and not
//! layers: each upper type also works on the `Core`'s parts directly, through their
//! methods). The state they share (the backend, the pool, the queue, the chunks, the
//! counters) is the `Core`'s:
//!
//! | type | declared in | methods in | job | state |
//! |---|---|---|---|---|
//! | `Engine` | `mod.rs` | `mod.rs`, `consumer.rs` | what the reader calls: `fill_buf` and `consume` (the spill's bytes first), records copied out of the pool, `skip` | [`spill::Spill`] |
//! | `Stream` | `stream.rs` | `stream.rs` | the current file's bytes in the pool: `fill`, `consume`, move on, activate | `handout` |
//! | `ReadAhead` | `read_ahead.rs` | `read_ahead.rs` | refilling, waiting (bounded: `hung`), draining | the scheduler, completions, `unread_error`, `hung` |
//! | `Core` | `core.rs` | `core.rs` | what the others share: backend and pool (`None` once moved or leaked), queue, chunks, counters; dropping reads | - |
//!
//! The settings they work by are `Limits` (`limits.rs`), fixed when the engine is made.
//!
//! Beside them, each with the state it owns: `scheduler` (which read goes next:
//! [`scheduler::Scheduler`]), `policy` (the read policy's decisions: [`policy::Policy`]),
//! `opens` (descriptors: [`opens::Opens`]), `completions` (completions:
//! [`completions::Completions`]), `chunks` (reads in flight or waiting, and orphans:
//! [`chunks::Chunks`]), `uncached` (leaving the page cache as found), `whole` (small cached
//! files copied whole into the spill rather than read ahead), and `front` (the
//! current file's chunks: how many of their bytes lie together, whether a skip may pass,
//! moving the consumer through them).
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
mod completions;
mod consumer;
mod core;
mod front;
mod limits;
mod opens;
mod policy;
mod queued_file;
mod read_ahead;
mod scheduler;
mod spill;
mod stream;
mod uncached;
mod whole;

use std::io;
use std::path::Path;

use crate::error::Error;
use crate::io::Backend;
use crate::io::Io;
#[cfg(test)]
use crate::io::{Opened, ReadDone, ReadReq};
use crate::pool::Pool;
#[cfg(test)]
use crate::source::FdRef;
use crate::source::Source;
use crate::stats::Stats;

use self::core::Core;
pub(crate) use limits::Limits;
pub(crate) use queued_file::QueuedFile;
use read_ahead::ReadAhead;
use spill::Spill;
use stream::Stream;

/// The queue, the pool and a backend, worked together: what the reader calls.
pub(crate) struct Engine<'a> {
    stream: Stream<'a>,
    /// Bytes of the current file copied out of the pool, read before the pool's.
    spill: Spill,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(io: Box<dyn Io<'a> + 'a>, pool: Pool, limits: Limits) -> Self {
        let ahead = ReadAhead::new(Core::new(io, pool), limits);
        Engine {
            stream: Stream::new(ahead),
            spill: Spill::default(),
        }
    }

    /// Drops every queued file, waits for every read in flight, and returns the same
    /// backend and pool, free to read files of another lifetime. Counters carry on, and the
    /// spill's allocation.
    pub(crate) fn rebind<'b>(mut self) -> io::Result<Engine<'b>> {
        self.spill.clear();
        self.stream.settle();
        let ahead = self.stream.ahead.rebind()?;
        Ok(Engine {
            stream: Stream::new(ahead),
            spill: std::mem::take(&mut self.spill),
        })
    }

    /// Shuts the engine down: the reader's `close`, which says only whether the drain
    /// failed (see `ReadAhead::drain`); file errors nobody read are
    /// [`unread_error`](Self::unread_error)'s.
    pub(crate) fn close(mut self) -> io::Result<()> {
        self.stream.ahead.drain()
    }

    /// The first file error no caller was given: of a file moved past (or dropped) before its
    /// error was read, else of a queued file that failed and was not read yet. Taken: each
    /// is returned once.
    pub(crate) fn take_unread_error(&mut self) -> Option<io::Error> {
        self.stream.ahead.take_unread_error()
    }

    /// Whether a wait gave up on a read: it may never complete, and it holds its region of
    /// the pool until it does, so reading on would soon wait for it again.
    pub(crate) fn hung(&self) -> bool {
        self.stream.ahead.hung
    }

    /// Gives the engine up (see `ReadAhead::abandon`): the files behind the current one, and
    /// its counters, less the opens and failures of those files: the reader they are
    /// queued into next opens them again, and says whether they fail.
    pub(crate) fn abandon(mut self) -> (Vec<QueuedFile<'a>>, Stats) {
        self.stream.settle();
        let core = &mut self.stream.ahead.core;
        let mut stats = core.stats;
        for i in 1..core.queue.len() {
            let file = core.queue.get_mut(i).expect("below the length");
            stats.file_handed_on(file.opened_here(), file.error().is_some());
        }
        (self.stream.ahead.abandon(), stats)
    }

    /// Queues a file's range `start..start + limit`, which it must hold whole where `exact`
    /// (an end of file before `start + limit` fails it); see `ReadAhead::push`.
    pub(crate) fn push_range(
        &mut self,
        source: Source<'a>,
        start: u64,
        limit: u64,
        exact: bool,
    ) -> io::Result<()> {
        // Reads are scheduled by the bytes consumed so far.
        self.stream.catch_up();
        self.stream.ahead.push(source, (start, limit), exact)
    }

    /// Turns the engine to one that never blocks: where it would wait for a read or an
    /// open, its calls fail with `WouldBlock` instead, having changed nothing the caller
    /// sees, to be made again once `wake` was called (a helper thread answered) or
    /// [`ready_fd`](Self::ready_fd) polls readable (the kernel completed something), or at
    /// [`wake_at`](Self::wake_at), where a wait that took `drain_timeout` fails the file as a
    /// blocking one does. Every file is opened through the backend's opens that answer
    /// later, a file handed in too. What still blocks, bounded: copies from the page cache,
    /// a helper thread's sizing of a file on a mount that may hang found changed
    /// (`drain_timeout` at most), the drain of `close`, `rebind` and the drop.
    #[cfg(feature = "tokio")]
    pub(crate) fn set_nonblocking(&mut self, wake: crate::helpers::Wake) {
        let core = &mut self.stream.ahead.core;
        core.nonblocking = true;
        core.io_mut().set_wake(wake);
    }

    /// Where the engine never blocks, when to call again if nothing woke it by then.
    #[cfg(feature = "tokio")]
    pub(crate) fn wake_at(&self) -> Option<std::time::Instant> {
        self.stream.ahead.wake_at()
    }

    /// Where the engine never blocks, a descriptor that polls readable when the kernel
    /// completed something (see `Io::ready_fd`).
    #[cfg(feature = "tokio")]
    pub(crate) fn ready_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.core().io().ready_fd()
    }

    /// The current file's path, when it was queued by path.
    pub(crate) fn current_path(&self) -> Option<&Path> {
        self.stream.current_path()
    }

    /// The current file's position among the files queued since the engine was made.
    pub(crate) fn current_index(&self) -> Option<u64> {
        self.stream.current_index()
    }

    /// The bytes the queued files have left to read, as far as known (one page for a file
    /// not opened yet).
    pub(crate) fn queued_bytes(&self) -> u64 {
        // The spill's bytes are past the consumer's place in their file, but not yet read.
        let left = self.core().queue.bytes_left(crate::consts::PAGE as u64);
        left - self.stream.unsettled() as u64 + self.spill.pending() as u64
    }

    /// The current file's length in bytes once it is open: its range's, cut at the size it
    /// had then.
    pub(crate) fn current_len(&self) -> Option<u64> {
        self.core().queue.front()?.status().sized_len()
    }

    /// A descriptor of the ring, where it has a submission thread others may share.
    pub(crate) fn sq_poll_ring(&self) -> Option<std::fs::File> {
        self.core().io().sq_poll_ring()
    }

    pub(crate) fn backend(&self) -> Backend {
        self.core().io().backend()
    }

    /// This engine's counters.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.core().stats;
        stats.consumed(self.stream.unsettled() as u64);
        stats
    }

    /// Whether the latest read that could tell found its bytes in the page cache (see
    /// `Policy::warm`).
    pub(crate) fn cache_warm(&self) -> bool {
        self.stream.ahead.sched.policy().warm()
    }

    /// The pool's size in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.core().pool().capacity()
    }

    fn core(&self) -> &Core<'a> {
        &self.stream.ahead.core
    }
}

/// Wraps a failure of the backend itself (not of one file's read) so it names the operation.
fn backend_error(op: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |source| Error::Backend { op, source }.into()
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = self.core();
        f.debug_struct("SequentialFileReader")
            .field("backend", &self.backend())
            .field("files_queued", &core.queue.len())
            .field("file_offset", &self.file_offset())
            .field("reads_in_flight", &core.io().in_flight())
            .field(
                "pool",
                &format_args!(
                    "{}/{} bytes",
                    core.pool().live_bytes(),
                    core.pool().capacity()
                ),
            )
            .field("registered_buffers", &core.io().registered())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
pub(crate) mod tests;
