//! A FUSE filesystem that fails, stalls and changes size under the reader, for tests that
//! need real kernel faults rather than scripted ones.
//!
//! It serves read-only files named `0000`, `0001`, ... in its root, whose bytes are those of
//! [`content_at`](super::content_at) for a seed of their own: a pure function of (file,
//! offset), so every byte read can be checked, and a byte from another file, another offset or
//! the zeros of a stale region never matches. Each file has a [`FileSpec`]: its size and its
//! [`Faults`].
//!
//! [`FaultMount::new`] mounts it (as root, without libfuse or fusermount) in a fresh temporary
//! directory, after unmounting what killed earlier runs left behind; [`FaultMount::unmount`]
//! unmounts it, which fails while a file under it is still open; [`FaultMount::abandon`]
//! answers the reads it holds, aborts its connection and detaches it, for a mount whose files
//! stay open for good. Where `/dev/fuse` is missing or mounting is refused, `new` returns why,
//! for the test to print and skip.
//!
//! Delayed replies (latency, a slow read, a slow open) are sent from a thread of their own, so
//! a delayed request never holds up the others.
//!
//! Attributes and entries are cached for 0 s, so the kernel asks for a file's size again
//! every time it needs it: a size change shows at once.
//!
//! Kernel behaviour worth knowing when writing tests on it:
//! - In page-cache mode ([`Serve::PageCache`]) a short reply is taken as the end of the file:
//!   the kernel shrinks its idea of the size, and drops data from reads in flight.
//! - With [`Serve::DirectIo`] (or a reader's `O_DIRECT`) and io_uring, a short reply made
//!   io_uring ask again at the original offset and hand out wrong bytes: a kernel quirk. Tests
//!   of short replies and shrinking files (whose reads past the new end are short) must read
//!   them buffered in page-cache mode, or without io_uring.
//! - With [`Serve::DirectIo`] and a reader's `O_DIRECT` through io_uring, even the short reply
//!   at a file's real end is asked again, up to 128 times, for the rest of the (4 KiB-aligned)
//!   read. A reader that cuts at the file's size still reads it right, but pays
//!   [`Faults::latency`] that many times: a 1-byte file with 2 ms of latency takes 1/4 s.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner, MountOption,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

use super::{content_at, next_seed, splitmix64};

/// What a file does wrong. The default does nothing wrong.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// A read whose range covers this offset fails with `EIO`, every time.
    pub eio_at: Option<u64>,
    /// Every reply to a read of this file waits this long.
    pub latency: Duration,
    /// The first read whose range covers this offset waits this long (instead of `latency`).
    pub slow_read: Option<(u64, Duration)>,
    /// Every open of this file waits this long before its reply.
    pub open_delay: Duration,
    /// Every open of this file fails with this error.
    pub open_error: Option<Errno>,
    /// From the first read of this file on, it is this size instead: the reader's `fstat`
    /// (the kernel's `getattr`) sees the old size, its reads the new one. Smaller shrinks it
    /// (the reads past the new end get short replies), larger grows it.
    pub resize_to: Option<u64>,
    /// Every reply to a read carries at most this many bytes (not through io_uring with
    /// [`Serve::DirectIo`] or `O_DIRECT`: see the module docs).
    pub short_replies: Option<u32>,
    /// A read whose range covers this offset gets no answer until
    /// [`FaultMount::release_hung`] or [`FaultMount::abandon`] (or the mount is dropped): a
    /// hung device. Interrupting the request does not end it (the filesystem does not answer
    /// interrupts). In page-cache mode io_uring waits for it on a kernel worker; with
    /// [`Serve::DirectIo`] (or `O_DIRECT`) the kernel reads inline, so the thread that
    /// submits the read hangs in `io_uring_enter` itself, as it would in `pread`.
    pub hang_at: Option<u64>,
}

/// One file of the filesystem.
#[derive(Clone, Debug, Default)]
pub struct FileSpec {
    /// Its size, as `getattr` reports it until [`Faults::resize_to`] applies.
    pub size: u64,
    /// What it does wrong.
    pub faults: Faults,
}

