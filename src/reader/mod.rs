//! The public reader: queuing, activation, moving on, shutting down. `build()`, which picks
//! the backend, is in `build`; `Read` and `BufRead` are in `std_io`; the record API in
//! `records`.

mod build;
#[cfg(feature = "tokio")]
mod for_async;
mod for_scan;
mod records;
mod std_io;

use std::fs::File;
use std::io;
use std::path::Path;

use crate::config::ReaderBuilder;
use crate::engine::Engine;
use crate::entry::Entry;
use crate::error::Error;
use crate::io::Backend;
use crate::source::Source;
use crate::stats::Stats;

/// Reads a FIFO of files front to back, reading ahead across file boundaries.
///
/// The current file is the front of the queue. [`fill_buf`](std::io::BufRead::fill_buf) and
/// [`read`](std::io::Read::read) return bytes of the current file only, and `&[]`/`0` at its end until
/// [`move_to_next_file`](Self::move_to_next_file) or [`activate_file`](Self::activate_file);
/// nothing bleeds over from the next file.
///
/// # Ends and errors
///
/// Every way out of a file answers from one state of that file, the same on both backends:
/// it is read to its end, or to where it failed. **An error is never an end of file**: the
/// bytes before a failure come out, then the error (naming the file, the operation and the
/// offset), and it sticks until [`move_to_next_file`](Self::move_to_next_file) or
/// [`activate_file`](Self::activate_file). So `fill_buf` returning `&[]`, `read` returning 0,
/// and [`fill_buf_at_least(n)`](Self::fill_buf_at_least) or [`skip(n)`](Self::skip) answering
/// with fewer than `n` bytes all mean one thing: the file ends there. A file that ends before
/// the size it had when it was opened (cut while queued) ends where its reads end, as std's
/// reads do; a parser sees the record torn there.
///
/// `SequentialFileReader<'a>` is `Send`: it may move to another thread between calls, in the
/// middle of a scan. `'a` is the lifetime of the files and paths it borrows (`&file` with
/// [`add_file_to_prefetch`](Self::add_file_to_prefetch) or [`push`](Self::push), `&path` with
/// `push`); a reader that borrows none (paths and files handed over) is `'static`.
///
/// # Several readers
///
/// For many files on many cores, run a reader per thread: [`Scan`](crate::Scan) does it,
/// handing each file to whichever thread is free. Readers know nothing of each other: each
/// reads by the same fixed policy, whatever else runs in the process. A file found in the
/// page cache is copied on the caller's thread, as `BufReader` would; files that go to the
/// device are read ahead, with depth (ARCHITECTURE.md, "The read policy", has it whole).
/// One reader whose caller does heavy work per byte may hand its copies to the kernel's
/// workers instead: [`ReaderBuilder::offload`].
///
/// # Dropping
///
/// Dropping the reader cancels the reads it has in flight and waits for each to come back
/// before it frees its buffer pool, since the kernel writes into the pool until then. A read
/// of a hung device or mount may never come back: after
/// [`ReaderBuilder::drain_timeout`] (30 s by default) the drop gives up and returns, leaking
/// the pool and the ring rather than freeing memory the kernel may still write into, and
/// counts it in [`drains_abandoned`](crate::drains_abandoned). [`close`](Self::close) does the
/// same and says whether it had to. With [`Backend::Pread`] the reads in flight are those of
/// its helper threads, waited for the same way.
///
/// Files on a filesystem that may hang (FUSE, NFS, SMB, any not known to be local) are
/// closed on a helper thread, never waited for: a close there can block for good. So such a
/// file may be still closing a moment after the drop returns, and an unmount right then may
/// fail with `EBUSY`. While a reader lives it also holds a directory open in each mount it
/// opened files in (so that it never takes another mount for one it checked), which keeps them
/// busy too, as do up to 32 files done with that wait to be closed together (see
/// [`max_open_files`](ReaderBuilder::max_open_files)).
///
/// # Examples
///
/// Hash every file of a list, one after another:
///
/// ```
/// use std::io::Read;
/// use readahead::SequentialFileReader;
///
/// # fn main() -> std::io::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let paths: Vec<_> = (0..3).map(|i| dir.path().join(i.to_string())).collect();
/// # for (i, p) in paths.iter().enumerate() { std::fs::write(p, vec![i as u8; 1000 * i])?; }
/// let mut reader = SequentialFileReader::new()?;
/// for path in &paths {
///     reader.push(path)?;
/// }
/// let mut sizes = Vec::new();
/// let mut bytes = Vec::new();
/// loop {
///     bytes.clear();
///     reader.read_to_end(&mut bytes)?;
///     sizes.push(bytes.len());
///     if !reader.move_to_next_file()? {
///         break;
///     }
/// }
/// assert_eq!(sizes, [0, 1000, 2000]);
/// # Ok(())
/// # }
/// ```
pub struct SequentialFileReader<'a> {
    engine: Engine<'a>,
}

