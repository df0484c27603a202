//! Reading ahead: reaping what completed and issuing more as room opens (`refill`), blocking
//! for a read (`wait`), and draining what is in flight before the pool goes.
//!
//! Reads a hung device or mount never completes (an NFS server gone, a FUSE daemon stuck):
//! the consumer's wait is bounded by `drain_timeout`, the file waited for fails with
//! `TimedOut`, and the engine can be given up, handing back the files queued behind it.
//! A read that never completes keeps its region of the pool, which is freed in FIFO order:
//! the engine can go on only until the pool comes round to that region. So once it has given
//! up on a read it says so (`hung`), for its owner to give it up in turn.

use std::io;
use std::time::{Duration, Instant};

use super::completions::Completions;
use super::scheduler::Scheduler;
use super::{backend_error, Core, Limits, QueuedFile};
use crate::error::Error;
use crate::queue::FileEntry;
use crate::source::Source;

/// Reads ahead of the consumer: reaps completions, issues more as room opens, waits.
pub(super) struct ReadAhead<'a> {
    pub(super) core: Core<'a>,
    pub(super) sched: Scheduler,
    completions: Completions<'a>,
    /// The first error of a file dropped before any caller was given it, until the reader's
    /// `take_unread_error` takes it.
    unread_error: Option<Error>,
    /// Whether a wait gave up on a read that may never complete (see `wait`).
    pub(super) hung: bool,
    /// Whether the read-ahead was given up (`abandon`): its drain waits for nothing.
    abandoned: bool,
    /// Where the engine never blocks: since when a read of the current file (by its id) was
    /// waited for and nothing came (a wait that is `WouldBlock` again and again is one wait,
    /// bounded as `wait` bounds it).
    stalled: Option<(u64, Instant)>,
}

impl<'a> ReadAhead<'a> {
    pub(super) fn new(core: Core<'a>, limits: Limits) -> Self {
        let mut sched = Scheduler::new(limits);
        // Direct reads pass the page cache by, and uncached ones must not leave theirs in it:
        // neither copies a file on the consumer's thread (see `whole.rs`).
        let whole = core.io().copies_cached() && !limits.direct && !limits.uncached;
        sched.policy_mut().copy_whole(whole);
        ReadAhead {
            core,
            sched,
            completions: Completions::default(),
            unread_error: None,
            hung: false,
            abandoned: false,
            stalled: None,
        }
    }

    /// Queues `limit` bytes of a file from `start` (all of them where `exact`: an end of
    /// file before `start + limit` fails it). Its opening and reading start at once where
    /// the pipeline has room (a file past the open-ahead's reach waits for the files before
    /// it: see `Scheduler::within_reach`). Where starting them fails (the ring broke), the
    /// file is not queued: it is queued and `Ok`, or not queued and `Err`.
    pub(super) fn push(
        &mut self,
        source: Source<'a>,
        (start, limit): (u64, u64),
        exact: bool,
    ) -> io::Result<()> {
        let id = self.core.queue.push_range(source, start, limit, exact);
        if !self.sched.within_reach(&self.core) {
            // Scheduling now would do what the last pass did: nothing reaches the new file.
            return Ok(());
        }
        let scheduled = self.sched.schedule_queued(&mut self.core);
        if scheduled.is_err() {
            self.core.drop_back_file(id);
        }
        scheduled
    }

    /// Reaps what has completed and issues more reads: called whenever room may have opened.
    pub(super) fn refill(&mut self) -> io::Result<()> {
        if self.core.io().in_flight() > 0 {
            self.completions.reap(&mut self.core)?;
        }
        self.handle_done();
        self.sched.schedule_unless_ahead(&mut self.core)?;
        self.submit_continuations()
    }

    /// Issues reads, earliest file first, while depth and pool allow; then submits them.
    pub(super) fn schedule(&mut self) -> io::Result<()> {
        self.sched.schedule(&mut self.core)
    }

    /// Opens the current file if it is not yet (waiting for an open under way), until it is
    /// sized or has failed; its error is left for reading it to report. An error here is
    /// the backend's.
    pub(super) fn open_current(&mut self) -> io::Result<()> {
        self.open_front()?;
        let front = self.core.queue.front();
        let to_size = |f: &FileEntry<'_>| !f.status().is_sized() && f.error().is_none();
        if front.is_some_and(|f| f.fd().is_some() && to_size(f)) {
            self.core.size_open(0); // Open, not sized yet (see `Opened::size`).
        }
        Ok(())
    }

