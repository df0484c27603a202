//! The reader under tokio (`AsyncSequentialFileReader`): the same engine, turned to one
//! that never blocks (its waits fail with `WouldBlock`, having changed nothing), called again
//! each time what it waits on is ready (`ready.rs`).

mod ready;

use std::fs::File;
use std::future::poll_fn;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};

use crate::entry::Entry;
use crate::io::Backend;
use crate::reader::SequentialFileReader;
use crate::stats::Stats;
use ready::Ready;

/// A [`SequentialFileReader`] for tokio: the same queue, read-ahead and per-file semantics,
/// with [`AsyncRead`] and [`AsyncBufRead`] stopping at each file's end, and the record API
/// as `async` methods. Built with the `tokio` feature, on Unix.
///
/// Nothing it does blocks a runtime thread on the device or on a mount: where the reader
/// would wait for a read or an open, the task waits instead, woken through the runtime's
/// reactor by the ring's descriptor (the kernel completed something) or by the helper
/// threads that open files and run the `pread` backend's reads (each writes a byte to a
/// socket the reactor polls once it answered), or by a timer at the reader's
/// [`drain_timeout`](crate::ReaderBuilder::drain_timeout): a read or an open that hangs
/// fails its file with [`TimedOut`](io::ErrorKind::TimedOut), naming it, and the reader
/// goes on, as the blocking one does. Copies from the page cache are made inline, on the
/// task's thread, as they do not wait for the device; as tokio's own I/O does, each call
/// spends the task's budget (more for the bytes it copied), so a reader of cached files
/// gives its worker up to the other tasks now and then. Every file is opened through the
/// backend's asynchronous opens, a file handed in (`&File`, `File`) too.
///
/// What may hold a runtime thread, each bounded by `drain_timeout`: [`close`](Self::close)
/// and the drop, which cancel what is in flight and wait for the kernel to give the pool's
/// regions back, as the blocking reader does (a hung mount's read may hold it that long;
/// after that the pool is leaked, counted by [`drains_abandoned`](crate::drains_abandoned));
/// and the size of a file on a mount that may hang, asked again on a helper thread when a
/// read finds it changed.
///
/// It is `Send`, and works on either runtime flavour; it must be made inside a runtime with
/// I/O and time enabled, and used on that runtime.
///
/// # Cancel safety
///
/// Every method is cancel safe: a future dropped before it completes has consumed nothing,
/// and the next call goes on where the reader stands. What the kernel may still write is the
/// reader's pool, which the reader owns and keeps until each read came back (or leaks, never
/// frees, where a drain gives up); a file whose open a dropped future waited for is opened
/// all the same, its descriptor held by the reader and closed by it. A record
/// ([`fill_buf_at_least`](Self::fill_buf_at_least)) whose bytes were partly copied when its
/// future was dropped keeps them for the next call.
///
/// # Examples
///
/// ```no_run
/// use readahead::{AsyncSequentialFileReader, SequentialFileReader};
/// use tokio::io::AsyncReadExt;
///
/// # async fn run() -> std::io::Result<()> {
/// let mut reader = AsyncSequentialFileReader::new(SequentialFileReader::new()?)?;
/// for path in ["a.bin", "b.bin"] {
///     reader.push(path)?;
/// }
/// let mut bytes = Vec::new();
/// loop {
///     bytes.clear();
///     reader.read_to_end(&mut bytes).await?; // stops at the end of the current file
///     if !reader.move_to_next_file().await? {
///         break;
///     }
/// }
/// reader.close().await
/// # }
/// ```
pub struct AsyncSequentialFileReader<'a> {
    // Drop order: `ready` deregisters the ring's descriptor from the reactor before `reader`
    // closes it.
    ready: Ready,
    reader: SequentialFileReader<'a>,
    /// Units of the task's budget owed for what the last calls read (see `poll_call`).
    owed: u64,
}

/// The summary of the reader it wraps.
impl std::fmt::Debug for AsyncSequentialFileReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.reader.fmt(f)
    }
}

/// Bytes read into the pool that cost the task one unit of its budget: 128 units, tokio's
/// budget for one turn of a task, are 8 MiB, a few milliseconds of copies from the page
/// cache.
const BYTES_PER_UNIT: u64 = 64 << 10;

impl<'a> AsyncSequentialFileReader<'a> {
    /// Turns `reader` into one for tokio, with the files it has queued and its settings
    /// (build it with [`SequentialFileReader::builder`] to set them).
    ///
    /// # Errors
    ///
    /// The runtime's reactor refused the reader's descriptors.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled.
    pub fn new(mut reader: SequentialFileReader<'a>) -> io::Result<Self> {
        let (ready, wake) = Ready::new(reader.ready_fd())?;
        reader.set_nonblocking(wake);
        Ok(AsyncSequentialFileReader {
            ready,
            reader,
            owed: 0,
        })
    }

