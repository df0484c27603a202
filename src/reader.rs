//! The public reader: `Read`, `BufRead`, queuing, activation, moving on; and `build()`,
//! which picks the backend.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::Path;
use std::sync::Arc;

use crate::backend::sync::SyncIo;
use crate::backend::uring::{Ring, RingConfig};
use crate::config::ReaderBuilder;
use crate::consts::{Backend, OFFLOAD_DEPTH, WARM_WINDOW};
use crate::engine::{Engine, Limits};
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
    /// [`Error::IoUringUnavailable`] for [`Backend::IoUring`] where the kernel refuses it,
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
            offload_depth: OFFLOAD_DEPTH,
        };
        let ring_config = RingConfig {
            depth: config.queue_depth,
            register: config.registered_buffers.unwrap_or(config.direct_io),
            io_workers: config.io_workers,
        };
        let io: Box<dyn Io<'a> + 'a> = match config.backend {
            Backend::Sync => Box::new(SyncIo::default()),
            backend => match Ring::new(ring_config, &pool) {
                Ok(ring) => Box::new(ring),
                Err(source) if backend == Backend::IoUring => {
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
    /// start (`u64::MAX`: all of it). It becomes current if the queue was empty.
    ///
    /// The reader reads at explicit offsets and never moves the file's position.
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
    /// - If it was partly read, it is read again from byte 0.
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

    /// Marks bytes as read. Clamps `amt` to what the last `fill_buf` returned, as std's
    /// `BufReader` does.
    fn consume(&mut self, amt: usize) {
        self.engine.consume(amt)
    }
}
