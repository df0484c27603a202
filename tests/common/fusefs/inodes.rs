//! The fault filesystem's inode table: each file's spec, seed and state, the counters the
//! test reads, and what a read of a file gets (bytes, an error, a delay or no answer).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo};

use super::super::content_at;
use super::handlers::{Delayer, Job};
use super::{FileSpec, Serve};

/// The inode of the root directory; file `i` is inode `FIRST_FILE + i`.
pub(super) const ROOT: u64 = 1;
pub(super) const FIRST_FILE: u64 = 2;

/// A file's state: its spec, its seed and what has happened to it.
#[derive(Debug)]
pub(super) struct FileState {
    pub(super) spec: FileSpec,
    pub(super) seed: u64,
    /// Set by the first read: from then on
    /// [`Faults::resize_to`](super::Faults::resize_to) applies.
    pub(super) read_once: AtomicBool,
    /// Set once the slow read has been sent.
    pub(super) slow_sent: AtomicBool,
}

impl FileState {
    /// What the entry is: a regular file, or a symbolic link (see
    /// [`FileSpec::symlink_to`](super::FileSpec::symlink_to)).
    pub(super) fn kind(&self) -> FileType {
        match self.spec.symlink_to {
            Some(_) => FileType::Symlink,
            None => FileType::RegularFile,
        }
    }

    /// Its permissions: read-only, or all for a symbolic link (as Linux shows them).
    fn perm(&self) -> u16 {
        match self.spec.symlink_to {
            Some(_) => 0o777,
            None => 0o444,
        }
    }

    fn size_now(&self) -> u64 {
        if let Some(target) = &self.spec.symlink_to {
            return target.as_os_str().len() as u64;
        }
        match self.spec.faults.resize_to {
            Some(to) if self.read_once.load(Ordering::SeqCst) => to,
            _ => self.spec.size,
        }
    }
}

/// Everything the filesystem's handlers and the test share.
#[derive(Debug)]
pub(super) struct State {
    pub(super) files: Vec<FileState>,
    pub(super) serve: Serve,
    /// How long the kernel may cache entries and attributes (see `FaultMount::with_ttl`).
    pub(super) ttl: Duration,
    pub(super) delayer: Delayer,
    pub(super) opens: AtomicU64,
    pub(super) releases: AtomicU64,
    /// Opens answered with an error (never released).
    pub(super) open_errors: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) eio_replies: AtomicU64,
    pub(super) slow_reads: AtomicU64,
    pub(super) short_replies: AtomicU64,
    pub(super) hung_reads: AtomicU64,
    pub(super) hung_calls: AtomicU64,
    pub(super) flushes: AtomicU64,
    pub(super) readlinks: AtomicU64,
    pub(super) hung: Held,
}

/// The replies of reads held by [`Faults::hang_at`](super::Faults::hang_at); `None` once they
/// were released, after which such reads are answered at once.
pub(super) struct Held(pub(super) Mutex<Option<Vec<Job>>>);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().unwrap().as_ref().map(Vec::len);
        f.debug_tuple("Held").field(&held).finish()
    }
}

impl State {
    /// Holds `reply` if the read of `size` bytes at `offset` of `file` hangs; else gives it
    /// back.
    pub(super) fn hold(&self, file: &FileState, offset: u64, size: u32, reply: Job) -> Option<Job> {
        let covers = |at: u64| offset <= at && at < offset + u64::from(size);
        if !file.spec.faults.hang_at.is_some_and(covers) {
            return Some(reply);
        }
        self.hold_if(true, &self.hung_reads, reply)
    }

    /// Holds `reply`, counted in `count`, where `hang` (until the mount releases what it
    /// holds); else gives it back.
    pub(super) fn hold_if(&self, hang: bool, count: &AtomicU64, reply: Job) -> Option<Job> {
        if !hang {
            return Some(reply);
        }
        let mut hung = self.hung.0.lock().unwrap();
        let Some(held) = hung.as_mut() else {
            return Some(reply);
        };
        count.fetch_add(1, Ordering::Relaxed);
        held.push(reply);
        None
    }

    pub(super) fn file(&self, ino: INodeNo) -> Option<&FileState> {
        let i = u64::from(ino).checked_sub(FIRST_FILE)?;
        self.files.get(usize::try_from(i).ok()?)
    }

    pub(super) fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm, nlink) = if ino == ROOT {
            (FileType::Directory, 0, 0o555, 2)
        } else {
            let file = self.file(INodeNo(ino))?;
            (file.kind(), file.size_now(), file.perm(), 1)
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
    pub(super) fn read(
        &self,
        file: &FileState,
        offset: u64,
        size: u32,
    ) -> (Result<Vec<u8>, Errno>, Duration) {
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
