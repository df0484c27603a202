//! The engine against a scripted completion source: short reads, EOF mid-region, errors,
//! retries, reordering and reads dropped in flight, page-cache hints and offloaded reads,
//! and opens done by the source, with no kernel ring involved.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use std::mem;

use super::*;
use crate::consts::{MAX_RETRIES, OFFLOAD_MIN};
use crate::io::{open_source, FromCache, OpenResult};
use crate::source::{raw_fd, RawFd};
use crate::sys::Opener;
use crate::tests::{direct_io_on, disk_tempdir};

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

/// Descriptors of this process open on files under `dir`. Each test has its own directory,
/// so tests running alongside do not count.
pub(crate) fn fds_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
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
    /// Whether `read_if_cached` refuses every read, as a filesystem without `RWF_NOWAIT`.
    refuse_nowait: bool,
    /// Whether `start_open` takes opens (completed like reads); else paths are opened with
    /// `Io::open`.
    async_open: bool,
    /// Errnos the next opens of a path get, in turn; after them it is really opened.
    open_errors: HashMap<PathBuf, VecDeque<i32>>,
    /// Opens completed and not yet taken.
    opened: Vec<(u64, OpenResult)>,
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
            refuse_nowait: false,
            async_open: false,
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
            offset: req.offset(),
            len: req.len(),
            attempt: *attempt,
            offload: req.offload(),
            offloaded_before: 0,
            direct: req.is_direct(),
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
        let result = match scripted {
            Some(errno) => Err(errno),
            None => OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(&call.path)
                .map(|file| (file, flags))
                .map_err(|e| e.raw_os_error().expect("an OS error")),
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

/// The orders a source may complete in: `(reverse, lazy)`.
const ORDERS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

impl<'a> Io<'a> for Scripted<'a> {
    fn backend(&self) -> Backend {
        Backend::Pread
    }
    fn read(&mut self, req: ReadReq<'a>) {
        let call = Call {
            offset: req.offset(),
            len: req.len(),
            attempt: self.attempts.get(&req.id()).copied().unwrap_or(0),
            offload: req.offload(),
            offloaded_before: 0,
            direct: req.is_direct(),
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
    fn start_open(&mut self, file: u64, path: &Path, direct: bool) -> bool {
        if !self.async_open {
            return false;
        }
        let call = OpenCall {
            file,
            path: path.to_path_buf(),
            direct,
        };
        self.log.lock().unwrap().opens.push(call.clone());
        self.pending.push(Op::Open(call));
        self.note_descriptors();
        true
    }
    fn take_opened(&mut self, out: &mut Vec<(u64, OpenResult)>) {
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
        if self.refuse_nowait {
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
            open_errors: s.open_errors,
            opened: s.opened,
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

/// An engine with `limits` and a pool of `pool` bytes; every region is filled with
/// [`POISON`] before it is read into.
fn poisoned(io: Scripted<'_>, pool: usize, limits: Limits) -> Engine<'_> {
    let mut e = Engine::new(Box::new(io), Pool::with_capacity(pool).unwrap(), limits);
    e.set_poison(POISON);
    e
}

/// The engine's settings in these tests: one window for every cached read, offloading
/// large cached reads (`offload(true)`).
fn limits(read_size: usize, warm_window: usize) -> Limits {
    Limits {
        read_size,
        direct: false,
        depth: 16,
        max_open: 4,
        // No bound but the pool's (larger than any test's): the tests of a window set one.
        cold_window: usize::MAX / 2,
        warm_window,
        inline_window: warm_window,
        small_window: warm_window,
        offload_depth: 2,
        offload: true,
        drain_timeout: crate::consts::DEFAULT_DRAIN_TIMEOUT,
    }
}

/// Every queued file, read through `fill_buf`/`consume`: its bytes or its error's message.
fn read_all(e: &mut Engine<'_>) -> Vec<Result<Vec<u8>, String>> {
    read_all_checking(e, |_| {})
}

/// Like [`read_all`], calling `check` after every `fill_buf`.
fn read_all_checking(
    e: &mut Engine<'_>,
    mut check: impl FnMut(&Engine<'_>),
) -> Vec<Result<Vec<u8>, String>> {
    let mut out = Vec::new();
    loop {
        let mut bytes = Vec::new();
        let res = loop {
            match e.fill_buf() {
                Ok([]) => break Ok(bytes),
                Ok(buf) => {
                    // Every byte shown is consumed in turn, so checking those is enough.
                    let n = buf.len().min(1000);
                    assert!(
                        !buf[..n].contains(&POISON),
                        "bytes no read wrote were exposed"
                    );
                    bytes.extend_from_slice(&buf[..n]);
                    e.consume(n);
                    check(e);
                }
                Err(err) => break Err(err.to_string()),
            }
        };
        out.push(res);
        if !e.move_to_next_file().unwrap() {
            return out;
        }
    }
}

fn queue_paths(e: &mut Engine<'_>, f: &Files) {
    for p in &f.paths {
        e.push(Source::Path(p.as_path().into()), 0, u64::MAX)
            .unwrap();
    }
}

fn assert_exact(got: &[Result<Vec<u8>, String>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.as_ref().unwrap_or_else(|e| panic!("file {i}: {e}"));
        assert!(g == w, "file {i}: {} bytes, want {}", g.len(), w.len());
    }
}

fn assert_pool_empty(e: &Engine<'_>) {
    assert_eq!(e.pool().used(), 0, "every region is back");
    assert_eq!(e.pool().lent(), 0);
}

#[test]
fn reads_in_order_across_files() {
    let f = files(&[0, 1, 4095, 4096, 4097, 20_000, 100_000]);
    let mut e = engine(Scripted::new(|_| Act::Full), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

#[test]
fn short_reads_of_every_length_are_continued() {
    let f = files(&[3 * 4096 + 123, 5000]);
    for short in (1..=300).chain([511, 4095, 4096, 4097, 8191]) {
        let mut e = engine(first_attempts(1, Act::Short(short)), 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert!(e.stats().short_reads > 0, "short {short}");
        assert_pool_empty(&e);
    }
}

/// The rest of a short read, queued while a completion is handled by a step that does not
/// block (`refill`, as `consume` and `skip` call it), is submitted by that step: it must not
/// wait in the submission queue until the consumer next blocks.
#[test]
fn continuations_are_submitted_by_the_step_that_makes_them() {
    let f = files(&[16 << 10]);
    let io = first_attempts(1, Act::Short(100));
    let log = io.log.clone();
    let mut e = engine(io, 64 << 10, 8192);
    // Queuing issues the file's two reads, and submits them.
    queue_paths(&mut e, &f);
    assert_eq!(log.lock().unwrap().reads.len(), 2);
    assert_eq!(log.lock().unwrap().unsubmitted, 0);
    // Both come back short; nothing else is left to issue, so only the continuations go.
    e.refill().unwrap();
    let log = log.lock().unwrap();
    assert_eq!(e.stats().short_reads, 2);
    assert_eq!(
        log.reads.len(),
        4,
        "the rest of each short read was asked for"
    );
    assert_eq!(log.unsubmitted, 0, "continuations queued but not submitted");
}

#[test]
fn one_byte_at_a_time() {
    let f = files(&[9000, 3]);
    let mut e = engine(Scripted::new(|_| Act::Short(1)), 16 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
}

#[test]
fn eof_in_the_middle_of_a_region_ends_the_file_there() {
    let f = files(&[30_000, 5000]);
    // The file "shrinks": the read at 8192 returns 100 bytes, then end of file.
    let mut e = engine(
        Scripted::new(|c| match (c.offset, c.attempt) {
            (8192, 0) => Act::Short(100),
            (8292, _) => Act::Eof,
            (o, _) if o > 8192 && o < 30_000 => Act::Eof,
            _ => Act::Full,
        }),
        64 << 10,
        8192,
    );
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert_eq!(got[0].as_ref().unwrap(), &f.data[0][..8292]);
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert_pool_empty(&e);
}

#[test]
fn an_error_fails_its_file_alone_naming_path_and_offset() {
    let f = files(&[10_000, 20_000, 3000]);
    let mut e = engine(fail_at(8192, 8192, libc::EIO), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    // File 1's second region fails; its first region is delivered, then the error.
    let mut first = Vec::new();
    assert_eq!(e.fill_buf().unwrap(), &f.data[0][..8192]);
    e.consume(8192);
    first.extend(e.fill_buf().unwrap().to_vec());
    let n = first.len();
    e.consume(n);
    assert!(e.fill_buf().unwrap().is_empty());
    assert!(e.move_to_next_file().unwrap());
    let mut second = Vec::new();
    let err = loop {
        match e.fill_buf() {
            Ok(b) => {
                assert!(!b.is_empty(), "the error comes before the end");
                second.extend_from_slice(b);
                let n = b.len();
                e.consume(n);
            }
            Err(err) => break err,
        }
    };
    assert_eq!(second, &f.data[1][..8192]);
    let msg = err.to_string();
    assert!(
        msg.contains(&*f.paths[1].to_string_lossy()) && msg.contains("offset 8192"),
        "{msg}"
    );
    assert_eq!(err.raw_os_error(), None);
    assert!(err.get_ref().unwrap().is::<Error>());
    // It keeps failing until the reader moves on.
    assert!(e.fill_buf().is_err());
    assert!(e.move_to_next_file().unwrap());
    let rest = read_all(&mut e);
    assert_exact(&rest, &f.data[2..]);
    assert_eq!(e.stats().files_failed, 1);
    assert_pool_empty(&e);
}

#[test]
fn passing_errors_are_retried() {
    let sizes = [20_000, 100];
    // Each read of 8 KiB (or the tail) fails twice, then goes through.
    let reads: usize = sizes.iter().map(|s: &usize| s.div_ceil(8192)).sum();
    for errno in [libc::EINTR, libc::EAGAIN, libc::ECANCELED] {
        let f = files(&sizes);
        let mut e = engine(first_attempts(2, Act::Fail(errno)), 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert_eq!(e.stats().retries, 2 * reads as u64, "errno {errno}");
    }
}

#[test]
fn retries_are_bounded() {
    let f = files(&[5000, 100]);
    let mut e = engine(fail_at(0, 5000, libc::EAGAIN), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert!(got[0].as_ref().unwrap_err().contains("offset 0"));
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert_eq!(e.stats().retries, u64::from(MAX_RETRIES));
}

#[test]
fn completions_out_of_order() {
    let f = files(&[50_000, 7, 12_345, 0, 70_000]);
    let mut io = first_attempts(1, Act::Short(1000));
    io.reverse = true;
    let mut e = engine(io, 32 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

#[test]
fn moving_on_leaves_reads_in_flight_as_orphans() {
    let f = files(&[200_000, 5000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 128 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf().unwrap(), &f.data[0][..8192]);
    assert!(
        e.core.io.in_flight() > 1,
        "read-ahead of the current file is in flight"
    );
    assert!(e.move_to_next_file().unwrap());
    let orphaned = e.core.chunks.orphans() as u64;
    let discarded = e.stats().reads_discarded;
    assert!(orphaned > 0);
    let rest = read_all(&mut e);
    assert_exact(&rest, &f.data[1..]);
    drop(rest);
    // Each orphan came back once, counted as discarded, or is still out (and comes back
    // through the drain in `Drop`, which checks every loan returns).
    let came_back = e.stats().reads_discarded - discarded;
    assert_eq!(came_back + e.core.chunks.orphans() as u64, orphaned);
}

#[test]
fn activating_a_partly_read_file_restarts_it() {
    let f = files(&[50_000, 3000]);
    let file = std::fs::File::open(&f.paths[0]).unwrap();
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 32 << 10, 4096);
    e.push(Source::Borrowed(&file), 0, u64::MAX).unwrap();
    e.push(Source::Path(f.paths[1].as_path().into()), 0, u64::MAX)
        .unwrap();
    let n = e.fill_buf().unwrap().len();
    e.consume(n - 10);
    assert_eq!(e.file_offset(), (n - 10) as u64);
    e.activate(&file, u64::MAX).unwrap();
    assert_eq!(e.file_offset(), 0);
    // It reads again from byte 0, and the file queued behind it still follows.
    assert_exact(&read_all(&mut e), &f.data);
}

#[test]
fn a_borrowed_file_is_read_through_a_duplicate_closed_once_its_reads_are_done() {
    let f = files(&[50_000, 3000]);
    let (big, small) = (
        std::fs::File::open(&f.paths[0]).unwrap(),
        std::fs::File::open(&f.paths[1]).unwrap(),
    );
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 32 << 10, 4096);
    e.push(Source::Borrowed(&small), 0, u64::MAX).unwrap();
    e.push(Source::Borrowed(&big), 0, u64::MAX).unwrap();
    // Reads name the reader's own descriptor, never the caller's number.
    let dup = e.core.queue.front().unwrap().fd().unwrap().raw();
    assert_ne!(dup, raw_fd(&small));
    assert_eq!(fds_under(&f.dir()), 4, "each file and its duplicate");
    assert_eq!(e.fill_buf().unwrap(), &f.data[1][..]);
    assert_eq!(fds_under(&f.dir()), 3, "the small file's reads are done");
    // Read again: duplicated again, and still found by the caller's descriptor.
    e.consume(10);
    e.activate(&small, u64::MAX).unwrap();
    assert_exact(&read_all(&mut e), &[f.data[1].clone(), f.data[0].clone()]);
    drop(e);
    assert_eq!(fds_under(&f.dir()), 2, "the caller's files alone");
}

#[test]
fn drop_with_reads_in_flight_gets_every_loan_back() {
    let f = files(&[300_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(e.pool().lent() > 1);
    drop(e); // `Drop for Engine` debug-asserts that every loan came back.
}

/// A drain that times out (reads a hung device never completes) leaks the backend and the
/// pool rather than free them under the kernel, counts itself for the process, and `close`
/// says what happened; the drop after it does not wait again (`Drop for Engine` asserts the
/// pool it frees has no loan out).
#[test]
fn a_drain_that_times_out_leaks_counts_and_says_so() {
    let f = files(&[300_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    io.hung = true;
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(e.pool().lent() > 1);
    let before = crate::stats::drains_abandoned();
    let err = e.close().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("gave up after"), "{err}");
    assert!(err.to_string().contains("leaked"), "{err}");
    assert!(crate::stats::drains_abandoned() > before);
}

/// Files with reads of every kind at a 64 KiB read size: whole 64 KiB reads, tails below
/// and at 64 KiB, files of one byte and of none.
const WARM_SIZES: [usize; 9] = [
    300_000, 70_000, 5000, 65_536, 65_535, 0, 200_000, 1, 131_072,
];

/// Reads every file of [`WARM_SIZES`] with the page cache answering `cached` and the
/// given read size, window and completion order (`short`: every read's first attempt comes
/// back with at most that many bytes). Checks the bytes, that the pool held no more than
/// the window while cached, and how reads were offloaded; returns the log and the stats.
fn read_warm(
    cached: Option<bool>,
    read_size: usize,
    window: usize,
    order: (bool, bool),
    short: Option<usize>,
) -> (Log, Stats) {
    let f = files(&WARM_SIZES);
    let mut io = match short {
        Some(n) => first_attempts(1, Act::Short(n)),
        None => Scripted::new(|_| Act::Full),
    }
    .ordered(order);
    io.cached = cached;
    let log = io.log.clone();
    let mut e = engine_windowed(io, 1 << 20, read_size, window);
    queue_paths(&mut e, &f);
    let warm = cached == Some(true);
    let got = read_all_checking(&mut e, |e| {
        let pool = e.pool();
        assert!(
            !warm || pool.live_regions() <= 1 || pool.live_bytes() <= window,
            "{} bytes in {} regions held, window {window}",
            pool.live_bytes(),
            pool.live_regions()
        );
    });
    assert_exact(&got, &f.data);
    let stats = e.stats();
    drop(e);
    let log = mem::take(&mut *log.lock().unwrap());
    assert_eq!(log.offloaded, 0, "every offloaded read came back");
    for c in &log.reads {
        assert!(
            !c.offload || c.len >= OFFLOAD_MIN,
            "a read of {} bytes was offloaded",
            c.len
        );
        if c.attempt > 0 {
            assert!(!c.offload, "continuations are copied inline");
        }
    }
    let offloaded = log.reads.iter().filter(|c| c.offload).count();
    assert_eq!(stats.reads_offloaded, offloaded as u64);
    assert!(log.peak_offloaded <= 2, "offload_depth is 2");
    if warm {
        assert!(stats.peak_pool_bytes <= window as u64, "{stats:?}");
    } else {
        assert_eq!(offloaded, 0, "nothing is offloaded unless cached");
    }
    (log, stats)
}

#[test]
fn cached_files_offload_large_reads_within_the_window() {
    for order in ORDERS {
        for short in [None, Some(5000)] {
            let (log, stats) = read_warm(Some(true), 64 << 10, 192 << 10, order, short);
            let what = format!("order {order:?}, short {short:?}");
            // Every first attempt of 64 KiB or more is offloaded, but those the consumer
            // copies itself rather than wait while both offload slots are taken.
            for c in log.reads.iter().filter(|c| c.attempt == 0) {
                let helped = c.len >= OFFLOAD_MIN && c.offloaded_before == 2;
                assert_eq!(c.offload || helped, c.len >= OFFLOAD_MIN, "{what}: {c:?}");
            }
            // Those are the files' whole 64 KiB reads...
            let large = log
                .reads
                .iter()
                .filter(|c| c.attempt == 0 && c.len >= OFFLOAD_MIN)
                .count();
            let whole: usize = WARM_SIZES.iter().map(|s| s / (64 << 10)).sum();
            assert_eq!(large, whole, "{what}");
            // ...and one is copied inline only while two others are offloaded.
            assert!(
                stats.reads_offloaded >= whole.min(2) as u64,
                "{what}: {stats:?}"
            );
            if order.1 {
                // Reads pile up when completed lazily: the cap is what holds them back.
                assert_eq!(log.peak_offloaded, 2, "{what}");
            }
        }
    }
}

#[test]
fn a_window_below_a_page_multiple_still_bounds_the_pool() {
    for order in ORDERS {
        for window in [135_072, 200_000] {
            read_warm(Some(true), 64 << 10, window, order, None);
        }
        read_warm(Some(true), 100_000, 230_000, order, None);
    }
}

#[test]
fn uncached_files_offload_nothing_and_may_fill_the_pool() {
    for cached in [None, Some(false)] {
        for order in ORDERS {
            let (log, stats) = read_warm(cached, 64 << 10, 192 << 10, order, None);
            assert!(log.reads.iter().all(|c| !c.offload));
            if order.1 {
                assert!(
                    stats.peak_pool_bytes > 192 << 10,
                    "{cached:?} {order:?}: {stats:?}"
                );
            }
        }
    }
}

#[test]
fn reads_below_64k_are_never_offloaded() {
    for order in ORDERS {
        // A window of the whole pool: this is about offloading only (see the next test).
        let (log, _) = read_warm(Some(true), 60 << 10, 1 << 20, order, None);
        assert!(log.reads.iter().all(|c| c.len < OFFLOAD_MIN && !c.offload));
        // (`read_warm` checks that `Stats::reads_offloaded` agrees.) The same files read in
        // reads of 64 KiB are offloaded: the size alone kept those above inline.
        let (_, stats) = read_warm(Some(true), OFFLOAD_MIN, 1 << 20, order, None);
        assert!(stats.reads_offloaded > 0, "{order:?}: {stats:?}");
    }
}

#[test]
fn cached_files_read_in_small_reads_stay_within_the_window() {
    for order in ORDERS {
        read_warm(Some(true), 60 << 10, 128 << 10, order, None);
    }
}

/// Reads `sizes` as cached files through an engine with `limits`; checks the bytes and
/// returns the stats and the log.
fn read_cached(sizes: &[usize], order: (bool, bool), limits: Limits) -> (Stats, Log) {
    read_through(Scripted::new(|_| Act::Full).ordered(order), sizes, limits)
}

/// Reads `sizes` as cached files through `io` and an engine with `limits`; checks the bytes
/// and returns the stats and the log.
fn read_through(mut io: Scripted<'static>, sizes: &[usize], limits: Limits) -> (Stats, Log) {
    let f = files(sizes);
    io.cached = Some(true);
    let log = io.log.clone();
    let mut e = poisoned(io, 1 << 20, limits);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    let stats = e.stats();
    drop(e);
    let log = mem::take(&mut *log.lock().unwrap());
    (stats, log)
}

/// The settings of a reader built without `offload(true)`, with the given windows (small,
/// inline).
fn not_offloading(windows: (usize, usize)) -> Limits {
    Limits {
        small_window: windows.0,
        inline_window: windows.1,
        offload: false,
        ..limits(64 << 10, 1 << 20)
    }
}

#[test]
fn without_offload_cached_reads_are_copied_at_once_within_their_windows() {
    let small = [5000, 1, 0, 12_000, 8192, 4096, 9000, 12_288, 100, 7000];
    let windows = (32 << 10, 64 << 10);
    for order in ORDERS {
        let (stats, log) = read_cached(&WARM_SIZES, order, not_offloading(windows));
        assert_eq!(stats.reads_offloaded, 0, "{order:?}");
        assert!(log.reads.iter().all(|c| !c.offload));
        // Every large read was copied at once, found cached without asking the backend:
        // only every `SMALL_READS_PER_HINT`-th small read asks.
        let large = log.reads.iter().filter(|c| c.len >= OFFLOAD_MIN).count();
        assert_eq!(stats.reads_cached, large as u64, "{order:?}");
        assert_eq!(log.cached_now, large, "{order:?}");
        let small_reads = log.reads.len() - large;
        assert!(log.asked <= small_reads.div_ceil(16), "{order:?}: {log:?}");
        // One read at a time: the region just consumed is the next one written.
        assert!(stats.peak_pool_bytes <= 64 << 10, "{order:?}: {stats:?}");
        // Small reads only: the read-ahead holds no more than the small window.
        let (stats, _) = read_cached(&small, order, not_offloading(windows));
        assert!(stats.peak_pool_bytes <= 32 << 10, "{order:?}: {stats:?}");
    }
}

#[test]
fn a_read_the_cache_does_not_hold_gives_the_device_depth() {
    for order in ORDERS {
        let f = files(&[1 << 20, 1 << 20]);
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.cached = Some(false);
        let log = io.log.clone();
        let limits = Limits {
            cold_window: 256 << 10,
            ..not_offloading((32 << 10, 64 << 10))
        };
        let mut e = poisoned(io, 1 << 20, limits);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        let stats = e.stats();
        drop(e);
        let log = log.lock().unwrap();
        // Each tried the cache first, then went through the backend.
        assert_eq!(stats.reads_cached, 0, "{order:?}");
        assert_eq!(log.cached_tried, log.reads.len(), "{order:?}");
        assert!(stats.peak_pool_bytes <= 256 << 10, "{order:?}: {stats:?}");
        if order.1 {
            // Completed lazily, reads pile up to the cold window, not one read's.
            assert!(stats.peak_pool_bytes > 64 << 10, "{order:?}: {stats:?}");
        }
    }
}

/// A source that opens paths itself, completing opens and reads in `order`, and counts the
/// descriptors on `f`'s files.
fn opening(f: &Files, order: (bool, bool)) -> Scripted<'static> {
    let mut io = Scripted::new(|_| Act::Full).ordered(order);
    io.async_open = true;
    io.watch = Some(f.dir());
    io
}

/// Sizes for the open tests: empty files, files of one read and of several.
const OPEN_SIZES: [usize; 12] = [
    0, 1, 5000, 70_000, 4096, 0, 20_000, 3, 100_000, 8192, 1, 65_536,
];

#[test]
fn paths_opened_by_the_source_read_exactly_within_the_cap() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        for max_open in [1, 2, 4] {
            let what = format!("order {order:?}, max_open {max_open}");
            let io = opening(&f, order);
            let log = io.log.clone();
            let mut e = engine(io, 64 << 10, 8192);
            e.sched.limits_mut().max_open = max_open;
            queue_paths(&mut e, &f);
            let got = read_all_checking(&mut e, |e| {
                // A file whose reads are all done holds no descriptor, while it is current.
                let front = e.core.queue.front().unwrap();
                let Source::Path(path) = &front.source else {
                    unreachable!()
                };
                if front.all_issued() && front.progress().in_flight() == 0 {
                    let path = f.dir().join(path.file_name().unwrap());
                    assert_eq!(fds_under(&path), 0, "{what}: {path:?} still open");
                }
            });
            assert_exact(&got, &f.data);
            assert_eq!(fds_under(&f.dir()), 0, "{what}: every file closed");
            assert_eq!(e.stats().files_opened, f.paths.len() as u64, "{what}");
            assert_pool_empty(&e);
            drop(e);
            let log = log.lock().unwrap();
            for p in &f.paths {
                assert_eq!(log.opens_of(p), 1, "{what}: {p:?}");
            }
            assert!(log.sync_opens.is_empty(), "{what}");
            assert!(
                (1..=max_open).contains(&log.peak_descriptors),
                "{what}: {} descriptors at once",
                log.peak_descriptors
            );
        }
    }
}

#[test]
fn direct_opens_go_through_the_source_with_the_flag() {
    let f = files(&OPEN_SIZES);
    // On the disk, where the files take O_DIRECT (or the test fails under
    // READAHEAD_REQUIRE_URING=1: see `skip_refused`).
    let direct = direct_io_on(&f.paths[1]);
    for order in ORDERS {
        let io = opening(&f, order);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        e.sched.limits_mut().direct = true;
        queue_paths(&mut e, &f);
        // Where the filesystem refuses O_DIRECT (EINVAL), the file is opened here without.
        assert_exact(&read_all(&mut e), &f.data);
        let reads_direct = e.stats().reads_direct;
        assert_eq!(reads_direct > 0, direct, "{order:?}: {reads_direct}");
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert!(log.opens.iter().all(|o| o.direct), "{order:?}");
        assert_eq!(log.opens.len(), f.paths.len(), "{order:?}");
    }
}

/// A source like [`opening`] whose first opens of the given files fail with these errnos.
fn opening_failing(f: &Files, order: (bool, bool), errors: &[(usize, i32)]) -> Scripted<'static> {
    let mut io = opening(f, order);
    for &(i, errno) in errors {
        io.open_errors
            .entry(f.paths[i].clone())
            .or_default()
            .push_back(errno);
    }
    io
}

#[test]
fn a_failed_open_fails_that_file_alone_naming_it() {
    let f = files(&OPEN_SIZES[..6]);
    for order in ORDERS {
        let io = opening_failing(&f, order, &[(1, libc::ENOENT), (3, libc::EACCES)]);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        let got = read_all(&mut e);
        for (i, (g, want)) in got.iter().zip(&f.data).enumerate() {
            let errno = match i {
                1 => libc::ENOENT,
                3 => libc::EACCES,
                _ => {
                    assert_eq!(g.as_ref().unwrap(), want, "{order:?} file {i}");
                    continue;
                }
            };
            let msg = g.as_ref().unwrap_err();
            let os = io::Error::from_raw_os_error(errno).to_string();
            let path = f.paths[i].to_string_lossy();
            assert!(
                msg.contains(&*path) && msg.contains(&os),
                "{order:?}: {msg}"
            );
        }
        assert_eq!(e.stats().files_failed, 2);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert!(log.sync_opens.is_empty(), "no retry of a missing file");
        assert_eq!(log.opens.len(), f.paths.len());
    }
}

#[test]
fn refused_flags_fall_back_to_an_open_here() {
    let f = files(&OPEN_SIZES);
    let refused = [
        (1, libc::EPERM),
        (2, libc::EINVAL),
        (5, libc::EPERM),
        (8, libc::EINVAL),
    ];
    for order in ORDERS {
        let io = opening_failing(&f, order, &refused);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert_eq!(e.stats().files_opened, f.paths.len() as u64);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let mut log = log.lock().unwrap();
        let want: Vec<_> = refused.iter().map(|&(i, _)| f.paths[i].clone()).collect();
        log.sync_opens.sort();
        assert_eq!(log.sync_opens, want, "{order:?}");
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
    }
}

#[test]
fn emfile_on_a_later_file_lowers_the_cap_and_opens_it_later() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        let io = opening_failing(&f, order, &[(2, libc::EMFILE)]);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        // Remembered only once the cap was lowered.
        assert!(e.sched.opens().lowered(), "{order:?}: the cap was lowered");
        // Opens went through again, so the cap came back as configured.
        assert_eq!(
            e.sched.opens().max_open(e.sched.limits()),
            4,
            "{order:?}: the cap recovers"
        );
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert_eq!(log.opens_of(&f.paths[2]), 2, "{order:?}: opened again");
        assert!(log.sync_opens.is_empty(), "{order:?}");
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
    }
}

#[test]
fn emfile_on_the_current_file_closes_files_opened_ahead_and_retries() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        let io = opening_failing(&f, order, &[(0, libc::EMFILE)]);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert_eq!(log.sync_opens, [f.paths[0].clone()], "{order:?}");
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
        if order == (true, false) {
            // Files 1 to 3 opened before file 0's open failed: closed, and opened again.
            for p in &f.paths[1..4] {
                assert_eq!(log.opens_of(p), 2, "{p:?}");
            }
        }
    }
}

#[test]
fn moving_past_a_file_being_opened_loses_nothing() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        let io = opening(&f, order);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert!(
            e.core.queue.front().unwrap().status().is_opening(),
            "{order:?}"
        );
        assert!(e.move_to_next_file().unwrap());
        // File 1's open started when it was queued; moving on reaped it, unless the source
        // completes only when the engine waits.
        let lazy = order.1;
        assert_eq!(
            e.core.queue.front().unwrap().status().is_opening(),
            lazy,
            "{order:?}"
        );
        assert!(e.move_to_next_file().unwrap());
        assert_exact(&read_all(&mut e), &f.data[2..]);
        assert_pool_empty(&e);
        // Late opens of the files moved past were closed as they came.
        let pending = e.sched.opens().in_flight();
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}, {pending} opens pending");
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        for p in &f.paths {
            assert_eq!(log.opens_of(p), 1, "{order:?}: {p:?}");
        }
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
    }
}

#[test]
fn dropping_with_opens_in_flight_leaks_nothing() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        for read_first in [false, true] {
            let mut e = engine(opening(&f, order), 64 << 10, 8192);
            queue_paths(&mut e, &f);
            if read_first {
                // File 0's bytes, or its end at once where it is empty (as it is here).
                let first = e.fill_buf().unwrap();
                assert!(f.data[0].starts_with(first), "{order:?}");
                assert_eq!(first.is_empty(), f.data[0].is_empty(), "{order:?}");
                assert!(e.move_to_next_file().unwrap());
                assert_eq!(e.fill_buf().unwrap()[0], f.data[1][0]);
            }
            assert!(e.sched.opens().in_flight() > 0, "{order:?} {read_first}");
            drop(e);
            assert_eq!(fds_under(&f.dir()), 0, "{order:?} {read_first}");
        }
    }
}

#[test]
fn moving_past_a_file_with_reads_in_flight_stays_within_the_cap() {
    let f = files(&[300_000, 10, 10]);
    let io = opening(&f, (false, true));
    let log = io.log.clone();
    let mut e = engine(io, 256 << 10, 16 << 10);
    e.sched.limits_mut().max_open = 2;
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(
        e.core.io.in_flight() > 1,
        "file 0's read-ahead is in flight"
    );
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
    drop(e);
    let peak = log.lock().unwrap().peak_descriptors;
    assert!(
        peak <= 2,
        "{peak} descriptors held or being opened, max_open 2"
    );
}

#[test]
fn paths_the_source_opens_that_are_not_files_fail_alone() {
    let f = files(&[5000, 10]);
    let sub = f.dir().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let missing = f.dir().join("missing");
    for order in ORDERS {
        let mut e = engine(opening(&f, order), 64 << 10, 8192);
        for p in [&f.paths[0], &sub, &missing, &f.paths[1]] {
            e.push(Source::Path(p.as_path().into()), 0, u64::MAX)
                .unwrap();
        }
        let got = read_all(&mut e);
        assert_eq!(got[0].as_ref().unwrap(), &f.data[0]);
        let dir_err = got[1].as_ref().unwrap_err();
        assert!(
            dir_err.contains("sub") && dir_err.contains("directory"),
            "{dir_err}"
        );
        let missing_err = got[2].as_ref().unwrap_err();
        assert!(missing_err.contains("missing"), "{missing_err}");
        assert_eq!(got[3].as_ref().unwrap(), &f.data[1]);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}");
    }
}

#[test]
fn passing_open_errors_are_retried() {
    let f = files(&OPEN_SIZES);
    // File 3 twice: a retried open may fail again.
    let errors = [
        (1, libc::EINTR),
        (2, libc::EAGAIN),
        (3, libc::ECANCELED),
        (3, libc::ECANCELED),
    ];
    for order in ORDERS {
        let io = opening_failing(&f, order, &errors);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert_eq!(e.stats().files_failed, 0, "{order:?}");
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}");
        let log = log.lock().unwrap();
        // Each file opened once, and once more for each passing error it got.
        for (i, p) in f.paths.iter().enumerate() {
            let want = 1 + errors.iter().filter(|&&(j, _)| j == i).count();
            assert_eq!(log.opens_of(p), want, "{order:?}: file {i}");
        }
        assert!(log.sync_opens.is_empty(), "{order:?}");
    }
}

#[test]
fn open_retries_are_bounded() {
    let f = files(&OPEN_SIZES[..4]);
    let errors = vec![(1, libc::ECANCELED); MAX_RETRIES as usize + 1];
    for order in ORDERS {
        let io = opening_failing(&f, order, &errors);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        let got = read_all(&mut e);
        let msg = got[1].as_ref().unwrap_err();
        let os = io::Error::from_raw_os_error(libc::ECANCELED).to_string();
        assert!(
            msg.contains(&*f.paths[1].to_string_lossy()) && msg.contains(&os),
            "{msg}"
        );
        for i in [0, 2, 3] {
            assert_eq!(got[i].as_ref().unwrap(), &f.data[i], "{order:?}: file {i}");
        }
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}");
        let opens = log.lock().unwrap().opens_of(&f.paths[1]);
        assert_eq!(opens, MAX_RETRIES as usize + 1, "{order:?}");
    }
}

/// An engine reading with `O_DIRECT`, or `None` where `f`'s filesystem (the disk) refuses it
/// (see `skip_refused`).
fn direct_engine<'a>(io: Scripted<'a>, f: &Files) -> Option<Engine<'a>> {
    if !direct_io_on(&f.paths[0]) {
        return None;
    }
    let mut e = engine(io, 256 << 10, 16 << 10);
    e.sched.limits_mut().direct = true;
    Some(e)
}