    /// `open_current`, but a file its open leaves unsized stays so (see `Opened::size`).
    pub(super) fn open_front(&mut self) -> io::Result<()> {
        loop {
            let Some(front) = self.core.queue.front() else {
                return Ok(());
            };
            if front.status().is_sized() || front.error().is_some() || front.fd().is_some() {
                return Ok(());
            }
            self.schedule()?;
            let front = self.core.queue.front().expect("still current");
            if !front.status().is_sized() && front.error().is_none() && front.fd().is_none() {
                if !self.anything_in_flight() {
                    return Err(io::Error::other(format!(
                        "readahead: {} could not be opened, nothing under way (this is a bug)",
                        front.name()
                    )));
                }
                self.wait()?;
            }
        }
    }

    /// Whether a read or an open is under way: something to wait for.
    pub(super) fn anything_in_flight(&self) -> bool {
        self.core.io().in_flight() > 0 || self.sched.opens_in_flight() > 0
    }

    /// Handles every completion reaped, and every open the backend finished.
    fn handle_done(&mut self) {
        self.completions
            .handle(&mut self.core, self.sched.policy_mut());
        self.sched.handle_opened(&mut self.core);
    }

    /// Submits what handling completions queued (the rest of short reads, retries), which
    /// the scheduling after it submits only if it issued reads of its own: else they would
    /// wait in the submission queue until the consumer next blocks, with the device idle.
    /// Nothing is entered where nothing is queued.
    fn submit_continuations(&mut self) -> io::Result<()> {
        self.core.io_mut().submit().map_err(backend_error("submit"))
    }

    /// Blocks until a read completes, then handles what came back and refills. Where
    /// nothing completes within `drain_timeout`, the current file fails with `TimedOut`
    /// (the read it waited for is left in flight) and the engine counts as hung.
    pub(super) fn wait(&mut self) -> io::Result<()> {
        debug_assert!(
            self.anything_in_flight(),
            "waiting with nothing in flight would hang"
        );
        if self.sched.help(&mut self.core) {
            return self.refill();
        }
        if self.core.nonblocking {
            return self.poll_wait();
        }
        let opening = (self.core.queue.front()).is_some_and(|f| f.status().is_opening());
        // The current file waits for its open, which a timeout fails, not for reads of the
        // files behind it: those are reaped once it is open. With no read in flight, what
        // can come is an open.
        if (opening || self.core.io().in_flight() == 0) && self.core.io_mut().wait_opens() {
            self.handle_done();
            self.schedule()?;
            return self.submit_continuations();
        }
        let start = Instant::now();
        let timeout = self.sched.limits().drain_timeout;
        if !self
            .completions
            .reap_until(&mut self.core, start, timeout)?
        {
            self.hung = true;
            fail_hung_front(&mut self.core, timeout);
        }
        self.core.stats.waited(start.elapsed());
        self.handle_done();
        self.schedule()?;
        self.submit_continuations()
    }