impl FileSpec {
    /// A file of `size` bytes that does nothing wrong.
    pub fn new(size: u64) -> Self {
        FileSpec {
            size,
            faults: Faults::default(),
        }
    }

    /// The same file, with these faults.
    pub fn with(self, faults: Faults) -> Self {
        FileSpec { faults, ..self }
    }

    /// Its size once it has been read (see [`Faults::resize_to`]).
    pub fn final_size(&self) -> u64 {
        self.faults.resize_to.unwrap_or(self.size)
    }
}

/// `n` files of random sizes (up to `max_size` bytes, log-uniform) with random faults, the
/// same for the same `seed`: most files do nothing wrong, some fail (`EIO` mid-file, a failing
/// open), some are slow (latency of a few ms, a slow open, at most one very slow read), some
/// change size. With `short_ok` (page-cache mode, read buffered: see the module docs) some
/// also shrink or reply short; without, they only grow.
pub fn random_files(n: usize, max_size: u64, seed: u64, short_ok: bool) -> Vec<FileSpec> {
    let mut next = {
        let mut counter = seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
        move |below: u64| {
            counter = counter.wrapping_add(1);
            splitmix64(counter) % below.max(1)
        }
    };
    let ms = |n: u64| Duration::from_millis(n);
    let mut slow_left = 1;
    (0..n)
        .map(|_| {
            // Log-uniform: as many files under 1 KiB as between 32 and 64 KiB.
            let bits = next(u64::from(64 - max_size.leading_zeros()) + 1);
            let size = next(1 << bits).min(max_size);
            let mut f = Faults::default();
            match next(100) {
                0..=5 => f.eio_at = Some(next(size)),
                6..=9 => {
                    f.open_error =
                        Some([Errno::EIO, Errno::EACCES, Errno::ENOENT][next(3) as usize])
                }
                10..=13 if short_ok => f.resize_to = Some(next(size + 1)),
                10..=13 => f.resize_to = Some(size + next(size + 1)),
                14..=17 if short_ok => f.short_replies = Some(1 + next(16 << 10) as u32),
                _ => {}
            }
            if next(5) == 0 {
                f.latency = ms(next(3));
            }
            if next(10) == 0 {
                f.open_delay = ms(1 + next(5));
            }
            if size > 0 && next(20) == 0 && slow_left > 0 {
                slow_left -= 1;
                f.slow_read = Some((next(size), ms(50 + next(150))));
            }
            FileSpec { size, faults: f }
        })
        .collect()
}

/// How the filesystem answers opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serve {
    /// Reads go through the page cache, with the kernel's own readahead.
    PageCache,
    /// `FOPEN_DIRECT_IO`: every read of the application reaches the filesystem as it is.
    DirectIo,
}

/// Counters of what the filesystem was asked and did, across all files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Opens asked for, failed ones included.
    pub opens: u64,
    /// Releases (the last close of an open file).
    pub releases: u64,
    /// Reads asked for.
    pub reads: u64,
    /// Reads answered with `EIO`.
    pub eio_replies: u64,
    /// Slow reads sent (see [`Faults::slow_read`]).
    pub slow_reads: u64,
    /// Replies cut short by [`Faults::short_replies`].
    pub short_replies: u64,
    /// Reads held without an answer (see [`Faults::hang_at`]).
    pub hung_reads: u64,
}

impl std::ops::Add for FsStats {
    type Output = FsStats;

    fn add(self, o: FsStats) -> FsStats {
        FsStats {
            opens: self.opens + o.opens,
            releases: self.releases + o.releases,
            reads: self.reads + o.reads,
            eio_replies: self.eio_replies + o.eio_replies,
            slow_reads: self.slow_reads + o.slow_reads,
            short_replies: self.short_replies + o.short_replies,
            hung_reads: self.hung_reads + o.hung_reads,
        }
    }
}

/// The name of the filesystem in `/proc/self/mounts`: a prefix of its own, then the id of the
/// process that mounted it, so that a mount whose process is gone is known to be stale.
const FS_NAME: &str = "readahead-faults";

