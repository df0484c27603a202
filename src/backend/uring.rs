//! The io_uring backend: one ring, reads submitted in batches, completions reaped in batches.
//! The engine cancels and drains it (`shutdown`) before dropping it; dropped, it closes the
//! ring where nothing is in flight, and leaks it where something still is.
//!
//! Invariants:
//! - Every read handed to the kernel stays in `reads` as a
//!   [`KernelRead`](crate::io::KernelRead) (its region: the bytes the kernel writes; its
//!   `FdRef`: the descriptor it names) until its completion is reaped. Nothing can reach
//!   those bytes meanwhile: a `KernelRead` gives no access to them, and only `drain` turns
//!   one back into a completion, for the completion it reaped. A read's id is below the tags
//!   of opens and cancels and unique among reads in flight, checked in every build before
//!   its entry is queued.
//! - Every open handed to the kernel keeps its path in `opens` until its completion is
//!   reaped; its tag (`OPEN` and the file's id) is unique among opens in flight, checked in
//!   every build before its entry is queued.
//! - At most `depth` reads, `depth` opens and `depth` cancels are in flight (plus one cancel
//!   each on shutdown), and the completion queue holds `8 * depth`, so it cannot overflow
//!   (and the kernel keeps overflow anyway: `FEAT_NODROP`).
//! - If the ring is dropped with reads or opens still in flight (a drain that timed out or
//!   failed), the ring itself, their loans, descriptors and paths are leaked, never closed
//!   or freed (the pool leaks its memory with the loans): the kernel may still write into
//!   them. The engine leaks the whole ring in that case anyway (`Core::drain`).
//!
//! Where a file is opened, [`ThreadOpens`] decides, as for the `pread` backend (`io/dirs.rs`
//! has the rule): an `IORING_OP_OPENAT` first tries the open on the submitting thread, which
//! a FUSE mount's open can block for good. Only a path in a directory on a mount checked
//! local is opened through the ring, staying beneath the directory on its mount: in the
//! submission where the kernel has it cached (never waiting there), else on a kernel worker;
//! a helper thread's hand-off cost more than the open itself, and a system call of its own
//! more than a place in the next submission (`in_flight/ring_opens.rs`).
//!
//! The ring is three types, each in its own file with the state it owns: `Ring` (here), the
//! [`Io`] interface, which delegates to the two others (and opens files on helper threads)
//! and closes or leaks the ring when dropped; `Kernel` (`uring/kernel.rs`), the `IoUring`
//! handle, which submits entries, retrying while the kernel is busy, and waits for
//! completions; `InFlight` (`uring/in_flight.rs`), the reads, opens and cancels the kernel
//! has, which collects what comes back. Where each needs `unsafe`, it is in a child named
//! for what it guards: `kernel/lifetimes.rs` (setting the ring up, pushing entries, taking
//! and closing the ring) and `in_flight/loans.rs` (handing reads and opens over and turning
//! their completions back into loans and files); `in_flight/reads.rs` keeps the reads
//! (`Reads`), `in_flight/ring_opens.rs` the opens (`RingOpens`).
#![allow(unsafe_code)]

mod in_flight;
mod kernel;

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use io_uring::{opcode, IoUring};

use crate::io::{
    Backend, Copied, FromCache, Io, LocalDir, OpenResult, OpenStart, ReadDone, ReadReq, RingOpen,
    ThreadOpens,
};
use crate::pool::Pool;
use crate::source::FdRef;
use crate::sys::Opener;

use super::setup::check_features;
use super::RingConfig;
use in_flight::InFlight;
use kernel::Kernel;

/// The `user_data` of cancel requests; read ids never reach it.
const CANCEL: u64 = u64::MAX;
/// Set in the `user_data` of opens (with the file's id in the low bits); read ids stay below.
const OPEN: u64 = 1 << 62;

/// Sets up a small ring and checks it can do what the backend needs.
pub(crate) fn probe() -> io::Result<()> {
    let mut ring = IoUring::new(2)?;
    check_features(&mut ring, round_trip).map(|_| ())
}

/// Submits a no-op and waits for its completion.
fn round_trip(ring: &mut IoUring) -> io::Result<()> {
    let nop = opcode::Nop::new().build().user_data(CANCEL);
    // SAFETY: a no-op names no buffer or descriptor.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("a new ring's submission queue is full"))?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    ring.completion().for_each(drop);
    Ok(())
}

/// The ring and the reads it has in flight: the [`Io`] interface over the ring's handle on
/// the kernel and what the kernel has.
pub(crate) struct Ring<'a> {
    // Drop order: `Drop for Ring` leaks what is in flight, and the kernel's ring with it, if
    // anything is; else it closes the ring, which is `ManuallyDrop` to keep that explicit.
    kernel: Kernel,
    flight: InFlight<'a>,
    /// Where files are opened, and those opened on helper threads.
    opens: ThreadOpens,
}

impl std::fmt::Debug for Ring<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.flight.len())
            .field("fixed", &self.kernel.fixed())
            .finish_non_exhaustive()
    }
}

impl<'a> Ring<'a> {
    /// Sets up the ring for `pool` (the memory every read lands in), registering the pool
    /// where asked and permitted.
    pub(crate) fn new(config: RingConfig, pool: &Pool) -> io::Result<Ring<'a>> {
        let kernel = Kernel::new(config, pool)?;
        Ok(Ring {
            kernel,
            flight: InFlight::new(config.depth as usize),
            opens: ThreadOpens::new(config.open_timeout),
        })
    }
}

