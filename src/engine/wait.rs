//! Waiting: reaping what completed and issuing more as room opens (`refill`), blocking for a
//! read (`wait`), and bounding that wait. Reads a hung device or mount never completes (an NFS
//! server gone, a FUSE daemon stuck): the consumer's wait is bounded by `drain_timeout`, the
//! file waited for fails with `TimedOut`, and the engine can be given up, handing back the
//! files queued behind it.
//!
//! A read that never completes keeps its region of the pool, which is freed in FIFO order:
//! the engine can go on only until the pool comes round to that region. So once it has given
//! up on a read it says so ([`Engine::hung`]), for its owner to give it up in turn.

use std::io;
use std::time::{Duration, Instant};

use super::{ring_error, Engine};
use crate::error::Error;
use crate::source::Source;

/// A file taken back from an engine given up: queue it again elsewhere.
#[derive(Debug)]
pub(crate) struct Unread<'a> {
    pub(crate) source: Source<'a>,
    pub(crate) start: u64,
    pub(crate) limit: u64,
    /// Whether the file must hold the whole range (see `Engine::push_range`).
    pub(crate) exact: bool,
}

impl<'a> Engine<'a> {
    /// Reaps what has completed and issues more reads: called whenever room may have opened.
    pub(super) fn refill(&mut self) -> io::Result<()> {
        if self.core.io.in_flight() > 0 {
            self.completions.reap(&mut self.core)?;
            self.handle_done();
        }
        self.sched.schedule_unless_ahead(&mut self.core)?;
        self.submit_continuations()
    }

    /// Issues reads, earliest file first, while depth and pool allow; then submits them.
    pub(super) fn schedule(&mut self) -> io::Result<()> {
        self.sched.schedule(&mut self.core)
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
        self.core.io.submit().map_err(ring_error("submit"))
    }

    /// Blocks until a read completes, then handles what came back and refills. Where
    /// nothing completes within `drain_timeout`, the current file fails with `TimedOut`
    /// (the read it waited for is left in flight) and the engine counts as hung.
    pub(super) fn wait(&mut self) -> io::Result<()> {
        debug_assert!(
            self.core.io.in_flight() > 0,
            "waiting with nothing in flight would hang"
        );
        if self.sched.help(&mut self.core) {
            return self.refill();
        }
        let start = Instant::now();
        let timeout = self.sched.limits().drain_timeout;
        if !self
            .completions
            .reap_until(&mut self.core, start, timeout)?
        {
            self.fail_hung_front();
        }
        self.core.stats.waits += 1;
        self.core.stats.wait_time += start.elapsed();
        self.handle_done();
        self.schedule()?;
        self.submit_continuations()
    }

    /// Fails the current file where the read it waits for starts (else where its consumer
    /// is), and drops its reads from there on: those in flight become orphans.
    fn fail_hung_front(&mut self) {
        self.hung = true;
        let timeout = self.sched.limits().drain_timeout;
        let Some(front) = self.core.queue.front_mut() else {
            return;
        };
        let id = front.id;
        let hung = self
            .core
            .chunks
            .iter()
            .position(|c| c.file() == id && c.in_flight());
        let at = hung.map_or(front.progress().consumed(), |i| {
            self.core.chunks[i].resume_at()
        });
        let error = Error::Read {
            path: front.name(),
            offset: at,
            source: timed_out(timeout),
        };
        if front.fail(error, at) {
            self.core.stats.files_failed += 1;
        }
        if let Some(i) = hung {
            while let Some(c) = self.core.chunks.remove_of(i, id) {
                self.core.drop_chunk(c);
            }
        }
    }

    /// Whether a wait gave up on a read: it may never complete, and it holds its region of
    /// the pool until it does, so reading on would soon wait for it again.
    pub(crate) fn hung(&self) -> bool {
        self.hung
    }

    /// Gives the engine up: the current file is dropped, the files queued behind it are
    /// handed back, in order, to be queued into another reader, and what is still in flight
    /// is cancelled without waiting again (a wait already gave up on it): where anything is,
    /// the backend and the pool are leaked and counted, as by a drain that timed out.
    pub(crate) fn abandon(mut self) -> Vec<Unread<'a>> {
        self.exposed = 0;
        self.spill.clear();
        self.drop_front_file();
        let mut behind = Vec::with_capacity(self.core.queue.len());
        while let Some(id) = self.core.queue.front().map(|f| f.id) {
            while let Some(c) = self.core.chunks.pop_front_of(id) {
                self.core.drop_chunk(c);
            }
            let f = self.core.queue.pop_front().expect("checked");
            let status = f.status();
            let (start, limit, exact) = (status.start(), status.limit(), status.is_exact());
            behind.push(Unread {
                source: f.source,
                start,
                limit,
                exact,
            });
        }
        self.sched.limits_mut().stop_waiting();
        // Its drop drains, leaking what the kernel still has.
        drop(self);
        behind
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
