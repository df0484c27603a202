//! The backend interface: what the engine asks of a backend ([`Io`]), the reads it hands
//! over ([`ReadReq`]), what comes back ([`ReadDone`]), and files set up for reading
//! ([`Opened`], [`ToOpen`], in `to_open.rs`), opened on helper threads ([`ThreadOpens`]).
//!
//! A read's bytes are reachable only while no kernel can write them: a [`ReadReq`] holds a
//! [`Loan`], which a backend writing on its own thread fills through
//! [`ReadReq::buf_mut`]; a backend handing the read to the kernel first turns it into a
//! [`KernelRead`], which gives no access to the bytes, and back into a [`ReadDone`] only
//! through [`KernelLoan::reaped`], which is `unsafe` (see `pool`).

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::pool::{KernelLoan, Loan};
use crate::source::{FdRef, Source};
use crate::sys;

mod backend;
mod dirs;
mod opened;
mod thread_opens;
mod to_open;
pub use backend::Backend;
#[cfg(target_os = "linux")] // the ring's
pub(crate) use dirs::LocalDir;
pub(crate) use opened::{finish_open, size_local, Opened};
#[cfg(target_os = "linux")] // the ring's
pub(crate) use thread_opens::RingOpen;
pub(crate) use thread_opens::ThreadOpens;
#[cfg(test)]
pub(crate) use to_open::open_source;
pub(crate) use to_open::ToOpen;

/// One read for a backend: `len` bytes of `fd` at `offset`, into `loan` from `buf_off`.
#[derive(Debug)]
pub(crate) struct ReadReq<'a> {
    id: u64,
    fd: FdRef<'a>,
    /// Whether `fd` has `O_DIRECT` (page-cache hints are pointless then).
    direct: bool,
    /// Whether the backend should copy on a kernel worker rather than inline (the bytes are
    /// in the page cache, so the copy can overlap the consumer's work).
    offload: bool,
    /// Whether the read asks the kernel to drop the pages it brings in (`RWF_DONTCACHE`).
    uncached: bool,
    offset: u64,
    loan: Loan,
    buf_off: usize,
    len: usize,
}

impl<'a> ReadReq<'a> {
    /// # Panics
    /// If `buf_off + len` does not fit in the loan (the io_uring backend relies on it).
    pub(crate) fn new(
        id: u64,
        (fd, direct): (FdRef<'a>, bool),
        offset: u64,
        loan: Loan,
        buf_off: usize,
        len: usize,
    ) -> Self {
        assert!(
            buf_off <= loan.len() && len <= loan.len() - buf_off,
            "read outside its region"
        );
        assert!(len <= u32::MAX as usize);
        ReadReq {
            id,
            fd,
            direct,
            offload: false,
            uncached: false,
            offset,
            loan,
            buf_off,
            len,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    pub(crate) fn fd(&self) -> &FdRef<'a> {
        &self.fd
    }
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn offload(&self) -> bool {
        self.offload
    }
    pub(crate) fn with_offload(mut self, offload: bool) -> Self {
        self.offload = offload;
        self
    }
    /// Whether the read is sent with `RWF_DONTCACHE`.
    pub(crate) fn uncached(&self) -> bool {
        self.uncached
    }
    pub(crate) fn with_uncached(mut self, uncached: bool) -> Self {
        self.uncached = uncached;
        self
    }
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes the read writes, for a backend that writes them itself.
    pub(crate) fn buf_mut(&mut self) -> &mut [u8] {
        let (off, len) = (self.buf_off, self.len);
        &mut self.loan.as_mut_slice()[off..off + len]
    }

    /// Hands the read to the kernel: the address to write `len()` bytes at, and what stands
    /// for the read until its completion is reaped.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn into_kernel(self) -> (KernelRead<'a>, *mut u8) {
        let (loan, ptr) = self.loan.into_kernel();
        let read = KernelRead {
            id: self.id,
            direct: self.direct,
            offload: self.offload,
            uncached: self.uncached,
            loan,
            fd: self.fd,
        };
        (read, ptr.wrapping_add(self.buf_off))
    }

    /// The same read, free to go to a helper thread: its descriptor borrows nothing.
    pub(crate) fn detach(self) -> ReadReq<'static> {
        self.attach()
    }

