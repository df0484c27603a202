//! One thread of a scan: a reader of its own, a window of entries queued into it ahead of the
//! file the closure reads (so that its read-ahead crosses file boundaries), topped up from
//! the shared cursor whenever it runs low, and each file's outcome sent to the caller.

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, PoisonError};

use super::control::{ScanState, StopOnPanic};
use super::file::ScanFile;
use super::work::{Taken, Work};
use super::{Entry, Outcome};
use crate::config::ReaderBuilder;
use crate::consts::Backend;
use crate::reader::SequentialFileReader;
use crate::stats::Stats;

/// How the scan's threads build their readers: from the same settings; where they share one
/// submission thread, the first reader built starts it and the others attach to it.
pub(super) struct Builders {
    base: ReaderBuilder,
    /// With a shared submission thread: the settings that attach to it, once there is one.
    attach: Option<Mutex<Option<ReaderBuilder>>>,
    /// The pool bytes the readers given up on a hung read left behind, so far.
    left_behind: AtomicUsize,
    /// How many they may leave behind: the scan's memory budget, again.
    budget: usize,
}

impl Builders {
    /// Readers from `base`, sharing one submission thread where it asks for one; those given
    /// up may leave `budget` bytes of pools behind together.
    pub(super) fn new(base: ReaderBuilder, budget: usize) -> Self {
        let attach = base.sq_poll.is_some().then(Mutex::default);
        Builders {
            base,
            attach,
            left_behind: AtomicUsize::new(0),
            budget,
        }
    }

    /// Counts a reader given up on a hung read, whose pool stays behind for good (the
    /// kernel may still write into it).
    ///
    /// # Errors
    ///
    /// Where the pools left behind pass the budget: the scan then stops, rather than leave
    /// more memory behind.
    fn leave_behind(&self) -> io::Result<()> {
        let pool = self.buffer_size();
        let total = self.left_behind.fetch_add(pool, Ordering::Relaxed) + pool;
        if total <= self.budget {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "readahead: the scan gave up {} readers on reads a hung mount never completed, \
                 leaving {} MiB of their pools behind, more than its memory budget ({} MiB, \
                 `Scan::memory`); it stops rather than leave more",
                total / pool,
                total >> 20,
                self.budget >> 20
            ),
        ))
    }

    /// The pool size of every reader.
    pub(super) fn buffer_size(&self) -> usize {
        // As `build()` will size it: whole pages, and room for one read.
        self.base
            .buffer_size
            .max(self.base.read_size)
            .next_multiple_of(crate::consts::PAGE)
    }

    /// A thread's reader, once `given_up` readers of the thread were given up on a hung read.
    fn build<'a>(&self, given_up: u32) -> io::Result<SequentialFileReader<'a>> {
        let Some(attach) = &self.attach else {
            return Ok(with_workers_for(self.base.clone(), given_up).build()?);
        };
        let mut attach = attach.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(builder) = &*attach {
            return Ok(with_workers_for(builder.clone(), given_up).build()?);
        }
        let reader = with_workers_for(self.base.clone(), given_up).build()?;
        *attach = Some(self.base.clone().sq_poll_shared_with(&reader));
        Ok(reader)
    }
}

/// `builder` with its kernel workers' cap raised by the cap again for each reader given up:
/// the workers are the thread's, shared by all its rings, and a hung read keeps one for
/// good, so a reader given up may leave them all stuck. The kernel's own limit still holds.
fn with_workers_for(builder: ReaderBuilder, given_up: u32) -> ReaderBuilder {
    match builder.io_workers {
        Some(cap) if cap > 0 && given_up > 0 => {
            builder.io_workers(cap.saturating_mul(given_up.saturating_add(1)))
        }
        _ => builder,
    }
}

/// An outcome on its way to the caller, with its index in the input.
pub(super) type Sent<T, E> = (usize, Outcome<T, E>);

/// What a thread sends the caller at once: the outcomes of up to [`SEND_BATCH`] files.
pub(super) type Batch<T, E> = Vec<Sent<T, E>>;

