//! The portable backend: the same reads as plain `pread(2)`, each on a helper thread (see
//! `helpers`), so that a read a hung mount never answers holds a helper thread, not the
//! reader's: the reader waits for it at most `drain_timeout`, as for the ring's. Reads the
//! page cache holds are copied at once on the caller's thread (Linux). The only backend off
//! Linux, and the fallback where io_uring is refused.

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::helpers;
use crate::io::Backend;
#[cfg(target_os = "linux")]
use crate::io::{Copied, FromCache};
use crate::io::{Io, ReadDone, ReadReq, ThreadOpens};
#[cfg(target_os = "linux")]
use crate::source::FdRef;
use crate::sys::{read_at, read_uncached_at};

/// Reads on helper threads at once per reader, at most: enough for the device to have
/// depth while files come from it, each read as large as the ring's.
const READ_THREADS: usize = 4;

/// Reads with `pread` on helper threads, as many at once as [`READ_THREADS`].
#[derive(Debug)]
pub(crate) struct PreadIo<'a> {
    /// Reads handed over, waiting for a helper thread, in order.
    waiting: VecDeque<ReadReq<'a>>,
    /// Reads on helper threads.
    running: usize,
    /// Where helper threads send the reads they finished.
    tx: Sender<ReadDone<'static>>,
    rx: Receiver<ReadDone<'static>>,
    /// Reads done (or cancelled, or copied at once) and not yet collected.
    finished: Vec<ReadDone<'a>>,
    opens: ThreadOpens,
    /// Told of each read a helper thread finished (see `helpers::Wake`).
    wake: helpers::Wake,
}

impl PreadIo<'_> {
    /// Reads on helper threads, whose opens are waited for at most `open_timeout`.
    pub(crate) fn new(open_timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel();
        PreadIo {
            waiting: VecDeque::new(),
            running: 0,
            tx,
            rx,
            finished: Vec::new(),
            opens: ThreadOpens::new(open_timeout),
            wake: helpers::Wake::default(),
        }
    }
}

impl<'a> PreadIo<'a> {
    /// Hands waiting reads to helper threads while fewer than [`READ_THREADS`] run. Where no
    /// helper thread can be had and none runs, the read fails with why.
    fn start_waiting(&mut self) {
        while self.running < READ_THREADS {
            let Some(req) = self.waiting.pop_front() else {
                return;
            };
            let (tx, wake) = (self.tx.clone(), self.wake.clone());
            // The reader may have gone: the loan then stays out, and its pool leaked.
            let job = move |req| {
                let _ = tx.send(pread_all(req));
                wake.wake();
            };
            let req = match helpers::spawn_with(req.detach(), job) {
                Ok(()) => {
                    self.running += 1;
                    continue;
                }
                Err((_, req)) => req.attach(),
            };
            if self.running > 0 {
                // Tried again as a running read finishes.
                self.waiting.push_front(req);
                return;
            }
            // None runs to make room: the read fails for good, as `helpers::spawn` says
            // (`EAGAIN` would be tried again at once, and fail the same).
            self.finished.push(req.done(-libc::EMFILE));
        }
    }

    /// Waits for the reads on helper threads until `deadline`, moving them to `out`; an
    /// error of kind `TimedOut` where some did not come back (`timeout`: to say how long).
    fn wait_reads(
        &mut self,
        out: &mut Vec<ReadDone<'a>>,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> io::Result<()> {
        // `collect` waits only while nothing is collected: each turn hands it all over.
        while self.running > 0 {
            let collected = self.collect(Some(deadline));
            out.append(&mut self.finished);
            if !collected {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} reads did not return within {timeout:?}", self.running),
                ));
            }
        }
        Ok(())
    }

    /// Takes a read a helper thread finished, and starts the next waiting.
    fn finished_one(&mut self, done: ReadDone<'static>) {
        self.running -= 1;
        self.finished.push(done.attach());
        self.start_waiting();
    }

    /// Collects the reads finished; where none is and `deadline` is given, waits for one until
    /// it (`None`: for good). `false`: the deadline passed with nothing collected.
    fn collect(&mut self, deadline: Option<Option<Instant>>) -> bool {
        while let Ok(done) = self.rx.try_recv() {
            self.finished_one(done);
        }
        let Some(deadline) = deadline else {
            return true;
        };
        if !self.finished.is_empty() || self.running == 0 {
            return true;
        }
        match helpers::recv_until(&self.rx, deadline) {
            Ok(done) => {
                self.finished_one(done);
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => unreachable!("`self.tx` is never dropped"),
        }
    }
}

