//! The engine against a scripted completion source, with no kernel ring involved: the
//! source and its log, the test files, and the helpers the tests in the files below share.

mod access;
pub(crate) use access::{fds_under, pool};
mod cache;
mod direct;
mod drop;
mod nonblocking;
mod opens;
mod reading;
mod reads;
mod records;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::mem;

use super::*;
use crate::io::{finish_open, open_source, FromCache, OpenResult, OpenStart};
use crate::source::{RawFd, Spares};
use crate::sys::Opener;
use crate::tests::disk_tempdir;
use cache::limits;
use reading::{assert_exact, read_all, read_all_checking};

/// What the script says one read returns.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Everything asked that the file has.
    Full,
    /// At most this many bytes.
    Short(usize),
    /// End of file: 0.
    Eof,
    /// `-errno`.
    Fail(i32),
}

/// One read the script is asked about (and the log keeps).
#[derive(Clone, Copy, Debug)]
struct Call {
    offset: u64,
    len: usize,
    /// 0 for a chunk's first read, then 1, 2... for its continuations and retries.
    attempt: u32,
    /// Whether the read was handed over to be offloaded.
    offload: bool,
    /// Offloaded reads in flight when it was handed over.
    offloaded_before: usize,
    /// Whether the read names an `O_DIRECT` descriptor.
    direct: bool,
    /// Whether the descriptor it names is `O_NONBLOCK` (the ring may answer `EAGAIN`).
    nonblocking: bool,
    /// The address of the pool's bytes it was handed to write.
    at: usize,
}

type Script = Box<dyn FnMut(&Call) -> Act + Send>;

/// An open the engine started through the source.
#[derive(Clone, Debug)]
struct OpenCall {
    file: u64,
    path: PathBuf,
    direct: bool,
}

/// What the source has been handed and not completed yet.
enum Op<'a> {
    Read(ReadReq<'a>),
    Open(OpenCall),
}

/// What a source saw, where the test can still look once the source is in an engine.
#[derive(Debug, Default)]
struct Log {
    /// Every read handed over, in order.
    reads: Vec<Call>,
    /// Reads handed over since the last submission (`submit`, or a `reap`, which submits
    /// first as the ring's does): queued, not yet started.
    unsubmitted: usize,
    /// Offloaded reads in flight now, and the most there were when a read was handed over.
    offloaded: usize,
    peak_offloaded: usize,
    /// Every open started through `start_open`, in order.
    opens: Vec<OpenCall>,
    /// Paths opened with `Io::open` (on the engine's thread).
    sync_opens: Vec<PathBuf>,
    /// Descriptors `O_DIRECT` was turned off on (`Io::clear_direct`), with the paths they
    /// were open on.
    direct_cleared: Vec<(RawFd, PathBuf)>,
    /// The most descriptors on files under `Scripted::watch` plus opens in flight, counted
    /// whenever an open is started (`start_open`) or done on the engine's thread
    /// (`Io::open`), the only times the count can grow.
    peak_descriptors: usize,
    /// Times the engine asked whether a range is cached (`Io::cached`).
    asked: usize,
    /// Reads the engine offered to copy at once from the cache (`Io::read_if_cached`), and
    /// those taken.
    cached_tried: usize,
    cached_now: usize,
}

impl Log {
    /// How many opens of `path` were started through `start_open`.
    fn opens_of(&self, path: &Path) -> usize {
        self.opens.iter().filter(|o| o.path == path).count()
    }
}

/// A completion source that reads the real file but returns what the script says, in the
/// order it says.
struct Scripted<'a> {
    pending: Vec<Op<'a>>,
    cancelled: HashSet<u64>,
    attempts: HashMap<u64, u32>,
    script: Script,
    /// Complete reads newest first.
    reverse: bool,
    /// Complete reads only when the engine waits (so reads pile up in flight).
    lazy: bool,
    /// What `cached` answers.
    cached: Option<bool>,
    /// Whether `read_if_cached` refuses the reads of a file (by its path), as a filesystem
    /// without `RWF_NOWAIT` does.
    refuse_nowait: fn(&Path) -> bool,
    /// Whether `start_open` takes opens (completed like reads); else paths are opened with
    /// `Io::open`.
    async_open: bool,
    /// Whether those opens are answered by themselves, as a helper thread's are, on the
    /// second time the engine looks for answers after starting them (so while it
    /// schedules, not when it waits).
    opens_answer_themselves: bool,
    /// Whether those opens are answered where they start (`OpenStart::Done`), as the
    /// kernel's caches answer them on the reader's thread.
    opens_on_the_spot: bool,
    /// Opens answered by themselves, and how many more looks before each is answered.
    answering: Vec<(OpenCall, u32)>,
    /// Errnos the next opens of a path get, in turn; after them it is really opened.
    open_errors: HashMap<PathBuf, VecDeque<i32>>,
    /// Opens completed and not yet taken.
    opened: Vec<(u64, OpenResult<'a>)>,
    /// The flags paths are opened with.
    opener: Opener,
    /// The directory whose descriptors `Log::peak_descriptors` counts.
    watch: Option<PathBuf>,
    /// Whether `submit` fails, as a broken ring's does.
    fail_submit: bool,
    /// Whether reads in flight never come back, cancelled or not (a hung device): `shutdown`
    /// times out with them still in flight.
    hung: bool,
    log: Arc<Mutex<Log>>,
}

