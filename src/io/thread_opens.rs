//! Opening queued files on helper threads (see `helpers`), for both backends: an open on a
//! hung mount then holds a helper thread, never the reader's. Each open is waited for at
//! most the reader's `drain_timeout` from its start; past it, the file fails with
//! `TimedOut`, naming itself, and whatever the open brings later is closed unseen. Opens
//! started together time out together, so ten hung opens cost one timeout, not ten.
//!
//! A helper thread costs a wake-up or two an open, which a scan of many small cached files
//! feels. So a path in a directory where a file was already opened, on a helper thread, and
//! found on a local filesystem (`sys::may_hang`), or in a directory on the same mount as such
//! a file (`sys::cached_dir`, which asks no filesystem), is opened on the reader's thread
//! where the kernel can open it from its caches (a cold inode goes to a helper thread, so
//! that the reader reads on while the disk answers), by its name in a handle of its
//! directory, without following a symbolic link or crossing a mount (a link may lead
//! anywhere, and a file bind-mounted into the directory may lie on a hung mount: those go
//! to a helper thread too); and so is
//! a file handed in on such a mount (`sys::mount_id`). The ring opens a cold inode of such a
//! directory itself, on a kernel worker (`backend/uring/in_flight/opens.rs`), and hands its
//! answer in here (`answer`), to be taken with the others.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::local::{split, InDir, Local};
use super::{OpenResult, Opened, ToOpen};
use crate::error::{Error, FileName};
use crate::helpers;
use crate::source::FdRef;
use crate::sys::{self, Opener};

/// Opens of a reader that may be under way past a tenth of the timeout (most likely hung)
/// without counting against its depth (`Limits::open_depth`): so that
/// the opens behind hung ones start, and hang or not, while the hung ones wait out their
/// timeout together.
const MAX_SLOW: usize = 16;