impl<'a> SequentialFileReader<'a> {
    /// A reader with every setting at its default (see [`ReaderBuilder`]).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] if the pool cannot be allocated. Where io_uring is refused, the
    /// reader falls back to plain reads rather than fail.
    ///
    /// # Examples
    ///
    /// See the [type's](Self#examples).
    pub fn new() -> Result<Self, Error> {
        ReaderBuilder::new().build()
    }

    /// A builder, to set the pool size, read size, backend and more.
    ///
    /// # Examples
    ///
    /// See [`ReaderBuilder`].
    pub fn builder() -> ReaderBuilder {
        ReaderBuilder::new()
    }

    /// Queues a file: a path borrowed for `'a` (`&path`, as `&file` is) or taken over
    /// (`path`), a `File` borrowed (`&file`) or taken over (`file`), whole or a byte range
    /// of it ([`Entry`] has them all). It becomes current if the queue
    /// was empty; its reads start at once where the pipeline has room.
    ///
    /// A path is opened (read-only, close-on-exec, `O_NOATIME` where permitted) only when
    /// the read-ahead reaches it, so any number can be queued. `O_NOATIME` (Linux) keeps a
    /// scan from writing access times; the kernel refuses it for files the process does not
    /// own, and the reader then opens that file and its later ones without it. A `File` is
    /// read as [`add_file_to_prefetch`](Self::add_file_to_prefetch) says; one taken over is
    /// closed once the reader is done with it.
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting reads; the file is then not queued (it is queued
    /// and `Ok`, or not queued and `Err`). A file that cannot be opened or read gets its
    /// error when it is read, naming it, and [`move_to_next_file`](Self::move_to_next_file)
    /// goes on to the next file.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::fs::File;
    /// use std::io::Read;
    /// use readahead::{Entry, SequentialFileReader};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("f");
    /// # std::fs::write(&path, b"header:payload")?;
    /// let kept = File::open(&path)?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(&path)?; // a path the caller keeps, opened when the read-ahead reaches it
    /// reader.push(&kept)?; // a file the caller keeps open
    /// reader.push(File::open(&path)?)?; // a file the reader closes when done
    /// reader.push(Entry::from(&path).range(7..))?; // all but the header
    /// let mut texts = Vec::new();
    /// loop {
    ///     let mut text = String::new();
    ///     reader.read_to_string(&mut text)?;
    ///     texts.push(text);
    ///     if !reader.move_to_next_file()? {
    ///         break;
    ///     }
    /// }
    /// assert_eq!(texts, ["header:payload", "header:payload", "header:payload", "payload"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn push(&mut self, entry: impl Into<Entry<'a>>) -> io::Result<()> {
        let (source, start, len, exact) = entry.into().into_parts();
        self.engine.push_range(source, start, len, exact)
    }

    /// Queues a file the caller keeps open, to read up to `read_limit` bytes of it from its
    /// start, `u64::MAX` meaning all of it: the call of Agave's reader, kept as it is.
    /// [`push`](Self::push) queues the same with `push(&file)` (all of it) or
    /// `push(Entry::file(&file).range(..read_limit))`. It becomes current if the queue was
    /// empty; its reads start at once where the pipeline has room.
    ///
    /// The reader reads it through a duplicate of its descriptor, made when the read-ahead
    /// reaches it and closed once its reads are done (on Linux with others, as
    /// [`max_open_files`](ReaderBuilder::max_open_files) says, counted against it): the
    /// kernel may look a read's descriptor up only when it starts it, and so a reader
    /// leaked with [`mem::forget`](std::mem::forget) never reads whatever file takes the
    /// number after the caller closes `file`. Where the process has no descriptor left for
    /// the duplicate, the file's error says so, as for a path that cannot be opened.
    ///
    /// A regular file or a block device. The reader reads at explicit offsets and never
    /// moves the file's position, not even for a moment (but on Windows, whose positional
    /// reads, `seek_read`, move it): a block device is sized by asking the device
    /// (`BLKGETSIZE64` on Linux), not by seeking to its end. Where the platform has no such
    /// question (Unixes but Linux, FreeBSD and macOS), a block device is that file's error.
    ///
    /// # Errors
    ///
    /// As [`push`](Self::push).
    ///
    /// # Examples
    ///
    /// See [`rebind`](Self::rebind).
    pub fn add_file_to_prefetch(&mut self, file: &'a File, read_limit: u64) -> io::Result<()> {
        self.engine
            .push_range(Source::Borrowed(file), 0, read_limit, false)
    }

