//! What the kernel relies on outlives its use: the pool it registers, and the region and
//! descriptor each entry names, stay valid until the entry's completion is reaped (`push`'s
//! promise); the ring's own descriptor and memory live until it is closed, once, with nothing
//! in flight (`take`, `close`). Each `unsafe` block here states which it relies on.

use std::fs::File;
use std::io;
use std::mem::{self, ManuallyDrop};
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{opcode, squeue, types, CompletionQueue};

use super::{Kernel, WorkersApart};
use crate::backend::setup::{check_features, set_up};
use crate::backend::uring::round_trip;
use crate::backend::RingConfig;
use crate::io::{KernelRead, ReadReq};
use crate::pool::Pool;
use crate::sys;

/// The largest buffer the kernel registers as one.
const MAX_REGISTERED: usize = 1 << 30;

impl Kernel {
    /// Sets up the ring (see [`Ring::new`](crate::backend::uring::Ring::new)).
    pub(in crate::backend::uring) fn new(config: RingConfig, pool: &Pool) -> io::Result<Kernel> {
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
            taken: false,
        };
        Ok(kernel)
    }

    /// The entry that reads `req` into its region (`READ_FIXED` where the pool is registered;
    /// by kernel workers where it asks), and the read it becomes, which names that region.
    pub(in crate::backend::uring) fn read_entry<'a>(
        &mut self,
        req: ReadReq<'a>,
    ) -> (squeue::Entry, KernelRead<'a>) {
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
    pub(in crate::backend::uring) unsafe fn push(
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
    pub(in crate::backend::uring) fn sq_poll_ring(&self) -> Option<File> {
        if !self.ring.params().is_setup_sqpoll() {
            return None;
        }
        // SAFETY: the ring's descriptor stays open while `self.ring` lives, which outlives
        // this borrow; the clone is a descriptor of its own.
        let fd = unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) };
        fd.try_clone_to_owned().ok().map(File::from)
    }

    /// Moves the ring out, into a `Kernel` of its own, leaving `self` a shell, which
    /// [`close`](Self::close) and `undo_workers_apart` leave alone.
    ///
    /// # Safety
    ///
    /// Called once; `self` must never be used again but to be closed or dropped.
    pub(in crate::backend::uring) unsafe fn take(&mut self) -> Kernel {
        assert!(!self.taken, "the ring was taken already");
        self.taken = true;
        // SAFETY: the ring is taken out once (checked above), and `taken` keeps `close`
        // from closing it through `self`.
        let ring = unsafe { ManuallyDrop::take(&mut self.ring) };
        Kernel {
            ring: ManuallyDrop::new(ring),
            fixed: self.fixed,
            broken: self.broken.take(),
            workers_apart: mem::take(&mut self.workers_apart),
            taken: false,
        }
    }

    /// Closes the ring.
    ///
    /// # Safety
    ///
    /// Called once, and only when nothing in flight names the ring's memory or ours.
    pub(in crate::backend::uring) unsafe fn close(&mut self) {
        if self.taken {
            return; // The ring lives on in the `Kernel` it was moved to.
        }
        // SAFETY: once (the caller's promise), and nothing in flight any more.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
    }
}
