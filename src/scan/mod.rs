//! The parallel scan: many files over N readers on N threads, in one call.
//!
//! The top of the layers: it uses the reader through its public methods, and a few of the
//! crate's own (the bytes it holds queued, the current file's length and opening it first,
//! an entry's range queued exact), and the builder's pool size, to bound what a thread
//! queues. Its work is split by concern:
//!
//! | file | job |
//! |---|---|
//! | `work` | handing out work: the shared cursor over the caller's iterator |
//! | `worker` | one thread: its reader, its window of queued entries, running the closure |
//! | `file` | the closure's handle on one file ([`ScanFile`]) |
//! | `order` | outcomes in input order, within a window ([`Ordered`]) |
//! | `stream` | the outcomes for a tokio task (`ScanStream`, the `tokio` feature) |
//! | `control` | progress counters, cancelling, and the window's gate ([`ScanHandle`]) |
//! | `budget` | what the readers hold together: pool memory, kernel workers, descriptors |

mod budget;
mod control;
mod file;
mod order;
mod outcome;
#[cfg(feature = "tokio")]
mod stream;
mod summary;
mod work;
mod worker;

use std::io;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::Duration;

pub use budget::{DEFAULT_SCAN_IO_WORKERS, DEFAULT_SCAN_MEMORY};
pub use control::{Progress, ScanHandle};
pub use file::ScanFile;
pub use order::Ordered;
pub use outcome::Outcome;
#[cfg(feature = "tokio")]
pub use stream::ScanStream;
use summary::summarize;
pub use summary::ScanSummary;

use control::{ScanState, StopOnPanic};
use work::Work;
use worker::{Batch, Builders, Shared, ThreadEnd};

use crate::config::ReaderBuilder;
use crate::entry::Entry;

/// Entries each thread keeps queued in its reader ahead of the file it reads, by default.
pub const DEFAULT_QUEUE_AHEAD: usize = 256;
/// Batches of outcomes on their way to the caller at most (each of up to 32 files), before
/// the threads wait for it.
const IN_TRANSIT: usize = 32;

