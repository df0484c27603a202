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
//! - Every open handed to the kernel keeps its path in `opens` until its completion is reaped.
//!
//! `in_flight.rs` keeps the reads (`Reads`) and opens (`Opens`) the ring has; this file alone
//! hands them to the kernel and turns their completions back into loans and descriptors.
//! `kernel.rs` waits for completions and keeps the kernel's workers off the thread's CPU.
//! - At most `depth` reads, `depth` opens and `depth` cancels are in flight (plus one cancel
//!   each on shutdown), and the completion queue holds `8 * depth`, so it cannot overflow
//!   (and the kernel keeps overflow anyway: `FEAT_NODROP`).
//! - If the ring is dropped with reads or opens still in flight (a drain that timed out or
//!   failed), the ring itself, their loans, paths and descriptors are leaked, never closed or
//!   freed (the pool leaks its memory with the loans): the kernel may still write into them.
//!   The engine leaks the whole ring in that case anyway (`Engine::drain`).
#![allow(unsafe_code)]

mod in_flight;
mod kernel;

use std::fs::File;
use std::io;
use std::mem::{self, ManuallyDrop};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use crate::consts::Backend;
use crate::error::Error;
use crate::io::{FromCache, Io, OpenResult, Opened, ReadDone, ReadReq};
use crate::pool::Pool;
use crate::source::Source;

use super::setup::{check_features, set_up};
use super::RingConfig;
use in_flight::{Opens, Reads};
use kernel::{is_busy, wait_one_until, WorkersApart, BUSY_TRIES};

/// The `user_data` of cancel requests; read ids never reach it.
const CANCEL: u64 = u64::MAX;
/// Set in the `user_data` of opens (with the file's id in the low bits); read ids never
/// reach it.
const OPEN: u64 = 1 << 62;
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

/// The ring and the reads it has in flight.
pub(crate) struct Ring<'a> {
    // Drop order: `Drop for Ring` leaks `reads` and `opens` if anything is still in flight,
    // then `ring` closes. `ManuallyDrop` keeps the ring's own drop explicit there.
    ring: ManuallyDrop<IoUring>,
    reads: Reads<'a>,
    opens: Opens,
    cancels: usize,
    depth: usize,
    /// Whether the pool is registered (reads are `READ_FIXED` with buffer index 0).
    fixed: bool,
    /// The first error the ring returned; it is broken after that.
    broken: Option<io::Error>,
    workers_apart: WorkersApart,
}

impl std::fmt::Debug for Ring<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.reads.len())
            .field("fixed", &self.fixed)
            .finish_non_exhaustive()
    }
}

