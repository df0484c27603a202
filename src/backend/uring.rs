//! The io_uring backend: one ring, reads submitted in batches, completions reaped in batches,
//! cancel and drain on drop.
//!
//! Invariants:
//! - Every read handed to the kernel stays in `reads` as a
//!   [`KernelRead`](crate::io::KernelRead) (its region: the bytes the kernel writes; its
//!   `FdRef`: the descriptor it names) until its completion is reaped. Nothing can reach those bytes meanwhile: a `KernelRead` gives no access to them,
//!   and only `drain` turns one back into a completion, for the completion it reaped. A
//!   read's id is below the tags of opens and cancels and unique among reads in flight,
//!   checked in every build before its entry is queued.
//! - At most `depth` reads and `depth` cancels are in flight (plus one cancel each on
//!   shutdown), and the completion queue holds `8 * depth`, so it cannot overflow (and the
//!   kernel keeps overflow anyway: `FEAT_NODROP`).
//! - If the ring is dropped with reads still in flight (a drain that timed out or failed),
//!   the ring itself, their loans and descriptors are leaked, never closed or freed (the pool
//!   leaks its memory with the loans): the kernel may still write into them. The engine
//!   leaks the whole ring in that case anyway (`Core::drain`).
//!
//! Files are not opened through the ring: an `IORING_OP_OPENAT` first tries the open on the
//! submitting thread, which a FUSE mount's open can block for good. They are opened on
//! helper threads, as by the `pread` backend ([`ThreadOpens`]).
//!
//! `in_flight.rs` keeps the reads the ring has (`Reads`); this file alone hands them to the
//! kernel and turns their completions back into loans. The ring is three types, each with
//! the state it owns: `Kernel`, the `IoUring` handle, builds and pushes entries here and, in
//! `kernel.rs`, submits them, retrying while the kernel is busy, and waits for completions;
//! `InFlight`, the reads and cancels the kernel has, hands them over and reaps them here and,
//! in `reap.rs`, collects completions; `Ring`, the [`Io`] interface, delegates to the two
//! (and opens files on helper threads) and closes or leaks the ring when dropped.
#![allow(unsafe_code)]

mod in_flight;
mod kernel;
mod reap;

use std::fs::File;
use std::io;
use std::mem::{self, ManuallyDrop};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, CompletionQueue, IoUring};

use crate::consts::Backend;
use crate::io::{FromCache, Io, KernelRead, ReadDone, ReadReq, ThreadOpens};
use crate::pool::Pool;
use crate::sys;

use super::setup::{check_features, set_up};
use super::RingConfig;
use in_flight::Reads;
use kernel::WorkersApart;

/// The `user_data` of cancel requests; read ids never reach it.
const CANCEL: u64 = u64::MAX;
/// The largest buffer the kernel registers as one.
const MAX_REGISTERED: usize = 1 << 30;

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
    /// Opens, on helper threads.
    opens: ThreadOpens,
}

/// The ring's handle on the kernel: the `IoUring`, what it was set up with, and whether it
/// broke. Builds and pushes entries (here), submits them and waits (`kernel.rs`).
struct Kernel {
    /// Closed only by `Drop for Ring` (of this ring, or of the one `rebind` moves it to), and
    /// only once nothing is in flight.
    ring: ManuallyDrop<IoUring>,
    /// Whether the pool is registered (reads are `READ_FIXED` with buffer index 0).
    fixed: bool,
    /// The first error the ring returned; it is broken after that.
    broken: Option<io::Error>,
    /// Whether this ring asked the kernel's workers off its thread's CPU.
    workers_apart: WorkersApart,
}

/// What the kernel has of the ring: reads and cancels, handed over and reaped here; what
/// came back is collected in `reap.rs`.
struct InFlight<'a> {
    reads: Reads<'a>,
    /// Cancels the kernel has.
    cancels: usize,
    /// The most cancels the kernel has at once (the engine keeps the reads to it).
    depth: usize,
}

impl std::fmt::Debug for Ring<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.flight.reads.len())
            .field("fixed", &self.kernel.fixed)
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

