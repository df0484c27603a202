//! A scan thread's window (`Lane`): the entries queued into its reader ahead of the file the
//! closure reads, so that the read-ahead crosses file boundaries, topped up from the shared
//! cursor whenever it runs low, and the closure run on each in turn.

use std::collections::VecDeque;
use std::io;
use std::mem;

use super::builders::Builders;
use super::file::ScanFile;
use super::outbox::Outbox;
use super::outcome::Outcome;
use super::readers::Readers;
use super::state::{ScanState, StopOnPanic};
use super::work::Taken;
use super::worker::{ThreadEnd, Worker};
use crate::entry::Entry;

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
    /// of its bytes): a batch at a time, so that the cursor is locked once a batch.
    pub(super) fn top_up<I>(&mut self, worker: &Worker<'_, I>) -> io::Result<()>
    where
        I: Iterator,
        I::Item: Into<Entry<'a>>,
    {
        let (ahead, bytes) = (worker.queue_ahead, worker.queue_bytes);
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
