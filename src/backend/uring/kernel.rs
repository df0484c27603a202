//! The ring's handle on the kernel (`Kernel`). Here, the part that needs no `unsafe`:
//! submitting what is queued, retrying while the kernel is busy, waiting for completions, and
//! keeping the kernel's workers off the thread's CPU (`WorkersApart`, in
//! `kernel/workers_apart.rs`). Setting the ring up,
//! building and pushing an entry, which hands the kernel what it names, and taking or closing
//! the ring are in `kernel/lifetimes.rs`.

mod lifetimes;
mod workers_apart;

use std::io;
use std::mem::ManuallyDrop;
use std::thread;
use std::time::{Duration, Instant};

use io_uring::{types, CompletionQueue, IoUring};

pub(super) use workers_apart::WorkersApart;

/// Tries of a wait the kernel answers with `EBUSY`/`EAGAIN` before giving up.
const BUSY_TRIES: u32 = 64;
/// How long a submission the kernel answers with `EBUSY`/`EAGAIN` is tried again while no
/// completion comes to make room, before the ring is taken for broken.
const BUSY_PATIENCE: Duration = Duration::from_secs(1);
/// The longest pause between those tries (they start at a few microseconds, doubling).
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// The ring's handle on the kernel: the `IoUring`, what it was set up with, and whether it
/// broke. Submits entries and waits (here); builds and pushes them (`kernel/lifetimes.rs`).
pub(super) struct Kernel {
    /// Closed only by `Drop for Ring` (of this ring, or of the one `rebind` moves it to), and
    /// only once nothing is in flight; moved out (`taken`) by `rebind`.
    ring: ManuallyDrop<IoUring>,
    /// Whether the pool is registered (reads are `READ_FIXED` with buffer index 0).
    fixed: bool,
    /// The first error the ring returned; it is broken after that.
    broken: Option<io::Error>,
    /// Whether this ring asked the kernel's workers off its thread's CPU.
    workers_apart: WorkersApart,
    /// Whether `ring` was moved to another `Kernel` (see `take`): nothing is done with it
    /// here then.
    taken: bool,
}

impl Kernel {
    /// The ring itself, for the ring's tests to look at its queues.
    #[cfg(test)]
    pub(super) fn io_uring(&mut self) -> &mut IoUring {
        &mut self.ring
    }

    /// Whether a kernel thread of the ring's submits its entries (`sq_poll`), not the
    /// reader's thread in `io_uring_enter`.
    pub(super) fn polled(&self) -> bool {
        self.ring.params().is_setup_sqpoll()
    }

    /// Whether the pool is registered with the ring.
    pub(super) fn fixed(&self) -> bool {
        self.fixed
    }

    /// The ring's descriptor, which polls readable while completions wait to be reaped.
    #[cfg(feature = "tokio")]
    pub(super) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&*self.ring)
    }

    /// Whether entries are queued and not yet submitted.
    pub(super) fn queued(&mut self) -> bool {
        !self.ring.submission().is_empty()
    }

    /// The error the ring broke with, as an error of its own; `Ok` if it did not break.
    pub(super) fn check(&self) -> io::Result<()> {
        match &self.broken {
            Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
            None => Ok(()),
        }
    }

    /// The completions there, to be reaped.
    pub(super) fn completions(&mut self) -> CompletionQueue<'_> {
        self.ring.completion()
    }

    /// `io_uring_enter` for what is queued. While the kernel is busy (`EBUSY`: completions
    /// must be reaped first; `EAGAIN`: short of memory for now), `reap` takes the
    /// completions there, to make room; where there are none yet, the kernel is given a
    /// pause to complete some. A busy kernel is a reason to wait, not to end the reader: it
    /// gives up only once `BUSY_PATIENCE` has passed with no completion coming.
    pub(super) fn submit(&mut self, mut reap: impl FnMut(CompletionQueue<'_>)) -> io::Result<()> {
        self.check()?;
        let mut progress = Instant::now();
        let mut pause = Duration::from_micros(5);
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if is_busy(&e) && progress.elapsed() < BUSY_PATIENCE => {
                    if self.ring.completion().is_empty() {
                        thread::sleep(pause);
                        pause = (pause * 2).min(BUSY_PAUSE);
                    } else {
                        reap(self.ring.completion());
                        progress = Instant::now();
                    }
                }
                Err(e) => {
                    self.broken = Some(io::Error::new(e.kind(), e.to_string()));
                    return Err(e);
                }
            }
        }
    }

    /// Blocks in the kernel until at least one completion is there, or returns an error of
    /// kind `TimedOut` once `deadline` has passed (see `wait_one_until`).
    pub(super) fn wait(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        wait_one_until(&mut self.ring, deadline)
    }

    /// Undoes what `WorkersApart::ask` set for this ring, where it is the last to rely on it.
    pub(super) fn undo_workers_apart(&self) {
        if self.taken {
            return;
        }
        self.workers_apart.undo(&self.ring);
    }
}

/// Blocks in the kernel until at least one completion is there, or returns an error of
/// kind `TimedOut` once `deadline` has passed (`None`: never). The bound needs
/// `IORING_FEAT_EXT_ARG` (Linux 5.11), a wait with a timeout; without it the wait is not
/// bounded. Needs nothing of the `Kernel` but its `IoUring`.
fn wait_one_until(ring: &mut IoUring, deadline: Option<Instant>) -> io::Result<()> {
    let deadline = deadline.filter(|_| ring.params().is_feature_ext_arg());
    let mut tries = 0;
    loop {
        let waited = match deadline {
            None => ring.submit_and_wait(1),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no completion before the deadline",
                    ));
                }
                let timeout = types::Timespec::from(left);
                let args = types::SubmitArgs::new().timespec(&timeout);
                ring.submitter().submit_with_args(1, &args)
            }
        };
        match waited {
            Ok(_) => return Ok(()),
            // Timed out: the caller reaps what came meanwhile, then finds no time left.
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            // Completions are waiting to be reaped: reap them.
            Err(e) if is_busy(&e) && tries < BUSY_TRIES => {
                tries += 1;
                if !ring.completion().is_empty() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_busy(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN))
}