/// Reads `f` with `O_DIRECT` from a filesystem that refuses `O_DIRECT` reads (not opens),
/// checking the bytes; what the source saw, or `None` where the test is skipped.
fn read_with_direct_reads_refused(f: &Files) -> Option<Arc<Mutex<Log>>> {
    let io = Scripted::new(|c| {
        if c.direct {
            Act::Fail(libc::EINVAL)
        } else {
            Act::Full
        }
    });
    let log = io.log.clone();
    let mut e = direct_engine(io, f)?;
    queue_paths(&mut e, f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
    assert!(e.stats().reads_direct > 0, "{:?}", e.stats());
    drop(e);
    assert_eq!(fds_under(&f.dir()), 0);
    Some(log)
}

#[test]
fn einval_on_a_direct_read_goes_on_buffered_on_the_same_descriptor() {
    let f = files(&[12_345, 100]);
    let Some(log) = read_with_direct_reads_refused(&f) else {
        return;
    };
    let log = log.lock().unwrap();
    let cleared: Vec<_> = log.direct_cleared.iter().map(|(_, p)| p.clone()).collect();
    let paths: Vec<_> = f.paths.iter().map(|p| p.canonicalize().unwrap()).collect();
    assert_eq!(cleared, paths, "each file once");
    assert_eq!(
        log.sync_opens, f.paths,
        "each file opened once, never again"
    );
    assert!(log.reads.iter().any(|c| !c.direct));
}

#[test]
fn einval_on_reads_issued_direct_before_it_was_turned_off_reads_them_again() {
    let f = files(&[200_000]);
    let Some(log) = read_with_direct_reads_refused(&f) else {
        return;
    };
    let log = log.lock().unwrap();
    // Several reads were in flight with O_DIRECT when the first failed: it was turned off
    // once, and the others were read again, buffered, on the same descriptor.
    let direct = log.reads.iter().filter(|c| c.direct).count();
    assert!(direct > 1, "{direct} direct reads");
    assert_eq!(log.direct_cleared.len(), 1);
}

#[test]
fn a_short_direct_read_before_the_end_is_read_on() {
    let f = files(&[100_000, 33_333, 5000]);
    for short in [1, 100, 4095, 4097, 10_000] {
        for order in ORDERS {
            let what = format!("short {short}, order {order:?}");
            let io = first_attempts(1, Act::Short(short)).ordered(order);
            let log = io.log.clone();
            let Some(mut e) = direct_engine(io, &f) else {
                return;
            };
            queue_paths(&mut e, &f);
            assert_exact(&read_all(&mut e), &f.data);
            assert!(e.stats().short_reads > 0, "{what}");
            assert!(e.stats().reads_direct > 0, "{what}");
            assert_pool_empty(&e);
            drop(e);
            assert_eq!(fds_under(&f.dir()), 0, "{what}");
            assert!(log.lock().unwrap().reads.iter().any(|c| c.direct), "{what}");
        }
    }
}

#[test]
fn a_direct_file_replying_one_byte_at_a_time_reads_whole() {
    let f = files(&[33_333, 9000]);
    let Some(mut e) = direct_engine(Scripted::new(|_| Act::Short(1)), &f) else {
        return;
    };
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert!(e.stats().reads_direct > 0, "{:?}", e.stats());
    assert_pool_empty(&e);
}

#[test]
fn a_direct_file_that_shrank_ends_where_its_reads_end() {
    let f = files(&[50_000, 5000]);
    // The file "shrinks" to 20,100 bytes: reads past that are short, then at its end.
    let io = Scripted::new(|c| match c.offset {
        o if o >= 20_100 => Act::Eof,
        o if o + c.len as u64 > 20_100 => Act::Short((20_100 - o) as usize),
        _ => Act::Full,
    });
    let Some(mut e) = direct_engine(io, &f) else {
        return;
    };
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert_eq!(got[0].as_ref().unwrap(), &f.data[0][..20_100]);
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert!(e.stats().reads_direct > 0, "{:?}", e.stats());
    assert_pool_empty(&e);
}

/// `fill_buf_at_least` over a pool of five pages read a page at a time, in every completion
/// order: runs of every length up to the pool, from every position, come back exact; those
/// straddling the pool's end (or a short read's gap) are copied, the others are not.
#[test]
fn runs_across_the_pool_end_are_spilled_exactly() {
    let f = files(&[150_001, 9000]);
    for order in ORDERS {
        for n in [1, 100, 4095, 4096, 4097, 9000, 5 * 4096] {
            let io = Scripted::new(|_| Act::Full).ordered(order);
            let mut e = engine(io, 5 * 4096, 4096);
            queue_paths(&mut e, &f);
            let mut got = Vec::new();
            loop {
                let run = e.fill_buf_at_least(n).unwrap();
                let left = f.data[0].len() - got.len();
                assert!(run.len() >= n.min(left), "{order:?} n={n}: {}", run.len());
                assert!(
                    !run.contains(&POISON),
                    "{order:?} n={n}: bytes no read wrote"
                );
                if run.is_empty() {
                    break;
                }
                // Consume a little less than asked, so runs start everywhere.
                let take = run.len().min(n.div_ceil(2) + 1);
                got.extend_from_slice(&run[..take]);
                e.consume(take);
            }
            assert!(got == f.data[0], "{order:?} n={n}: {} bytes", got.len());
            let spilled = e.stats().bytes_spilled;
            assert_eq!(spilled == 0, n == 1, "{order:?} n={n}: {spilled} spilled");
            assert!(e.move_to_next_file().unwrap());
            assert_exact(&read_all(&mut e), &f.data[1..]);
            assert_pool_empty(&e);
        }
    }
}

#[test]
fn a_run_larger_than_the_pool_is_refused_and_the_engine_goes_on() {
    let f = files(&[50_000]);
    let mut e = engine(Scripted::new(|_| Act::Full), 4 * 4096, 4096);
    queue_paths(&mut e, &f);
    let err = e.fill_buf_at_least(4 * 4096 + 1).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

/// A parser's loop over a file that fails at `fail` (a read of `read_size` bytes there
/// gets `EIO`): records of `n` bytes with `fill_buf_at_least`, and, once it answers with the
/// error, the bytes before it with `fill_buf`. Returns every byte before the error and the
/// error's message; panics if a short answer came before the failure, like an end would.
fn records_until_the_error(e: &mut Engine<'_>, n: usize, len: usize) -> (Vec<u8>, String) {
    let mut got = Vec::new();
    while let Ok(run) = e.fill_buf_at_least(n) {
        assert!(
            run.len() >= n || got.len() + run.len() == len,
            "a short answer ({} bytes at {}) where the file does not end",
            run.len(),
            got.len()
        );
        assert!(
            !run.is_empty(),
            "an end at {} where the file fails",
            got.len()
        );
        let take = run.len().min(n);
        got.extend_from_slice(&run[..take]);
        e.consume(take);
    }
    let err = loop {
        match e.fill_buf() {
            Ok([]) => panic!("an end at {} where the file fails", got.len()),
            Ok(buf) => {
                let k = buf.len();
                got.extend_from_slice(buf);
                e.consume(k);
            }
            Err(err) => break err.to_string(),
        }
    };
    (got, err)
}

/// A read error inside a record comes out as the file's error, never as a short record
/// that looks like the end of the file: in every completion order, for records that fit
/// before the failure and records that straddle it, in place and copied.
#[test]
fn a_record_across_a_failure_is_the_error_never_a_short_answer() {
    let f = files(&[40_000, 3000]);
    for order in ORDERS {
        for n in [1, 136, 1000, 4096, 5000, 3 * 4096] {
            let io = fail_at(3 * 4096, 4096, libc::EIO).ordered(order);
            let mut e = engine(io, 5 * 4096, 4096);
            queue_paths(&mut e, &f);
            let (got, err) = records_until_the_error(&mut e, n, f.data[0].len());
            assert!(
                got == f.data[0][..3 * 4096],
                "{order:?} n={n}: {} bytes",
                got.len()
            );
            assert!(err.contains("offset 12288"), "{order:?} n={n}: {err}");
            assert!(e.fill_buf_at_least(1).is_err(), "the error sticks");
            assert!(e.fill_buf().is_err(), "the error sticks");
            assert!(e.move_to_next_file().unwrap());
            assert_exact(&read_all(&mut e), &f.data[1..]);
            assert_pool_empty(&e);
        }
    }
}

/// `skip` passes over bytes before a failure, but never the failure itself: a skip that
/// would is the file's error and moves nothing.
#[test]
fn a_skip_across_a_failure_is_the_error_and_moves_nothing() {
    let f = files(&[40_000, 100]);
    for order in ORDERS {
        let io = fail_at(2 * 4096, 4096, libc::EIO).ordered(order);
        let mut e = engine(io, 8 * 4096, 4096);
        queue_paths(&mut e, &f);
        // Reading the first bytes waits for the first read; the failing one comes back by
        // the time the record loop reaches it.
        assert_eq!(e.fill_buf_at_least(100).unwrap()[..100], f.data[0][..100]);
        e.consume(100);
        let before = e.file_offset();
        while e.fill_buf_at_least(4096).is_ok() {
            e.consume(1);
            assert!(
                e.file_offset() < 2 * 4096,
                "{order:?}: read past the failure"
            );
        }
        let at = e.file_offset();
        let left = 2 * 4096 - at;
        assert!(at > before);
        let err = e.skip(left + 1).unwrap_err();
        assert!(err.to_string().contains("offset 8192"), "{order:?}: {err}");
        assert_eq!(
            e.file_offset(),
            at,
            "{order:?}: a failed skip moves nothing"
        );
        assert_eq!(
            e.skip(left).unwrap(),
            left,
            "{order:?}: up to the failure is fine"
        );
        assert!(e.skip(1).is_err());
        assert!(e.fill_buf().is_err());
        assert!(e.move_to_next_file().unwrap());
        assert_exact(&read_all(&mut e), &f.data[1..]);
        assert_pool_empty(&e);
    }
}

/// A file that shrank after it was sized ends where its reads end (std's answer: an end),
/// and `fill_buf_at_least` says so with a short answer, not an error.
#[test]
fn a_file_that_ends_early_is_an_end_not_an_error() {
    let f = files(&[30_000, 100]);
    let io = Scripted::new(|c| {
        if c.offset >= 8192 {
            Act::Eof
        } else {
            Act::Full
        }
    });
    let mut e = engine(io, 64 << 10, 4096);
    queue_paths(&mut e, &f);
    let run = e.fill_buf_at_least(10_000).unwrap();
    assert_eq!(
        run,
        &f.data[0][..8192],
        "every byte before the end, then the end"
    );
    e.consume(8192);
    assert!(e.fill_buf().unwrap().is_empty());
    assert_eq!(e.skip(10).unwrap(), 0);
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
}

/// A range of a file: its bytes from `start` for `len`, ending early at the file's end.
#[test]
fn ranges_read_their_bytes_only() {
    let f = files(&[50_000, 9000, 20_000]);
    for order in ORDERS {
        let io = first_attempts(1, Act::Short(1000)).ordered(order);
        let mut e = engine(io, 8 * 4096, 4096);
        let ranges = [(0, 10_000), (4097, 100_000), (12_345, 0), (19_999, 5)];
        for (i, &(start, len)) in ranges.iter().enumerate() {
            let p = f.paths[i.min(2)].as_path();
            e.push(Source::Path(p.into()), start, len).unwrap();
        }
        let want: Vec<Vec<u8>> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(start, len))| {
                let d = &f.data[i.min(2)];
                let from = (start as usize).min(d.len());
                d[from..(start + len).min(d.len() as u64) as usize].to_vec()
            })
            .collect();
        assert_eq!(e.file_offset(), 0);
        assert_exact(&read_all(&mut e), &want);
        assert_pool_empty(&e);
    }
}