    /// The same read, for a reader of another lifetime.
    pub(crate) fn attach<'b>(self) -> ReadReq<'b> {
        ReadReq {
            id: self.id,
            fd: self.fd.attach(),
            direct: self.direct,
            offload: self.offload,
            uncached: self.uncached,
            offset: self.offset,
            loan: self.loan,
            buf_off: self.buf_off,
            len: self.len,
        }
    }

    /// The completion of this read: bytes read, or `-errno`.
    pub(crate) fn done(self, result: i32) -> ReadDone<'a> {
        ReadDone {
            id: self.id,
            result,
            direct: self.direct,
            offload: self.offload,
            uncached: self.uncached,
            loan: self.loan,
            _fd: self.fd,
        }
    }
}

/// What came of offering a read to the page cache ([`Io::read_if_cached`]).
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // read only what is cached: Linux
pub(crate) enum FromCache<'a> {
    /// Copied at once, as far as the cache held it (`all`: the whole read); its completion
    /// comes back with the next `reap`.
    Taken { all: bool },
    /// Nothing of it was cached: issue it with `read`.
    Missed(ReadReq<'a>),
    /// The backend, kernel or filesystem cannot read only what is cached (or a seccomp
    /// filter refuses it): issue it with `read`, and offer no more of the file's reads.
    Refused(ReadReq<'a>),
}

impl<'a> ReadReq<'a> {
    /// Copies the read at once on this thread, as far as the page cache holds it, without
    /// waiting for the device (`preadv2` with `RWF_NOWAIT`), handing its completion (a short
    /// one where only the front was cached) to `ready`. Linux only.
    #[cfg(target_os = "linux")]
    pub(crate) fn read_cached(mut self, ready: impl FnOnce(ReadDone<'a>)) -> FromCache<'a> {
        if self.fd.may_hang() {
            return FromCache::Refused(self);
        }
        let (off, len) = (self.buf_off, self.len);
        let buf = &mut self.loan.as_mut_slice()[off..off + len];
        let (file, offset) = (self.fd.file(), self.offset);
        let mut copied = sys::read_cached_at(file, buf, offset, self.uncached);
        if self.uncached && copied.as_ref().is_err_and(refuses_uncached) {
            // Said of `RWF_DONTCACHE`, not of the cache: asked again without it. The read
            // sent to the device with it learns the same, and the file goes on without it.
            sys::note_uncached_refused(self.fd.device());
            copied = sys::read_cached_at(file, buf, offset, false);
        }
        match copied {
            Ok(n) => {
                ready(self.done(n as i32));
                FromCache::Taken { all: n == len }
            }
            Err(e) if refuses_nowait(&e) => FromCache::Refused(self),
            Err(_) => FromCache::Missed(self),
        }
    }
}

/// What came of copying a file's bytes at once from the page cache into a buffer of the
/// engine's own ([`Io::copy_cached`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // read only what is cached: Linux
pub(crate) enum Copied {
    /// This many bytes, as far as the cache held them (0: the file ends at the offset).
    Bytes(usize),
    /// Nothing was cached at the offset (or the call failed): read it the usual way.
    Missed,
    /// The backend, kernel or filesystem cannot copy only what is cached.
    Refused,
}

/// Copies `fd`'s bytes at `offset` into `buf` at once, on this thread, as far as the page
/// cache holds them, without waiting for the device (`preadv2` with `RWF_NOWAIT`). A file
/// that may hang is refused: its filesystem is not known to answer without waiting.
#[cfg(target_os = "linux")]
pub(crate) fn copy_cached(fd: &FdRef<'_>, offset: u64, buf: &mut [u8]) -> Copied {
    if fd.may_hang() {
        return Copied::Refused;
    }
    match sys::read_cached_at(fd.file(), buf, offset, false) {
        Ok(n) => Copied::Bytes(n),
        // A directory sized by a seek: nothing copied, its read the usual way fails it
        // (see `Error::read`), and the cache is not taken for cold.
        Err(e) if e.kind() == io::ErrorKind::IsADirectory => Copied::Bytes(0),
        Err(e) if refuses_nowait(&e) => Copied::Refused,
        Err(_) => Copied::Missed,
    }
}

/// Whether a read's error says the kernel or filesystem cannot read only what is cached
/// (`EPERM`: a seccomp filter refuses the call, which says nothing of the cache either).
#[cfg(target_os = "linux")]
fn refuses_nowait(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS | libc::EPERM)
    )
}

/// Whether a read's error says the kernel or filesystem refuses `RWF_DONTCACHE` (`EINVAL`:
/// a kernel that knows no such flag).
#[cfg(target_os = "linux")]
fn refuses_uncached(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}

/// A read in the kernel's hands: its region (which it gives no access to) and the
/// descriptor it names, both kept until its completion is reaped.
#[derive(Debug)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
pub(crate) struct KernelRead<'a> {
    id: u64,
    direct: bool,
    offload: bool,
    uncached: bool,
    loan: KernelLoan,
    fd: FdRef<'a>,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
impl<'a> KernelRead<'a> {
    /// The completion of this read: `reap` turns the region back into a loan (see
    /// [`KernelLoan::reaped`] for when that is sound).
    pub(crate) fn done(self, result: i32, reap: impl FnOnce(KernelLoan) -> Loan) -> ReadDone<'a> {
        ReadDone {
            id: self.id,
            result,
            direct: self.direct,
            offload: self.offload,
            uncached: self.uncached,
            loan: reap(self.loan),
            _fd: self.fd,
        }
    }
}