/// What an open on a helper thread sends back: the file's id, what came of it, and the
/// opener with what the kernel refused of its flags.
type Answer = (u64, Result<Opened<'static>, Error>, Opener);

/// Opens under way on helper threads, and those answered and not yet taken.
#[derive(Debug)]
pub(crate) struct ThreadOpens {
    /// The longest an open is waited for, from its start.
    timeout: Duration,
    /// The flags paths are opened with, and what the kernel refused of them so far.
    opener: Opener,
    tx: Sender<Answer>,
    rx: Receiver<Answer>,
    /// Opens under way: when each started, and its path (to name it if it times out).
    started: HashMap<u64, (Instant, Box<Path>)>,
    /// Opens answered (or timed out) and not yet taken.
    answered: Vec<(u64, Result<Opened<'static>, Error>)>,
    /// Directories and devices files were found on, on a local filesystem.
    local: Local,
}

impl ThreadOpens {
    /// Opens that are each waited for at most `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel();
        ThreadOpens {
            timeout,
            opener: Opener::default(),
            tx,
            rx,
            started: HashMap::new(),
            answered: Vec::new(),
            local: Local::default(),
        }
    }

    /// Opens `path` on this thread where its directory is known to be local (see the module
    /// docs) and the kernel can open it from what it has cached, without following a
    /// symbolic link; `None` where not (a cold inode, a link, a missing file: any failure):
    /// open it on a helper thread, which waits for the disk while this one reads on.
    fn open_here(&mut self, path: &Path, direct: bool) -> Option<Result<Opened<'static>, Error>> {
        let (Some(dir), name) = self.in_local_dir(path)? else {
            return None;
        };
        let (file, flags) = self.opener.open_cached(&dir, name, direct).ok()?;
        let opened = super::finish_cached_open(file, flags, direct, path);
        Some(opened.map(|opened| self.local.locate(opened)))
    }

    /// Starts opening `path` for file `file` on a helper thread; `false` where no helper
    /// thread can be had (the open is then made with [`open`](Self::open), which says why).
    pub(crate) fn start(&mut self, file: u64, path: &Path, direct: bool) -> bool {
        self.start_cached(file, path, direct) || self.start_on_helper(file, path, direct).is_ok()
    }

    /// Opens `path` for file `file` on this thread where [`open_here`](Self::open_here) can,
    /// its answer taken with the others; whether it did.
    pub(crate) fn start_cached(&mut self, file: u64, path: &Path, direct: bool) -> bool {
        let Some(opened) = self.open_here(path, direct) else {
            return false;
        };
        self.answer(file, opened);
        true
    }

    /// Where `path`'s directory is known to lie on a local filesystem (see the module docs),
    /// a handle of it and `path`'s name in it, or where the kernel does not have the
    /// directory cached (`EAGAIN`), no handle and `path` whole (a mount in the directory would
    /// hold it cached, so `path` crosses none there): a file there that the kernel does not
    /// have cached may be opened by the ring, so. Where the handle cannot be had otherwise
    /// (a kernel without `RESOLVE_CACHED`), `None`: a helper thread opens it. The reader's
    /// thread opens a path only in a handle (`open_here`).
    pub(crate) fn in_local_dir<'p>(&mut self, path: &'p Path) -> Option<InDir<'p>> {
        if !self.local.holds(path) {
            return None;
        }
        let (dir, name) = split(path)?;
        match self.local.handle(dir) {
            Ok(handle) => Some((Some(Arc::clone(handle)), name)),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Some((None, path)),
            Err(_) => None,
        }
    }

    /// The file handed in that `fd` reads, opened again on this thread through `/proc` with
    /// an open file description of the reader's own, where its filesystem is known local
    /// (an open elsewhere may hang); `None` where not, or where it cannot be.
    pub(crate) fn reopen_own(&mut self, fd: &FdRef<'_>) -> Option<FdRef<'static>> {
        if fd.may_hang() || !sys::readable(fd.file()) {
            return None;
        }
        let file = sys::reopen_blocking(fd.file(), &mut self.opener)?;
        Some(FdRef::new(Arc::new(file)).with_device(fd.device()))
    }

    /// The answer for file `file` of an open made elsewhere (on this thread, or by the
    /// ring), taken with the others.
    pub(crate) fn answer(&mut self, file: u64, opened: Result<Opened<'static>, Error>) {
        self.answered.push((file, opened));
    }

    /// `opened`, from a directory known to be local, knowing whether its filesystem may hang
    /// (asked of it only where its device is not known to be local).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn locate(&self, opened: Opened<'static>) -> Opened<'static> {
        self.local.locate(opened)
    }

    /// The flags paths are opened with, and what the kernel refused of them so far.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn opener_mut(&mut self) -> &mut Opener {
        &mut self.opener
    }

    /// Whether an open is answered and not yet taken, without waiting.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn any_answered(&mut self) -> bool {
        self.collect();
        !self.answered.is_empty()
    }

    /// Starts opening `path` for file `file` on a helper thread, whatever its directory.
    ///
    /// # Errors
    ///
    /// No helper thread can be had (see `helpers::spawn`).
    pub(crate) fn start_on_helper(
        &mut self,
        file: u64,
        path: &Path,
        direct: bool,
    ) -> io::Result<()> {
        let (tx, mut opener) = (self.tx.clone(), self.opener);
        let to_open = ToOpen::Path(path.into());
        let job = move || {
            let opened = to_open.open(direct, &mut opener);
            // The reader may have gone: the file is closed here then.
            let _ = tx.send((file, opened, opener));
        };
        helpers::spawn(job)?;
        self.started.insert(file, (Instant::now(), path.into()));
        Ok(())
    }

    /// Moves the opens answered to `out`; those given up on are closed.
    pub(crate) fn take<'a>(&mut self, out: &mut Vec<(u64, OpenResult<'a>)>) {
        self.collect();
        out.extend(
            self.answered
                .drain(..)
                .map(|(file, opened)| (file, opened.map(Opened::attach))),
        );
    }

    /// Blocks until an open is answered, or until the earliest one under way has taken the
    /// timeout (it is answered with `TimedOut` then), or until one more turns slow (see
    /// [`slow`](Self::slow): more opens may start then); `false` where none is under way.
    pub(crate) fn wait(&mut self) -> bool {
        if self.started.is_empty() {
            return !self.answered.is_empty();
        }
        let slow = self.slow();
        while self.answered.is_empty() && self.slow() == slow {
            let Some(deadline) = self.give_up_late() else {
                break;
            };
            let wake = self.next_slow().map_or(deadline, |at| at.min(deadline));
            match helpers::recv_until(&self.rx, Some(wake)) {
                Ok(answer) => self.answered_with(answer),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => unreachable!("`self.tx` is never dropped"),
            }
        }
        true
    }

    /// Opens under way for more than a tenth of the timeout (most likely hung), [`MAX_SLOW`]
    /// at most: they no longer count against the reader's depth of opens.
    pub(crate) fn slow(&self) -> usize {
        if self.started.is_empty() {
            return 0;
        }
        let since = Instant::now().checked_sub(self.timeout / 10);
        let slow = (self.started.values()).filter(|(at, _)| since.is_some_and(|s| *at <= s));
        slow.count().min(MAX_SLOW)
    }

    /// When the next open turns slow, where one more may.
    fn next_slow(&self) -> Option<Instant> {
        if self.slow() >= MAX_SLOW {
            return None;
        }
        let now = Instant::now();
        let turns = self.started.values().map(|(at, _)| *at + self.timeout / 10);
        turns.filter(|&t| t > now).min()
    }

    /// Waits until every open under way has returned, or until `deadline`, and closes what
    /// they opened: so that a reader dropped right after queuing leaves no descriptor open
    /// behind it. One that has not returned by then is left to its helper thread, which
    /// closes its file when it returns.
    pub(crate) fn close_all(&mut self, deadline: Option<Instant>) {
        while !self.started.is_empty() {
            match helpers::recv_until(&self.rx, deadline) {
                Ok(answer) => self.answered_with(answer),
                Err(_) => break,
            }
        }
        self.started.clear();
        self.answered.clear();
    }

    /// The longest an open is waited for.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens and sizes `source` on a helper thread, waiting for it at most the timeout.
    pub(crate) fn open(&mut self, to_open: ToOpen, direct: bool) -> Result<Opened<'static>, Error> {
        if let ToOpen::Path(path) = &to_open {
            if let Some(opened) = self.open_here(path, direct) {
                return opened;
            }
        }
        if self.local.holds_file(&to_open) {
            let opened = to_open.open_sized(direct, &mut self.opener);
            return opened.map(|opened| self.local.locate(opened));
        }
        let name = to_open.name();
        let (tx, rx) = mpsc::sync_channel(1);
        let mut opener = self.opener;
        let job = move || {
            let opened = to_open.open(direct, &mut opener);
            // Its descriptor is closed once the reader is done with it, not after this
            // thread's answer: a caller counting descriptors must not see it linger.
            drop(to_open);
            let _ = tx.send((opened, opener));
        };
        helpers::spawn(job).map_err(|source| Error::Open {
            path: name.clone(),
            source,
        })?;
        match rx.recv_timeout(self.timeout) {
            Ok((opened, opener)) => {
                self.opener.learn(opener);
                if let Ok(o) = &opened {
                    let path = match &name {
                        FileName::Path(path) => Some(path.as_path()),
                        _ => None,
                    };
                    self.local.learn(path, o);
                }
                opened
            }
            Err(_) => Err(timed_out(name, self.timeout)),
        }
    }

    /// The size of `fd`'s file now, asked on a helper thread and waited for at most the
    /// timeout; `None` where it cannot be told.
    pub(crate) fn size(&self, fd: &FdRef<'_>) -> Option<u64> {
        let (tx, rx) = mpsc::sync_channel(1);
        let file = fd.shared();
        let job = move || {
            let size = sys::file_size(&file).ok();
            drop(file); // As in `open`.
            let _ = tx.send(size);
        };
        helpers::spawn(job).ok()?;
        rx.recv_timeout(self.timeout).ok().flatten()
    }

    /// Answers with `TimedOut` every open under way past the timeout; the deadline of the
    /// earliest left, if any.
    fn give_up_late(&mut self) -> Option<Instant> {
        let now = Instant::now();
        let timeout = self.timeout;
        let late: Vec<u64> = (self.started.iter())
            .filter(|(_, (at, _))| now.duration_since(*at) >= timeout)
            .map(|(&file, _)| file)
            .collect();
        for file in late {
            let (_, path) = self.started.remove(&file).expect("listed above");
            let name = FileName::Path(path.into_path_buf());
            self.answered.push((file, Err(timed_out(name, timeout))));
        }
        let earliest = self.started.values().map(|(at, _)| *at).min()?;
        Some(earliest + timeout)
    }

    /// Takes an answer from a helper thread, unless its open was given up on.
    /// Collects what the helper threads answered so far, without waiting.
    fn collect(&mut self) {
        while let Ok(answer) = self.rx.try_recv() {
            self.answered_with(answer);
        }
    }

    fn answered_with(&mut self, (file, opened, opener): Answer) {
        self.opener.learn(opener);
        let Some((_, path)) = self.started.remove(&file) else {
            return;
        };
        if let Ok(o) = &opened {
            self.local.learn(Some(&path), o);
        }
        self.answered.push((file, opened));
    }
}