    /// Makes `(file, read_limit)` the current file (`read_limit` as in
    /// [`add_file_to_prefetch`](Self::add_file_to_prefetch)).
    ///
    /// - Queued files ahead of it are dropped.
    /// - If it is at the front and untouched, what was read ahead for it is used.
    /// - If it was partly read, or failed, it is read again from byte 0 (its error is
    ///   forgotten: reading it again may succeed); the files queued behind it keep what was
    ///   read ahead for them.
    /// - If it is not queued, the queue is emptied and it is queued alone.
    ///
    /// A queued file is identified by its descriptor plus its limit.
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::fs::File;
    /// use std::io::Read;
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    /// # std::fs::write(&a, b"first")?;
    /// # std::fs::write(&b, b"second")?;
    /// let (a, b) = (File::open(&a)?, File::open(&b)?);
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.add_file_to_prefetch(&a, u64::MAX)?;
    /// reader.add_file_to_prefetch(&b, u64::MAX)?;
    /// reader.activate_file(&b, u64::MAX)?; // `a` is dropped; `b` keeps its read-ahead
    /// let mut text = String::new();
    /// reader.read_to_string(&mut text)?;
    /// assert_eq!(text, "second");
    /// # Ok(())
    /// # }
    /// ```
    pub fn activate_file(&mut self, file: &'a File, read_limit: u64) -> io::Result<()> {
        self.engine.activate(file, read_limit)
    }