/// A completed read: its loan comes back with the result (bytes read, or `-errno`).
#[derive(Debug)]
pub(crate) struct ReadDone<'a> {
    pub(crate) id: u64,
    pub(crate) result: i32,
    /// Whether the read was issued with `O_DIRECT` (the file may have gone buffered since:
    /// its `EINVAL` then calls for the read again, not for the file to fail).
    pub(crate) direct: bool,
    /// Whether the read was offloaded (see [`ReadReq::offload`]).
    pub(crate) offload: bool,
    /// Whether the read was sent with `RWF_DONTCACHE` (its `EOPNOTSUPP` or `EINVAL` then
    /// says the filesystem refuses that, not that the file failed).
    pub(crate) uncached: bool,
    pub(crate) loan: Loan,
    /// Keeps the descriptor open until the completion is handled.
    pub(crate) _fd: FdRef<'a>,
}

impl ReadDone<'_> {
    /// The same completion, for the reader of another lifetime that issued it.
    pub(crate) fn attach<'b>(self) -> ReadDone<'b> {
        ReadDone {
            id: self.id,
            result: self.result,
            direct: self.direct,
            offload: self.offload,
            uncached: self.uncached,
            loan: self.loan,
            _fd: self._fd.attach(),
        }
    }
}

/// What came of an open the backend started: the file set up for reading, or why not.
pub(crate) type OpenResult<'a> = Result<Opened<'a>, Error>;

/// What came of starting an open ([`Io::start_open`]).
#[derive(Debug)]
pub(crate) enum OpenStart<'a> {
    /// The backend cannot start it: the path is opened with [`Io::open`] instead.
    Refused,
    /// Under way: its answer comes back through [`Io::take_opened`].
    Started,
    /// Made on the spot, on this thread, from the kernel's caches: its answer.
    Done(OpenResult<'a>),
}

impl<'a> From<io::Result<Option<OpenResult<'static>>>> for OpenStart<'a> {
    /// What [`ThreadOpens::start`] said.
    fn from(started: io::Result<Option<OpenResult<'static>>>) -> Self {
        match started {
            Ok(Some(opened)) => OpenStart::Done(opened.map(Opened::attach)),
            Ok(None) => OpenStart::Started,
            Err(_) => OpenStart::Refused,
        }
    }
}

