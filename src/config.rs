//! Configuration of a reader: the builder's settings and their validation. What builds a
//! reader from them is `reader` (`ReaderBuilder::build`), which picks the backend.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use crate::consts::{
    DEFAULT_BUFFER_SIZE, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_OPEN_FILES, DEFAULT_QUEUE_DEPTH,
    DEFAULT_READ_SIZE, DIRECT_ALIGN, MAX_READ_SIZE, PAGE,
};
use crate::error::Error;
use crate::io::Backend;

/// Builds a [`SequentialFileReader`](crate::SequentialFileReader) with settings other than
/// the defaults.
///
/// Setters take and return the builder by value, so settings chain; [`build`](Self::build)
/// checks them all at once.
///
/// # Examples
///
/// ```
/// use readahead::{Backend, SequentialFileReader};
///
/// # fn main() -> Result<(), readahead::Error> {
/// let reader = SequentialFileReader::builder()
///     .buffer_size(8 << 20)
///     .read_size(256 << 10)
///     .backend(Backend::Auto)
///     .build()?;
/// assert_ne!(reader.backend(), Backend::Auto);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[must_use = "a builder does nothing until .build() is called"]
pub struct ReaderBuilder {
    pub(crate) buffer_size: usize,
    pub(crate) read_size: usize,
    pub(crate) direct_io: bool,
    /// `None`: register where it pays, with `direct_io`.
    pub(crate) registered_buffers: Option<bool>,
    pub(crate) backend: Backend,
    pub(crate) queue_depth: u32,
    pub(crate) max_open_files: usize,
    pub(crate) io_workers: Option<u32>,
    pub(crate) drain_timeout: Duration,
    pub(crate) offload: bool,
    pub(crate) uncached: bool,
    /// Uncached reads dropped behind even where `RWF_DONTCACHE` is taken (see
    /// `uncached_fallback`).
    pub(crate) uncached_fallback: bool,
    /// How long an idle submission thread polls before it sleeps, where there is one.
    pub(crate) sq_poll: Option<Duration>,
    /// The ring whose submission thread this reader's ring shares, where it does.
    pub(crate) sq_poll_ring: Option<SharedRing>,
    /// The pool bytes buffered reads from the device may hold (`COLD_WINDOW` where `None`):
    /// less for each of a scan's many readers (see `scan::budget`).
    pub(crate) cold_window: Option<usize>,
}

/// A reader's ring, kept open (a descriptor of its own, as a `File`) for rings set up later
/// to share its submission thread. Builders holding the same one are equal.
#[derive(Clone, Debug)]
pub(crate) struct SharedRing(pub(crate) Arc<File>);