impl<'a> Scripted<'a> {
    fn new(script: impl FnMut(&Call) -> Act + Send + 'static) -> Self {
        Scripted {
            pending: Vec::new(),
            cancelled: HashSet::new(),
            attempts: HashMap::new(),
            script: Box::new(script),
            reverse: false,
            lazy: false,
            cached: None,
            refuse_nowait: |_| false,
            async_open: false,
            opens_answer_themselves: false,
            opens_on_the_spot: false,
            answering: Vec::new(),
            open_errors: HashMap::new(),
            opened: Vec::new(),
            opener: Opener::default(),
            watch: None,
            fail_submit: false,
            hung: false,
            log: Arc::default(),
        }
    }

    /// Completes in the given order: `(reverse, lazy)`, see [`ORDERS`].
    fn ordered(mut self, (reverse, lazy): (bool, bool)) -> Self {
        self.reverse = reverse;
        self.lazy = lazy;
        self
    }

    fn complete(&mut self, mut req: ReadReq<'a>) -> ReadDone<'a> {
        if req.offload() {
            self.log.lock().unwrap().offloaded -= 1;
        }
        if self.cancelled.remove(&req.id()) {
            return req.done(-libc::ECANCELED);
        }
        let attempt = self.attempts.entry(req.id()).or_default();
        let call = Call {
            at: req.buf_mut().as_ptr() as usize,
            offset: req.offset(),
            len: req.len(),
            attempt: *attempt,
            offload: req.offload(),
            offloaded_before: 0,
            direct: req.is_direct(),
            nonblocking: nonblocking(req.fd()),
        };
        *attempt += 1;
        let act = (self.script)(&call);
        let (fd, offset) = (req.fd().clone(), req.offset());
        let buf = req.buf_mut();
        let result = match act {
            Act::Full => fd.file().read_at(buf, offset).unwrap() as i32,
            // Read whole (an O_DIRECT descriptor refuses an unaligned length), then keep `n`
            // bytes: the rest is poisoned again, as no read wrote it.
            Act::Short(n) => {
                let got = fd.file().read_at(buf, offset).unwrap();
                let n = n.min(got);
                buf[n..got].fill(POISON);
                n as i32
            }
            Act::Eof => 0,
            Act::Fail(errno) => -errno,
        };
        req.done(result)
    }

    /// Completes an open: the scripted errno, or really opening the path.
    fn complete_open(&mut self, call: OpenCall) {
        let scripted = self
            .open_errors
            .get_mut(&call.path)
            .and_then(VecDeque::pop_front);
        let flags = self.opener.flags(call.direct);
        let opened = match scripted {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(&call.path),
        };
        let result = match opened {
            Ok(file) => finish_open(
                file,
                (flags, call.direct),
                &call.path,
                false,
                &mut Spares::default(),
            )
            .map(|o| o.located().attach()),
            Err(source) => Err(Error::Open {
                path: crate::error::FileName::Path(call.path.clone()),
                source,
            }),
        };
        self.opened.push((call.file, result));
    }

    fn finish(&mut self, op: Op<'a>, out: &mut Vec<ReadDone<'a>>) {
        match op {
            Op::Read(req) => {
                let done = self.complete(req);
                out.push(done);
            }
            Op::Open(call) => self.complete_open(call),
        }
    }

    /// Records the descriptors held or being opened under `watch`.
    fn note_descriptors(&self) {
        let Some(dir) = &self.watch else { return };
        let opening = self
            .pending
            .iter()
            .filter(|op| matches!(op, Op::Open(_)))
            .count();
        let n = fds_under(dir) + opening;
        let mut log = self.log.lock().unwrap();
        log.peak_descriptors = log.peak_descriptors.max(n);
    }
}

/// Whether `fd` is `O_NONBLOCK`.
fn nonblocking(fd: &FdRef<'_>) -> bool {
    crate::sys::status_flags(fd.file()).is_ok_and(|f| f & libc::O_NONBLOCK != 0)
}

/// The orders a source may complete in: `(reverse, lazy)`.
const ORDERS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

impl<'a> Io<'a> for Scripted<'a> {
    fn backend(&self) -> Backend {
        Backend::Pread
    }
    /// Takes the read, first filling the bytes it is to write with [`POISON`], so that a
    /// byte exposed that no read wrote shows.
    fn read(&mut self, mut req: ReadReq<'a>) {
        req.buf_mut().fill(POISON);
        let at = req.buf_mut().as_ptr() as usize;
        let call = Call {
            at,
            offset: req.offset(),
            len: req.len(),
            attempt: self.attempts.get(&req.id()).copied().unwrap_or(0),
            offload: req.offload(),
            offloaded_before: 0,
            direct: req.is_direct(),
            nonblocking: nonblocking(req.fd()),
        };
        let mut log = self.log.lock().unwrap();
        let call = Call {
            offloaded_before: log.offloaded,
            ..call
        };
        log.reads.push(call);
        log.unsubmitted += 1;
        if call.offload {
            log.offloaded += 1;
            log.peak_offloaded = log.peak_offloaded.max(log.offloaded);
        }
        drop(log);
        self.pending.push(Op::Read(req));
    }
    fn cancel(&mut self, id: u64) {
        self.cancelled.insert(id);
    }
    fn submit(&mut self) -> io::Result<()> {
        if self.fail_submit {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        self.log.lock().unwrap().unsubmitted = 0;
        Ok(())
    }
    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        self.submit()?;
        if self.lazy {
            // Only when waiting, and one at a time (the oldest, or the newest when reversed),
            // so the engine sees the rest still in flight.
            if wait && !self.pending.is_empty() {
                let i = if self.reverse {
                    self.pending.len() - 1
                } else {
                    0
                };
                let op = self.pending.remove(i);
                self.finish(op, out);
            }
            return Ok(());
        }
        let mut batch = mem::take(&mut self.pending);
        if self.reverse {
            batch.reverse();
        }
        for op in batch {
            self.finish(op, out);
        }
        Ok(())
    }
    fn in_flight(&self) -> usize {
        self.pending.len() + self.opened.len()
    }
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, _timeout: Duration) -> io::Result<()> {
        if self.hung && !self.pending.is_empty() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "scripted hang"));
        }
        for op in mem::take(&mut self.pending) {
            match op {
                Op::Read(req) => {
                    if req.offload() {
                        self.log.lock().unwrap().offloaded -= 1;
                    }
                    out.push(req.done(-libc::ECANCELED));
                }
                // As a kernel may: the open finished before its cancel came.
                Op::Open(call) => self.complete_open(call),
            }
        }
        // Files opened for nothing: closed here.
        self.opened.clear();
        Ok(())
    }
    fn open(&mut self, source: &Source<'a>, direct: bool) -> Result<Opened<'a>, Error> {
        let opened = open_source(source, direct, &mut self.opener);
        if let Source::Path(path) = source {
            self.log.lock().unwrap().sync_opens.push(path.to_path_buf());
        }
        self.note_descriptors();
        opened
    }
    fn clear_direct(&mut self, fd: &FdRef<'a>) -> io::Result<()> {
        let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.raw())).unwrap();
        self.log
            .lock()
            .unwrap()
            .direct_cleared
            .push((fd.raw(), path));
        crate::sys::clear_direct(fd.file())
    }
    fn start_open(&mut self, file: u64, path: &Path, direct: bool) -> OpenStart<'a> {
        if !self.async_open {
            return OpenStart::Refused;
        }
        let call = OpenCall {
            file,
            path: path.to_path_buf(),
            direct,
        };
        self.log.lock().unwrap().opens.push(call.clone());
        if self.opens_on_the_spot {
            self.complete_open(call);
            self.note_descriptors();
            let (_, opened) = self.opened.pop().expect("answered just now");
            return OpenStart::Done(opened);
        }
        if self.opens_answer_themselves {
            self.answering.push((call, 1));
            return OpenStart::Started;
        }
        self.pending.push(Op::Open(call));
        self.note_descriptors();
        OpenStart::Started
    }
    fn take_opened(&mut self, out: &mut Vec<(u64, OpenResult<'a>)>) {
        for (call, looks) in std::mem::take(&mut self.answering) {
            match looks {
                0 => self.complete_open(call),
                _ => self.answering.push((call, looks - 1)),
            }
        }
        out.append(&mut self.opened);
    }
    fn cached(&mut self, _fd: &FdRef<'a>, _offset: u64, _len: u64) -> Option<bool> {
        self.log.lock().unwrap().asked += 1;
        self.cached
    }
    /// Where the script says the files are cached, takes the read as `read` does: it
    /// completes as the script says, in the source's order.
    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        let mut log = self.log.lock().unwrap();
        log.cached_tried += 1;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", req.fd().raw())).unwrap();
        if (self.refuse_nowait)(&path) {
            return FromCache::Refused(req);
        }
        if self.cached != Some(true) {
            return FromCache::Missed(req);
        }
        log.cached_now += 1;
        drop(log);
        self.read(req);
        FromCache::Taken { all: true }
    }
    fn rebind<'b>(self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        assert!(self.pending.is_empty(), "rebinding with reads in flight");
        let s = *self;
        Box::new(Scripted {
            pending: Vec::new(),
            cancelled: s.cancelled,
            attempts: s.attempts,
            script: s.script,
            reverse: s.reverse,
            lazy: s.lazy,
            cached: s.cached,
            refuse_nowait: s.refuse_nowait,
            async_open: s.async_open,
            opens_answer_themselves: s.opens_answer_themselves,
            opens_on_the_spot: s.opens_on_the_spot,
            answering: s.answering,
            open_errors: s.open_errors,
            opened: s
                .opened
                .into_iter()
                .map(|(id, r)| (id, r.map(Opened::attach)))
                .collect(),
            opener: s.opener,
            watch: s.watch,
            fail_submit: s.fail_submit,
            hung: s.hung,
            log: s.log,
        })
    }
}

