//! One thread of a scan (`Worker::run`): what every thread works by, and the loop each runs,
//! its window topped up, the closure run on the next file, its outcome sent to the caller.
//! The window is the thread's `Lane`: the entries queued into its reader ahead of the file
//! the closure reads, so that the read-ahead crosses file boundaries, topped up from the
//! shared cursor whenever it runs low, and the closure run on each in turn.

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::sync::mpsc::SyncSender;

use super::builders::Builders;
use super::file::ScanFile;
use super::outbox::{Batch, Outbox};
use super::outcome::Outcome;
use super::readers::{Readers, ThreadEnd};
use super::state::{ScanState, StopOnPanic};
use super::work::{Taken, Work};
use crate::entry::Entry;

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

/// The fewest files a window is cut to while its reader finds the page cache warm
/// (`warm_window`), however little of the input is left: below it, a reader's opens ahead
/// and its work a file cost more (BENCHMARKS.md, "Tried and rejected").
const WARM_MIN_WINDOW: usize = 8;

/// The most entries a window of at most `ahead` holds while its reader finds the page cache
/// warm: `share`, the thread's share of what is left of the input, but not below
/// `WARM_MIN_WINDOW`. Its reader then copies each file as the closure reaches it rather than
/// read it ahead, so a longer window would only hold files another thread could read once
/// the input ends. Cold, windows keep their length: fewer files queued would hold fewer
/// reads in flight (BENCHMARKS.md, "Tried and rejected").
fn warm_window(ahead: usize, share: usize) -> usize {
    ahead.min(share.max(WARM_MIN_WINDOW))
}

/// An entry of the window, queued into the reader.
struct Queued {
    index: usize,
    start: u64,
    len: Option<u64>,
    /// Its place in the reader's queue (`SequentialFileReader::current_index`).
    id: usize,
}

/// A thread's readers and its window of entries, in input order.
pub(super) struct Lane<'a> {
    readers: Readers<'a>,
    queued: VecDeque<Queued>,
    /// The most entries the next top-up takes: 1 at first, twice as many each time after,
    /// so that no thread takes a long run of entries before the others have started, nor
    /// before the sizes of the paths it took are known.
    batch: usize,
    /// Entries just taken from the input (kept to reuse its allocation).
    taken: Vec<Taken<'a>>,
    /// The entries queued into the current reader so far.
    ids: usize,
}

impl<'a> Lane<'a> {
    pub(super) fn new() -> Self {
        Lane {
            readers: Readers::new(),
            queued: VecDeque::new(),
            batch: 1,
            taken: Vec::new(),
            ids: 0,
        }
    }

    /// The input index of the window's first entry, the next the closure runs on.
    pub(super) fn next_index(&self) -> Option<usize> {
        self.queued.front().map(|q| q.index)
    }

    /// The counters and backend of its readers (those given up included), dropping them.
    pub(super) fn end(self) -> ThreadEnd {
        self.readers.end()
    }