impl<'a> Ring<'a> {
    /// Sets up the ring for `pool` (the memory every read lands in), registering the pool
    /// where asked and permitted.
    pub(crate) fn new(config: RingConfig, pool: &Pool) -> io::Result<Ring<'a>> {
        let depth = config.depth;
        let mut ring = set_up(depth, config.sq_poll)?;
        let can_open = check_features(&mut ring, round_trip)?;
        let (base, len) = pool.as_raw_parts();
        let fixed = config.register && len <= MAX_REGISTERED && {
            let iov = libc::iovec {
                iov_base: base.cast(),
                iov_len: len,
            };
            // SAFETY: registering only pins the pages; the kernel writes into them only for the
            // READ_FIXED requests `read` submits, each of which names a loan of this pool, and
            // the pool never frees its memory while a loan is out (invariant above).
            unsafe { ring.submitter().register_buffers(&[iov]) }.is_ok()
        };
        if let Some(workers) = config.io_workers.filter(|&workers| workers > 0) {
            // Bounded workers serve reads and opens of files; the unbounded ones, anything
            // else (a pipe handed in), which a reader of files rarely needs: one is enough.
            let _ = ring
                .submitter()
                .register_iowq_max_workers(&mut [workers, 1]);
        }
        Ok(Ring {
            ring: ManuallyDrop::new(ring),
            reads: Reads::with_capacity(depth as usize),
            opens: Opens::new(can_open),
            cancels: 0,
            depth: depth as usize,
            fixed,
            broken: None,
            workers_apart: WorkersApart::default(),
        })
    }

    /// Puts an entry in the submission queue, submitting to make room if it is full.
    ///
    /// # Safety
    ///
    /// Every buffer and descriptor the entry names must stay valid until its completion is
    /// reaped.
    unsafe fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the caller keeps what `entry` names valid until its completion is reaped.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.submit_queued()?;
        }
    }

    /// `io_uring_enter` for what is queued, reaping into `ready` when the kernel is busy.
    fn submit_queued(&mut self) -> io::Result<()> {
        if let Some(e) = &self.broken {
            return Err(io::Error::new(e.kind(), e.to_string()));
        }
        let mut tries = 0;
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if is_busy(&e) && tries < BUSY_TRIES => {
                    tries += 1;
                    let mut ready = self.reads.lend_ready();
                    self.drain(&mut ready);
                    self.reads.put_ready(ready);
                }
                Err(e) => {
                    self.broken = Some(io::Error::new(e.kind(), e.to_string()));
                    return Err(e);
                }
            }
        }
    }

    /// Moves every completion in the completion queue to `out`.
    fn drain(&mut self, out: &mut Vec<ReadDone<'a>>) {
        for cqe in self.ring.completion() {
            if cqe.user_data() == CANCEL {
                self.cancels -= 1;
                continue;
            }
            if cqe.user_data() & OPEN != 0 {
                // SAFETY: a successful open's result is a new descriptor, owned by nobody
                // else; the `File` takes it over and closes it.
                let own = |fd| unsafe { File::from_raw_fd(fd) };
                self.opens.completed(cqe.user_data(), cqe.result(), own);
                continue;
            }
            let read = self.reads.completed(cqe.user_data());
            // SAFETY: this is the completion of the read `read` stands for (its id is the
            // entry's `user_data`, unique among reads in flight): the kernel is done with it.
            out.push(read.done(cqe.result(), |loan| unsafe { loan.reaped() }));
        }
    }

    /// Collects completions; with `wait` and none there, waits for one until its deadline
    /// (`None`: for good). `Ok(false)`: the deadline passed with nothing collected.
    fn reap_by(
        &mut self,
        wait: Option<Option<Instant>>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        let before = out.len();
        self.reads.take_ready(out);
        self.drain(out);
        match wait {
            Some(deadline) if out.len() == before && !self.opens.any_opened() => {
                if let Some(e) = &self.broken {
                    return Err(io::Error::new(e.kind(), e.to_string()));
                }
                match wait_one_until(&mut self.ring, deadline) {
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(false),
                    waited => waited?,
                }
                self.drain(out);
                // A wait that timed out returns as one that was woken: only the clock tells.
                let late = deadline.is_some_and(|d| Instant::now() >= d);
                return Ok(!(late && out.len() == before && !self.opens.any_opened()));
            }
            _ if !self.ring.submission().is_empty() => self.submit_queued()?,
            _ => {}
        }
        Ok(true)
    }
}

