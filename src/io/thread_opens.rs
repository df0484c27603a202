//! Where a queued file is opened and sized (`ThreadOpens`), for both backends: the one
//! place that decides it, by the rule in `dirs.rs`. A path in a directory on a mount
//! checked local is opened through the ring, where there is one, without leaving that
//! mount: the kernel opens it in the submission, on the reader's thread, where it has it
//! cached, else on one of its workers, and the opens of the read-ahead go in one
//! submission. Without a ring (or where a kernel thread submits: `sq_poll`), it is opened
//! on the reader's thread where the kernel can open it from its caches, else by the ring's
//! workers where there is a ring. Everything else is opened on a helper thread (see
//! `helpers`), so that an open on a hung mount holds a helper thread, never the reader's:
//! each is waited for at most the reader's `drain_timeout` from its start; past it, the
//! file fails with `TimedOut`, naming itself, and whatever the open brings later is closed
//! unseen (on the helper thread). Opens started together time out together, so ten hung
//! opens cost one timeout, not ten. A directory on a mount not yet checked has its mount
//! checked by a helper job of its own, so that the next files there open without one,
//! unless the kernel's table of mounts names it a kind known local (see `dirs.rs`).

use std::io;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dirs::{Checked, Dirs, LocalDir};
use super::{OpenResult, Opened, ToOpen};
use crate::error::{Error, FileName};
use crate::helpers;
use crate::id_map::IdMap;
use crate::source::{Descriptor, FdRef, Spares};
use crate::sys::{self, Opener};

/// Opens of a reader that may be under way past a tenth of the timeout (most likely hung)
/// without counting against its depth (`Limits::open_depth`): so that
/// the opens behind hung ones start, and hang or not, while the hung ones wait out their
/// timeout together.
const MAX_SLOW: usize = 16;

/// What a helper thread sends back: the file's id, what came of its open, and the opener
/// with what the kernel refused of its flags; or what it found of a directory's mount.
enum HelperAnswer {
    Opened(u64, Result<Opened<'static>, Error>, Opener),
    Checked(Checked),
}

/// Where the open of a path of a local directory went.
enum Local {
    /// Made on this thread, from the kernel's caches: its answer.
    Here(OpenResult<'static>),
    /// To the ring.
    Ring,
    /// Neither: it goes to a helper thread.
    Helper,
}

/// The ring, as a place to open a path of a local directory.
pub(crate) trait RingOpen {
    /// Whether the kernel first tries an open in the submission, on the reader's thread,
    /// from its caches: not where a kernel thread of the ring's submits (`sq_poll`), which
    /// other readers may share, and which no open may hold; each goes to a worker there.
    fn opens_in_submission(&self) -> bool;
    /// Hands the open of `path` (`dir`: its directory's handle and its name there) for file
    /// `file` to the ring, with `opener`'s flags; whether it did. Its answer comes back
    /// through [`ThreadOpens::answer_from_ring`].
    fn open_in(
        &mut self,
        file: u64,
        path: &Path,
        dir: LocalDir<'_>,
        opener: &Opener,
        direct: bool,
    ) -> bool;
}

/// Opens under way on helper threads, and those answered and not yet taken.
#[derive(Debug)]
pub(crate) struct ThreadOpens {
    /// The longest an open is waited for, from its start.
    timeout: Duration,
    /// The flags paths are opened with, and what the kernel refused of them so far.
    opener: Opener,
    tx: Sender<HelperAnswer>,
    rx: Receiver<HelperAnswer>,
    /// Opens under way: when each started, and how to name it if it times out.
    started: IdMap<(Instant, FileName)>,
    /// Helper jobs whose answer has not come yet, those given up on included: while any
    /// is out, answers are looked for, so that a late one's file is closed, not kept open
    /// in the channel (a FUSE mount it lies on would stay busy).
    out: usize,
    /// The id of the last open waited for at once ([`open`](Self::open)): ids count down
    /// from the top, far from the queue's, and a late answer names the open it belongs to.
    last_now: u64,
    /// Opens answered (or timed out) and not yet taken.
    answered: Vec<(u64, Result<Opened<'static>, Error>)>,
    /// Directories, and the mounts checked local.
    dirs: Dirs,
    /// Told of each answer a helper thread sends (see `helpers::Wake`).
    wake: helpers::Wake,
    /// The allocations of descriptors closed, for those opened here next.
    spares: Spares,
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
            started: IdMap::default(),
            out: 0,
            answered: Vec::new(),
            dirs: Dirs::default(),
            last_now: u64::MAX,
            wake: helpers::Wake::default(),
            spares: Spares::default(),
        }
    }

