//! Where a read's region, or an open's path, passes to the kernel and back: a read handed
//! over stays in `reads` until its own completion is reaped, and only then is its
//! `KernelLoan` a `Loan` again (`drain`); an open's path stays in `opens` until its
//! completion is reaped, which alone owns the descriptor it brings; cancels name no memory.
//! Each `unsafe` block here states which it relies on.

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use io_uring::{opcode, CompletionQueue};

use super::InFlight;
use crate::backend::uring::kernel::Kernel;
use crate::backend::uring::{CANCEL, OPEN};
use crate::io::{LocalDir, ReadDone, ReadReq};
use crate::sys::Opener;

impl<'a> InFlight<'a> {
    /// Hands `req` to the kernel: the read stays in `reads` until `drain` reaps its
    /// completion, or (never queued, the ring broken) until shutdown.
    pub(in crate::backend::uring) fn read(&mut self, kernel: &mut Kernel, req: ReadReq<'a>) {
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

    /// Hands the kernel an open of `path` for file `file` (tried in the submission, else on
    /// one of its workers; on a worker straight away where a kernel thread submits), by its
    /// name in its local directory's handle (`dir`), with `opener`'s flags; `false` where it
    /// is to be opened elsewhere.
    pub(in crate::backend::uring) fn open(
        &mut self,
        kernel: &mut Kernel,
        (file, dir): ((u64, &Path), LocalDir<'_>),
        direct: bool,
        opener: &Opener,
    ) -> bool {
        if kernel.check().is_err() {
            return false;
        }
        let how = (direct, opener);
        let depth = (self.depth, kernel.polled());
        let Some((entry, open)) = self.opens.prepare(file, dir, how, depth) else {
            return false;
        };
        // SAFETY: the entry names the name's bytes (the last of the path's, NUL-ended) and
        // the `open_how`, both on the heap, owned by the `Vec` and an `Arc` in `open`
        // (moving it does not move them, and nothing changes the `Vec` before `completed`,
        // once this open's completion is reaped; the `open_how` is only ever read, and this
        // `Arc` keeps it, leaked with `open` by `leak`, whoever else drops theirs), and the
        // directory's descriptor, kept open by the `Arc` in `open`; `open` goes
        // into `opens` right below and stays there until `drain` reaps this open's completion
        // (or is leaked with the ring); its tag is free among opens (`prepare` checks it) and
        // above every read id.
        if unsafe { kernel.push(&entry, |cq| self.drain_ready(cq)) }.is_err() {
            return false;
        }
        self.opens.sent(open);
        true
    }

    /// Asks the kernel to cancel the read `id`, where it has it and fewer than `depth`
    /// cancels.
    pub(in crate::backend::uring) fn cancel(&mut self, kernel: &mut Kernel, id: u64) {
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
    pub(in crate::backend::uring) fn drain(
        &mut self,
        cq: CompletionQueue<'_>,
        out: &mut Vec<ReadDone<'a>>,
    ) {
        for cqe in cq {
            if cqe.user_data() == CANCEL {
                self.cancels -= 1;
                continue;
            }
            if cqe.user_data() & OPEN != 0 {
                // SAFETY: this is the completion of the open tagged so (tags are unique
                // among opens in flight): a result of zero or more is a new descriptor,
                // owned by nobody else, which the `File` takes over and closes.
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

    /// Cancels everything the kernel has and waits, for at most `timeout`, until every read
    /// is back, to `out`, and every open (the files it opened are closed).
    pub(in crate::backend::uring) fn shutdown(
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
        let ids: Vec<u64> = self.reads.ids().chain(self.opens.tags()).collect();
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