/// Reads many files on N threads, one [`SequentialFileReader`] each, and runs a closure on
/// every file: the whole job of a checksum tool or a startup scan in one call.
///
/// - **Input**: any iterator of [`Entry`]s (paths, `File`s, byte ranges of either, and what
///   converts into them), consumed lazily: a few at a time, never collected.
/// - **Threads**: [`threads`](Self::threads) of them, named `readahead-scan-N` (by default,
///   the available parallelism), each with a reader built from one [`ReaderBuilder`]
///   ([`reader`](Self::reader)). Entries are handed out in batches from one shared cursor
///   whenever a thread's window runs low: a thread's first batch is one entry, each next
///   twice as many, and it takes none while the bytes it knows it holds fill its pool
///   (a path's size is known once its reader opens it ahead). So a thread holds only a few
///   large files at a time, and a thread that finds the input empty waits at most for what
///   another holds (its window, not the rest of the input). Each thread keeps a window of entries
///   ([`queue_ahead`](Self::queue_ahead)) queued in its reader, so its read-ahead runs into
///   the next files while the closure works on this one. Paths are opened only when the
///   read-ahead reaches them.
/// - **Budget**: whatever the number of threads, the readers' pools together take at most
///   [`memory`](Self::memory) (256 MiB by default), and each thread starts at most
///   [`io_workers`](Self::io_workers) + 1 io_uring kernel workers (3 by default).
/// - **Per file**: the closure of [`map`](Self::map) (or [`map_init`](Self::map_init), with
///   state of its own per thread) gets a [`ScanFile`] (`BufRead`, `Read`,
///   `fill_buf_at_least`, `skip`, its path, index and length) and returns a value or an
///   error. Outcomes come to the caller's thread, keyed by input index:
///   [`for_each`](ScanMap::for_each) as files finish, [`ordered`](ScanMap::ordered) in input
///   order.
/// - **Errors**: a file that cannot be opened or read fails alone, with an error naming it
///   (the reader's), which the closure returns with `?`; the scan goes on. A panic in the
///   closure stops the scan: the other threads stop before their next file, every thread's
///   closure is waited for, and the panic is raised again on the caller's thread, as
///   [`std::thread::scope`] does.
/// - **Hung mounts**: an open, or a read, the kernel has not completed after the reader's
///   [`drain_timeout`](ReaderBuilder::drain_timeout) (an NFS server gone, a FUSE daemon
///   stuck) fails its file with [`TimedOut`](io::ErrorKind::TimedOut), naming it, on both
///   backends. Opens (and sizing the file) and `pread` reads are made on helper threads
///   ([`crate::helper_threads`]), so none blocks a scan thread; opens started together time
///   out together, so ten hung opens cost about one timeout. After a hung read, its thread
///   gives its reader up (the pool leaked, and on io_uring the ring, counted in
///   [`crate::drains_abandoned`]) and queues the files behind into a new one, so every other
///   file keeps its outcome, and the call returns. The pools left behind count against
///   [`memory`](Self::memory) once more: past it, the scan stops with an error of kind
///   [`OutOfMemory`](io::ErrorKind::OutOfMemory) saying so. A thread whose io_uring read
///   the kernel still holds cannot exit (Linux waits for its workers): the scan waits for
///   its closure, not for the thread, which exits once the read ends.
/// - **Progress and cancelling**: a [`ScanHandle`] ([`handle`](Self::handle)) reads the
///   counters while the scan runs and cancels it from any thread; files taken from the input
///   but not started are reported as [`Outcome::NotRun`].
///
/// # Examples
///
/// A checksum tool: every file hashed, the lines printed in the order of the arguments (the
/// hashes computed on all cores, at most a window of them held back for the order):
///
/// ```
/// use std::io;
/// use readahead::{Outcome, Scan};
///
/// # fn main() -> io::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let mut paths: Vec<_> = (0..5).map(|i| dir.path().join(format!("{i}.bin"))).collect();
/// # for (i, p) in paths.iter().enumerate() { std::fs::write(p, vec![i as u8; 1000 * i])?; }
/// # paths.insert(2, dir.path().join("missing"));
/// let (failed, _summary) = Scan::new(&paths)
///     .map(|file| {
///         let mut hasher = blake3::Hasher::new();
///         io::copy(file, &mut hasher)?;
///         io::Result::Ok(hasher.finalize())
///     })
///     .ordered(|outcomes| {
///         let mut failed = 0;
///         for (index, outcome) in outcomes {
///             match outcome {
///                 Outcome::Done(hash) => println!("{hash}  {}", paths[index].display()),
///                 Outcome::Failed(e) => {
///                     eprintln!("{e}"); // "cannot open .../missing: No such file ..."
///                     failed += 1;
///                 }
///                 Outcome::NotRun => {}
///             }
///         }
///         failed
///     })?;
/// assert_eq!(failed, 1);
/// # Ok(())
/// # }
/// ```
///
/// A startup scan of record files (an 8-byte little-endian length, then that many bytes),
/// each record taken in place with `fill_buf_at_least` and hashed with a hasher each thread
/// keeps; a file that does not parse fails alone:
///
/// ```
/// use std::io::{self, BufRead};
/// use readahead::{Outcome, Scan, ScanFile};
///
/// fn records(hasher: &mut blake3::Hasher, file: &mut ScanFile) -> io::Result<u64> {
///     let mut count = 0;
///     loop {
///         let header = file.fill_buf_at_least(8)?;
///         if header.is_empty() {
///             return Ok(count);
///         }
///         let len = match header.get(..8) {
///             Some(len) => u64::from_le_bytes(len.try_into().unwrap()) as usize,
///             None => return Err(io::Error::other("a header cut short")),
///         };
///         let record = file.fill_buf_at_least(8 + len)?;
///         if record.len() < 8 + len {
///             return Err(io::Error::other("a record runs past the end"));
///         }
///         hasher.update(&record[8..8 + len]);
///         file.consume(8 + len);
///         count += 1;
///     }
/// }
///
/// # fn main() -> io::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let mut paths = Vec::new();
/// # for i in 0..4u64 {
/// #     let mut data = Vec::new();
/// #     for _ in 0..=i { data.extend_from_slice(&3u64.to_le_bytes()); data.extend_from_slice(b"abc"); }
/// #     if i == 3 { data.extend_from_slice(&99u64.to_le_bytes()); }
/// #     let path = dir.path().join(i.to_string());
/// #     std::fs::write(&path, data)?;
/// #     paths.push(path);
/// # }
/// let (mut total, mut failed) = (0, Vec::new());
/// let summary = Scan::new(&paths)
///     .threads(2)
///     .map_init(blake3::Hasher::new, records)
///     .for_each(|index, outcome| match outcome {
///         Outcome::Done(count) => total += count,
///         Outcome::Failed(e) => failed.push((index, e.to_string())),
///         Outcome::NotRun => {}
///     })?;
/// assert_eq!(total, 1 + 2 + 3);
/// assert_eq!(failed, [(3, "a record runs past the end".to_string())]);
/// assert_eq!(summary.progress.files, 4);
/// # Ok(())
/// # }
/// ```
///
/// [`SequentialFileReader`]: crate::SequentialFileReader
#[must_use = "a scan does nothing until .map(..).for_each(..) or .ordered(..)"]
pub struct Scan<'a, I> {
    entries: I,
    builder: ReaderBuilder,
    threads: Option<NonZeroUsize>,
    memory: usize,
    queue_ahead: usize,
    window: Option<usize>,
    handle: ScanHandle,
    _entries: PhantomData<fn() -> Entry<'a>>,
}