    /// Lets go of `fd`'s descriptor: where nothing else holds it, it is closed (with others,
    /// if local) and its allocation kept for the next file opened here (see `Spares`).
    pub(crate) fn close(&mut self, fd: FdRef<'_>) {
        self.spares.close(fd);
    }

    /// Descriptors of files done with, still open until closed together (see `Spares`):
    /// held all the same, so counted against the reader's cap.
    pub(crate) fn closing(&self) -> usize {
        self.spares.closing()
    }

    /// Closes the files done with now; whether there were any.
    pub(crate) fn close_done(&mut self) -> bool {
        self.spares.close_done()
    }

    /// Tells `wake` of each answer a helper thread sends from now on: for a reader that
    /// never blocks (see [`poll`](Self::poll)).
    #[cfg(feature = "tokio")]
    pub(crate) fn set_wake(&mut self, wake: helpers::Wake) {
        self.wake = wake;
    }

    /// Starts opening `path` for file `file`, where the rule says (see the module docs): the
    /// one place that decides it. An open made on this thread from the kernel's caches (where
    /// the ring does not take it) is answered here (`Some`), not queued: the caller has the
    /// file at once, for no more than a plain open costs. Any other answer, the ring's
    /// included, is taken with [`take`](Self::take).
    ///
    /// # Errors
    ///
    /// No helper thread can be had (see `helpers::spawn`).
    pub(crate) fn start(
        &mut self,
        file: u64,
        path: &Path,
        direct: bool,
        ring: Option<&mut dyn RingOpen>,
    ) -> io::Result<Option<OpenResult<'static>>> {
        self.collect();
        match self.dirs.place(path) {
            Ok(dir) => match self.start_local(file, path, dir, direct, ring) {
                Local::Here(opened) => return Ok(Some(opened)),
                Local::Ring => return Ok(None),
                Local::Helper => {}
            },
            Err(check) => self.start_check(check),
        }
        self.start_on_helper(file, ToOpen::Path(path.into()), direct)
            .map(|()| None)
    }

    /// Finds out on a helper thread, apart from any open, whether the mount `check` names
    /// is local: a hung open does not hold the answer back, nor a hung mount's answer an
    /// open. Where no helper thread can be had, the mount stays unchecked, its files opened
    /// on helper threads.
    fn start_check(&mut self, check: Option<super::dirs::Check>) {
        let Some(check) = check else { return };
        let (tx, wake) = (self.tx.clone(), self.wake.clone());
        let job = move || {
            let _ = tx.send(HelperAnswer::Checked(check.run()));
            wake.wake();
        };
        if helpers::spawn(job).is_ok() {
            self.out += 1;
        }
    }