impl<'a> Io<'a> for Ring<'a> {
    fn backend(&self) -> Backend {
        Backend::IoUring
    }

    fn read(&mut self, req: ReadReq<'a>) {
        let (id, fd, len, offset) = (
            req.id(),
            types::Fd(req.fd().raw()),
            req.len() as u32,
            req.offset(),
        );
        let offload = req.offload();
        if offload {
            self.workers_apart.ask(&self.ring);
        }
        let (read, ptr) = req.into_kernel();
        let entry = if self.fixed {
            opcode::ReadFixed::new(fd, ptr, len, 0)
                .offset(offset)
                .build()
        } else {
            opcode::Read::new(fd, ptr, len).offset(offset).build()
        }
        .user_data(id);
        let entry = if offload {
            entry.flags(squeue::Flags::ASYNC)
        } else {
            entry
        };
        self.reads.check_id(id);
        // SAFETY: `ptr..ptr+len` lies in the request's region (`ReadReq::new` checks it), and
        // the read, region and `FdRef` with it, goes into `reads` right below (its id free there
        // and below the tags: checked above), where it stays until `drain` reaps this id's
        // completion. With `fixed`, the address lies in the registered pool (every loan is a
        // region of it).
        match unsafe { self.push(&entry) } {
            Ok(()) => self.reads.sent(id, read),
            // Not queued (the ring is broken): keep it to hand back on shutdown.
            Err(_) => self.reads.not_sent(read),
        }
    }

    fn registered(&self) -> bool {
        self.fixed
    }

    fn sq_poll_ring(&self) -> Option<File> {
        if !self.ring.params().is_setup_sqpoll() {
            return None;
        }
        // SAFETY: the ring's descriptor stays open while `self.ring` lives, which outlives
        // this borrow; the clone is a descriptor of its own.
        let fd = unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) };
        fd.try_clone_to_owned().ok().map(File::from)
    }

    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        // Copied while this thread waits in the call, as the ring's inline completion would
        // be, without a submission and a completion to go through.
        req.read_cached(|done| self.reads.push_ready(done))
    }

    fn start_open(&mut self, file: u64, path: &Path, direct: bool) -> bool {
        if self.broken.is_some() {
            return false;
        }
        let Some((entry, open)) = self.opens.prepare(file, path, direct, self.depth) else {
            return false; // Opened here instead.
        };
        // SAFETY: the path the entry names lives on the heap, owned by the `CString` in `open`
        // (moving it does not move the bytes), which goes into `opens` right below and stays
        // there until `drain` reaps this open's completion.
        if unsafe { self.push(&entry) }.is_err() {
            return false;
        }
        self.opens.sent(open);
        true
    }

    fn take_opened(&mut self, out: &mut Vec<(u64, OpenResult)>) {
        self.opens.take_opened(out);
    }

    fn open(&mut self, source: &Source<'a>, direct: bool) -> Result<Opened<'a>, Error> {
        self.opens.open_here(source, direct)
    }

    fn cancel(&mut self, id: u64) {
        if self.cancels >= self.depth || !self.reads.has(id) {
            return; // Best effort: the read completes on its own.
        }
        let entry = opcode::AsyncCancel::new(id).build().user_data(CANCEL);
        // SAFETY: a cancel names no buffer or descriptor, only the id of a read.
        if unsafe { self.push(&entry) }.is_ok() {
            self.cancels += 1;
        }
    }

    fn submit(&mut self) -> io::Result<()> {
        if self.ring.submission().is_empty() {
            return Ok(());
        }
        self.submit_queued()
    }

    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        self.reap_by(wait.then_some(None), out).map(drop)
    }

    fn reap_until(
        &mut self,
        deadline: Option<Instant>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        self.reap_by(Some(deadline), out)
    }

    fn in_flight(&self) -> usize {
        self.reads.len() + self.opens.len()
    }

    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        // SAFETY: these reads never reached the kernel (`push` failed for each).
        let unsent = self.reads.take_unsent().into_iter();
        out.extend(unsent.map(|r| r.done(-libc::ECANCELED, |loan| unsafe { loan.reaped() })));
        self.reads.take_ready(out);
        let ids: Vec<u64> = self.reads.ids().chain(self.opens.tags()).collect();
        for id in ids {
            let entry = opcode::AsyncCancel::new(id).build().user_data(CANCEL);
            // SAFETY: a cancel names no buffer or descriptor.
            unsafe { self.push(&entry) }?;
            self.cancels += 1;
        }
        // Pushing may have submitted, and a busy kernel reaped into `ready` meanwhile.
        self.reads.take_ready(out);
        while self.reads.any_in_kernel() || self.opens.any_in_kernel() {
            self.drain(out);
            if self.reads.any_in_kernel() || self.opens.any_in_kernel() {
                // A read of a hung device or mount may never complete, cancelled or not.
                wait_one_until(&mut self.ring, deadline)?;
            }
        }
        // Files opened for nothing: closed here.
        self.opens.close_opened();
        Ok(())
    }

    fn rebind<'b>(self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        assert_eq!(self.in_flight(), 0, "rebinding a ring with reads in flight");
        // Never dropped: its `Drop` would close the ring, which moves on below.
        let mut old = ManuallyDrop::new(*self);
        // Empty (nothing in flight); dropped for their allocations, as they name `'a`.
        drop(mem::take(&mut old.reads));
        // SAFETY: the ring is taken out of `old` once, here, and `old` is never dropped (it is
        // `ManuallyDrop`), so the ring is closed only by the rebound `Ring`; nothing is in
        // flight on it (asserted above).
        let ring = unsafe { ManuallyDrop::take(&mut old.ring) };
        let rebound: Ring<'b> = Ring {
            ring: ManuallyDrop::new(ring),
            reads: Reads::with_capacity(old.depth),
            opens: mem::replace(&mut old.opens, Opens::new(false)),
            cancels: old.cancels,
            depth: old.depth,
            fixed: old.fixed,
            broken: old.broken.take(),
            workers_apart: mem::take(&mut old.workers_apart),
        };
        Box::new(rebound)
    }
}

impl Drop for Ring<'_> {
    fn drop(&mut self) {
        self.workers_apart.undo(&self.ring);
        if self.reads.any_in_kernel() || self.opens.any_in_kernel() {
            // Reads and opens the kernel may still be doing: never free their loans or paths,
            // nor close their descriptors (leaking the loans makes the pool leak its memory
            // too), nor the ring they complete into, whose memory the kernel writes.
            self.reads.leak();
            self.opens.leak();
            return;
        }
        // SAFETY: dropped exactly once, here, and nothing in flight names our memory any more.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
    }
}

#[cfg(test)]
#[path = "uring_tests.rs"]
mod tests;