    /// Takes more entries and queues them once the window is down to half (of its files or
    /// of its bytes): a batch at a time, so that the cursor is locked once a batch. While
    /// its reader finds the page cache warm, the window is also at most the thread's share
    /// of what is left of an input of known length (`warm_window`).
    pub(super) fn top_up<I>(&mut self, worker: &Worker<'_, I>) -> io::Result<()>
    where
        I: Iterator,
        I::Item: Into<Entry<'a>>,
    {
        let ahead = match worker.work.share_left() {
            Some(share) if self.readers.cache_warm() => warm_window(worker.queue_ahead, share),
            _ => worker.queue_ahead,
        };
        let bytes = worker.queue_bytes;
        if self.queued.len() > ahead / 2 {
            return Ok(());
        }
        // The bytes the window holds for its reader to read: a walk of its queue, so only
        // once the count of files did not stop the top-up already.
        let held = self.readers.queued_bytes();
        if held > bytes / 2 {
            return Ok(());
        }
        let files = (ahead - self.queued.len()).min(self.batch);
        self.batch = self.batch.saturating_mul(2);
        let mut taken = mem::take(&mut self.taken);
        worker.work.take(files, bytes - held, &mut taken);
        let result = self.queue_all(&mut taken, worker.builders);
        self.taken = taken;
        result
    }

    /// Queues `taken` into the reader, built on the first entry; every entry lands in
    /// `queued`, even where this fails (those after a failure are reported not run).
    fn queue_all(&mut self, taken: &mut Vec<Taken<'a>>, builders: &Builders) -> io::Result<()> {
        let mut result = Ok(());
        for Taken { index, entry, .. } in taken.drain(..) {
            let q = Queued {
                index,
                start: entry.start(),
                len: entry.len(),
                id: self.ids,
            };
            if result.is_ok() {
                result = self.queue_one(entry, builders);
            }
            self.queued.push_back(q);
        }
        result
    }

    /// Queues one entry. An error is the reader's (its ring failed), not the entry's.
    fn queue_one(&mut self, entry: Entry<'a>, builders: &Builders) -> io::Result<()> {
        self.readers.get(builders)?.push(entry)?;
        self.ids += 1;
        Ok(())
    }

    /// Runs the closure on the window's first entry (the reader's current file), then moves
    /// the reader on; the entry's index and outcome, and whether moving on worked.
    pub(super) fn run_next<I, S, T, E>(
        &mut self,
        worker: &Worker<'_, I>,
        local: &mut Option<S>,
        init: &impl Fn() -> S,
        f: &impl Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E>,
    ) -> (usize, Outcome<T, E>, io::Result<()>)
    where
        E: From<io::Error>,
    {
        let state = worker.state;
        let q = self.queued.pop_front().expect("the caller saw an entry");
        let reader = self.readers.built();
        debug_assert_eq!(reader.current_index(), Some(q.id), "the reader is in step");
        // Opened first, so that the closure's `ScanFile` knows the file's length. A file that
        // cannot be opened keeps its error for its reads; an error here is the ring's.
        let opened = reader.open_current();
        let mut file = ScanFile::new(reader, q.index, q.start, q.len, state);
        // A panic stops the other threads at once, not after this reader is dropped.
        let stop = StopOnPanic(state);
        let result = match opened {
            Ok(()) => f(local.get_or_insert_with(init), &mut file),
            Err(e) => Err(E::from(e)),
        };
        drop(stop);
        file.finish();
        state.count_file(result.is_err());
        let moved = if reader.hung() {
            self.replace_reader(worker.builders)
        } else {
            reader.move_to_next_file().map(drop)
        };
        (q.index, Outcome::from(result), moved)
    }

    /// Gives up a reader that gave up on a hung read, and queues the entries behind into a
    /// new one: each keeps the outcome it would have had. An error is the new reader's.
    fn replace_reader(&mut self, builders: &Builders) -> io::Result<()> {
        self.ids = 0;
        self.readers.replace(builders, self.queued.len())?;
        for q in &mut self.queued {
            q.id = self.ids;
            self.ids += 1;
        }
        Ok(())
    }

    /// Reports every entry left in the window as not run.
    pub(super) fn report_not_run<T, E>(&mut self, state: &ScanState, out: &mut Outbox<'_, T, E>) {
        for q in self.queued.drain(..) {
            state.count_not_run();
            out.push(q.index, Outcome::NotRun);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_window_is_the_share_left_within_its_bounds() {
        assert_eq!(warm_window(256, 1000), 256);
        assert_eq!(warm_window(256, 100), 100);
        assert_eq!(warm_window(256, 3), WARM_MIN_WINDOW);
        assert_eq!(warm_window(256, 0), WARM_MIN_WINDOW);
        assert_eq!(warm_window(4, 100), 4, "never more than asked");
        assert_eq!(warm_window(1, 0), 1);
    }
}
