//! A scan with its closure, ready to run (`ScanMap`): running every thread, and handing the
//! outcomes to the caller as files finish or in input order.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, PoisonError};
use std::thread;

use super::builders::Builders;
use super::handle::ScanHandle;
use super::order::Ordered;
use super::outbox::Batch;
use super::outcome::Outcome;
use super::readers::ThreadEnd;
use super::state::{ScanState, StopOnPanic};
use super::summary::{summarize, ScanSummary};
use super::work::Work;
use super::worker::Worker;
use super::{budget, Scan, ScanFile};
use crate::entry::Entry;

/// Batches of outcomes on their way to the caller at most (each of up to 256 files), before
/// the threads wait for it.
const IN_TRANSIT: usize = 32;

/// A [`Scan`] with its closure, ready to run: [`for_each`](Self::for_each) takes the
/// outcomes as files finish, [`ordered`](Self::ordered) in input order. Made by
/// [`Scan::map`] or [`Scan::map_init`]; see [`Scan`'s examples](Scan#examples).
#[must_use = "a scan does nothing until .for_each(..) or .ordered(..)"]
pub struct ScanMap<'a, I, INIT, F> {
    scan: Scan<'a, I>,
    init: INIT,
    f: F,
}

impl<'a, I, INIT, F> ScanMap<'a, I, INIT, F> {
    /// `scan`, to run `f` on every file with each thread's state made by `init`.
    pub(super) fn new(scan: Scan<'a, I>, init: INIT, f: F) -> Self {
        ScanMap { scan, init, f }
    }

    /// A handle on the scan this runs, for a face of it that runs it elsewhere (`stream`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(super) fn handle(&self) -> ScanHandle {
        self.scan.handle.clone()
    }
}

impl<'a, I, INIT, F> ScanMap<'a, I, INIT, F>
where
    I: Iterator + Send,
    I::Item: Into<Entry<'a>>,
{
    /// Runs the scan, handing each file's outcome to `sink` on the caller's thread as files
    /// finish (not in input order), with the file's index in the input. Returns once every
    /// thread has stopped. A thread sends its outcomes a few dozen at a time (and whatever it
    /// has when it waits or ends), not one by one: so the caller's thread is woken once a
    /// batch, not once a file.
    ///
    /// # Errors
    ///
    /// A reader could not be built (its [`Error`](crate::Error), as an `io::Error`), or
    /// failed as a whole (its ring); the other threads stop before their next file. A file's
    /// error is never the scan's: it is that file's outcome.
    ///
    /// # Panics
    ///
    /// With the panic of a closure, or of `sink`, once every thread has stopped.
    pub fn for_each<S, T, E>(
        self,
        mut sink: impl FnMut(usize, Outcome<T, E>),
    ) -> io::Result<ScanSummary>
    where
        INIT: Fn() -> S + Sync,
        F: Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
        T: Send,
        E: From<io::Error> + Send,
    {
        let (_, summary) = self.run(None, |results, _| {
            for (index, outcome) in results.into_iter().flatten() {
                sink(index, outcome);
            }
        })?;
        Ok(summary)
    }

    /// Runs the scan, handing `consume` the outcomes as an iterator in input order
    /// ([`Ordered`]), while the threads run; returns what `consume` returns. Threads that get
    /// a [`window`](Scan::window) ahead of the last outcome handed out wait, so a slow file
    /// holds back at most a window of outcomes. If `consume` returns before the iterator's
    /// end, the scan stops.
    ///
    /// # Errors
    ///
    /// As [`for_each`](Self::for_each).
    ///
    /// # Panics
    ///
    /// As [`for_each`](Self::for_each), with `consume` for `sink`.
    pub fn ordered<S, T, E, R>(
        self,
        consume: impl FnOnce(Ordered<'_, T, E>) -> R,
    ) -> io::Result<(R, ScanSummary)>
    where
        INIT: Fn() -> S + Sync,
        F: Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
        T: Send,
        E: From<io::Error> + Send,
    {
        let threads = self.scan.thread_count();
        let window = (self.scan.window).unwrap_or_else(|| {
            self.scan
                .queue_ahead
                .saturating_mul(threads)
                .saturating_mul(4)
        });
        self.run(Some(window), |results, state| {
            consume(Ordered::new(results, state))
        })
    }

    /// Runs every thread inside one [`thread::scope`], and `consume` on the caller's thread
    /// over the outcomes they send; then waits for every thread's closure.
    fn run<S, T, E, R>(
        self,
        window: Option<usize>,
        consume: impl FnOnce(Receiver<Batch<T, E>>, &ScanState) -> R,
    ) -> io::Result<(R, ScanSummary)>
    where
        INIT: Fn() -> S + Sync,
        F: Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
        T: Send,
        E: From<io::Error> + Send,
    {
        let threads = self.scan.thread_count();
        let ScanMap { scan, init, f } = self;
        let work = Work::new(scan.entries, threads);
        let state = &*scan.handle.state;
        let base = budget::share(scan.builder, scan.memory, threads);
        budget::reserve_descriptors(&base, threads);
        let builders = Builders::new(base, scan.memory);
        let worker = Worker {
            work: &work,
            state,
            builders: &builders,
            queue_ahead: scan.queue_ahead,
            queue_bytes: 2 * builders.buffer_size() as u64,
            window,
        };
        let (tx, rx) = mpsc::sync_channel(IN_TRANSIT);
        let ends: Vec<End> = (0..threads).map(|_| Mutex::default()).collect();
        let out = thread::scope(|scope| {
            let mut spawned = Ok(());
            for (i, end) in ends.iter().enumerate() {
                let (tx, worker, init, f) = (tx.clone(), &worker, &init, &f);
                let run = move || {
                    let ran = panic::catch_unwind(AssertUnwindSafe(|| worker.run(init, f, &tx)));
                    *end.lock().unwrap_or_else(PoisonError::into_inner) = Some(ran);
                };
                // Never joined: a thread that submitted a read a hung mount never completes
                // cannot exit (Linux waits for its io_uring workers) once its closure has
                // returned. The scope waits for the closures alone; the `JoinHandle` is dropped.
                let named = thread::Builder::new().name(format!("readahead-scan-{i}"));
                if let Err(e) = named.spawn_scoped(scope, run) {
                    state.stop();
                    spawned = Err(e);
                    break;
                }
            }
            drop(tx);
            let stop_on_panic = StopOnPanic(state);
            let out = consume(rx, state);
            // Stops threads still at work if `consume` returned before the end.
            state.stop();
            drop(stop_on_panic);
            spawned.map(|()| out)
        });
        let ends = ends
            .into_iter()
            .filter_map(|end| end.into_inner().unwrap_or_else(PoisonError::into_inner));
        let summary = summarize(ends, &scan.handle)?;
        Ok((out?, summary))
    }
}

impl<I, INIT, F> std::fmt::Debug for ScanMap<'_, I, INIT, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanMap")
            .field("scan", &self.scan)
            .finish_non_exhaustive()
    }
}

/// Where a thread leaves what it came to (`None`: it never ran).
type End = Mutex<Option<thread::Result<io::Result<ThreadEnd>>>>;
