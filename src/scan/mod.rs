//! The parallel scan: many files over N readers on N threads, in one call.
//!
//! The top of the layers: it uses the reader through its public methods, and a few of the
//! crate's own (the bytes it holds queued, the current file's length and opening it first,
//! an entry's range queued exact), and the builder's pool size, to bound what a thread
//! queues. Each file holds one type, named for it:
//!
//! | file | type | job |
//! |---|---|---|
//! | `mod.rs` | [`Scan`] | the scan's settings |
//! | `map` | [`ScanMap`] | running the threads, the outcomes handed to the caller |
//! | `work` | `Work` | handing out work: the shared cursor over the caller's iterator |
//! | `worker` | `Worker`, `Lane` | one thread: the loop it runs, what every thread works by, and its window of queued entries (`Lane`), running the closure on each |
//! | `readers` | `Readers` | a thread's reader, and a new one past a hung read |
//! | `builders` | `Builders` | how the threads build their readers |
//! | `outbox` | `Outbox` | a thread's outcomes on their way to the caller |
//! | `file` | [`ScanFile`] | one file, as the closure reads it |
//! | `order` | [`Ordered`] | outcomes in input order, within a window |
//! | `stream` | `ScanStream` | the outcomes for a tokio task, as they finish (the `tokio` feature) |
//! | `outcome` | [`Outcome`] | what became of one file |
//! | `summary` | [`ScanSummary`] | what the scan did, once every thread has stopped |
//! | `progress` | [`ScanProgress`] | the counters, as the caller reads them |
//! | `handle` | [`ScanHandle`] | the caller's handle: progress, cancelling |
//! | `state` | `ScanState` | what the threads share: counters, stopping, the window's gate |
//! | `budget` | - | what the readers hold together: pool memory, buffered reads from the device, kernel workers, descriptors |

mod budget;
mod builders;
mod file;
mod handle;
mod map;
mod order;
mod outbox;
mod outcome;
mod progress;
mod readers;
mod state;
#[cfg(feature = "tokio")]
mod stream;
mod summary;
mod work;
mod worker;

use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::thread;
use std::time::Duration;

pub use budget::{DEFAULT_SCAN_IO_WORKERS, DEFAULT_SCAN_MEMORY};
pub use file::ScanFile;
pub use handle::ScanHandle;
pub use map::ScanMap;
pub use order::Ordered;
pub use outcome::Outcome;
pub use progress::ScanProgress;
#[cfg(feature = "tokio")]
pub use stream::ScanStream;
pub use summary::ScanSummary;

use crate::config::ReaderBuilder;
use crate::entry::Entry;

/// Entries each thread keeps queued in its reader ahead of the file it reads, by default.
pub const DEFAULT_QUEUE_AHEAD: usize = 256;