/// The error of a file whose open did not return within `timeout`.
fn timed_out(path: FileName, timeout: Duration) -> Error {
    Error::Open {
        path,
        source: io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the open did not return within {timeout:?} (a hung mount?); it is left to a \
                 helper thread and the file given up on"
            ),
        ),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Waits for every open under way and takes what came of them.
    fn take_all(opens: &mut ThreadOpens) -> Vec<(u64, OpenResult<'static>)> {
        let mut out = Vec::new();
        while !opens.started.is_empty() {
            opens.wait();
            opens.take(&mut out);
        }
        opens.take(&mut out);
        out
    }

    #[test]
    fn a_directory_found_local_opens_its_files_here_but_not_its_links() {
        let dir = crate::tests::disk_tempdir();
        let (a, b, link) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("l"),
        );
        std::fs::write(&a, b"aa").unwrap();
        std::fs::write(&b, b"bbb").unwrap();
        std::os::unix::fs::symlink(&b, &link).unwrap();
        let mut opens = ThreadOpens::new(Duration::from_secs(30));
        // The first file of the directory: on a helper thread.
        assert!(opens.start(1, &a, false));
        assert_eq!(opens.started.len(), 1, "on a helper thread");
        let got = take_all(&mut opens);
        assert!(matches!(&got[..], [(1, Ok(o))] if o.size == 2), "{got:?}");
        // The directory is local now: opened at once, here.
        assert!(opens.start(2, &b, false));
        assert!(opens.started.is_empty(), "opened on this thread");
        let got = take_all(&mut opens);
        assert!(matches!(&got[..], [(2, Ok(o))] if o.size == 3), "{got:?}");
        // A link may lead anywhere: on a helper thread, and followed there.
        assert!(opens.start(3, &link, false));
        assert_eq!(opens.started.len(), 1, "a link goes to a helper thread");
        let got = take_all(&mut opens);
        assert!(matches!(&got[..], [(3, Ok(o))] if o.size == 3), "{got:?}");
        // A missing file of the local directory fails here, naming itself.
        assert!(opens.start(4, &dir.path().join("missing"), false));
        let got = take_all(&mut opens);
        assert!(matches!(&got[..], [(4, Err(_))]), "{got:?}");
    }

    #[test]
    fn another_directory_on_a_mount_found_local_opens_its_files_here() {
        let dir = crate::tests::disk_tempdir();
        let (a, b) = (dir.path().join("a"), dir.path().join("sub"));
        std::fs::write(&a, b"aa").unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("b"), b"bbb").unwrap();
        let mut opens = ThreadOpens::new(Duration::from_secs(30));
        assert!(opens.start(1, &a, false));
        assert_eq!(opens.started.len(), 1, "the first file: on a helper thread");
        assert_eq!(take_all(&mut opens).len(), 1);
        assert!(opens.start(2, &b.join("b"), false));
        if cfg!(target_os = "linux") {
            assert!(opens.started.is_empty(), "the same mount: opened here");
        }
        let got = take_all(&mut opens);
        assert!(matches!(&got[..], [(2, Ok(o))] if o.size == 3), "{got:?}");
    }

    #[test]
    fn a_file_handed_in_on_a_mount_found_local_is_opened_here() {
        let dir = crate::tests::disk_tempdir();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"aa").unwrap();
        std::fs::write(&b, b"bbb").unwrap();
        let handed_in = || ToOpen::File {
            file: std::sync::Arc::new(std::fs::File::open(&b).unwrap()),
            dup: false,
        };
        let mut opens = ThreadOpens::new(Duration::from_secs(30));
        assert!(!opens.local.holds_file(&handed_in()), "no mount known yet");
        assert!(opens.start(1, &a, false));
        let got = take_all(&mut opens);
        assert!(matches!(&got[..], [(1, Ok(_))]), "{got:?}");
        assert!(opens.local.holds_file(&handed_in()), "the same mount");
        let opened = opens.open(handed_in(), false).unwrap();
        assert_eq!(opened.size, 3);
    }
}