impl PartialEq for SharedRing {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedRing {}

/// The settings a caller makes, by the names of their methods; a shared submission thread
/// as whether there is one. What only a scan sets for its readers is left out.
impl std::fmt::Debug for ReaderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderBuilder")
            .field("buffer_size", &self.buffer_size)
            .field("read_size", &self.read_size)
            .field("direct_io", &self.direct_io)
            .field("registered_buffers", &self.registered_buffers)
            .field("backend", &self.backend)
            .field("queue_depth", &self.queue_depth)
            .field("max_open_files", &self.max_open_files)
            .field("io_workers", &self.io_workers)
            .field("drain_timeout", &self.drain_timeout)
            .field("offload", &self.offload)
            .field("uncached", &self.uncached)
            .field("sq_poll", &self.sq_poll)
            .field("sq_poll_shared", &self.sq_poll_ring.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ReaderBuilder {
    fn default() -> Self {
        ReaderBuilder {
            buffer_size: DEFAULT_BUFFER_SIZE,
            read_size: DEFAULT_READ_SIZE,
            direct_io: false,
            registered_buffers: None,
            backend: Backend::Auto,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            max_open_files: DEFAULT_MAX_OPEN_FILES,
            io_workers: None,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            offload: false,
            uncached: false,
            uncached_fallback: false,
            sq_poll: None,
            sq_poll_ring: None,
            cold_window: None,
        }
    }
}

impl ReaderBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The size in bytes of the whole buffer pool: all read-ahead, across files, lives in it.
    ///
    /// Default [`DEFAULT_BUFFER_SIZE`]. Any size but 0 works: the pool is rounded up to whole
    /// pages (4 KiB; every read takes whole pages of it) and to at least one read of
    /// [`read_size`](Self::read_size), so `buffer_size(1024).read_size(512)` makes a pool of
    /// 4096 bytes. [`SequentialFileReader::capacity`](crate::SequentialFileReader::capacity)
    /// says what it is, as does the reader's `Debug`. A pool that holds one read at a time
    /// reads one read at a time: give it room for many (the default holds 64) to read ahead.
    pub fn buffer_size(mut self, bytes: usize) -> Self {
        self.buffer_size = bytes;
        self
    }

    /// The largest single read, in bytes, at least a page (4 KiB: a smaller size is taken as
    /// 4 KiB). A file smaller than this takes only what it needs.
    ///
    /// Default [`DEFAULT_READ_SIZE`]. With [`direct_io`](Self::direct_io) it is rounded up to
    /// a multiple of 4 KiB, and so are the reads of a file that [`uncached`](Self::uncached)
    /// reads `O_DIRECT`.
    pub fn read_size(mut self, bytes: usize) -> Self {
        self.read_size = bytes;
        self
    }

    /// Read with `O_DIRECT`, bypassing the page cache. Default off.
    ///
    /// Applies to queued paths and to files handed in (which are reopened with `O_DIRECT`
    /// through `/proc/self/fd`). Where the filesystem refuses `O_DIRECT` (tmpfs, for one), the
    /// file is read buffered instead, without error.
    ///
    /// Elsewhere: `O_DIRECT` on FreeBSD (files handed in are read buffered there), and
    /// `fcntl(F_NOCACHE)` on macOS (files handed in are reopened at the path `F_GETPATH`
    /// reports). Ignored on other platforms, Windows included.
    pub fn direct_io(mut self, on: bool) -> Self {
        self.direct_io = on;
        self
    }

    /// Register the pool with the ring (`IORING_REGISTER_BUFFERS`, Linux 5.1) so reads use
    /// `READ_FIXED` and pages are pinned once, not per read.
    ///
    /// Default: on with [`direct_io`](Self::direct_io), where every read would otherwise pin
    /// its pages; off without, since buffered reads copy from the page cache and gain nothing,
    /// while registering pins the whole pool up front (BENCHMARKS.md). Where registration is refused (`RLIMIT_MEMLOCK` too low), plain reads are
    /// used, without error. Ignored by [`Backend::Pread`].
    pub fn registered_buffers(mut self, on: bool) -> Self {
        self.registered_buffers = Some(on);
        self
    }

    /// Which backend to use. Default [`Backend::Auto`].
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The most reads in flight at once (the ring's size). Default [`DEFAULT_QUEUE_DEPTH`];
    /// between 1 and 4096.
    pub fn queue_depth(mut self, depth: u32) -> Self {
        self.queue_depth = depth;
        self
    }

    /// The most queued paths the reader keeps open at once (and duplicates of borrowed files:
    /// see [`add_file_to_prefetch`](crate::SequentialFileReader::add_file_to_prefetch)).
    /// Default [`DEFAULT_MAX_OPEN_FILES`]; at least 1. Paths are opened only as the read-ahead
    /// reaches them, so any number can be queued whatever `ulimit -n` is. Files done with
    /// count until closed: on Linux, up to 32 of them wait to be closed together (one system
    /// call for many), and are closed at once where they would hold the reader at this cap.
    /// While reads find the page cache warm (on Linux, where the reader can tell), it holds
    /// at most 64, or this cap where lower (a file opened further ahead of its copy has left
    /// the CPU's cache when it is read); while they go to the device, up to this cap, so that
    /// more files' directory and inode reads overlap.
    pub fn max_open_files(mut self, files: usize) -> Self {
        self.max_open_files = files;
        self
    }

    /// The most io_uring kernel worker threads for the reads and opens of files that cannot
    /// be done without blocking (bounded workers, `IORING_REGISTER_IOWQ_MAX_WORKERS`, Linux
    /// 5.15), plus one for reads of anything else (a pipe: unbounded workers). Default, and 0:
    /// the kernel's own limits, as many bounded workers as the ring's entries or 4 per CPU,
    /// whichever is fewer. A [`Scan`](crate::Scan) caps its readers' by default (see
    /// [`Scan::io_workers`](crate::Scan::io_workers)).
    ///
    /// The kernel keeps the limit for the thread that builds the reader (its workers serve
    /// all of its rings), until another ring of that thread sets it again. Ignored where the
    /// kernel lacks it, by [`Backend::Pread`], and off Linux.
    ///
    /// ```
    /// let reader = readahead::SequentialFileReader::builder().io_workers(2).build()?;
    /// # Ok::<(), readahead::Error>(())
    /// ```
    pub fn io_workers(mut self, workers: u32) -> Self {
        self.io_workers = Some(workers);
        self
    }

    /// Whether io_uring's kernel workers copy large reads of files in the page cache
    /// (`IOSQE_ASYNC`), so that the copy overlaps the caller's work on the bytes before them.
    /// Default `false`: every copy out of the page cache is made on the caller's thread, into
    /// the region it has just consumed, as `BufReader` does, for the least CPU time per byte.
    ///
    /// `true` pays where one reader's caller does more work per byte than a copy (a hash) and
    /// a CPU is idle for the workers: a hash over cached files runs faster with them, for
    /// more CPU time in all (wake-ups, and the bytes landing in another CPU's cache). Where
    /// the caller's work costs about what a copy does (a fast hash on a CPU with wide
    /// vectors), it loses: measure with your own consumer (`scan --compare`). Where every
    /// CPU already runs a reader, as in a [`Scan`](crate::Scan) with a thread per CPU, the
    /// workers only take time from the other readers: leave it off. BENCHMARKS.md has the
    /// figures. Ignored by [`Backend::Pread`] and off Linux.
    ///
    /// ```
    /// let reader = readahead::SequentialFileReader::builder().offload(true).build()?;
    /// # Ok::<(), readahead::Error>(())
    /// ```
    pub fn offload(mut self, on: bool) -> Self {
        self.offload = on;
        self
    }

    /// Leave the page cache as the reader found it: read through the page cache, but drop
    /// the pages the reader's own reads brought in, while pages that were cached before stay
    /// cached. For a scan that reads a data set once (a startup check, a backup, a checksum
    /// run) without evicting what the rest of the system keeps in memory. Default `false`.
    ///
    /// Each file goes one of three ways, decided at its first read:
    /// - **No page of it cached** (one `cachestat`, asked while reads are not being found
    ///   cached): it is read with `O_DIRECT` (turned on for the reader's descriptor), which
    ///   brings no page in and, at the read-ahead's depth, is faster and cheaper than any read
    ///   through the page cache. Only where the filesystem takes `O_DIRECT`, and where the
    ///   reader has a descriptor of its own: a path it opened, or a file handed in on a
    ///   filesystem known local, opened again through `/proc/self/fd` (the caller's open file
    ///   description, which a duplicate shares, keeps its flags). Pages a filesystem caches
    ///   all the same (btrfs inline or compressed extents) are dropped once the file's reads
    ///   are done.
    /// - **Otherwise**, its reads carry `RWF_DONTCACHE` (Linux 6.14 and filesystems that
    ///   support it: ext4, XFS, among others), so the kernel drops the pages they bring in
    ///   once copied, with no alignment rules; what was cached is copied as without it.
    /// - **Where the filesystem refuses the flag** (older kernels, btrfs, FUSE, many network
    ///   filesystems), the read is sent again without it, the filesystem is remembered for
    ///   the process, and the pages of the reads that did not find their pages cached are
    ///   dropped with `posix_fadvise(POSIX_FADV_DONTNEED)` once read into the pool; where a
    ///   read cannot tell, its pages stay.
    ///
    /// [`Stats`](crate::Stats) say which way each file went
    /// ([`files_direct`](crate::Stats::files_direct),
    /// [`files_uncached`](crate::Stats::files_uncached),
    /// [`files_dropped_behind`](crate::Stats::files_dropped_behind)).
    ///
    /// With [`direct_io`](Self::direct_io) it changes nothing (`O_DIRECT` bypasses the cache
    /// already; a file whose filesystem refuses `O_DIRECT` is read buffered, as without this).
    /// Ignored off Linux.
    ///
    /// ```
    /// let reader = readahead::SequentialFileReader::builder().uncached(true).build()?;
    /// # Ok::<(), readahead::Error>(())
    /// ```
    pub fn uncached(mut self, on: bool) -> Self {
        self.uncached = on;
        self
    }

    /// With [`uncached`](Self::uncached): every file read as on a filesystem that refuses
    /// both `RWF_DONTCACHE` and `O_DIRECT` (buffered, its reads' pages dropped behind), so
    /// that the fallback can be measured where they are taken. Only with the feature
    /// `measure-fallbacks`, which the crate's own tests and benchmarks turn on: not a stable
    /// part of the API.
    #[cfg(feature = "measure-fallbacks")]
    #[doc(hidden)]
    pub fn uncached_fallback(mut self, on: bool) -> Self {
        self.uncached_fallback = on;
        self
    }

    /// A kernel thread that takes the ring's reads off its submission queue as they are
    /// queued (`IORING_SETUP_SQPOLL`, Linux 5.11 without privileges), so submitting costs no
    /// system call; it polls for `idle` after the last read before it sleeps. Default: none,
    /// the reader submits with `io_uring_enter` itself. Where the kernel refuses it, the ring
    /// is set up without it, without error. Ignored by [`Backend::Pread`] and off Linux.
    ///
    /// Each such thread takes a CPU while it polls: for several readers, share one
    /// ([`sq_poll_shared_with`](Self::sq_poll_shared_with), or the scan's
    /// [`sq_poll`](crate::Scan::sq_poll)). The crate's BENCHMARKS.md has what it measured.
    pub fn sq_poll(mut self, idle: Duration) -> Self {
        self.sq_poll = Some(idle);
        self
    }

    /// The longest a reader waits for the kernel: for a file's open (and its size), for a
    /// read it needs while reading, and, when it is dropped,
    /// [`rebind`](crate::SequentialFileReader::rebind)ed or
    /// [`close`](crate::SequentialFileReader::close)d, for the reads it has in flight to
    /// come back once cancelled. Default [`DEFAULT_DRAIN_TIMEOUT`]; more than 0.
    /// [`Duration::MAX`] waits as long as they take.
    ///
    /// Opens, and the `pread` backend's reads, are made on helper threads (see
    /// [`helper_threads`](crate::helper_threads)), so that one a hung mount never answers
    /// blocks a helper thread, not the caller (a path in a directory where a file was
    /// already found on a local filesystem opens on the caller's thread): an open that has
    /// not returned after this long fails its file with an error of kind
    /// [`TimedOut`](std::io::ErrorKind::TimedOut) naming it, and the reader goes on with the
    /// next. Opens started together time out together.
    ///
    /// The kernel writes into the reader's buffer pool until each read's completion is
    /// reaped, so the pool cannot be freed before. A read of a hung device or mount (an NFS
    /// server gone, a FUSE daemon stuck) may never complete, and cancelling does not end it:
    /// after this long the reader gives up, and leaks its pool and its ring (kept mapped and
    /// open, never freed) rather than free memory the kernel may still write into. Each time
    /// is counted, for the whole process, in [`drains_abandoned`](crate::drains_abandoned);
    /// `close` returns it as an error of kind [`TimedOut`](std::io::ErrorKind::TimedOut).
    /// The kernel keeps waiting for the read: the thread that submitted it cannot exit before
    /// it completes (Linux waits for the thread's io_uring workers when it exits).
    ///
    /// It bounds the reader's waits for the current file's bytes too: where no read
    /// completes for this long, that file fails with an error of kind `TimedOut` naming it,
    /// and the read is left in flight. It keeps its region of the pool until it completes,
    /// so reading on soon waits for it again: drop the reader and build another, as a
    /// [`Scan`](crate::Scan) does for its thread (keeping the other files' outcomes).
    ///
    /// On io_uring the bound needs `IORING_FEAT_EXT_ARG` (Linux 5.11): on older kernels the
    /// wait for a read is not bounded. With [`Backend::Pread`] a read waited for this long is
    /// given up the same way: the helper thread that makes it keeps its region of the pool.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// The settings, checked, with the read size aligned and the pool's size rounded up.
    pub(crate) fn validate(mut self) -> Result<ReaderBuilder, Error> {
        check(&self)?;
        // A read of less than a page costs a read a few bytes: at least a page, as the
        // pool's regions are (`Debug` shows the size taken).
        self.read_size = self.read_size.max(crate::consts::PAGE);
        if self.direct_io {
            self.read_size = self.read_size.next_multiple_of(DIRECT_ALIGN);
        }
        self.buffer_size = pool_size(self.buffer_size, self.read_size);
        Ok(self)
    }
}

/// Refuses the first setting that cannot work, saying why. The settings are checked as
/// given, before `validate` aligns the read size and rounds the pool up.
fn check(b: &ReaderBuilder) -> Result<(), Error> {
    let refuse = |what, why: String| Err(Error::InvalidConfig { what, why });
    if b.read_size == 0 {
        return refuse(
            "read_size",
            "0 bytes cannot hold a read; use at least 1 (a size below 4096 is taken as 4096)"
                .into(),
        );
    }
    if b.read_size > MAX_READ_SIZE {
        let read = b.read_size;
        let why =
            format!("{read} bytes is more than the largest read this crate makes; use at most {MAX_READ_SIZE}");
        return refuse("read_size", why);
    }
    if b.buffer_size == 0 {
        return refuse(
            "buffer_size",
            "0 bytes cannot hold a read; use at least 1".into(),
        );
    }
    if b.buffer_size > isize::MAX as usize / 2 {
        let why = format!(
            "{} bytes is too large to allocate; use at most {}",
            b.buffer_size,
            isize::MAX as usize / 2
        );
        return refuse("buffer_size", why);
    }
    if !(1..=4096).contains(&b.queue_depth) {
        return refuse(
            "queue_depth",
            format!("{} is outside 1..=4096", b.queue_depth),
        );
    }
    if b.max_open_files == 0 {
        let why = "0 would never open a queued path; use at least 1";
        return refuse("max_open_files", why.into());
    }
    if b.drain_timeout.is_zero() {
        let why = "0 would leak the pool of every reader dropped with a read in flight; use at least a few seconds";
        return refuse("drain_timeout", why.into());
    }
    Ok(())
}

/// The pool for `buffer_size` and reads of up to `read_size` bytes: whole pages (every
/// region of the pool is), and room for at least one read.
fn pool_size(buffer_size: usize, read_size: usize) -> usize {
    buffer_size.max(read_size).next_multiple_of(PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(b: ReaderBuilder) -> String {
        b.validate().unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_valid() {
        let _ = ReaderBuilder::new().validate().unwrap();
    }

    #[test]
    fn zero_sizes_are_refused_and_named() {
        assert!(err(ReaderBuilder::new().buffer_size(0)).contains("buffer_size"));
        assert!(err(ReaderBuilder::new().read_size(0)).contains("read_size"));
        assert!(err(ReaderBuilder::new().queue_depth(0)).contains("queue_depth"));
        assert!(err(ReaderBuilder::new().max_open_files(0)).contains("max_open_files"));
        assert!(err(ReaderBuilder::new().drain_timeout(Duration::ZERO)).contains("drain_timeout"));
    }

    #[test]
    fn the_pool_is_rounded_up_to_pages_and_one_read() {
        let pool = |buffer, read| {
            let b = ReaderBuilder::new().buffer_size(buffer).read_size(read);
            b.validate().unwrap().buffer_size
        };
        assert_eq!(pool(1, 1), PAGE);
        assert_eq!(pool(1024, 512), PAGE);
        assert_eq!(pool(PAGE, PAGE + 1), 2 * PAGE);
        assert_eq!(pool(3 * PAGE - 1, PAGE), 3 * PAGE);
        assert_eq!(pool(8 * PAGE, PAGE), 8 * PAGE);
    }

    #[test]
    fn direct_io_rounds_read_size() {
        let b = ReaderBuilder::new()
            .direct_io(true)
            .read_size(5000)
            .validate()
            .unwrap();
        assert_eq!(b.read_size, 8192);
    }
}
