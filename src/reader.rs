//! The public reader: `Read`, `BufRead`, queuing, activation, moving on; and `build()`,
//! which picks the backend.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::Path;
use std::sync::Arc;

use crate::backend::sync::SyncIo;
use crate::backend::{self, RingConfig};
use crate::config::ReaderBuilder;
use crate::consts::{Backend, OFFLOAD_DEPTH, SMALL_WINDOW, WARM_WINDOW};
use crate::engine::{Engine, Limits, READERS};
use crate::error::Error;
use crate::io::Io;
use crate::pool::Pool;
use crate::source::Source;
use crate::stats::Stats;

impl ReaderBuilder {
    /// Checks the settings and builds the reader.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a setting that cannot work (it says which and why),
    /// [`Error::IoUringUnavailable`] for [`Backend::IoUring`] where the kernel refuses it, or
    /// anywhere but Linux,
    /// [`Error::OutOfMemory`] if the pool cannot be allocated.
    pub fn build<'a>(self) -> Result<SequentialFileReader<'a>, Error> {
        let config = self.validate()?;
        SequentialFileReader::from_config(config)
    }
}

/// Reads a FIFO of files front to back, reading ahead across file boundaries.
///
/// The current file is the front of the queue. [`fill_buf`](BufRead::fill_buf) and
/// [`read`](Read::read) return bytes of the current file only, and `&[]`/`0` at its end until
/// [`move_to_next_file`](Self::move_to_next_file) or [`activate_file`](Self::activate_file);
/// nothing bleeds over from the next file.
///
/// `SequentialFileReader<'a>` is `Send`: it may move to another thread between calls, in the
/// middle of a scan. `'a` is the lifetime of the files borrowed with
/// [`add_file_to_prefetch`](Self::add_file_to_prefetch); a reader that borrows none is
/// `'static`.
///
/// # Several readers
///
/// For many files on many cores, run a reader per thread (file `i` to thread `i mod N`). The
/// readers of a process count themselves while they live: with fewer of them than CPUs, large
/// reads of files in the page cache are copied by kernel workers while the consumer works on
/// the bytes before them; with as many as CPUs (idle ones count too) every CPU is consuming,
/// so each reader copies on its own thread, and keeps small reads within 512 KiB of its
/// consumer, where the CPU's cache still holds them ([`Stats::reads_offloaded`] shows which).
///
/// # Dropping
///
/// Dropping the reader cancels the reads it has in flight and waits for each to come back
/// before it frees its buffer pool, since the kernel writes into the pool until then. A read
/// of a hung device or mount may never come back: after
/// [`ReaderBuilder::drain_timeout`] (30 s by default) the drop gives up and returns, leaking
/// the pool and the ring rather than freeing memory the kernel may still write into, and
/// counts it in [`Stats::drains_abandoned`]. [`close`](Self::close) does the same and says
/// whether it had to. With [`Backend::Sync`] nothing is in flight when the reader is dropped
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

    fn from_config(config: ReaderBuilder) -> Result<Self, Error> {
        let pool = Pool::with_capacity(config.buffer_size).ok_or(Error::OutOfMemory {
            bytes: config.buffer_size,
        })?;
        let limits = Limits {
            read_size: config.read_size,
            direct: config.direct_io,
            depth: config.queue_depth as usize,
            max_open: config.max_open_files,
            warm_window: WARM_WINDOW.max(config.read_size).min(config.buffer_size),
            small_window: SMALL_WINDOW.min(config.buffer_size),
            offload_depth: OFFLOAD_DEPTH,
            readers: Some(&READERS),
            drain_timeout: config.drain_timeout,
        };
        let ring_config = RingConfig {
            depth: config.queue_depth,
            register: config.registered_buffers.unwrap_or(config.direct_io),
            io_workers: config.io_workers,
        };
        let io: Box<dyn Io<'a> + 'a> = match config.backend {
            Backend::Sync => Box::new(SyncIo::default()),
            choice => match backend::ring(ring_config, &pool) {
                Ok(ring) => ring,
                Err(source) if choice == Backend::IoUring => {
                    return Err(Error::IoUringUnavailable { source })
                }
                Err(_) => Box::new(SyncIo::default()),
            },
        };
        Ok(SequentialFileReader {
            engine: Engine::new(io, pool, limits),
        })
    }

    /// Queues a file the caller keeps open, to read up to `read_limit` bytes of it from its
    /// start (`u64::MAX`: all of it). It becomes current if the queue was empty; its reads
    /// start at once where the pipeline has room.
    ///
    /// The reader reads at explicit offsets and never moves the file's position (but on
    /// Windows, whose positional reads, `seek_read`, move it).
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting reads. A file that cannot be read (a pipe, say)
    /// gets its error when it is read, naming it.
    pub fn add_file_to_prefetch(&mut self, file: &'a File, read_limit: u64) -> io::Result<()> {
        self.engine.push(Source::Borrowed(file), read_limit)
    }

    /// Queues a file the reader takes ownership of (and closes once it is done with it).
    ///
    /// # Errors
    ///
    /// As [`add_file_to_prefetch`](Self::add_file_to_prefetch).
    pub fn add_owned_file_to_prefetch(&mut self, file: File, read_limit: u64) -> io::Result<()> {
        self.engine.push(Source::Owned(Arc::new(file)), read_limit)
    }

    /// Queues a path, to read all of it. It is opened (read-only, close-on-exec, `O_NOATIME`
    /// where permitted) only when the read-ahead reaches it, so any number can be queued.
    ///
    /// # Errors
    ///
    /// Errors of the ring while starting reads. A path that cannot be opened or read gets its
    /// error when it is read: the error names the path, and
    /// [`move_to_next_file`](Self::move_to_next_file) goes on to the next file.
    pub fn add_path_to_prefetch(&mut self, path: impl AsRef<Path>) -> io::Result<()> {
        self.engine
            .push(Source::Path(path.as_ref().into()), u64::MAX)
    }

    /// Makes `(file, read_limit)` the current file.
    ///
    /// - Queued files ahead of it are dropped.
    /// - If it is at the front and untouched, what was read ahead for it is used.
    /// - If it was partly read (or failed), it is read again from byte 0; the files queued
    ///   behind it keep what was read ahead for them.
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
    /// another file is now current.
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
    /// remain (so `len() < n` means the file ends first; `&[]` at its end).
    ///
    /// For parsers of records: ask for a header, read the record's length from it, then ask
    /// for the whole record and [`consume`](BufRead::consume) it. The bytes are returned in
    /// place, without copying, when they lie in adjacent regions of the pool (consecutive
    /// reads of one file do, but at the pool's end); otherwise they are copied once into a
    /// buffer the reader keeps (counted in [`Stats::bytes_spilled`]). It waits only for the
    /// reads it needs, and never crosses into the next file. `consume` accepts up to the
    /// length returned.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `n` is more than the pool holds
    /// ([`ReaderBuilder::buffer_size`]): the reader goes on, and a smaller `n` works. The
    /// current file's error, as [`fill_buf`](BufRead::fill_buf) returns it.
    ///
    /// # Examples
    ///
    /// Records of an 8-byte little-endian length and that many bytes:
    ///
    /// ```
    /// use std::io::BufRead;
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("records");
    /// # let mut data = Vec::new();
    /// # for body in [&b"one"[..], b"three", b""] {
    /// #     data.extend_from_slice(&(body.len() as u64).to_le_bytes());
    /// #     data.extend_from_slice(body);
    /// # }
    /// # std::fs::write(&path, data)?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.add_path_to_prefetch(&path)?;
    /// let mut bodies = Vec::new();
    /// loop {
    ///     let header = reader.fill_buf_at_least(8)?;
    ///     if header.len() < 8 {
    ///         break; // the end of the file (or a torn header)
    ///     }
    ///     let len = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
    ///     let record = reader.fill_buf_at_least(8 + len)?;
    ///     bodies.push(record[8..8 + len].to_vec());
    ///     reader.consume(8 + len);
    /// }
    /// assert_eq!(bodies, [&b"one"[..], b"three", b""]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        self.engine.fill_buf_at_least(n)
    }

    /// Skips `n` bytes of the current file from the next byte [`fill_buf`](BufRead::fill_buf)
    /// would return; returns how many were skipped (fewer only at the file's end or limit).
    ///
    /// What is skipped is not read: regions wholly inside the range are freed unread, reads
    /// in flight for it are cancelled or their bytes dropped, and reads not yet issued for it
    /// never are (the file's next read starts past it, aligned down for `O_DIRECT`).
    /// [`file_offset`](Self::file_offset) moves on by the count returned.
    ///
    /// # Errors
    ///
    /// The current file's error (it cannot be opened, say), naming it.
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
    /// says so.
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

    /// The backend in use: [`Backend::IoUring`] or [`Backend::Sync`], never `Auto`.
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

impl Read for SequentialFileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }

    /// Copies straight from the pool, one chunk at a time.
    fn read_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let avail = self.fill_buf()?;
            if avail.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the current file ended first",
                ));
            }
            let n = avail.len().min(buf.len());
            buf[..n].copy_from_slice(&avail[..n]);
            self.consume(n);
            buf = &mut buf[n..];
        }
        Ok(())
    }

    /// Reserves the rest of the current file at once, then copies chunk by chunk.
    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let start = buf.len();
        loop {
            let avail = self.fill_buf()?;
            if avail.is_empty() {
                return Ok(buf.len() - start);
            }
            buf.extend_from_slice(avail);
            let n = avail.len();
            self.consume(n);
        }
    }
}

impl BufRead for SequentialFileReader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.engine.fill_buf()
    }

    /// Marks bytes as read. Clamps `amt` to what the last `fill_buf` (or
    /// `fill_buf_at_least`) returned, as std's `BufReader` does.
    fn consume(&mut self, amt: usize) {
        self.engine.consume(amt)
    }
}