/// The inode of the root directory; file `i` is inode `FIRST_FILE + i`.
const ROOT: u64 = 1;
const FIRST_FILE: u64 = 2;

/// A file's state: its spec, its seed and what has happened to it.
#[derive(Debug)]
struct FileState {
    spec: FileSpec,
    seed: u64,
    /// Set by the first read: from then on [`Faults::resize_to`] applies.
    read_once: AtomicBool,
    /// Set once the slow read has been sent.
    slow_sent: AtomicBool,
}

impl FileState {
    fn size_now(&self) -> u64 {
        match self.spec.faults.resize_to {
            Some(to) if self.read_once.load(Ordering::SeqCst) => to,
            _ => self.spec.size,
        }
    }
}

/// Everything the filesystem's handlers and the test share.
#[derive(Debug)]
struct State {
    files: Vec<FileState>,
    serve: Serve,
    delayer: Delayer,
    opens: AtomicU64,
    releases: AtomicU64,
    reads: AtomicU64,
    eio_replies: AtomicU64,
    slow_reads: AtomicU64,
    short_replies: AtomicU64,
    hung_reads: AtomicU64,
    hung: Held,
}

/// The replies of reads held by [`Faults::hang_at`]; `None` once they were released, after
/// which such reads are answered at once.
struct Held(Mutex<Option<Vec<Job>>>);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().unwrap().as_ref().map(Vec::len);
        f.debug_tuple("Held").field(&held).finish()
    }
}

impl State {
    /// Holds `reply` if the read of `size` bytes at `offset` of `file` hangs; else gives it
    /// back.
    fn hold(&self, file: &FileState, offset: u64, size: u32, reply: Job) -> Option<Job> {
        let covers = |at: u64| offset <= at && at < offset + u64::from(size);
        if !file.spec.faults.hang_at.is_some_and(covers) {
            return Some(reply);
        }
        let mut hung = self.hung.0.lock().unwrap();
        let Some(held) = hung.as_mut() else {
            return Some(reply);
        };
        self.hung_reads.fetch_add(1, Ordering::Relaxed);
        held.push(reply);
        None
    }

    fn file(&self, ino: INodeNo) -> Option<&FileState> {
        let i = u64::from(ino).checked_sub(FIRST_FILE)?;
        self.files.get(usize::try_from(i).ok()?)
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm, nlink) = if ino == ROOT {
            (FileType::Directory, 0, 0o555, 2)
        } else {
            let size = self.file(INodeNo(ino))?.size_now();
            (FileType::RegularFile, size, 0o444, 1)
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            // SAFETY: getuid and getgid cannot fail and touch no memory.
            uid: unsafe { libc::getuid() },
            // SAFETY: as above.
            gid: unsafe { libc::getgid() },
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// The reply to a read of `file` of `size` bytes at `offset`, and how long it waits.
    fn read(&self, file: &FileState, offset: u64, size: u32) -> (Result<Vec<u8>, Errno>, Duration) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        file.read_once.store(true, Ordering::SeqCst);
        let faults = &file.spec.faults;
        let end = (offset + u64::from(size)).min(file.size_now());
        let covers = |at: u64| offset <= at && at < end;
        let mut delay = faults.latency;
        if let Some((at, slow)) = faults.slow_read {
            if covers(at) && !file.slow_sent.swap(true, Ordering::SeqCst) {
                self.slow_reads.fetch_add(1, Ordering::Relaxed);
                delay = slow;
            }
        }
        if faults.eio_at.is_some_and(covers) {
            self.eio_replies.fetch_add(1, Ordering::Relaxed);
            return (Err(Errno::EIO), delay);
        }
        let mut len = end.saturating_sub(offset);
        if let Some(short) = faults.short_replies {
            if len > u64::from(short) {
                self.short_replies.fetch_add(1, Ordering::Relaxed);
                len = u64::from(short);
            }
        }
        (Ok(content_at(file.seed, offset, len as usize)), delay)
    }
}