/// What the engine needs of a backend.
pub(crate) trait Io<'a>: Send {
    /// `IoUring` or `Pread`.
    fn backend(&self) -> Backend;
    /// Queues a read. The backend owns the loan until it returns it in a [`ReadDone`].
    fn read(&mut self, req: ReadReq<'a>);
    /// Asks for a queued or in-flight read to be cancelled; its completion still comes back.
    fn cancel(&mut self, id: u64);
    /// Starts what is queued, without waiting.
    fn submit(&mut self) -> io::Result<()>;
    /// Collects completions; with `wait`, blocks until at least one read has completed.
    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()>;
    /// `reap` with `wait`, giving up at `deadline` (`None`: never): `Ok(false)` where it
    /// passed with nothing collected. Backends that cannot bound a wait (a `pread` blocks
    /// the thread in the kernel) wait as long as it takes.
    fn reap_until(
        &mut self,
        _deadline: Option<Instant>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        self.reap(true, out).map(|()| true)
    }
    /// Reads (and, for a backend that opens with its reads, opens) handed over and not yet
    /// returned.
    fn in_flight(&self) -> usize;
    /// Cancels everything and waits until every read has come back, or until `timeout` has
    /// passed: then an error of kind [`TimedOut`](io::ErrorKind::TimedOut), with what has not
    /// come back still in flight (the kernel may still write into it).
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, timeout: Duration) -> io::Result<()>;
    /// The opens the backend makes on helper threads (both real backends: the defaults of
    /// the open methods below go through them).
    fn thread_opens(&self) -> Option<&ThreadOpens> {
        None
    }
    /// As [`thread_opens`](Self::thread_opens), to start and take opens.
    fn thread_opens_mut(&mut self) -> Option<&mut ThreadOpens> {
        None
    }
    /// Opens (if it is a path) and sizes a queued file, with the flags of the backend's
    /// [`Opener`](sys::Opener), the one its [`start_open`](Self::start_open) takes its flags from; on a
    /// helper thread, waited for at most `drain_timeout`.
    fn open(&mut self, source: &Source<'a>, direct: bool) -> Result<Opened<'a>, Error> {
        let opens = self
            .thread_opens_mut()
            .expect("a backend that opens on helper threads");
        opens.open(ToOpen::of(source)?, direct).map(Opened::attach)
    }
    /// Starts opening a queued path (with the flags of the backend's [`Opener`](sys::Opener)) without
    /// blocking (see [`OpenStart`]).
    fn start_open(&mut self, file: u64, path: &Path, direct: bool) -> OpenStart<'a> {
        let Some(opens) = self.thread_opens_mut() else {
            return OpenStart::Refused;
        };
        OpenStart::from(opens.start(file, path, direct, None))
    }
    /// Starts opening and sizing a queued file of any kind (a file handed in too) without
    /// blocking, for a reader that never blocks; `false` where the backend cannot, and the
    /// file is opened with [`open`](Self::open) instead. The result comes back through
    /// [`take_opened`](Self::take_opened).
    fn start_open_any(&mut self, file: u64, source: &Source<'a>, direct: bool) -> bool {
        let Ok(to_open) = ToOpen::of(source) else {
            return false; // `open` meets the same failure, and reports it.
        };
        let opens = self.thread_opens_mut();
        opens.is_some_and(|opens| opens.start_any(file, to_open, direct).is_ok())
    }
    /// Opens started by `start_open` that completed: (file id, what came of it).
    fn take_opened(&mut self, out: &mut Vec<(u64, OpenResult<'a>)>) {
        if let Some(opens) = self.thread_opens_mut() {
            opens.take(out);
        }
    }
    /// Where opens are made apart from reads: blocks until one started by `start_open`
    /// completes, or until the earliest under way has taken `drain_timeout` (it completes
    /// failed with `TimedOut` then), and returns `true`. `false` where the backend's opens
    /// complete with its reads (`reap`), or none is under way.
    fn wait_opens(&mut self) -> bool {
        self.thread_opens_mut().is_some_and(ThreadOpens::wait)
    }
    /// [`wait_opens`](Self::wait_opens) without blocking: collects what came, and fails with
    /// `TimedOut` the opens under way past `drain_timeout`; whether an open is answered and
    /// not yet taken. [`opens_due`](Self::opens_due) says when to look again.
    fn opens_answered(&mut self) -> bool {
        self.thread_opens_mut().is_some_and(ThreadOpens::poll)
    }
    /// When an open under way next times out or turns slow, for a reader that never blocks
    /// to look again (see `ThreadOpens::due`); `None` where none is under way.
    #[cfg(feature = "tokio")]
    fn opens_due(&self) -> Option<Instant> {
        self.thread_opens().and_then(ThreadOpens::due)
    }
    /// Calls `wake` whenever a helper thread answered (an open, a `pread` read), for a
    /// reader that never blocks: it looks again then. What the kernel completes on a ring
    /// makes [`ready_fd`](Self::ready_fd) readable instead.
    #[cfg(feature = "tokio")]
    fn set_wake(&mut self, wake: crate::helpers::Wake) {
        if let Some(opens) = self.thread_opens_mut() {
            opens.set_wake(wake);
        }
    }
    /// A descriptor that polls readable once the kernel has completions for the backend
    /// (the ring's own); `None` where every answer comes through [`set_wake`](Self::set_wake).
    #[cfg(feature = "tokio")]
    fn ready_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    /// Opens under way that do not count against the reader's depth of opens: those so slow
    /// that they most likely hung (see `ThreadOpens::slow`), and the ring's, which its depth,
    /// the cap on its workers and the cap on descriptors bound already.
    fn uncounted_opens(&self) -> usize {
        self.thread_opens().map_or(0, ThreadOpens::slow)
    }
    /// Whether the pool is registered with the kernel (reads are `READ_FIXED`).
    fn registered(&self) -> bool {
        false
    }
    /// A descriptor of the backend's ring, where it has a submission thread that other rings
    /// may share (`IORING_SETUP_ATTACH_WQ`).
    fn sq_poll_ring(&self) -> Option<File> {
        None
    }
    /// Whether `len` bytes of `fd` at `offset` are all in the page cache (`cachestat`, Linux
    /// 6.5); `None` where the kernel cannot tell.
    fn cached(&mut self, fd: &FdRef<'a>, offset: u64, len: u64) -> Option<bool> {
        #[cfg(target_os = "linux")]
        return sys::page_cache_holds(fd.file(), offset, len);
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (fd, offset, len);
            None
        }
    }
    /// Takes `req` and copies it at once, on this thread, as far as the page cache holds it,
    /// without waiting for the device; its completion comes back with the next
    /// [`reap`](Self::reap) (a short one where only the front was cached). See
    /// [`FromCache`] for what to do with a read it did not take.
    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        FromCache::Refused(req)
    }
    /// Whether [`copy_cached`](Self::copy_cached) can copy anything.
    fn copies_cached(&self) -> bool {
        false
    }
    /// Copies `fd`'s bytes at `offset` into `buf` (the engine's, not the pool's) at once, on
    /// this thread, as far as the page cache holds them, without waiting for the device.
    fn copy_cached(&mut self, fd: &FdRef<'a>, offset: u64, buf: &mut [u8]) -> Copied {
        let _ = (fd, offset, buf);
        Copied::Refused
    }
    /// The file's size now (a read found its end before the size it had when opened);
    /// `None` where it cannot be told.
    fn size_now(&mut self, fd: &FdRef<'a>) -> Option<u64> {
        match self.thread_opens() {
            // `fstat` may ask a hung mount: on a helper thread there, waited for with a bound.
            Some(opens) => opens.size(fd),
            None => sys::file_size(fd.file()).ok(),
        }
    }
    /// The file handed in that `fd` reads, with an open file description of the reader's own
    /// (see [`ThreadOpens::reopen_own`]); `None` where the backend has none to give.
    fn reopen_own(&mut self, fd: &FdRef<'a>) -> Option<FdRef<'a>> {
        let opens = self.thread_opens_mut()?;
        opens.reopen_own(fd).map(FdRef::attach)
    }
    /// Switches the descriptor of a file that refused `O_DIRECT` reads to buffered ones:
    /// the same descriptor, never the file reopened by its path, which may name another
    /// file by now.
    fn clear_direct(&mut self, fd: &FdRef<'a>) -> io::Result<()> {
        sys::clear_direct(fd.file())
    }
    /// The same backend (ring, registrations), free to name descriptors of another lifetime.
    ///
    /// # Panics
    ///
    /// If anything is in flight: call [`shutdown`](Self::shutdown) first.
    fn rebind<'b>(self: Box<Self>) -> Box<dyn Io<'b> + 'b>;
}
