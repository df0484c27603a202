//! The public reader: queuing, activation, moving on, the record API. `build()`, which picks
//! the backend, is in `build`; `Read` and `BufRead` are in `std_io`.

mod build;
mod for_scan;
mod std_io;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::config::ReaderBuilder;
use crate::consts::Backend;
use crate::engine::Engine;
use crate::error::Error;
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
/// middle of a scan. `'a` is the lifetime of the files borrowed with
/// [`add_file_to_prefetch`](Self::add_file_to_prefetch); a reader that borrows none is
/// `'static`.
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
/// counts it in [`Stats::drains_abandoned`]. [`close`](Self::close) does the same and says
/// whether it had to. With [`Backend::Pread`] nothing is in flight when the reader is dropped
/// (it reads on the caller's thread), so dropping it never waits.
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
///     reader.add_path_to_prefetch(path)?;
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
    pub fn new() -> Result<Self, Error> {
        ReaderBuilder::new().build()
    }

    /// A builder, to set the pool size, read size, backend and more.
    pub fn builder() -> ReaderBuilder {
        ReaderBuilder::new()
    }

    /// Queues a file the caller keeps open, to read up to `read_limit` bytes of it from its
    /// start (`u64::MAX`: all of it). It becomes current if the queue was empty; its reads
    /// start at once where the pipeline has room.
    ///
    /// The reader reads it through a duplicate of its descriptor, made when the read-ahead
    /// reaches it and closed once its reads are done (counted against
    /// [`max_open_files`](ReaderBuilder::max_open_files)): the kernel may look a read's
    /// descriptor up only when it starts it, and so a reader leaked with
    /// [`mem::forget`](std::mem::forget) never reads whatever file takes the number after the
    /// caller closes `file`. Where the process has no descriptor left for the duplicate, the
    /// file's error says so, as for a path that cannot be opened.
    ///
    /// A regular file or a block device. The reader reads at explicit offsets and never
    /// moves the file's position, not even for a moment (but on Windows, whose positional
    /// reads, `seek_read`, move it): a block device is sized by asking the device
    /// (`BLKGETSIZE64` on Linux), not by seeking to its end. Where the platform has no such
    /// question (Unixes but Linux, FreeBSD and macOS), a block device is that file's error.
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting reads; the file is then not queued (it is queued
    /// and `Ok`, or not queued and `Err`). A file that cannot be read (a pipe, say) gets its
    /// error when it is read, naming it.
    pub fn add_file_to_prefetch(&mut self, file: &'a File, read_limit: u64) -> io::Result<()> {
        self.engine.push(Source::Borrowed(file), 0, read_limit)
    }

    /// Queues a file the reader takes ownership of (and closes once it is done with it).
    ///
    /// # Errors
    ///
    /// As [`add_file_to_prefetch`](Self::add_file_to_prefetch).
    pub fn add_owned_file_to_prefetch(&mut self, file: File, read_limit: u64) -> io::Result<()> {
        self.engine
            .push(Source::Owned(Arc::new(file)), 0, read_limit)
    }

    /// Queues a path, to read all of it. It is opened (read-only, close-on-exec, `O_NOATIME`
    /// where permitted) only when the read-ahead reaches it, so any number can be queued.
    ///
    /// `O_NOATIME` (Linux) keeps a scan from writing access times. The kernel refuses it for
    /// files the process does not own: the file is then opened without it, and so are the
    /// reader's later files, rather than each trying it again.
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting reads; the path is then not queued. A path that
    /// cannot be opened or read gets its error when it is read: the error names the path,
    /// and [`move_to_next_file`](Self::move_to_next_file) goes on to the next file.
    pub fn add_path_to_prefetch(&mut self, path: impl AsRef<Path>) -> io::Result<()> {
        self.add_path_range_to_prefetch(path, 0, u64::MAX)
    }

    /// Queues `len` bytes of a path from byte `start` (`len = u64::MAX`: to its end), for
    /// files whose data ends before their size (preallocated storage files, whose length
    /// lives in an index). The range ends early, without error, where the file does.
    ///
    /// The current file's [`file_offset`](Self::file_offset) counts from the file's byte 0,
    /// so it starts at `start`. Only the range is read (with [`direct_io`], from `start`
    /// aligned down to 4 KiB).
    ///
    /// [`direct_io`]: ReaderBuilder::direct_io
    ///
    /// # Errors
    ///
    /// As [`add_path_to_prefetch`](Self::add_path_to_prefetch).
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
    /// # std::fs::write(&path, b"header:payload:padding")?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.add_path_range_to_prefetch(&path, 7, 7)?;
    /// assert_eq!(reader.file_offset(), 7);
    /// let mut payload = String::new();
    /// reader.read_to_string(&mut payload)?;
    /// assert_eq!(payload, "payload");
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_path_range_to_prefetch(
        &mut self,
        path: impl AsRef<Path>,
        start: u64,
        len: u64,
    ) -> io::Result<()> {
        self.engine
            .push(Source::Path(path.as_ref().into()), start, len)
    }

    /// Queues `len` bytes of a file the caller keeps open, from byte `start`; see
    /// [`add_path_range_to_prefetch`](Self::add_path_range_to_prefetch) and
    /// [`add_file_to_prefetch`](Self::add_file_to_prefetch).
    ///
    /// # Errors
    ///
    /// As [`add_file_to_prefetch`](Self::add_file_to_prefetch).
    pub fn add_file_range_to_prefetch(
        &mut self,
        file: &'a File,
        start: u64,
        len: u64,
    ) -> io::Result<()> {
        self.engine.push(Source::Borrowed(file), start, len)
    }

    /// Queues `len` bytes of a file the reader takes ownership of, from byte `start`; see
    /// [`add_path_range_to_prefetch`](Self::add_path_range_to_prefetch).
    ///
    /// # Errors
    ///
    /// As [`add_file_to_prefetch`](Self::add_file_to_prefetch).
    pub fn add_owned_file_range_to_prefetch(
        &mut self,
        file: File,
        start: u64,
        len: u64,
    ) -> io::Result<()> {
        self.engine.push(Source::Owned(Arc::new(file)), start, len)
    }

    /// Makes `(file, read_limit)` the current file.
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
    pub fn file_offset(&self) -> u64 {
        self.engine.file_offset()
    }

    /// At least `n` contiguous bytes of the current file, or every byte left in it when fewer
    /// remain: `len() < n` means the file ends first (a record torn by the end), `&[]` that
    /// it has ended. Never fewer than `n` because of a failure: where the file fails before
    /// `n` bytes, the answer is the file's error (the bytes before the failure still come out
    /// of [`fill_buf`](std::io::BufRead::fill_buf), then the error again).
    ///
    /// For parsers of records: ask for a header, read the record's length from it, then ask
    /// for the whole record and [`consume`](std::io::BufRead::consume) it. The bytes are returned in
    /// place, without copying, when they lie in adjacent regions of the pool (consecutive
    /// reads of one file do, but at the pool's end); otherwise they are copied once into a
    /// buffer the reader keeps (counted in [`Stats::bytes_spilled`]). It waits only for the
    /// reads it needs, and never crosses into the next file. `consume` accepts up to the
    /// length returned.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `n` is more than the pool holds
    /// ([`capacity`](Self::capacity)): the reader goes on, and a smaller `n` works. The
    /// current file's error where it fails before `n` bytes, as
    /// [`fill_buf`](std::io::BufRead::fill_buf) returns it.
    ///
    /// # Examples
    ///
    /// Records of an 8-byte little-endian length and that many bytes. A parser meets three
    /// cases: a whole record; a record torn by the end of the file (fewer bytes than asked);
    /// and an error, which `?` passes on (it is never a short answer):
    ///
    /// ```
    /// use std::io::{self, BufRead};
    /// use readahead::SequentialFileReader;
    ///
    /// fn bodies(reader: &mut SequentialFileReader<'_>) -> io::Result<Vec<Vec<u8>>> {
    ///     let mut bodies = Vec::new();
    ///     loop {
    ///         let header = reader.fill_buf_at_least(8)?; // an error: the file's, named
    ///         if header.is_empty() {
    ///             return Ok(bodies); // the end of the file, between records
    ///         }
    ///         let len = match header.get(..8) {
    ///             Some(h) => u64::from_le_bytes(h.try_into().unwrap()) as usize,
    ///             None => return Err(torn(reader)), // the file ends inside a header
    ///         };
    ///         let record = reader.fill_buf_at_least(8 + len)?;
    ///         if record.len() < 8 + len {
    ///             return Err(torn(reader)); // the file ends inside a record
    ///         }
    ///         bodies.push(record[8..8 + len].to_vec()); // a whole record
    ///         reader.consume(8 + len);
    ///     }
    /// }
    ///
    /// fn torn(reader: &SequentialFileReader<'_>) -> io::Error {
    ///     let at = reader.file_offset();
    ///     io::Error::new(io::ErrorKind::UnexpectedEof, format!("a record torn at {at}"))
    /// }
    ///
    /// # fn main() -> io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("records");
    /// # let mut data = Vec::new();
    /// # for body in [&b"one"[..], b"three", b""] {
    /// #     data.extend_from_slice(&(body.len() as u64).to_le_bytes());
    /// #     data.extend_from_slice(body);
    /// # }
    /// # std::fs::write(&path, &data)?;
    /// # let torn_path = dir.path().join("torn");
    /// # std::fs::write(&torn_path, &data[..data.len() - 10])?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.add_path_to_prefetch(&path)?;
    /// reader.add_path_to_prefetch(&torn_path)?;
    /// assert_eq!(bodies(&mut reader)?, [&b"one"[..], b"three", b""]);
    /// reader.move_to_next_file()?;
    /// let err = bodies(&mut reader).unwrap_err();
    /// assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        self.engine.fill_buf_at_least(n)
    }

    /// Skips `n` bytes of the current file from the next byte [`fill_buf`](std::io::BufRead::fill_buf)
    /// would return; returns how many were skipped: fewer only at the file's end or limit
    /// (`0` at its end). A skip never passes a failure for an end: where the file is known to
    /// fail inside the `n` bytes, the answer is its error, and nothing is skipped (skipping
    /// up to the failure works, and reading there gives the error).
    ///
    /// What is skipped is not read: regions wholly inside the range are freed unread, reads
    /// in flight for it are cancelled or their bytes dropped, and reads not yet issued for it
    /// never are (the file's next read starts past it, aligned down for `O_DIRECT`).
    /// [`file_offset`](Self::file_offset) moves on by the count returned.
    ///
    /// # Errors
    ///
    /// The current file's error (it cannot be opened, or it failed inside the `n` bytes),
    /// naming it.
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
    /// # std::fs::write(&path, b"header:payload")?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.add_path_to_prefetch(&path)?;
    /// assert_eq!(reader.skip(7)?, 7);
    /// let mut rest = String::new();
    /// reader.read_to_string(&mut rest)?;
    /// assert_eq!(rest, "payload");
    /// assert_eq!(reader.skip(100)?, 0, "at the end");
    /// # Ok(())
    /// # }
    /// ```
    pub fn skip(&mut self, n: u64) -> io::Result<u64> {
        self.engine.skip(n)
    }

    /// The current file's path, when it was queued by path
    /// ([`add_path_to_prefetch`](Self::add_path_to_prefetch)); `None` for a file queued as a
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
    /// reader.add_path_to_prefetch(dir.path().join("missing"))?;
    /// reader.add_path_to_prefetch(&good)?;
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
    /// [`activate_file`](Self::activate_file) queues anew gets the next position.
    pub fn current_index(&self) -> Option<u64> {
        self.engine.current_index()
    }

    /// Drops every queued file (cancelling their reads and waiting for them) and returns the
    /// same reader, free to borrow files of a new lifetime: the ring, the pool and its
    /// registration are kept, not set up again. A half-read file is dropped; the reader
    /// behaves as new, but for [`stats`](Self::stats), which carry on.
    ///
    /// # Errors
    ///
    /// As [`close`](Self::close): where the reads in flight do not all come back within
    /// [`ReaderBuilder::drain_timeout`], or the ring fails while waiting, the reader is
    /// dropped, its pool and ring leaked rather than freed under the kernel, and the error
    /// says so. Unlike `close`, file errors nobody read are not returned: they are dropped
    /// with their files (read each file to its end, or its error, first if they matter).
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
    /// pool and ring freed.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] for the operation `drain`, whose source is of kind
    /// [`TimedOut`](io::ErrorKind::TimedOut) where reads were still in flight after
    /// [`ReaderBuilder::drain_timeout`] (a hung device or mount): the pool and ring are then
    /// leaked, not freed, and [`Stats::drains_abandoned`] counts it. Any other kind where the
    /// ring failed while waiting (leaked the same way where reads were left in flight).
    ///
    /// Otherwise, the first file error nobody read: of a file the reader moved past (or
    /// dropped) before its error was returned by any call, else of a queued file that
    /// failed and was not read yet; naming the file, as reading it would have. A clean
    /// shutdown of a reader whose every error was seen is `Ok`.
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
    /// reader.add_path_to_prefetch(&path)?;
    /// let mut head = [0; 16];
    /// reader.read_exact(&mut head)?;
    /// reader.close()?; // the rest of the file is still being read ahead: cancelled
    /// # Ok(())
    /// # }
    /// ```
    pub fn close(self) -> io::Result<()> {
        self.engine.close()
    }

    /// The backend in use: [`Backend::IoUring`] or [`Backend::Pread`], never `Auto`.
    pub fn backend(&self) -> Backend {
        self.engine.backend()
    }

    /// Counters of what the reader has done.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }
}

impl std::fmt::Debug for SequentialFileReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.engine.fmt(f)
    }
}