/// The filesystem, as the FUSE session sees it.
#[derive(Debug)]
struct FaultFs(Arc<State>);

/// How long the kernel may cache entries and attributes: not at all, so that size changes
/// show at once.
const TTL: Duration = Duration::ZERO;

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = name
            .to_str()
            .filter(|n| n.len() == 4 && u64::from(parent) == ROOT)
            .and_then(|n| n.parse::<u64>().ok())
            .map(|i| i + FIRST_FILE);
        match ino.and_then(|ino| self.0.attr(ino)) {
            Some(attr) => reply.entry(&TTL, &attr, fuser::Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.0.attr(ino.into()) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let state = &self.0;
        state.opens.fetch_add(1, Ordering::Relaxed);
        let Some(file) = state.file(ino) else {
            return reply.error(Errno::EISDIR);
        };
        let faults = &file.spec.faults;
        let flags = match state.serve {
            Serve::PageCache => FopenFlags::empty(),
            Serve::DirectIo => FopenFlags::FOPEN_DIRECT_IO,
        };
        let error = faults.open_error;
        state.delayer.after(faults.open_delay, move || match error {
            Some(e) => reply.error(e),
            None => reply.opened(FileHandle(0), flags),
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(file) = self.0.file(ino) else {
            return reply.error(Errno::EISDIR);
        };
        let (data, delay) = self.0.read(file, offset, size);
        let reply: Job = Box::new(move || match data {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        });
        if let Some(reply) = self.0.hold(file, offset, size, reply) {
            self.0.delayer.after(delay, reply);
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.0.releases.fetch_add(1, Ordering::Relaxed);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let dots = [
            (ROOT, FileType::Directory, ".".to_string()),
            (ROOT, FileType::Directory, "..".to_string()),
        ];
        let files = (0..self.0.files.len() as u64)
            .map(|i| (i + FIRST_FILE, FileType::RegularFile, file_name(i as usize)));
        for (next, (ino, kind, name)) in dots
            .into_iter()
            .chain(files)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(ino), next as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// The name of file `i`.
pub fn file_name(i: usize) -> String {
    format!("{i:04}")
}

/// A reply to send later.
type Job = Box<dyn FnOnce() + Send>;

/// Sends replies after their delay, from a thread of its own, so that a delayed reply holds up
/// no other request. Dropped, it sends what is left at once.
#[derive(Debug)]
struct Delayer {
    jobs: Mutex<mpsc::Sender<(Instant, Job)>>,
}

impl Delayer {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel::<(Instant, Job)>();
        std::thread::Builder::new()
            .name("fuse-delayer".into())
            .spawn(move || Delayer::run(rx))
            .expect("start the delay thread");
        Delayer {
            jobs: Mutex::new(tx),
        }
    }

    /// Runs `job` after `delay`: at once, on this thread, where there is none.
    fn after(&self, delay: Duration, job: impl FnOnce() + Send + 'static) {
        if delay.is_zero() {
            return job();
        }
        let jobs = self.jobs.lock().unwrap();
        if let Err(mpsc::SendError((_, job))) = jobs.send((Instant::now() + delay, Box::new(job))) {
            job();
        }
    }

    fn run(rx: mpsc::Receiver<(Instant, Job)>) {
        let mut pending: Vec<(Instant, Job)> = Vec::new();
        loop {
            let next = pending.iter().map(|(due, _)| *due).min();
            let got = match next {
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                Some(due) => rx.recv_timeout(due.saturating_duration_since(Instant::now())),
            };
            match got {
                Ok(job) => pending.push(job),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    pending.into_iter().for_each(|(_, job)| job());
                    return;
                }
            }
            let now = Instant::now();
            let (due, later): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(t, _)| *t <= now);
            pending = later;
            due.into_iter().for_each(|(_, job)| job());
        }
    }
}

/// The fault filesystem, mounted in a temporary directory of its own.
///
/// Dropped without [`unmount`](Self::unmount) (a test that failed), it detaches the mount
/// lazily, so that nothing is left behind even where a file under it is still open.
#[derive(Debug)]
pub struct FaultMount {
    state: Arc<State>,
    session: Option<fuser::BackgroundSession>,
    /// The mount point, canonical, as `/proc/self/mounts` shows it.
    dir: PathBuf,
    /// Removed (it is empty) once the filesystem is unmounted.
    tempdir: Option<tempfile::TempDir>,
}

impl FaultMount {
    /// Mounts a filesystem serving `files` as `serve` says.
    ///
    /// # Errors
    ///
    /// Why it cannot be mounted here (no `/dev/fuse`, mounting refused), for the caller to
    /// print and skip.
    ///
    pub fn new(files: Vec<FileSpec>, serve: Serve) -> Result<FaultMount, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse here".into());
        }
        unmount_stale();
        let tempdir = tempfile::Builder::new()
            .prefix("readahead-fuse-")
            .tempdir()
            .map_err(|e| format!("cannot make a mount point: {e}"))?;
        let dir = tempdir
            .path()
            .canonicalize()
            .expect("a canonical mount point");
        let state = Arc::new(State {
            files: files
                .into_iter()
                .map(|spec| FileState {
                    spec,
                    seed: next_seed(),
                    read_once: AtomicBool::new(false),
                    slow_sent: AtomicBool::new(false),
                })
                .collect(),
            serve,
            delayer: Delayer::new(),
            opens: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            eio_replies: AtomicU64::new(0),
            slow_reads: AtomicU64::new(0),
            short_replies: AtomicU64::new(0),
            hung_reads: AtomicU64::new(0),
            hung: Held(Mutex::new(Some(Vec::new()))),
        });
        let mut config = fuser::Config::default();
        config.mount_options.extend([
            MountOption::RO,
            MountOption::FSName(format!("{FS_NAME}:{}", std::process::id())),
        ]);
        config.n_threads = Some(2);
        let session = fuser::spawn_mount(FaultFs(state.clone()), &dir, &config)
            .map_err(|e| format!("cannot mount a FUSE filesystem on {}: {e}", dir.display()))?;
        Ok(FaultMount {
            state,
            session: Some(session),
            dir,
            tempdir: Some(tempdir),
        })
    }

    /// How it answers opens.
    pub fn serve(&self) -> Serve {
        self.state.serve
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of file `i`.
    pub fn path(&self, i: usize) -> PathBuf {
        self.dir.join(file_name(i))
    }

    /// The paths of every file, in order.
    pub fn paths(&self) -> Vec<PathBuf> {
        (0..self.state.files.len()).map(|i| self.path(i)).collect()
    }

    /// The spec file `i` was made with.
    pub fn spec(&self, i: usize) -> &FileSpec {
        &self.state.files[i].spec
    }

    /// The bytes file `i` holds at `offset..offset + len`, as the byte function says (whatever
    /// its size).
    pub fn bytes(&self, i: usize, offset: u64, len: usize) -> Vec<u8> {
        content_at(self.state.files[i].seed, offset, len)
    }

    /// The whole of file `i`, at its size once read (see [`FileSpec::final_size`]).
    pub fn expected(&self, i: usize) -> Vec<u8> {
        self.bytes(i, 0, self.spec(i).final_size() as usize)
    }

    /// What the filesystem has been asked and done so far.
    pub fn stats(&self) -> FsStats {
        let s = &self.state;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FsStats {
            opens: get(&s.opens),
            releases: get(&s.releases),
            reads: get(&s.reads),
            eio_replies: get(&s.eio_replies),
            slow_reads: get(&s.slow_reads),
            short_replies: get(&s.short_replies),
            hung_reads: get(&s.hung_reads),
        }
    }

    /// How many descriptors of this process name a file under the mount point.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("list /proc/self/fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(&self.dir))
            .count()
    }

    /// Whether `/proc/self/mounts` lists the mount point.
    pub fn is_mounted(&self) -> bool {
        mounts().iter().any(|(_, dir)| Path::new(dir) == self.dir)
    }

    /// Answers every read held by [`Faults::hang_at`], and from now on such reads at once.
    pub fn release_hung(&self) {
        let mut hung = self.state.hung.0.lock().unwrap_or_else(|e| e.into_inner());
        let held = hung.take().unwrap_or_default();
        drop(hung);
        held.into_iter().for_each(|reply| reply());
    }

    /// Ends a mount whose files stay open for good (a reader that leaked its descriptors):
    /// answers the reads it holds, aborts its connection (`/sys/fs/fuse/connections/N/abort`,
    /// through a `fusectl` mounted for the purpose), so that its session ends and any request
    /// left fails, and detaches it lazily, so that it is gone from the namespace at once (the
    /// kernel keeps it until its last file is closed). Returns whether the connection was
    /// aborted, saying why not on stderr.
    pub fn abandon(mut self) -> bool {
        self.release_hung();
        let aborted = abort_connection(&self.dir)
            .map_err(|e| eprintln!("cannot abort the FUSE connection: {e}"))
            .is_ok();
        detach(&self.dir);
        let session = self.session.take().expect("mounted");
        if aborted {
            // Its reads of the device fail now, which ends it.
            let _ = session.join();
        } else {
            // Serving on, for a mount nobody can reach; it ends with the process.
            std::mem::forget(session);
        }
        if let Some(dir) = self.tempdir.take() {
            let _ = dir.close();
        }
        aborted
    }

    /// Unmounts the filesystem and waits for its session to end.
    ///
    /// # Errors
    ///
    /// As `umount(2)`: `EBUSY` while a file under it is open.
    pub fn unmount(mut self) -> std::io::Result<()> {
        let session = self.session.take().expect("mounted");
        session.umount_and_join()?;
        if let Some(dir) = self.tempdir.take() {
            dir.close()?;
        }
        Ok(())
    }
}