/// Outcomes a thread gathers before it sends them: one message, and at most one wake-up of
/// the caller's thread, per this many files, rather than per file: a message per file
/// costs a `futex` call each (BENCHMARKS.md has the measurement).
const SEND_BATCH: usize = 32;

/// A thread's outcomes on their way to the caller, sent a batch at a time, and whatever is
/// gathered before the thread waits for the caller (`flush`) or ends, even by a panic.
struct Outbox<'t, T, E> {
    tx: &'t SyncSender<Batch<T, E>>,
    state: &'t ScanState,
    batch: Batch<T, E>,
}

impl<'t, T, E> Outbox<'t, T, E> {
    fn new(tx: &'t SyncSender<Batch<T, E>>, state: &'t ScanState) -> Self {
        Outbox {
            tx,
            state,
            batch: Vec::with_capacity(SEND_BATCH),
        }
    }

    fn push(&mut self, index: usize, outcome: Outcome<T, E>) {
        self.batch.push((index, outcome));
        if self.batch.len() >= SEND_BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = mem::replace(&mut self.batch, Vec::with_capacity(SEND_BATCH));
        if self.tx.send(batch).is_err() {
            // The caller has gone: nobody wants the rest.
            self.state.stop();
        }
    }
}

impl<T, E> Drop for Outbox<'_, T, E> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// What every thread of a scan works by.
pub(super) struct Shared<'s, I> {
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

/// Runs one thread of the scan until the input ends or the scan stops. Every entry it took
/// from the input gets an outcome, but for the one whose closure panicked.
///
/// # Errors
///
/// The reader could not be built, or failed as a whole (its ring); the scan stops then.
pub(super) fn run<'a, I, S, T, E>(
    shared: &Shared<'_, I>,
    init: &impl Fn() -> S,
    f: &impl Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E>,
    tx: &SyncSender<Batch<T, E>>,
) -> io::Result<ThreadEnd>
where
    I: Iterator,
    I::Item: Into<Entry<'a>>,
    E: From<io::Error>,
{
    let _stop = StopOnPanic(shared.state);
    let mut out = Outbox::new(tx, shared.state);
    let mut lane = Lane::new();
    let mut local = None;
    let result = loop {
        if shared.state.stopped() {
            break Ok(());
        }
        if let Err(e) = lane.top_up(shared) {
            break Err(e);
        }
        let Some(next) = lane.queued.front() else {
            break Ok(());
        };
        if let Some(window) = shared.window {
            // The caller may be waiting for what this thread gathered: sent first.
            if !shared.state.wait_turn(next.index, window, || out.flush()) {
                break Ok(());
            }
        }
        let (index, outcome, moved) = lane.run_next(shared, &mut local, init, f);
        out.push(index, outcome);
        if let Err(e) = moved {
            break Err(e);
        }
    };
    if result.is_err() {
        shared.state.stop();
    }
    lane.report_not_run(shared.state, &mut out);
    result.map(|()| lane.readers.end())
}

/// An entry of the window, queued into the reader.
struct Queued {
    index: usize,
    start: u64,
    len: Option<u64>,
    /// Its place in the reader's queue ([`SequentialFileReader::current_index`]).
    id: usize,
}

/// A thread's readers: the one it reads with, built on its first entry, and what those it
/// gave up on a hung read did.
struct Readers<'a> {
    current: Option<SequentialFileReader<'a>>,
    /// The counters and backend of the readers given up on a hung read.
    retired: Option<(Stats, Backend)>,
    /// How many readers were given up on a hung read.
    given_up: u32,
}

impl<'a> Readers<'a> {
    /// The bytes queued into the current reader, by the sizes it found when it opened its
    /// paths ahead, one page a path until then.
    fn queued_bytes(&self) -> u64 {
        self.current.as_ref().map_or(0, |r| r.queued_bytes())
    }