impl Kernel {
    /// Sets up the ring (see [`Ring::new`]).
    fn new(config: RingConfig, pool: &Pool) -> io::Result<Kernel> {
        let mut ring = set_up(config.depth, config.sq_poll)?;
        check_features(&mut ring, round_trip)?;
        let (base, len) = pool.as_raw_parts();
        let fixed = config.register && len <= MAX_REGISTERED && {
            let iov = libc::iovec {
                iov_base: base.cast(),
                iov_len: len,
            };
            // SAFETY: registering only pins the pages; the kernel writes into them only for the
            // READ_FIXED requests `read_entry` builds, each of which names a loan of this pool,
            // and the pool never frees its memory while a loan is out (invariant above).
            unsafe { ring.submitter().register_buffers(&[iov]) }.is_ok()
        };
        if let Some(workers) = config.io_workers.filter(|&workers| workers > 0) {
            // Bounded workers serve reads of files; the unbounded ones, anything
            // else (a pipe handed in), which a reader of files rarely needs: one is enough.
            let _ = ring
                .submitter()
                .register_iowq_max_workers(&mut [workers, 1]);
        }
        let kernel = Kernel {
            ring: ManuallyDrop::new(ring),
            fixed,
            broken: None,
            workers_apart: WorkersApart::default(),
        };
        Ok(kernel)
    }

    /// The entry that reads `req` into its region (`READ_FIXED` where the pool is registered;
    /// by kernel workers where it asks), and the read it becomes, which names that region.
    fn read_entry<'a>(&mut self, req: ReadReq<'a>) -> (squeue::Entry, KernelRead<'a>) {
        let (id, fd, len, offset) = (
            req.id(),
            types::Fd(req.fd().raw()),
            req.len() as u32,
            req.offset(),
        );
        let offload = req.offload();
        // Pages this read brings in are dropped once copied; those cached before stay.
        let rw_flags = if req.uncached() {
            sys::RWF_DONTCACHE
        } else {
            0
        };
        if offload {
            self.workers_apart.ask(&self.ring);
        }

        let (read, ptr) = req.into_kernel();
        let entry = if self.fixed {
            opcode::ReadFixed::new(fd, ptr, len, 0)
                .offset(offset)
                .rw_flags(rw_flags)
                .build()
        } else {
            (opcode::Read::new(fd, ptr, len).offset(offset))
                .rw_flags(rw_flags)
                .build()
        }
        .user_data(id);
        let entry = if offload {
            entry.flags(squeue::Flags::ASYNC)
        } else {
            entry
        };
        (entry, read)
    }

    /// Puts an entry in the submission queue, submitting to make room if it is full (`reap`
    /// takes completions while the kernel is busy: see `submit`).
    ///
    /// # Safety
    ///
    /// Every buffer and descriptor the entry names must stay valid until its completion is
    /// reaped.
    unsafe fn push(
        &mut self,
        entry: &squeue::Entry,
        mut reap: impl FnMut(CompletionQueue<'_>),
    ) -> io::Result<()> {
        loop {
            // SAFETY: the caller keeps what `entry` names valid until its completion is reaped.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.submit(&mut reap)?;
        }
    }

    /// The ring's descriptor, where it has a submission thread, for other rings to share it.
    fn sq_poll_ring(&self) -> Option<File> {
        if !self.ring.params().is_setup_sqpoll() {
            return None;
        }
        // SAFETY: the ring's descriptor stays open while `self.ring` lives, which outlives
        // this borrow; the clone is a descriptor of its own.
        let fd = unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) };
        fd.try_clone_to_owned().ok().map(File::from)
    }

    /// Moves the ring out, into a `Kernel` of its own, leaving `self` a shell.
    ///
    /// # Safety
    ///
    /// `self` must never be used nor closed again: the ring is closed only by the new one.
    unsafe fn take(&mut self) -> Kernel {
        // SAFETY: the ring is taken out once, here, and never closed through `self` (the
        // caller's promise).
        let ring = unsafe { ManuallyDrop::take(&mut self.ring) };
        Kernel {
            ring: ManuallyDrop::new(ring),
            fixed: self.fixed,
            broken: self.broken.take(),
            workers_apart: mem::take(&mut self.workers_apart),
        }
    }

    /// Closes the ring.
    ///
    /// # Safety
    ///
    /// Called once, and only when nothing in flight names the ring's memory or ours.
    unsafe fn close(&mut self) {
        // SAFETY: once (the caller's promise), and nothing in flight any more.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
    }
}