    /// Hands the open of `path` of a local directory to the ring where the kernel tries it
    /// in the submission, which costs a cached open no system call of its own: the opens
    /// started before the next submission go together (BENCHMARKS.md, "Tiny files"). Else,
    /// or where the ring takes no more opens now, opens it here from the kernel's caches,
    /// and a cold one goes to the ring's workers where a kernel thread submits; where it went.
    fn start_local(
        &mut self,
        file: u64,
        path: &Path,
        dir: LocalDir<'_>,
        direct: bool,
        mut ring: Option<&mut dyn RingOpen>,
    ) -> Local {
        let opener = self.opener;
        let in_submission = ring.as_deref().is_some_and(|r| r.opens_in_submission());
        let mut to_ring = |dir: LocalDir<'_>| {
            let ring = ring.as_deref_mut();
            ring.is_some_and(|r| r.open_in(file, path, dir, &opener, direct))
        };
        if in_submission && to_ring((dir.0.clone(), dir.1)) {
            return Local::Ring;
        }
        if let Some(opened) = self.open_here(path, &dir, direct) {
            return Local::Here(opened);
        }
        match !in_submission && to_ring(dir) {
            true => Local::Ring,
            false => Local::Helper,
        }
    }

    /// Opens `path` by its name in its local directory `dir`, on this thread, where the
    /// kernel can do it from its caches without leaving the directory's mount; `None` where
    /// not (a cold inode, a link, a mount point, a missing file: any failure, which the ring,
    /// with `sq_poll`, or a helper thread then meets and reports).
    fn open_here(
        &mut self,
        path: &Path,
        (dir, name): &LocalDir<'_>,
        direct: bool,
    ) -> Option<Result<Opened<'static>, Error>> {
        let (file, flags) = self.opener.open_beneath(dir, name, direct).ok()?;
        Some(super::finish_open(
            file,
            (flags, direct),
            path,
            true,
            &mut self.spares,
        ))
    }

    /// Starts opening `to_open` for file `file` on a helper thread.
    ///
    /// # Errors
    ///
    /// No helper thread can be had (see `helpers::spawn`).
    fn start_on_helper(&mut self, file: u64, to_open: ToOpen, direct: bool) -> io::Result<()> {
        let (tx, mut opener, name) = (self.tx.clone(), self.opener, to_open.name());
        let wake = self.wake.clone();
        let job = move || {
            let opened = to_open.open(direct, &mut opener);
            // Let go of before the answer, so that nothing but the answer outlives it; a
            // descriptor whose close may hang (a file handed in) is closed on a helper
            // thread of its own (see `Descriptor`), never here: the answer must not wait
            // for a close that never returns (FUSE's `FLUSH`).
            drop(to_open);
            // The reader may have gone: the file is closed then (here, where it may hang).
            let _ = tx.send(HelperAnswer::Opened(file, opened, opener));
            wake.wake();
        };
        helpers::spawn(job)?;
        self.out += 1;
        self.started.insert(file, (Instant::now(), name));
        Ok(())
    }

    /// What the ring made of the open of `path` for file `file`, with `flags`: a file
    /// opened beneath a local directory's handle, or `errno`. A symbolic link (`ELOOP`), a
    /// mount crossed (`EXDEV`) and a flag refused (learned, so that the file is opened
    /// without it) start again on a helper thread.
    #[cfg(target_os = "linux")] // the ring's alone
    pub(crate) fn answer_from_ring(
        &mut self,
        (file, path): (u64, &Path),
        flags: i32,
        result: Result<std::fs::File, i32>,
    ) {
        let direct = sys::has(flags, sys::DIRECT);
        let errno = match result {
            Ok(opened) => {
                let spares = &mut self.spares;
                let opened = super::finish_open(opened, (flags, direct), path, true, spares);
                return self.answered.push((file, opened));
            }
            Err(errno) => errno,
        };
        let again = matches!(errno, libc::ELOOP | libc::EXDEV)
            || self.opener.refused(flags, errno).is_some();
        let source = match again {
            true => match self.start_on_helper(file, ToOpen::Path(path.into()), direct) {
                Ok(()) => return,
                Err(e) => e,
            },
            false => io::Error::from_raw_os_error(errno),
        };
        let path = FileName::Path(path.to_path_buf());
        self.answered
            .push((file, Err(Error::Open { path, source })));
    }

    /// Opens and sizes `to_open` now, waiting for it at most the timeout: a path where
    /// [`start`](Self::start) puts it (but never on the ring, whose answers come with its
    /// reads), a file handed in here where it lies on a mount checked local, else on a helper
    /// thread, which also finds whether its filesystem may hang.
    pub(crate) fn open(&mut self, to_open: ToOpen, direct: bool) -> Result<Opened<'static>, Error> {
        self.last_now -= 1;
        let now = self.last_now;
        let name = to_open.name();
        let started = self.start_any(now, to_open, direct);
        started.map_err(|source| Error::Open { path: name, source })?;
        self.wait_for(now)
    }

    /// Starts opening and sizing `to_open` for file `file` without waiting: a path where
    /// [`start`](Self::start) puts it (never on the ring), a file handed in here where it
    /// lies on a mount checked local, else on a helper thread. Its answer is taken with
    /// [`take`](Self::take).
    ///
    /// # Errors
    ///
    /// No helper thread can be had (see `helpers::spawn`).
    pub(crate) fn start_any(&mut self, file: u64, to_open: ToOpen, direct: bool) -> io::Result<()> {
        match to_open {
            ToOpen::Path(path) => {
                if let Some(opened) = self.start(file, &path, direct, None)? {
                    self.answered.push((file, opened));
                }
                Ok(())
            }
            ToOpen::File { file: ref fd, .. } if self.dirs.holds_file(fd) => {
                fd.set_local(true);
                let opened = to_open.open_sized(direct, &mut self.opener);
                self.answered.push((file, opened));
                Ok(())
            }
            to_open => self.start_on_helper(file, to_open, direct),
        }
    }

    /// Waits for the answer of file `file`'s open, taking the others' as they come, at most
    /// until it has taken the timeout.
    fn wait_for(&mut self, file: u64) -> Result<Opened<'static>, Error> {
        loop {
            // Those late are given up on first: one answered `TimedOut` so is found below,
            // where, with no other open under way, there is no deadline to wait until.
            let deadline = self.give_up_late();
            if let Some(i) = self.answered.iter().position(|(f, _)| *f == file) {
                return self.answered.swap_remove(i).1;
            }
            if let Ok(answer) = helpers::recv_until(&self.rx, deadline) {
                self.answered_with(answer);
            }
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
        Some(FdRef::new(Arc::new(Descriptor::local(file))).with_device(fd.device()))
    }

    /// The size of `fd`'s file now: asked here where its filesystem is known local, else on
    /// a helper thread, waited for at most the timeout; `None` where it cannot be told.
    pub(crate) fn size(&self, fd: &FdRef<'_>) -> Option<u64> {
        if !fd.may_hang() {
            return sys::file_size(fd.file()).ok();
        }
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

    /// Whether an open is answered and not yet taken, without waiting.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
    pub(crate) fn any_answered(&mut self) -> bool {
        self.collect();
        !self.answered.is_empty()
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

    /// Whether a helper job's answer has not come yet (see `out`).
    pub(crate) fn jobs_out(&self) -> bool {
        self.out > 0
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

    /// [`wait`](Self::wait) without blocking: collects what the helper threads answered, and
    /// answers with `TimedOut` the opens under way past the timeout; whether an open is
    /// answered and not yet taken. [`due`](Self::due) says when to look again.
    pub(crate) fn poll(&mut self) -> bool {
        self.collect();
        self.give_up_late();
        !self.answered.is_empty()
    }

    /// When an open under way next times out, or turns slow (more opens may start then):
    /// when a reader that never blocks is to [`poll`](Self::poll) again, if no answer comes
    /// before. `None`: no open is under way.
    #[cfg(feature = "tokio")]
    pub(crate) fn due(&self) -> Option<Instant> {
        let earliest = self.started.values().map(|(at, _)| *at).min()?;
        let late = earliest + self.timeout;
        Some(self.next_slow().map_or(late, |at| at.min(late)))
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

    /// Waits until every open under way has returned, or until `deadline`, and drops what
    /// they opened, and closes the files done with that wait to be closed: so that a reader
    /// dropped right after queuing leaves no descriptor open behind it, nor one whose drain
    /// gave up (which leaks the backend). One that has not returned by then is left to its
    /// helper thread, which closes its file when it returns.
    pub(crate) fn close_all(&mut self, deadline: Option<Instant>) {
        self.close_done();
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
            let (_, name) = self.started.remove(&file).expect("listed above");
            self.answered.push((file, Err(timed_out(name, timeout))));
        }
        let earliest = self.started.values().map(|(at, _)| *at).min()?;
        Some(earliest + timeout)
    }

    /// Collects what the helper threads answered so far, without waiting.
    fn collect(&mut self) {
        if self.out == 0 {
            return; // Nothing can come: no job is out.
        }
        while let Ok(answer) = self.rx.try_recv() {
            self.answered_with(answer);
        }
    }

    /// Takes an answer from a helper thread: what it found of a mount, and its open, unless
    /// that was given up on (then dropped, and closed on a helper thread where it may hang).
    fn answered_with(&mut self, answer: HelperAnswer) {
        self.out -= 1;
        match answer {
            HelperAnswer::Checked(checked) => self.dirs.checked(checked),
            HelperAnswer::Opened(file, opened, opener) => {
                self.opener.learn(opener);
                if self.started.remove(&file).is_some() {
                    self.answered.push((file, opened));
                }
            }
        }
    }

    /// The same opens for a reader rebound (its queue's ids start again at 0): the
    /// directories and mounts known, and the flags refused, go on; nothing of the old
    /// reader's opens does, not even a late answer, which is closed where it comes.
    pub(crate) fn rebind(&mut self) -> ThreadOpens {
        let mut rebound = ThreadOpens::new(self.timeout);
        rebound.opener = self.opener;
        rebound.dirs = std::mem::take(&mut self.dirs);
        rebound.dirs.forget_last();
        rebound.wake = self.wake.clone();
        rebound
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
#[path = "thread_opens_tests.rs"]
mod tests;