/// A source where each read's first `n` attempts get `act`, and later ones succeed.
fn first_attempts(n: u32, act: Act) -> Scripted<'static> {
    Scripted::new(move |c| if c.attempt < n { act } else { Act::Full })
}

/// A source where every read of `len` bytes at `offset` fails with `errno`, and others succeed.
fn fail_at(offset: u64, len: usize, errno: i32) -> Scripted<'static> {
    Scripted::new(move |c| {
        if c.offset == offset && c.len == len {
            Act::Fail(errno)
        } else {
            Act::Full
        }
    })
}

/// Bytes that tell files and offsets apart, all below 0x80 (so never [`POISON`]).
fn content(file: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 251 + i * 7 + file * 13) % 128) as u8)
        .collect()
}

/// What every region is filled with before it is read into.
const POISON: u8 = 0xA5;

struct Files {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    data: Vec<Vec<u8>>,
}

impl Files {
    /// The directory as `/proc/self/fd` names it.
    fn dir(&self) -> PathBuf {
        self._dir.path().canonicalize().unwrap()
    }
}

/// Files of these sizes, on the disk (so that `O_DIRECT` is what it claims).
fn files(sizes: &[usize]) -> Files {
    let dir = disk_tempdir();
    let mut paths = Vec::new();
    let mut data = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let p = dir.path().join(format!("f{i}"));
        let bytes = content(i, len);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
        paths.push(p);
        data.push(bytes);
    }
    Files {
        _dir: dir,
        paths,
        data,
    }
}

