//! Helper threads for the calls that may never return: opening a file, sizing it, and the
//! `pread` backend's reads. On a hung mount (an NFS server gone, a FUSE daemon that never
//! answers) such a call blocks its thread in the kernel for good, where no signal reaches
//! it. Made on a reader's own thread, it would hold the reader's caller with it; made here,
//! the reader waits for its answer with a deadline (the reader's `drain_timeout`) and goes
//! on without it when the deadline passes.
//!
//! A job owns all it needs (`'static`): a call given up on holds nothing of the caller's.
//! Threads are started as jobs come and none is idle, kept for [`IDLE`] after their last job
//! for the next ones, and counted: at most [`MAX_THREADS`] at once in the process, so that
//! calls that never return leave a bounded number of threads behind. Past that, a job is
//! refused with an error that says why.

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Helper threads in the process at most, idle, busy or stuck in a call that never returns.
pub(crate) const MAX_THREADS: usize = 1024;
/// How long a helper thread waits for a job before it exits (20 ms measured no better:
/// BENCHMARKS.md, "Tried and rejected").
const IDLE: Duration = Duration::from_secs(5);
/// A helper's stack: its calls are system calls, with a path at most.
const STACK: usize = 128 << 10;

type Job = Box<dyn FnOnce() + Send>;

/// The jobs waiting for a thread, and the threads.
struct Threads {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads running, idle or not.
    running: usize,
}

static THREADS: Mutex<Threads> = Mutex::new(Threads {
    jobs: VecDeque::new(),
    idle: 0,
    running: 0,
});
/// Woken when a job is queued.
static JOB_QUEUED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Threads> {
    THREADS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `job` on a helper thread: an idle one, else a new one.
///
/// # Errors
///
/// [`MAX_THREADS`] helper threads are busy (calls that do not return, most likely), or the
/// system refused a new thread.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let mut threads = lock();
    if threads.idle > threads.jobs.len() {
        threads.jobs.push_back(Box::new(job));
        JOB_QUEUED.notify_one();
        return Ok(());
    }
    if threads.running >= MAX_THREADS {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "readahead: all {MAX_THREADS} helper threads are busy in opens or reads that \
                 have not returned (a hung mount?); no more files are opened or read until \
                 some return"
            ),
        ));
    }
    threads.running += 1;
    drop(threads);
    let started = thread::Builder::new()
        .name("readahead-helper".into())
        .stack_size(STACK)
        .spawn(move || serve(Box::new(job)));
    if let Err(e) = started {
        lock().running -= 1;
        return Err(e);
    }
    Ok(())
}

/// Closes `file` on a helper thread, never waited for: a close that may never return (see
/// `source::Descriptor`). Where no helper thread can be had ([`MAX_THREADS`] are stuck in
/// calls that never returned), the descriptor is left open rather than closed here.
pub(crate) fn close(file: std::fs::File) {
    if let Err((_, file)) = spawn_with(file, drop) {
        std::mem::forget(file);
    }
}

/// Runs `job(value)` on a helper thread (see [`spawn`]).
///
/// # Errors
///
/// As [`spawn`], with `value` given back: the job never ran.
pub(crate) fn spawn_with<T: Send + 'static>(
    value: T,
    job: impl FnOnce(T) + Send + 'static,
) -> Result<(), (io::Error, T)> {
    // The value comes back out of the slot where the job never runs.
    let slot = Arc::new(Mutex::new(Some(value)));
    let theirs = slot.clone();
    let run = move || {
        let taken = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(value) = taken {
            job(value);
        }
    };
    spawn(run).map_err(|e| {
        let value = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
        (e, value.expect("the job never ran"))
    })
}

/// The next answer a helper thread sends on `rx`, waited for until `deadline` (`None`: for
/// as long as it takes).
pub(crate) fn recv_until<T>(
    rx: &Receiver<T>,
    deadline: Option<Instant>,
) -> Result<T, RecvTimeoutError> {
    match deadline {
        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
    }
}

/// What a helper's answer wakes besides the channel it is sent on: a reader that never
/// blocks (see `Engine::set_nonblocking`) learns through it that an answer waits, instead of
/// blocking in [`recv_until`]. Nothing by default.
#[derive(Clone, Default)]
pub(crate) struct Wake(Option<Arc<dyn Fn() + Send + Sync>>);

impl Wake {
    /// Calls `wake` after each answer.
    #[cfg(feature = "tokio")]
    pub(crate) fn new(wake: impl Fn() + Send + Sync + 'static) -> Self {
        Wake(Some(Arc::new(wake)))
    }

    /// Says an answer was sent: called after the send, so that whoever it wakes finds it.
    pub(crate) fn wake(&self) {
        if let Some(wake) = &self.0 {
            wake();
        }
    }
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Wake").field(&self.0.is_some()).finish()
    }
}

/// Helper threads running now: idle, busy, or stuck in a call that never returned.
pub(crate) fn running() -> usize {
    lock().running
}

/// A helper thread's place among the [`MAX_THREADS`], given back when it is dropped.
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        lock().running -= 1;
    }
}

/// A helper thread: runs `job`, then each job queued, until none comes for [`IDLE`].
fn serve(mut job: Job) {
    // Gives the thread's place back however it ends, a job's panic included.
    let _running = Running;
    loop {
        job();
        let mut threads = lock();
        threads.idle += 1;
        let next = loop {
            if let Some(next) = threads.jobs.pop_front() {
                break Some(next);
            }
            let (guard, waited) = JOB_QUEUED
                .wait_timeout(threads, IDLE)
                .unwrap_or_else(PoisonError::into_inner);
            threads = guard;
            if waited.timed_out() && threads.jobs.is_empty() {
                break None;
            }
        };
        threads.idle -= 1;
        match next {
            Some(next) => job = next,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn jobs_run_and_idle_threads_are_reused() {
        let (tx, rx) = mpsc::channel();
        for i in 0..20 {
            let tx = tx.clone();
            spawn(move || tx.send(i).unwrap()).unwrap();
        }
        let mut got: Vec<i32> = (0..20).map(|_| rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
        assert!(running() <= MAX_THREADS);
    }

    #[test]
    fn a_job_that_never_returns_holds_only_its_thread() {
        let (hold, held) = mpsc::channel::<()>();
        spawn(move || {
            let _ = held.recv();
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        spawn(move || tx.send(7).unwrap()).unwrap();
        assert_eq!(rx.recv().unwrap(), 7);
        drop(hold);
    }
}
