//! The fault filesystem's FUSE handlers, and the thread that sends their delayed replies.

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

use super::inodes::{State, FIRST_FILE, ROOT};
use super::{file_name, Serve};

/// The filesystem, as the FUSE session sees it.
#[derive(Debug)]
pub(super) struct FaultFs(pub(super) Arc<State>);

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = name
            .to_str()
            .filter(|n| n.len() == 4 && u64::from(parent) == ROOT)
            .and_then(|n| n.parse::<u64>().ok())
            .map(|i| i + FIRST_FILE);
        match ino.and_then(|ino| self.0.attr(ino)) {
            Some(attr) => reply.entry(&self.0.ttl, &attr, fuser::Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let state = self.0.clone();
        let hang = state.file(ino).is_some_and(|f| f.spec.faults.hang_getattr);
        let reply: Job = Box::new(move || match state.attr(ino.into()) {
            Some(attr) => reply.attr(&state.ttl, &attr),
            None => reply.error(Errno::ENOENT),
        });
        if let Some(reply) = self.0.hold_if(hang, &self.0.hung_calls, reply) {
            reply();
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
            Serve::KeepCache => FopenFlags::FOPEN_KEEP_CACHE,
        };
        let error = faults.open_error;
        let counts = state.clone();
        let reply: Job = Box::new(move || match error {
            Some(e) => {
                counts.open_errors.fetch_add(1, Ordering::Relaxed);
                reply.error(e)
            }
            None => reply.opened(FileHandle(0), flags),
        });
        if let Some(reply) = state.hold_if(faults.hang_open, &state.hung_calls, reply) {
            state.delayer.after(faults.open_delay, reply);
        }
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

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let state = &self.0;
        state.flushes.fetch_add(1, Ordering::Relaxed);
        // Answered (not `ENOSYS`, after which the kernel would send no `FLUSH` again).
        let hang = state.file(ino).is_some_and(|f| f.spec.faults.hang_flush);
        let reply: Job = Box::new(move || reply.ok());
        if let Some(reply) = state.hold_if(hang, &state.hung_calls, reply) {
            reply();
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        use std::os::unix::ffi::OsStrExt;
        self.0.readlinks.fetch_add(1, Ordering::Relaxed);
        match self.0.file(ino).and_then(|f| f.spec.symlink_to.as_ref()) {
            Some(target) => reply.data(target.as_os_str().as_bytes()),
            None => reply.error(Errno::EINVAL),
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
        let files = (self.0.files.iter().enumerate())
            .map(|(i, f)| (i as u64 + FIRST_FILE, f.kind(), file_name(i)));
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

/// A reply to send later.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Sends replies after their delay, from a thread of its own, so that a delayed reply holds up
/// no other request. Dropped, it sends what is left at once.
#[derive(Debug)]
pub(super) struct Delayer {
    jobs: Mutex<mpsc::Sender<(Instant, Job)>>,
}

impl Delayer {
    pub(super) fn new() -> Self {
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