fn engine<'a>(io: Scripted<'a>, pool: usize, read_size: usize) -> Engine<'a> {
    engine_windowed(io, pool, read_size, pool)
}

/// Like [`engine`], with the limits `set` changes: settings are made before the engine is,
/// never changed under it.
fn engine_with<'a>(
    io: Scripted<'a>,
    (pool, read_size): (usize, usize),
    set: impl FnOnce(&mut Limits),
) -> Engine<'a> {
    let mut limits = limits(read_size, pool);
    set(&mut limits);
    poisoned(io, pool, limits)
}

/// An engine whose read-ahead of cached files stays within `warm_window` bytes; every region
/// is filled with [`POISON`] before it is read into.
fn engine_windowed<'a>(
    io: Scripted<'a>,
    pool: usize,
    read_size: usize,
    warm_window: usize,
) -> Engine<'a> {
    poisoned(io, pool, limits(read_size, warm_window))
}

/// An engine with `limits` and a pool of `pool` bytes; every read's bytes are filled with
/// [`POISON`] before it is read into (by `Scripted::read`).
fn poisoned(io: Scripted<'_>, pool: usize, limits: Limits) -> Engine<'_> {
    Engine::new(
        Box::new(io),
        Pool::with_capacity(pool, false).unwrap(),
        limits,
    )
}

fn queue_paths(e: &mut Engine<'_>, f: &Files) {
    for p in &f.paths {
        e.push_range(Source::Path(p.clone().into()), 0, u64::MAX, false)
            .unwrap();
    }
}

fn assert_pool_empty(e: &Engine<'_>) {
    assert_eq!(pool(e).used(), 0, "every region is back");
    assert_eq!(pool(e).lent(), 0);
}