impl<'a, I> Scan<'a, I>
where
    I: Iterator,
    I::Item: Into<Entry<'a>>,
{
    /// A scan of `entries`, in their order: paths, `File`s, [`Entry`]s, or anything else
    /// that converts into an [`Entry`]. Nothing is taken from them until the scan runs.
    pub fn new(entries: impl IntoIterator<IntoIter = I>) -> Self {
        Scan {
            entries: entries.into_iter(),
            builder: ReaderBuilder::new(),
            threads: None,
            memory: DEFAULT_SCAN_MEMORY,
            queue_ahead: DEFAULT_QUEUE_AHEAD,
            window: None,
            handle: ScanHandle::default(),
            _entries: PhantomData,
        }
    }

    /// The number of threads, each with a reader of its own; 0 (and the default): the
    /// available parallelism ([`std::thread::available_parallelism`]). A thread that gets no
    /// entry builds no reader.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = NonZeroUsize::new(threads);
        self
    }

    /// The settings of every thread's reader (each is built from a clone), within the
    /// scan's budget: each reader's pool is lowered, where needed, to its share of the
    /// scan's [`memory`](Self::memory), its kernel workers capped
    /// ([`io_workers`](Self::io_workers)), and its
    /// [`max_open_files`](ReaderBuilder::max_open_files) lowered to its share of half the
    /// descriptors the process may open (`ulimit -n`), so that the readers together never
    /// take them all. Where it asks for a submission thread
    /// ([`ReaderBuilder::sq_poll`]), the readers share one (see [`sq_poll`](Self::sq_poll)).
    pub fn reader(mut self, builder: ReaderBuilder) -> Self {
        self.builder = builder;
        self
    }

    /// Entries each thread keeps queued in its reader (the file being read included), so
    /// that the read-ahead crosses into the files after it; also bounded by twice the bytes
    /// of the reader's pool, for entries whose size is known. Default
    /// [`DEFAULT_QUEUE_AHEAD`]; at least 1. A thread takes more from the input once it is
    /// down to half of either.
    pub fn queue_ahead(mut self, files: usize) -> Self {
        self.queue_ahead = files.max(1);
        self
    }

    /// For [`ordered`](ScanMap::ordered): how far past the last outcome handed out a thread
    /// may start a file, so that at most this many outcomes wait for those before them.
    /// Default: 4 windows of [`queue_ahead`](Self::queue_ahead) a thread; at least 1.
    pub fn window(mut self, files: usize) -> Self {
        self.window = Some(files.max(1));
        self
    }

    /// One kernel submission thread for every thread's reader, polling for `idle` after the
    /// last read before it sleeps ([`ReaderBuilder::sq_poll`], the others attached with
    /// [`ReaderBuilder::sq_poll_shared_with`]): submitting then costs no system call, and the
    /// threads share one poller rather than each having its own. Default: none; the
    /// crate's BENCHMARKS.md has what it measured against a ring each.
    pub fn sq_poll(mut self, idle: Duration) -> Self {
        self.builder = self.builder.sq_poll(idle);
        self
    }

    /// A handle to watch the scan's progress and to cancel it, from any thread.
    pub fn handle(&self) -> ScanHandle {
        self.handle.clone()
    }

    /// Runs `f` on every file: its value is the file's [`Outcome::Done`], its error the
    /// file's [`Outcome::Failed`]. `E` takes the reader's errors (`From<io::Error>`), so that
    /// `?` passes a file's open or read error on.
    // The closure's type cannot be named, so the type is spelled out in full.
    #[allow(clippy::type_complexity)]
    pub fn map<T, E, F>(
        self,
        f: F,
    ) -> ScanMap<'a, I, fn(), impl Fn(&mut (), &mut ScanFile<'_, 'a>) -> Result<T, E> + Sync>
    where
        F: Fn(&mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
    {
        self.map_init(
            no_state as fn(),
            move |(): &mut (), file: &mut ScanFile<'_, 'a>| f(file),
        )
    }

    /// As [`map`](Self::map), with state of each thread's own, made by `init` on the thread
    /// before its first file and handed to `f` with every file (a hasher, a buffer), as
    /// rayon's `map_init`.
    pub fn map_init<S, T, E, INIT, F>(self, init: INIT, f: F) -> ScanMap<'a, I, INIT, F>
    where
        INIT: Fn() -> S + Sync,
        F: Fn(&mut S, &mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
    {
        ScanMap {
            scan: self,
            init,
            f,
        }
    }

    fn thread_count(&self) -> usize {
        self.threads
            .or_else(|| thread::available_parallelism().ok())
            .map_or(1, NonZeroUsize::get)
    }
}

fn no_state() {}

impl<I> std::fmt::Debug for Scan<'_, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("threads", &self.threads)
            .field("memory", &self.memory)
            .field("queue_ahead", &self.queue_ahead)
            .field("window", &self.window)
            .field("reader", &self.builder)
            .finish_non_exhaustive()
    }
}

/// A [`Scan`] with its closure, ready to run: [`for_each`](Self::for_each) takes the
/// outcomes as files finish, [`ordered`](Self::ordered) in input order.
#[must_use = "a scan does nothing until .for_each(..) or .ordered(..)"]
pub struct ScanMap<'a, I, INIT, F> {
    scan: Scan<'a, I>,
    init: INIT,
    f: F,
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
        let work = Work::new(scan.entries);
        let state = &*scan.handle.state;
        let base = budget::share(scan.builder, scan.memory, threads);
        let builders = Builders::new(base, scan.memory);
        let shared = Shared {
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
                let (tx, shared, init, f) = (tx.clone(), &shared, &init, &f);
                let run = move || {
                    let ran =
                        panic::catch_unwind(AssertUnwindSafe(|| worker::run(shared, init, f, &tx)));
                    *end.lock().unwrap_or_else(PoisonError::into_inner) = Some(ran);
                };
                // Never joined: a thread that submitted a read a hung mount never completes
                // cannot exit (Linux waits for its io_uring workers) once its closure has
                // returned. The scope waits for the closures alone; the handle is dropped.
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
