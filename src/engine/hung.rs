//! Reads a hung device or mount never completes (an NFS server gone, a FUSE daemon stuck):
//! the consumer's wait is bounded by `drain_timeout`, the file waited for fails with
//! `TimedOut`, and the engine can be given up, handing back the files queued behind it.
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
    /// Blocks until a read or open completes, for at most `drain_timeout` from `start`:
    /// where nothing does, the current file fails with `TimedOut` (the read it waited for is
    /// left in flight) and the engine counts as hung.
    pub(super) fn reap_waiting(&mut self, start: Instant) -> io::Result<()> {
        let deadline = start.checked_add(self.limits.drain_timeout);
        let came = self
            .io
            .reap_until(deadline, &mut self.done)
            .map_err(ring_error("wait"))?;
        if !came {
            self.fail_hung_front();
        }
        Ok(())
    }

    /// Fails the current file where the read it waits for starts (else where its consumer
    /// is), and drops its reads from there on: those in flight become orphans.
    fn fail_hung_front(&mut self) {
        self.hung = true;
        let timeout = self.limits.drain_timeout;
        let Some(front) = self.queue.front_mut() else {
            return;
        };
        let id = front.id;
        let hung = self
            .chunks
            .iter()
            .position(|c| c.file() == id && c.in_flight());
        let at = hung.map_or(front.progress().consumed(), |i| self.chunks[i].resume_at());
        let error = Error::Read {
            path: front.name(),
            offset: at,
            source: timed_out(timeout),
        };
        if front.fail(error, at) {
            self.stats.files_failed += 1;
        }
        if let Some(i) = hung {
            while let Some(c) = self.chunks.remove_of(i, id) {
                self.drop_chunk(c);
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
        let mut behind = Vec::with_capacity(self.queue.len());
        while let Some(id) = self.queue.front().map(|f| f.id) {
            while let Some(c) = self.chunks.pop_front_of(id) {
                self.drop_chunk(c);
            }
            let f = self.queue.pop_front().expect("checked");
            let status = f.status();
            let (start, limit, exact) = (status.start(), status.limit(), status.is_exact());
            behind.push(Unread {
                source: f.source,
                start,
                limit,
                exact,
            });
        }
        self.limits.stop_waiting();
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