/// The ring, as a place to open files (see [`RingOpen`]).
struct RingPlace<'r, 'a> {
    kernel: &'r mut Kernel,
    flight: &'r mut InFlight<'a>,
}

impl RingOpen for RingPlace<'_, '_> {
    fn opens_in_submission(&self) -> bool {
        !self.kernel.polled()
    }

    fn open_in(
        &mut self,
        file: u64,
        path: &Path,
        dir: LocalDir<'_>,
        opener: &Opener,
        direct: bool,
    ) -> bool {
        (self.flight).open(self.kernel, ((file, path), dir), direct, opener)
    }
}

impl<'a> Io<'a> for Ring<'a> {
    fn backend(&self) -> Backend {
        Backend::IoUring
    }

    fn read(&mut self, req: ReadReq<'a>) {
        self.flight.read(&mut self.kernel, req);
    }

    fn registered(&self) -> bool {
        self.kernel.fixed()
    }

    fn sq_poll_ring(&self) -> Option<File> {
        self.kernel.sq_poll_ring()
    }

    fn copies_cached(&self) -> bool {
        true
    }

    fn copy_cached(&mut self, fd: &FdRef<'a>, offset: u64, buf: &mut [u8]) -> Copied {
        crate::io::copy_cached(fd, offset, buf)
    }

    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        // Copied while this thread waits in the call, as the ring's inline completion would
        // be, without a submission and a completion to go through.
        req.read_cached(|done| self.flight.push_ready(done))
    }

    fn cancel(&mut self, id: u64) {
        self.flight.cancel(&mut self.kernel, id);
    }

    fn start_open(&mut self, file: u64, path: &Path, direct: bool) -> OpenStart<'a> {
        let mut ring = RingPlace {
            kernel: &mut self.kernel,
            flight: &mut self.flight,
        };
        OpenStart::from(self.opens.start(file, path, direct, Some(&mut ring)))
    }

    fn take_opened(&mut self, out: &mut Vec<(u64, OpenResult<'a>)>) {
        self.flight.hand_over_opens(&mut self.opens);
        self.opens.take(out);
    }

    fn wait_opens(&mut self) -> bool {
        // Opens the kernel made in the submission are answered already: collected, not
        // waited for. Those it has still complete with the reads: `reap` waits for them.
        self.flight.drain_ready(self.kernel.completions());
        if self.opens.any_answered() || self.flight.any_open_answered() {
            return true;
        }
        !self.flight.any_open_in_kernel() && self.opens.wait()
    }

    fn uncounted_opens(&self) -> usize {
        // The kernel's: made in the submission or by as many workers as make the reads
        // (`io_workers`), however many are queued, and at most `depth` are.
        self.opens.slow() + self.flight.opens_len()
    }

    fn submit(&mut self) -> io::Result<()> {
        if !self.kernel.queued() {
            return Ok(());
        }
        self.kernel.submit(|cq| self.flight.drain_ready(cq))
    }

    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        let wait = wait.then_some(None);
        self.flight.reap(&mut self.kernel, wait, out).map(drop)
    }

    fn reap_until(
        &mut self,
        deadline: Option<Instant>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        self.flight.reap(&mut self.kernel, Some(deadline), out)
    }

    fn in_flight(&self) -> usize {
        self.flight.len()
    }

    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, timeout: Duration) -> io::Result<()> {
        // One deadline for both waits, the ring's first: its reads name the pool, which
        // leaks if they do not come back, where an open left to a helper thread only closes
        // its file there when it returns.
        let deadline = Instant::now().checked_add(timeout);
        let drained = self.flight.shutdown(&mut self.kernel, out, timeout);
        self.opens.close_all(deadline);
        drained
    }

    fn opens_answered(&mut self) -> bool {
        // Opens the kernel has come back with the reads, through `reap`.
        self.opens.poll() || self.flight.any_open_answered()
    }

    #[cfg(feature = "tokio")]
    fn ready_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.kernel.fd())
    }

    fn thread_opens(&self) -> Option<&ThreadOpens> {
        Some(&self.opens)
    }

    fn thread_opens_mut(&mut self) -> Option<&mut ThreadOpens> {
        Some(&mut self.opens)
    }

    fn rebind<'b>(mut self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        assert_eq!(self.in_flight(), 0, "rebinding a ring with reads in flight");
        // SAFETY: the ring is taken out of `self` once, here; `self` is then only dropped,
        // and its `Drop` closes nothing of a kernel taken (see `Kernel::take`), so the ring
        // is closed only by the rebound `Ring`; nothing is in flight on it (asserted above).
        let kernel = unsafe { self.kernel.take() };
        let rebound: Ring<'b> = Ring {
            kernel,
            flight: self.flight.rebind(),
            opens: self.opens.rebind(),
        };
        Box::new(rebound)
    }
}

impl Drop for Ring<'_> {
    fn drop(&mut self) {
        self.kernel.undo_workers_apart();
        if self.flight.any_in_kernel() {
            // Reads the kernel may still be doing: never free their loans, nor close their
            // descriptors (leaking the loans makes the pool leak its memory
            // too), nor the ring they complete into, whose memory the kernel writes.
            self.flight.leak();
            return;
        }
        // SAFETY: dropped exactly once, here, and nothing in flight names our memory any more.
        unsafe { self.kernel.close() };
    }
}

#[cfg(test)]
#[path = "uring_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "uring_bytes_tests.rs"]
mod bytes_tests;

#[cfg(test)]
#[path = "uring_opens_tests.rs"]
mod opens_tests;