    /// Queues a file; see [`SequentialFileReader::push`]. It never waits: the file's open
    /// starts at once where the read-ahead has room.
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::push`].
    pub fn push(&mut self, entry: impl Into<Entry<'a>>) -> io::Result<()> {
        self.reader.push(entry)
    }

    /// Queues `file` to be read ahead, at most `read_limit` bytes of it; see
    /// [`SequentialFileReader::add_file_to_prefetch`]. It never waits.
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::add_file_to_prefetch`].
    pub fn add_file_to_prefetch(&mut self, file: &'a File, read_limit: u64) -> io::Result<()> {
        self.reader.add_file_to_prefetch(file, read_limit)
    }

    /// Makes `(file, read_limit)` the current file; see
    /// [`SequentialFileReader::activate_file`]. It never waits.
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::activate_file`].
    pub fn activate_file(&mut self, file: &'a File, read_limit: u64) -> io::Result<()> {
        self.reader.activate_file(file, read_limit)
    }

    /// Drops the rest of the current file; whether another file is now current. See
    /// [`SequentialFileReader::move_to_next_file`].
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::move_to_next_file`].
    ///
    /// # Cancel safety
    ///
    /// It completes at its first poll.
    pub async fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.reader.move_to_next_file()
    }

    /// At least `n` contiguous bytes of the current file, or all it has left; see
    /// [`SequentialFileReader::fill_buf_at_least`]. Consume them with
    /// [`consume`](AsyncBufRead::consume).
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::fill_buf_at_least`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: bytes already copied for the record wait for the next call.
    pub async fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        poll_fn(|cx| self.poll_call(cx, |r| r.fill_buf_at_least(n).map(drop))).await?;
        // Ready now: the same call answers at once, from what the first one found.
        self.reader.fill_buf_at_least(n)
    }

    /// Skips `n` bytes of the current file, without reading them; how many were skipped. See
    /// [`SequentialFileReader::skip`].
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::skip`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a skip waits only for the file's open, before it skips anything.
    pub async fn skip(&mut self, n: u64) -> io::Result<u64> {
        poll_fn(|cx| self.poll_call(cx, |r| r.skip(n))).await
    }

    /// The offset in the current file of the next byte; see
    /// [`SequentialFileReader::file_offset`].
    pub fn file_offset(&self) -> u64 {
        self.reader.file_offset()
    }

    /// The current file's path, when it was queued by path.
    pub fn current_path(&self) -> Option<&Path> {
        self.reader.current_path()
    }

    /// The current file's 0-based position among the files queued; see
    /// [`SequentialFileReader::current_index`].
    pub fn current_index(&self) -> Option<usize> {
        self.reader.current_index()
    }

    /// The backend reading: [`Backend::IoUring`] or [`Backend::Pread`].
    pub fn backend(&self) -> Backend {
        self.reader.backend()
    }

    /// The reader's counters; see [`SequentialFileReader::stats`].
    pub fn stats(&self) -> Stats {
        self.reader.stats()
    }

    /// The first file error no caller was given; see
    /// [`SequentialFileReader::take_unread_error`].
    pub fn take_unread_error(&mut self) -> Option<io::Error> {
        self.reader.take_unread_error()
    }

    /// Shuts the reader down: cancels what is in flight and waits, at most `drain_timeout`,
    /// for the kernel to give the pool back; see [`SequentialFileReader::close`]. That wait
    /// holds the task's thread (in practice as long as the kernel takes to answer the
    /// cancellations; the whole timeout only for a read a hung mount never answers).
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::close`]: the drain failed or gave up.
    pub async fn close(self) -> io::Result<()> {
        let AsyncSequentialFileReader { ready, reader, .. } = self;
        drop(ready);
        reader.close()
    }

    /// Calls `call` until it does not fail with `WouldBlock`, waiting between two calls for
    /// what may let it go on: `Pending` while nothing came.
    ///
    /// Each answer spends the task's budget (tokio's `coop`), as the runtime's own I/O does,
    /// and so do the bytes it read (one unit per [`BYTES_PER_UNIT`], owed until the next
    /// call, which pays before it does anything): a reader whose files are all cached never
    /// waits, copying them on the task's thread, and would otherwise hold its worker from
    /// the tasks queued there.
    fn poll_call<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut call: impl FnMut(&mut SequentialFileReader<'a>) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        while self.owed > 0 {
            std::task::ready!(tokio::task::coop::poll_proceed(cx)).made_progress();
            self.owed -= 1;
        }
        let budget = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let read = self.reader.stats().bytes_read;
        loop {
            match call(&mut self.reader) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => {
                    budget.made_progress();
                    self.owed = (self.reader.stats().bytes_read - read) / BYTES_PER_UNIT;
                    return Poll::Ready(done);
                }
            }
            let deadline = self.reader.wake_at();
            if let Err(e) = std::task::ready!(self.ready.poll(cx, deadline)) {
                return Poll::Ready(Err(e));
            }
        }
    }
}

impl AsyncBufRead for AsyncSequentialFileReader<'_> {
    /// The current file's next bytes, `&[]` at its end; see
    /// [`BufRead::fill_buf`](std::io::BufRead::fill_buf).
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_call(cx, |r| std::io::BufRead::fill_buf(r).map(drop)))?;
        // Ready now: the same call answers at once, from what the first one found.
        Poll::Ready(std::io::BufRead::fill_buf(&mut this.reader))
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        std::io::BufRead::consume(&mut self.get_mut().reader, amt);
    }
}

impl AsyncRead for AsyncSequentialFileReader<'_> {
    /// Bytes of the current file; none at its end.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let bytes = std::task::ready!(self.as_mut().poll_fill_buf(cx))?;
        let n = bytes.len().min(buf.remaining());
        buf.put_slice(&bytes[..n]);
        self.consume(n);
        Poll::Ready(Ok(()))
    }
}