    /// Drops the rest of the current file, without waiting to read it, and returns whether
    /// another file is now current. Whatever the current file's state (read to its end, part
    /// read, failed), it is dropped; its error, if nobody read it, goes with it.
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting the next reads. A bad next file is not an error
    /// here: its error comes when it is read.
    pub fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.engine.move_to_next_file()
    }

    /// The offset in the current file of the next byte `read` returns (0 with no file).
    #[inline]
    pub fn file_offset(&self) -> u64 {
        self.engine.file_offset()
    }

    /// The current file's path, when it was queued by path
    /// ([`push`](Self::push)); `None` for a file queued as a
    /// `File`, or with no current file. For saying which file failed:
    ///
    /// ```
    /// use std::io::Read;
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let good = dir.path().join("good");
    /// # std::fs::write(&good, b"bytes")?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(dir.path().join("missing"))?;
    /// reader.push(&good)?;
    /// let mut failed = Vec::new();
    /// loop {
    ///     if reader.read_to_end(&mut Vec::new()).is_err() {
    ///         failed.push(reader.current_path().unwrap().to_path_buf());
    ///     }
    ///     if !reader.move_to_next_file()? {
    ///         break;
    ///     }
    /// }
    /// assert_eq!(failed, [dir.path().join("missing")]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn current_path(&self) -> Option<&Path> {
        self.engine.current_path()
    }

    /// The current file's position among all files queued since the reader was built or
    /// rebound (0 for the first), or `None` when no file is current. A file that
    /// [`activate_file`](Self::activate_file) queues anew gets the next position. The same
    /// count as a scan's [`ScanFile::index`](crate::ScanFile::index), for a reader of its own.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// let mut reader = readahead::SequentialFileReader::new()?;
    /// assert_eq!(reader.current_index(), None);
    /// reader.push("a.bin")?;
    /// reader.push("b.bin")?;
    /// assert_eq!(reader.current_index(), Some(0));
    /// reader.move_to_next_file()?;
    /// assert_eq!(reader.current_index(), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn current_index(&self) -> Option<usize> {
        // Positions count files queued in memory, so they fit in `usize`.
        self.engine.current_index().map(|i| i as usize)
    }

    /// Drops every queued file (cancelling their reads and waiting for them) and returns the
    /// same reader, free to borrow files and paths of a new lifetime: the ring, the pool and its
    /// registration are kept, not set up again. A half-read file is dropped; the reader
    /// behaves as new, but for [`stats`](Self::stats), which carry on.
    ///
    /// # Errors
    ///
    /// As [`close`](Self::close): where the reads in flight do not all come back within
    /// [`ReaderBuilder::drain_timeout`], or the ring fails while waiting, the reader is
    /// dropped, its pool and ring leaked rather than freed under the kernel, and the error
    /// says so. File errors nobody read are dropped with their files (see
    /// [`take_unread_error`](Self::take_unread_error)).
    ///
    /// # Examples
    ///
    /// Batches of borrowed files, one reader:
    ///
    /// ```
    /// use std::fs::File;
    /// use std::io::Read;
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let paths: Vec<_> = (0..4).map(|i| dir.path().join(i.to_string())).collect();
    /// # for p in &paths { std::fs::write(p, b"abc")?; }
    /// let mut reader = SequentialFileReader::new()?;
    /// for batch in paths.chunks(2) {
    ///     let files = batch.iter().map(File::open).collect::<Result<Vec<_>, _>>()?;
    ///     let mut r = reader.rebind()?;
    ///     for f in &files {
    ///         r.add_file_to_prefetch(f, u64::MAX)?;
    ///     }
    ///     loop {
    ///         assert_eq!(r.read_to_end(&mut Vec::new())?, 3);
    ///         if !r.move_to_next_file()? {
    ///             break;
    ///         }
    ///     }
    ///     reader = r.rebind()?; // ends the borrow of `files`
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn rebind<'b>(self) -> io::Result<SequentialFileReader<'b>> {
        Ok(SequentialFileReader {
            engine: self.engine.rebind()?,
        })
    }

    /// The size in bytes of the buffer pool: [`ReaderBuilder::buffer_size`] rounded up to
    /// whole pages and to at least one read. The most bytes
    /// [`fill_buf_at_least`](Self::fill_buf_at_least) can be asked for.
    ///
    /// # Examples
    ///
    /// ```
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> Result<(), readahead::Error> {
    /// let reader = SequentialFileReader::builder()
    ///     .buffer_size(1024)
    ///     .read_size(512)
    ///     .build()?;
    /// assert_eq!(reader.capacity(), 4096); // one page
    /// # Ok(())
    /// # }
    /// ```
    pub fn capacity(&self) -> usize {
        self.engine.capacity()
    }

    /// Shuts the reader down, as dropping it does, and says whether that went cleanly: the
    /// reads in flight are cancelled and waited for (see [Dropping](Self#dropping)), and the
    /// pool and ring freed. File errors nobody read are dropped with their files: take them
    /// first with [`take_unread_error`](Self::take_unread_error) where they matter.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] for the operation `drain`, whose source is of kind
    /// [`TimedOut`](io::ErrorKind::TimedOut) where reads were still in flight after
    /// [`ReaderBuilder::drain_timeout`] (a hung device or mount): the pool and ring are then
    /// leaked, not freed, and [`drains_abandoned`](crate::drains_abandoned) counts it. Any
    /// other kind where the ring failed while waiting (leaked the same way where reads were
    /// left in flight).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("f");
    /// # std::fs::write(&path, vec![7; 1 << 20])?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(&path)?;
    /// let mut head = [0; 16];
    /// reader.read_exact(&mut head)?;
    /// reader.close()?; // the rest of the file is still being read ahead: cancelled
    /// # Ok(())
    /// # }
    /// ```
    pub fn close(self) -> io::Result<()> {
        self.engine.close()
    }

    /// Takes the first file error nobody read: of a file the reader moved past (or
    /// [`activate_file`](Self::activate_file) dropped) after it failed but before any call
    /// returned its error, else of a queued file that failed and was not read yet; naming
    /// the file, as reading it would have. `None` where every error known so far was seen (a
    /// file moved past while its open or read was still in flight goes without one). Each
    /// error is taken once; a queued file whose error is taken still returns it when read.
    ///
    /// For a caller that moves past files without reading each to its end: ask before
    /// [`close`](Self::close), [`rebind`](Self::rebind) or a drop, which drop such errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// // A directory handed in fails as it is queued first: its failure is known before the
    /// // move (a path is opened on a helper thread, and may not be by then).
    /// let directory = std::fs::File::open(dir.path())?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(&directory)?;
    /// reader.move_to_next_file()?; // moved past, its error never read
    /// let err = reader.take_unread_error().expect("the directory's error");
    /// assert!(err.to_string().contains(&*dir.path().to_string_lossy()));
    /// assert!(reader.take_unread_error().is_none(), "taken");
    /// reader.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn take_unread_error(&mut self) -> Option<io::Error> {
        self.engine.take_unread_error()
    }

    /// The backend in use: [`Backend::IoUring`] or [`Backend::Pread`], never `Auto`.
    ///
    /// # Examples
    ///
    /// ```
    /// use readahead::{Backend, SequentialFileReader};
    ///
    /// # fn main() -> Result<(), readahead::Error> {
    /// let reader = SequentialFileReader::builder().backend(Backend::Pread).build()?;
    /// assert_eq!(reader.backend(), Backend::Pread);
    /// # Ok(())
    /// # }
    /// ```
    pub fn backend(&self) -> Backend {
        self.engine.backend()
    }

    /// Whether the reader's latest read that could tell found its bytes in the page cache:
    /// most files are then copied as the caller reaches them rather than read ahead.
    pub(crate) fn cache_warm(&self) -> bool {
        self.engine.cache_warm()
    }

    /// Counters of what the reader has done.
    ///
    /// # Examples
    ///
    /// See [`Stats`].
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }
}

impl std::fmt::Debug for SequentialFileReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.engine.fmt(f)
    }
}
