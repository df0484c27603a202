//! One thread of a scan (`Worker::run`): what every thread works by, and the loop each runs,
//! its window topped up, the closure run on the next file, its outcome sent to the caller.

use std::io;
use std::sync::mpsc::SyncSender;

use super::builders::Builders;
use super::file::ScanFile;
use super::lane::Lane;
use super::outbox::{Batch, Outbox};
use super::state::{ScanState, StopOnPanic};
use super::work::Work;
use crate::entry::Entry;
use crate::io::Backend;
use crate::stats::Stats;

/// One thread's work, the same for every thread of a scan: where it takes entries from, the
/// state it reports to, how it builds its readers and how far it queues ahead. Each thread
/// [`run`](Self::run)s it.
pub(super) struct Worker<'s, I> {
    pub(super) work: &'s Work<I>,
    pub(super) state: &'s ScanState,
    pub(super) builders: &'s Builders,
    /// Entries a thread keeps queued in its reader at most.
    pub(super) queue_ahead: usize,
    /// Bytes (as far as known) a thread keeps queued at most: twice its reader's pool, so
    /// that the read-ahead can fill the pool while the window holds more behind it
    /// (BENCHMARKS.md). It takes more once it holds less than one pool.
    pub(super) queue_bytes: u64,
    /// For ordered results: how far past the last result delivered a file may start.
    pub(super) window: Option<usize>,
}

/// What a thread's reader did, if it built one.
pub(super) type ThreadEnd = Option<(Stats, Backend)>;

impl<I> Worker<'_, I> {
    /// Runs one thread of the scan until the input ends or the scan stops. Every entry it
    /// took from the input gets an outcome, but for the one whose closure panicked.
    ///
    /// # Errors
    ///
    /// The reader could not be built, or failed as a whole (its ring); the scan stops then.
    pub(super) fn run<'a, S, T, E>(
        &self,
        init: &impl Fn() -> S,
        f: &impl Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E>,
        tx: &SyncSender<Batch<T, E>>,
    ) -> io::Result<ThreadEnd>
    where
        I: Iterator,
        I::Item: Into<Entry<'a>>,
        E: From<io::Error>,
    {
        let _stop = StopOnPanic(self.state);
        let mut out = Outbox::new(tx, self.state);
        let mut lane = Lane::new();
        let mut local = None;
        let result = loop {
            if self.state.stopped() {
                break Ok(());
            }
            if let Err(e) = lane.top_up(self) {
                break Err(e);
            }
            let Some(next) = lane.next_index() else {
                break Ok(());
            };
            if let Some(window) = self.window {
                // The caller may be waiting for what this thread gathered: sent first.
                if !self.state.wait_turn(next, window, || out.flush()) {
                    break Ok(());
                }
            }
            let (index, outcome, moved) = lane.run_next(self, &mut local, init, f);
            out.push(index, outcome);
            if let Err(e) = moved {
                break Err(e);
            }
        };
        if result.is_err() {
            self.state.stop();
        }
        lane.report_not_run(self.state, &mut out);
        result.map(|()| lane.end())
    }
}