/// Queuing is all or nothing: where starting the file's reads fails (a broken ring), the
/// file is not queued and the error comes back.
#[test]
fn a_file_whose_reads_cannot_start_is_not_queued() {
    let f = files(&[10_000, 10_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.fail_submit = true;
    let mut e = engine(io, 64 << 10, 4096);
    let err = e
        .push(Source::Path(f.paths[0].as_path().into()), 0, u64::MAX)
        .unwrap_err();
    assert!(err.to_string().contains("submit"), "{err}");
    assert_eq!(e.current_index(), None, "not queued");
    assert!(!e.move_to_next_file().unwrap());
}

/// With `O_DIRECT`, a skip to the end of a file issues no aligned read of the bytes before
/// the end (which would be asked for nothing, and could fail for nothing): the file ends.
#[test]
fn a_direct_skip_to_the_end_reads_nothing_more() {
    let f = files(&[150_000, 100]);
    let last = 150_000 / 4096 * 4096;
    let io = Scripted::new(move |c| {
        if c.offset == last {
            Act::Fail(libc::EIO)
        } else {
            Act::Full
        }
    });
    let log = io.log.clone();
    let Some(mut e) = direct_engine(io, &f) else {
        return;
    };
    // A pool of 8 reads: the read-ahead is far from the end when the skip passes it.
    e.core.pool = Pool::with_capacity(8 * 4096).unwrap();
    e.sched.limits_mut().read_size = 4096;
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf_at_least(10).unwrap()[..10], f.data[0][..10]);
    assert_eq!(e.skip(1 << 20).unwrap(), 150_000);
    assert!(e.fill_buf().unwrap().is_empty(), "the end, not an error");
    let late = log.lock().unwrap().reads.iter().any(|c| c.offset == last);
    assert!(!late, "the last block was read after the skip passed it");
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
}

/// A skip to a file's end drops the reads in flight that hold nothing of the file past it:
/// with `O_DIRECT` the last read is rounded up past the end, and were it kept and to fail,
/// the file would fail for bytes nobody wants.
#[test]
fn a_skip_to_the_end_drops_the_last_read_in_flight() {
    let f = files(&[20_000, 100]);
    for order in ORDERS {
        // The last read: 3,616 bytes of the file, asked as 4,096.
        let io = fail_at(16_384, 4096, libc::EIO).ordered(order);
        let Some(mut e) = direct_engine(io, &f) else {
            return;
        };
        e.sched.limits_mut().read_size = 8192;
        queue_paths(&mut e, &f);
        assert_eq!(e.fill_buf_at_least(10).unwrap()[..10], f.data[0][..10]);
        if e.core.queue.front().unwrap().error().is_some() {
            continue; // This order completed the failing read first: nothing to check.
        }
        assert_eq!(e.skip(1 << 20).unwrap(), 20_000, "{order:?}");
        assert!(
            e.fill_buf().unwrap().is_empty(),
            "{order:?}: the end, not an error"
        );
        assert!(e.move_to_next_file().unwrap());
        assert_exact(&read_all(&mut e), &f.data[1..]);
    }
}

/// The first direct read of the first file is refused (`EINVAL`), once another file has
/// been renamed over its path: the reader goes on buffered with the file it opened, never
/// with what the path names by then.
#[test]
fn a_file_renamed_over_before_direct_reads_are_refused_is_not_read() {
    let f = files(&[12_345, 100]);
    let other = f.dir().join("other");
    std::fs::write(&other, content(7, 12_345)).unwrap();
    let (from, to) = (other.clone(), f.paths[0].clone());
    let mut renamed = false;
    let io = Scripted::new(move |c| {
        if !c.direct {
            return Act::Full;
        }
        if !renamed {
            std::fs::rename(&from, &to).unwrap();
            renamed = true;
        }
        Act::Fail(libc::EINVAL)
    });
    let log = io.log.clone();
    let Some(mut e) = direct_engine(io, &f) else {
        return;
    };
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
    drop(e);
    assert_eq!(fds_under(&f.dir()), 0);
    assert!(log.lock().unwrap().reads.iter().any(|c| c.direct));
    assert_ne!(
        std::fs::read(&f.paths[0]).unwrap(),
        f.data[0],
        "renamed over"
    );
}

/// The first error no caller was given is kept for `take_unread_error`: a file moved past
/// before its error was read, or else a queued file that failed unread; an error once
/// returned, or taken, is not.
#[test]
fn the_first_error_nobody_read_is_kept() {
    let f = files(&[20_000, 20_000, 20_000]);
    let io = Scripted::new(|c| {
        if c.offset == 8192 {
            Act::Fail(libc::EIO)
        } else {
            Act::Full
        }
    });
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    // File 0: its error returned, so read.
    while e.fill_buf().is_ok_and(|b| !b.is_empty()) {
        e.consume(100);
    }
    assert!(e.fill_buf().is_err());
    assert!(e.move_to_next_file().unwrap());
    // File 1: moved past before reading to its error (its failing read done by then).
    let _ = e.fill_buf_at_least(8192).unwrap();
    assert!(e.move_to_next_file().unwrap());
    let err = e.unread_error().expect("file 1's error, never read");
    assert!(
        err.to_string().contains(&*f.paths[1].to_string_lossy()),
        "{err}"
    );
    // File 2, current and failed, not read yet: its error, still queued, is the next.
    let _ = e.fill_buf_at_least(8192).unwrap();
    let err = e.unread_error().expect("file 2's error, not read yet");
    assert!(
        err.to_string().contains(&*f.paths[2].to_string_lossy()),
        "{err}"
    );
    assert!(e.unread_error().is_none(), "taken");
    assert!(e.fill_buf_at_least(8193).is_err());
    assert!(e.unread_error().is_none(), "read now");
}

/// A skip that passed the end a read finds only later (the file was cut after it was
/// opened) is not an end at a place the file never reached: the next read says the file
/// ended before the skip's offset.
#[test]
fn a_skip_past_the_end_of_a_file_cut_after_it_was_opened_is_an_error() {
    let f = files(&[100_000, 100]);
    // Reads complete lazily, so the skip comes before a read finds the new end.
    let io = Scripted::new(|_| Act::Full).ordered((false, true));
    let mut e = engine(io, 32 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf_at_least(10).unwrap()[..10], f.data[0][..10]);
    std::fs::File::options()
        .write(true)
        .open(&f.paths[0])
        .unwrap()
        .set_len(8192)
        .unwrap();
    assert_eq!(e.skip(50_000).unwrap(), 50_000, "the end is not known yet");
    let err = e.fill_buf().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    assert!(err.to_string().contains("ended at offset 8192"), "{err}");
    assert!(e.fill_buf_at_least(1).is_err(), "it sticks");
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
}

#[test]
fn a_read_the_cache_held_only_the_front_of_goes_on_from_there() {
    for order in ORDERS {
        // Every first attempt comes back with its first 5000 bytes alone, as a read of only
        // what is cached does where the rest is not: the rest is read as a continuation.
        let io = first_attempts(1, Act::Short(5000)).ordered(order);
        let limits = not_offloading((32 << 10, 64 << 10));
        let (stats, log) = read_through(io, &WARM_SIZES, limits);
        assert!(stats.reads_cached > 0, "{order:?}: {stats:?}");
        assert!(stats.short_reads > 0, "{order:?}: {stats:?}");
        assert!(log.reads.iter().any(|c| c.attempt > 0), "{order:?}");
    }
}

#[test]
fn where_reads_of_only_the_cache_are_refused_large_reads_ask_the_cache_instead() {
    for order in ORDERS {
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.refuse_nowait = true;
        let limits = not_offloading((32 << 10, 64 << 10));
        let (stats, log) = read_through(io, &WARM_SIZES, limits);
        // Offered once, then never again; the large reads asked the cache, which said
        // cached, so they kept to one read at a time.
        assert_eq!(log.cached_tried, 1, "{order:?}");
        assert_eq!(stats.reads_cached, 0, "{order:?}");
        let large = log.reads.iter().filter(|c| c.len >= OFFLOAD_MIN).count();
        assert!(log.asked >= large - 1, "{order:?}: {log:?}");
        assert!(stats.peak_pool_bytes <= 64 << 10, "{order:?}: {stats:?}");
    }
}

#[test]
fn reads_that_go_to_the_disk_buffered_stay_within_the_cold_window() {
    let read_size = 64 << 10;
    let window = 2 * read_size;
    let cold = |order| {
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.cached = Some(false);
        let limits = Limits {
            cold_window: window,
            ..limits(read_size, window)
        };
        poisoned(io, 1 << 20, limits)
    };
    for order in ORDERS {
        let f = files(&WARM_SIZES);
        let mut e = cold(order);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        let stats = e.stats();
        assert!(
            stats.peak_pool_bytes <= window as u64,
            "{order:?}: {stats:?}"
        );
        // A record longer than the window still comes out whole: its reads may fill the pool.
        let f = files(&[300_000]);
        let mut e = cold(order);
        queue_paths(&mut e, &f);
        let n = 250_000;
        assert_eq!(
            e.fill_buf_at_least(n).unwrap()[..n],
            f.data[0][..n],
            "{order:?}"
        );
    }
}