/// Reads many files on N threads, one [`SequentialFileReader`] each, and runs a closure on
/// every file: the whole job of a checksum tool or a startup scan in one call.
///
/// - **Input**: any iterator of [`Entry`]s (paths, `File`s, byte ranges of either, and
///   what converts into them), consumed lazily: a few at a time, never collected.
/// - **Threads**: [`threads`](Self::threads) of them, named `readahead-scan-N` (by default,
///   the available parallelism), each with a reader built from one [`ReaderBuilder`]
///   ([`reader`](Self::reader)). Entries are handed out in batches from one shared cursor
///   whenever a thread's window runs low: a thread's first batch is one entry, each next
///   twice as many, and it takes none while the bytes it knows it holds fill its pool
///   (a path's size is known once its reader opens it ahead): so a thread holds only a few
///   large files at a time. Where the input's length is known (a slice, a `Vec`), no batch
///   is more than half a thread's share of what is left; and while a thread's reader finds
///   the page cache warm (copying files as the closure reaches them), its window is cut to
///   its share of what is left, though not below 8 files: so the threads finish close
///   together. A thread that finds the input empty waits at most for what another holds
///   (its window, not the rest of the input). Each thread keeps a window of entries
///   ([`queue_ahead`](Self::queue_ahead)) queued in its reader, so its read-ahead runs into
///   the next files while the closure works on this one. Paths are opened only when the
///   read-ahead reaches them.
/// - **Budget**: whatever the number of threads, the readers' pools together take at most
///   [`memory`](Self::memory) (256 MiB by default); past two threads, each reader's
///   buffered reads from the device hold its share of 8 MiB of its pool, or one read where
///   that is more (the kernel's read-ahead keeps the device busy behind them), and each
///   reader keeps at most 64 of its files open (its builder's `max_open_files`, 128 by
///   default, with one or two threads); and each
///   thread starts at most [`io_workers`](Self::io_workers) + 1 io_uring kernel workers (3
///   by default).
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
///   stuck) fails its file with [`TimedOut`](std::io::ErrorKind::TimedOut), naming it, on both
///   backends. Opens (and sizing the file) and `pread` reads are made on helper threads
///   ([`crate::helper_threads`]), so none blocks a scan thread; opens started together time
///   out together, so ten hung opens cost about one timeout. After a hung read, its thread
///   gives its reader up (the pool leaked, and on io_uring the ring, counted in
///   [`crate::drains_abandoned`]) and queues the files behind into a new one, so every other
///   file keeps its outcome, and the call returns. The pools left behind count against
///   [`memory`](Self::memory) once more: past it, the scan stops with an error of kind
///   [`OutOfMemory`](std::io::ErrorKind::OutOfMemory) saying so. A thread whose io_uring read
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
    /// that converts into a [`Entry`]. Nothing is taken from them until the scan runs.
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
    ///
    /// Each thread's reader reads ahead on its own, so a thread a CPU keeps most devices
    /// busy. Threads past that gain little, and many more cost CPU of their own (each
    /// reader's ring, pool and kernel workers): the crate's BENCHMARKS.md has 8, 16 and 64
    /// threads against 2 on 2 CPUs.
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
    /// down to half of either. While its reader finds the page cache warm, the window is
    /// shorter near the input's end (see the type's docs).
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

    /// The most bytes the readers' pools take together: each thread's reader gets
    /// `bytes / threads` (at least 1 MiB), or the reader's own
    /// [`buffer_size`](ReaderBuilder::buffer_size) where that is less, and reads no larger
    /// than half its pool. Default [`DEFAULT_SCAN_MEMORY`], which leaves the readers of up to
    /// 8 threads their default pool of [`DEFAULT_BUFFER_SIZE`](crate::DEFAULT_BUFFER_SIZE),
    /// and gives each of 64 threads 4 MiB.
    ///
    /// The pools are most of what a scan holds: with `O_DIRECT` every byte of them is
    /// written (and pinned, with [`registered_buffers`](ReaderBuilder::registered_buffers)),
    /// while buffered reads of cold files touch only a few MiB of each.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let paths: Vec<_> = (0..4).map(|i| dir.path().join(i.to_string())).collect();
    /// # for p in &paths { std::fs::write(p, b"bytes")?; }
    /// let summary = readahead::Scan::new(&paths)
    ///     .threads(64)
    ///     .memory(128 << 20) // 2 MiB a thread
    ///     .map(|file| std::io::copy(file, &mut std::io::sink()))
    ///     .for_each(|_, _| {})?;
    /// assert_eq!(summary.progress.bytes, 20);
    /// # Ok(())
    /// # }
    /// ```
    pub fn memory(mut self, bytes: usize) -> Self {
        self.memory = bytes;
        self
    }

    /// The most io_uring kernel worker threads each thread's reader starts for reads and
    /// opens that would block ([`ReaderBuilder::io_workers`]: this many bounded ones, and one
    /// unbounded). Default [`DEFAULT_SCAN_IO_WORKERS`], unless the
    /// [`reader`](Self::reader)'s builder sets its own; 0: the kernel's own limit (up to 4
    /// per CPU for each thread, so thousands of threads for a scan on many cores).
    ///
    /// Each thread has workers of its own, so a scan may start `threads x (workers + 1)`
    /// of them. With [`sq_poll`](Self::sq_poll), the submission thread's workers serve every
    /// reader, and the cap is theirs: by default `threads x` [`DEFAULT_SCAN_IO_WORKERS`].
    /// A thread that gives up a reader on a hung read raises its cap by as many again for
    /// the next, since the hung read keeps its worker. Few are needed: reads of cold files and `O_DIRECT` reads go to the device
    /// without them where the filesystem allows (ext4, XFS, btrfs); opens of files whose
    /// directory entries are not cached, and filesystems that cannot read without
    /// blocking (FUSE, NFS), use them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let paths: Vec<_> = (0..4).map(|i| dir.path().join(i.to_string())).collect();
    /// # for p in &paths { std::fs::write(p, b"bytes")?; }
    /// // A slow network mount: more opens and reads waiting at once on each thread.
    /// let summary = readahead::Scan::new(&paths)
    ///     .io_workers(16)
    ///     .map(|file| std::io::copy(file, &mut std::io::sink()))
    ///     .for_each(|_, _| {})?;
    /// assert_eq!(summary.progress.files, 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn io_workers(mut self, workers: u32) -> Self {
        self.builder = self.builder.io_workers(workers);
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
        ScanMap::new(self, init, f)
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