impl Drop for FaultMount {
    fn drop(&mut self) {
        // A read held for good would keep the thread that asked for it, and whatever waits
        // for that thread, from ever finishing.
        self.release_hung();
        if self.session.is_some() {
            // A file left open under the mount would be flushed when the process exits,
            // after the filesystem's threads are gone: an exit that never ends. Aborted, the
            // connection fails it at once.
            if self.open_fds() > 0 {
                let _ = abort_connection(&self.dir);
            }
            detach(&self.dir);
        }
    }
}

/// The (source, mount point) of every mount of this process's namespace.
fn mounts() -> Vec<(String, String)> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let source = fields.next()?;
            let dir = fields.next()?.replace("\\040", " ");
            Some((source.to_string(), dir))
        })
        .collect()
}

/// Unmounts the fault filesystems left by processes that are gone (a killed test), and
/// removes their mount points.
pub fn unmount_stale() {
    for (source, dir) in mounts() {
        let Some(pid) = source
            .strip_prefix(FS_NAME)
            .and_then(|s| s.strip_prefix(':'))
        else {
            continue;
        };
        if alive(pid) {
            continue;
        }
        detach(Path::new(&dir));
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Whether process `pid` is running: a zombie (killed, not yet reaped) no longer serves its
/// mounts.
fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, Some(s) if s != 'Z' && s != 'X')
}

/// Aborts the FUSE connection of the filesystem mounted at `dir`, through a `fusectl`
/// filesystem mounted on a temporary directory of its own (there is one `fusectl`, wherever
/// it is mounted, and `/sys/fs/fuse/connections` may not have it).
fn abort_connection(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)?.dev();
    // The kernel names a connection by its device number, encoded as the kernel does.
    let conn = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
    let ctl = tempfile::Builder::new()
        .prefix("readahead-fusectl-")
        .tempdir()?;
    mount_fusectl(ctl.path())?;
    let written = std::fs::write(ctl.path().join(conn.to_string()).join("abort"), "1");
    detach(ctl.path());
    written
}

/// Mounts the `fusectl` filesystem at `dir`.
fn mount_fusectl(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; no data.
    let rc = unsafe {
        libc::mount(
            c"fusectl".as_ptr(),
            target.as_ptr(),
            c"fusectl".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Unmounts `dir` lazily: at once from the namespace, for good once nothing uses it.
fn detach(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}