impl<'a> InFlight<'a> {
    /// Hands `req` to the kernel: the read stays in `reads` until `drain` reaps its
    /// completion, or (never queued, the ring broken) until shutdown.
    fn read(&mut self, kernel: &mut Kernel, req: ReadReq<'a>) {
        let id = req.id();
        let (entry, read) = kernel.read_entry(req);
        self.reads.check_id(id);
        // SAFETY: the entry reads into `ptr..ptr+len` (`read_entry`), which lies in the
        // request's region (`ReadReq::new` checks it), and the read, region and `FdRef` with it,
        // goes into `reads` right below (its id free there and below the tags: checked above),
        // where it stays until `drain` reaps this id's completion. With `fixed`, the address
        // lies in the registered pool (every loan is a region of it).
        match unsafe { kernel.push(&entry, |cq| self.drain_ready(cq)) } {
            Ok(()) => self.reads.sent(id, read),
            // Not queued (the ring is broken): keep it to hand back on shutdown.
            Err(_) => self.reads.not_sent(read),
        }
    }

    /// Asks the kernel to cancel the read `id`, where it has it and fewer than `depth`
    /// cancels.
    fn cancel(&mut self, kernel: &mut Kernel, id: u64) {
        if self.cancels >= self.depth || !self.reads.has(id) {
            return; // Best effort: the read completes on its own.
        }
        let entry = opcode::AsyncCancel::new(id).build().user_data(CANCEL);
        // SAFETY: a cancel names no buffer or descriptor, only the id of a read.
        if unsafe { kernel.push(&entry, |cq| self.drain_ready(cq)) }.is_ok() {
            self.cancels += 1;
        }
    }

    /// Moves every completion in the completion queue `cq` to `out`.
    fn drain(&mut self, cq: CompletionQueue<'_>, out: &mut Vec<ReadDone<'a>>) {
        for cqe in cq {
            if cqe.user_data() == CANCEL {
                self.cancels -= 1;
                continue;
            }
            let read = self.reads.completed(cqe.user_data());
            // SAFETY: this is the completion of the read `read` stands for (its id is the
            // entry's `user_data`, unique among reads in flight): the kernel is done with it.
            out.push(read.done(cqe.result(), |loan| unsafe { loan.reaped() }));
        }
    }

    /// Cancels everything the kernel has and waits, for at most `timeout`, until every read
    /// is back, to `out`.
    fn shutdown(
        &mut self,
        kernel: &mut Kernel,
        out: &mut Vec<ReadDone<'a>>,
        timeout: Duration,
    ) -> io::Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        // SAFETY: these reads never reached the kernel (`push` failed for each).
        let unsent = self.reads.take_unsent().into_iter();
        out.extend(unsent.map(|r| r.done(-libc::ECANCELED, |loan| unsafe { loan.reaped() })));
        self.reads.take_ready(out);
        let ids: Vec<u64> = self.reads.ids().collect();
        for id in ids {
            let entry = opcode::AsyncCancel::new(id).build().user_data(CANCEL);
            // SAFETY: a cancel names no buffer or descriptor.
            unsafe { kernel.push(&entry, |cq| self.drain_ready(cq)) }?;
            self.cancels += 1;
        }
        // Pushing may have submitted, and a busy kernel reaped into `ready` meanwhile.
        self.reads.take_ready(out);
        self.wait_all(kernel, out, deadline)
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
        self.kernel.fixed
    }

    fn sq_poll_ring(&self) -> Option<File> {
        self.kernel.sq_poll_ring()
    }

    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        // Copied while this thread waits in the call, as the ring's inline completion would
        // be, without a submission and a completion to go through.
        req.read_cached(|done| self.flight.reads.push_ready(done))
    }

    fn cancel(&mut self, id: u64) {
        self.flight.cancel(&mut self.kernel, id);
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
        self.opens.close_all(Instant::now().checked_add(timeout));
        self.flight.shutdown(&mut self.kernel, out, timeout)
    }

    fn thread_opens(&self) -> Option<&ThreadOpens> {
        Some(&self.opens)
    }

    fn thread_opens_mut(&mut self) -> Option<&mut ThreadOpens> {
        Some(&mut self.opens)
    }

    fn rebind<'b>(self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        assert_eq!(self.in_flight(), 0, "rebinding a ring with reads in flight");
        // Never dropped: its `Drop` would close the ring, which moves on below.
        let mut old = ManuallyDrop::new(*self);
        // SAFETY: the ring is taken out of `old` once, here, and `old` is never dropped (it is
        // `ManuallyDrop`) nor used again, so the ring is closed only by the rebound `Ring`;
        // nothing is in flight on it (asserted above).
        let kernel = unsafe { old.kernel.take() };
        let rebound: Ring<'b> = Ring {
            kernel,
            flight: old.flight.rebind(),
            opens: ThreadOpens::new(old.opens.timeout()),
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