    /// `wait` for an engine that never blocks: takes what came back and issues more, and
    /// returns `Ok` where anything came or went out (the caller looks again), else an error
    /// of kind `WouldBlock`, having changed nothing the caller sees: the call is to be made
    /// again once the backend's notification fires, or at [`wake_at`](Self::wake_at). Once
    /// nothing came for `drain_timeout` while a read was waited for, the current file fails
    /// as `wait` fails it; an open's timeout is the backend's (`Io::opens_answered`).
    fn poll_wait(&mut self) -> io::Result<()> {
        let mark = |ahead: &Self| {
            let stats = &ahead.core.stats;
            let opens = ahead.sched.opens_in_flight();
            (stats.reads, stats.files_opened, stats.files_failed, opens)
        };
        let before = mark(self);
        if self.core.io().in_flight() > 0 {
            self.completions.reap(&mut self.core)?;
        }
        let came = self.core.io_mut().opens_answered() || !self.completions.is_empty();
        self.handle_done();
        self.schedule()?;
        self.submit_continuations()?;
        let now = Instant::now();
        if came || mark(self) != before {
            if let Some((_, since)) = self.stalled.take() {
                self.core.stats.wait_ended(now.duration_since(since));
            }
            return Ok(());
        }
        // Waiting for an open (or with no read in flight, for nothing else) is bounded by
        // the open's own timeout, not here.
        let in_flight = self.core.io().in_flight();
        let front = self.core.queue.front();
        let Some(front) = front.filter(|f| !f.status().is_opening() && in_flight > 0) else {
            self.stalled = None;
            return Err(io::ErrorKind::WouldBlock.into());
        };
        // The same wait goes on while the same file waits; a file made current since waits
        // anew.
        let since = match self.stalled {
            Some((id, since)) if id == front.id => since,
            _ => {
                self.core.stats.wait_started();
                now
            }
        };
        self.stalled = Some((front.id, since));
        let timeout = self.sched.limits().drain_timeout;
        if now.duration_since(since) < timeout {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.stalled = None;
        self.core.stats.wait_ended(now.duration_since(since));
        self.hung = true;
        fail_hung_front(&mut self.core, timeout);
        self.schedule()?;
        self.submit_continuations()
    }

    /// Where the engine never blocks, when to look again if the backend's notification has
    /// not fired by then: a read waited for reaches `drain_timeout`, or an open times out or
    /// turns slow. `None`: only a notification brings anything.
    #[cfg(feature = "tokio")]
    pub(super) fn wake_at(&self) -> Option<Instant> {
        let timeout = self.sched.limits().drain_timeout;
        let read = self
            .stalled
            .and_then(|(_, since)| since.checked_add(timeout));
        let open = self.core.io().opens_due();
        match (read, open) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drops the current file and whatever was read or is in flight for it, keeping its
    /// first error if no caller was given it.
    pub(super) fn drop_front_file(&mut self) {
        if self.sched.limits().uncached {
            super::uncached::file_left(&mut self.core);
        }
        let unreported = self.core.drop_front_file();
        if self.unread_error.is_none() {
            self.unread_error = unreported;
        }
    }

    /// The first file error no caller was given: of a file moved past (or dropped) before its
    /// error was read, else of a queued file that failed and was not read yet.
    pub(super) fn take_unread_error(&mut self) -> Option<io::Error> {
        if let Some(e) = self.unread_error.take() {
            return Some(e.into());
        }
        self.core.queue.take_first_unreported()
    }

    /// Cancels what is in flight and waits, up to `drain_timeout`, for all of it to come
    /// back; see `Core::drain`.
    pub(super) fn drain(&mut self) -> io::Result<()> {
        let timeout = if self.abandoned {
            Duration::ZERO
        } else {
            self.sched.limits().drain_timeout
        };
        self.core.drain(timeout)
    }

    /// Drops every queued file, waits for every read in flight, and returns the same backend
    /// and pool, free to read files of another lifetime; this one is left with none. The
    /// counters carry on (a cap on descriptors lowered here does not: the new one starts as
    /// configured).
    pub(super) fn rebind<'b>(&mut self) -> io::Result<ReadAhead<'b>> {
        while !self.core.queue.is_empty() {
            self.drop_front_file();
        }
        self.drain()?;
        let (io, pool) = self.core.take_io_and_pool();
        let mut core = Core::new(io.rebind(), pool);
        core.stats = self.core.stats;
        core.nonblocking = self.core.nonblocking;
        Ok(ReadAhead::new(core, *self.sched.limits()))
    }

    /// Gives the read-ahead up: the current file is dropped, the files queued behind it are
    /// handed back, in order, to be queued into another reader, and what is still in flight
    /// is cancelled without waiting again (a wait already gave up on it): where anything is,
    /// the backend and the pool are leaked and counted, as by a drain that timed out.
    pub(super) fn abandon(mut self) -> Vec<QueuedFile<'a>> {
        self.drop_front_file();
        let mut behind = Vec::with_capacity(self.core.queue.len());
        while let Some(f) = self.core.pop_front_file() {
            let status = f.status();
            let (start, limit, exact) = (status.start(), status.limit(), status.is_exact());
            behind.push(QueuedFile {
                source: f.source,
                start,
                limit,
                exact,
            });
        }
        self.abandoned = true;
        // Its drop drains, leaking what the kernel still has.
        drop(self);
        behind
    }
}

impl Drop for ReadAhead<'_> {
    fn drop(&mut self) {
        let drained = self.drain();
        // A drain that gave up leaked the pool (see `drain`). Had a loan stayed out anyway,
        // `Pool`'s drop would leak its memory rather than free it under the kernel.
        debug_assert!(drained.is_err() || std::thread::panicking() || self.core.pool_lent() == 0);
    }
}

/// Fails the current file where the read it waits for starts (else where its consumer is),
/// after no read completed within `timeout`, and drops its reads from there on: those in
/// flight become orphans.
fn fail_hung_front(core: &mut Core<'_>, timeout: Duration) {
    let Some(front) = core.queue.front_mut() else {
        return;
    };
    let id = front.id;
    let hung = core
        .chunks
        .iter()
        .position(|c| c.file_id() == id && c.in_flight());
    let at = hung.map_or(front.progress().consumed(), |i| core.chunks[i].resume_at());
    let error = Error::Read {
        path: front.name(),
        offset: at,
        source: timed_out(timeout),
    };
    if front.fail(error, at) {
        core.stats.file_failed();
    }
    if let Some(i) = hung {
        while let Some(c) = core.chunks.remove_of(i, id) {
            core.drop_chunk(c);
        }
    }
}

/// Why a file failed when no read completed within `timeout`.
fn timed_out(timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "no read completed within {timeout:?} (a hung device or mount?); the read is left \
             in flight and the file given up on"
        ),
    )
}
