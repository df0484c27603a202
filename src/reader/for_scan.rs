//! What the scan asks of a reader beyond its public methods: how much is queued, the
//! current file's length, and giving up a reader whose read hung.

use std::io;

use super::SequentialFileReader;
use crate::engine::QueuedFile;
use crate::stats::Stats;

impl<'a> SequentialFileReader<'a> {
    /// The bytes the queued files have left, as far as known (for the scan's hand-out of
    /// work).
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.engine.queued_bytes()
    }

    /// The current file's length once it is open (for the scan's `ScanFile`).
    pub(crate) fn current_len(&self) -> Option<u64> {
        self.engine.current_len()
    }

    /// Opens the current file if it is not yet, so that its length is known (for the scan's
    /// `ScanFile`); a file that cannot be opened keeps its error for reading it to report.
    ///
    /// # Errors
    ///
    /// The backend's (its ring failed), not the file's.
    pub(crate) fn open_current(&mut self) -> io::Result<()> {
        self.engine.open_current()
    }

    /// Whether a wait gave up on a read that may never complete (see
    /// [`ReaderBuilder::drain_timeout`](crate::ReaderBuilder::drain_timeout)): its region of the pool stays the kernel's, so the
    /// scan gives this reader up rather than read on.
    pub(crate) fn hung(&self) -> bool {
        self.engine.hung()
    }

    /// Gives the reader up without waiting again: the files queued behind the current one,
    /// in order, to queue into another reader, and its counters but for those files' (see
    /// `Engine::abandon`); what the kernel still has is leaked and counted, as by a drop
    /// whose drain timed out.
    pub(crate) fn abandon(self) -> (Vec<QueuedFile<'a>>, Stats) {
        self.engine.abandon()
    }

    /// Queues a file taken back from a reader given up, as it was queued there.
    pub(crate) fn requeue(&mut self, file: QueuedFile<'a>) -> io::Result<()> {
        self.engine
            .push_range(file.source, file.start, file.limit, file.exact)
    }
}