impl<'a> Io<'a> for PreadIo<'a> {
    fn backend(&self) -> Backend {
        Backend::Pread
    }

    fn read(&mut self, req: ReadReq<'a>) {
        self.waiting.push_back(req);
        self.start_waiting();
    }

    #[cfg(target_os = "linux")]
    fn copies_cached(&self) -> bool {
        true
    }

    #[cfg(target_os = "linux")]
    fn copy_cached(&mut self, fd: &FdRef<'a>, offset: u64, buf: &mut [u8]) -> Copied {
        crate::io::copy_cached(fd, offset, buf)
    }

    /// A cached read is done at once, as std's `read` would do it, into the region just
    /// consumed; one that must wait for the device goes to a helper thread.
    #[cfg(target_os = "linux")]
    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        req.read_cached(|done| self.finished.push(done))
    }

    /// Where the read still waits for a helper thread; one a helper thread has completes.
    fn cancel(&mut self, id: u64) {
        if let Some(i) = self.waiting.iter().position(|r| r.id() == id) {
            let req = self.waiting.remove(i).expect("found");
            self.finished.push(req.done(-libc::ECANCELED));
        }
    }

    fn submit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        self.collect(wait.then_some(None));
        out.append(&mut self.finished);
        Ok(())
    }

    fn reap_until(
        &mut self,
        deadline: Option<Instant>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        let collected = self.collect(Some(deadline));
        out.append(&mut self.finished);
        Ok(collected)
    }

    fn in_flight(&self) -> usize {
        self.waiting.len() + self.running + self.finished.len()
    }

    /// Cancels the reads waiting and waits for those on helper threads, at most `timeout`.
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, timeout: Duration) -> io::Result<()> {
        let cancelled = self.waiting.drain(..).map(|r| r.done(-libc::ECANCELED));
        out.extend(cancelled);
        out.append(&mut self.finished);
        // One deadline for both waits, the reads' first: they hold loans of the pool, which
        // leaks if they do not come back, where an open left to a helper thread only closes
        // its file there when it returns.
        let deadline = Instant::now().checked_add(timeout);
        let drained = self.wait_reads(out, deadline, timeout);
        self.opens.close_all(deadline);
        drained
    }

    #[cfg(feature = "tokio")]
    fn set_wake(&mut self, wake: helpers::Wake) {
        self.opens.set_wake(wake.clone());
        self.wake = wake;
    }

    fn thread_opens(&self) -> Option<&ThreadOpens> {
        Some(&self.opens)
    }

    fn thread_opens_mut(&mut self) -> Option<&mut ThreadOpens> {
        Some(&mut self.opens)
    }

    fn rebind<'b>(mut self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        assert_eq!(
            self.in_flight(),
            0,
            "rebinding a backend with reads in flight"
        );
        let mut rebound = PreadIo::new(self.opens.timeout());
        rebound.opens = self.opens.rebind();
        rebound.wake = self.wake.clone();
        Box::new(rebound)
    }
}

/// Reads the whole request (retrying `EINTR`, stopping at end of file): bytes read or
/// `-errno`.
pub(crate) fn pread_all(mut req: ReadReq<'_>) -> ReadDone<'_> {
    let (fd, offset, uncached) = (req.fd().clone(), req.offset(), req.uncached());
    let read = if uncached { read_uncached_at } else { read_at };
    let buf = req.buf_mut();
    let mut done = 0;
    let result = loop {
        if done == buf.len() {
            break done as i32;
        }
        match read(fd.file(), &mut buf[done..], offset + done as u64) {
            Ok(0) => break done as i32,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if done > 0 => break done as i32,
            Err(e) => break -e.raw_os_error().unwrap_or(libc::EIO),
        }
    };
    req.done(result)
}