    /// The current reader, built the first time an entry is queued (a thread with nothing
    /// to read builds none).
    fn get(&mut self, builders: &Builders) -> io::Result<&mut SequentialFileReader<'a>> {
        if self.current.is_none() {
            self.current = Some(builders.build(self.given_up)?);
        }
        Ok(self.current.as_mut().expect("built above"))
    }

    /// The current reader, once an entry was queued into it.
    fn built(&mut self) -> &mut SequentialFileReader<'a> {
        self.current.as_mut().expect("an entry was queued into it")
    }

    /// Gives up the current reader, which gave up on a hung read (the kernel may keep its
    /// region of the pool for good, so that it would soon wait again), and queues the `left`
    /// files behind its current one into a new one. An error is the new reader's.
    fn replace(&mut self, builders: &Builders, left: usize) -> io::Result<()> {
        let old = self.current.take().expect("the reader that hung");
        let backend = old.backend();
        let (behind, stats) = old.abandon();
        builders.leave_behind()?;
        let retired = self.retired.get_or_insert((Stats::default(), backend));
        retired.0.add(&stats);
        self.given_up += 1;
        debug_assert_eq!(behind.len(), left, "the reader is in step");
        if behind.is_empty() {
            return Ok(()); // The next entry taken builds one.
        }
        let reader = self.get(builders)?;
        for file in behind {
            reader.requeue(file)?;
        }
        Ok(())
    }

    /// The counters and backend of its readers (those given up included), dropping them.
    fn end(self) -> ThreadEnd {
        let now = self.current.map(|r| (r.stats(), r.backend()));
        match (self.retired, now) {
            (Some((mut stats, _)), Some((last, backend))) => {
                stats.add(&last);
                Some((stats, backend))
            }
            (retired, now) => now.or(retired),
        }
    }
}

/// A thread's readers and its window of entries, in input order.
struct Lane<'a> {
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
    fn new() -> Self {
        Lane {
            readers: Readers {
                current: None,
                retired: None,
                given_up: 0,
            },
            queued: VecDeque::new(),
            batch: 1,
            taken: Vec::new(),
            ids: 0,
        }
    }

    /// Takes more entries and queues them once the window is down to half (of its files or
    /// of its bytes): a batch at a time, so that the cursor is locked once a batch.
    fn top_up<I>(&mut self, shared: &Shared<'_, I>) -> io::Result<()>
    where
        I: Iterator,
        I::Item: Into<Entry<'a>>,
    {
        let (ahead, bytes) = (shared.queue_ahead, shared.queue_bytes);
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
        shared.work.take(files, bytes - held, &mut taken);
        let result = self.queue_all(&mut taken, shared.builders);
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
    fn run_next<I, S, T, E>(
        &mut self,
        shared: &Shared<'_, I>,
        local: &mut Option<S>,
        init: &impl Fn() -> S,
        f: &impl Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E>,
    ) -> (usize, Outcome<T, E>, io::Result<()>)
    where
        E: From<io::Error>,
    {
        let state = shared.state;
        let q = self.queued.pop_front().expect("the caller saw an entry");
        let reader = self.readers.built();
        debug_assert_eq!(reader.current_index(), Some(q.id), "the reader is in step");
        // Opened first, so that the closure's handle knows the file's length. A file that
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
            self.replace_reader(shared.builders)
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
    fn report_not_run<T, E>(&mut self, state: &ScanState, out: &mut Outbox<'_, T, E>) {
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
    fn each_reader_given_up_adds_the_cap_again() {
        let workers = |b: ReaderBuilder, given_up| with_workers_for(b, given_up).io_workers;
        assert_eq!(workers(ReaderBuilder::new().io_workers(2), 0), Some(2));
        assert_eq!(workers(ReaderBuilder::new().io_workers(2), 2), Some(6));
        assert_eq!(workers(ReaderBuilder::new().io_workers(0), 2), Some(0));
        assert_eq!(workers(ReaderBuilder::new(), 2), None);
    }
}
