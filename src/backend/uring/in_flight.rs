//! What the kernel has of the ring (`InFlight`): its reads, opens and cancels. Here, the
//! part that needs no `unsafe`: collecting completions, waiting for them, counting and
//! leaking what is in flight. Handing reads, opens and cancels to the kernel, and turning
//! what it reaped back into loans and files, are in `in_flight/loans.rs`; the reads
//! themselves are kept in `in_flight/reads.rs` (`Reads`), the opens in `in_flight/ring_opens.rs`
//! (`RingOpens`).

mod loans;
mod reads;
mod ring_opens;

use std::io;
use std::mem;
use std::time::Instant;

use io_uring::CompletionQueue;

use super::kernel::Kernel;
use crate::io::{ReadDone, ThreadOpens};
use reads::Reads;
use ring_opens::RingOpens;

/// What the kernel has of the ring: reads, opens and cancels, handed over and taken back
/// (`loans.rs`), and what came back collected and waited for (here).
pub(super) struct InFlight<'a> {
    reads: Reads<'a>,
    opens: RingOpens,
    /// Cancels the kernel has.
    cancels: usize,
    /// The most cancels the kernel has at once (the engine keeps the reads to it).
    depth: usize,
}

impl<'a> InFlight<'a> {
    /// Nothing in flight yet, for a ring of `depth`.
    pub(super) fn new(depth: usize) -> Self {
        InFlight {
            reads: Reads::with_capacity(depth),
            opens: RingOpens::default(),
            cancels: 0,
            depth,
        }
    }

    /// Moves the completions in `cq` to the ready ones, to be collected later: while a busy
    /// kernel holds a submission back, or to see which opens the last submission answered.
    pub(super) fn drain_ready(&mut self, cq: CompletionQueue<'_>) {
        let mut ready = self.reads.lend_ready();
        self.drain(cq, &mut ready);
        self.reads.put_ready(ready);
    }

    /// Collects completions; with `wait` and none there (no read, and no open to hand over),
    /// waits for one until its deadline (`None`: for good). `Ok(false)`: the deadline passed
    /// with nothing collected.
    pub(super) fn reap(
        &mut self,
        kernel: &mut Kernel,
        wait: Option<Option<Instant>>,
        out: &mut Vec<ReadDone<'a>>,
    ) -> io::Result<bool> {
        let before = out.len();
        self.reads.take_ready(out);
        self.drain(kernel.completions(), out);
        match wait {
            Some(deadline) if out.len() == before && !self.opens.any_answered() => {
                kernel.check()?;
                match kernel.wait(deadline) {
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(false),
                    waited => waited?,
                }
                self.drain(kernel.completions(), out);
                // A wait that timed out returns as one that was woken: only the clock tells.
                let late = deadline.is_some_and(|d| Instant::now() >= d);
                return Ok(!(late && out.len() == before && !self.opens.any_answered()));
            }
            _ if kernel.queued() => kernel.submit(|cq| self.drain_ready(cq))?,
            _ => {}
        }
        Ok(true)
    }

    /// Reaps into `out` until the kernel has no read or open left, waiting until `deadline`
    /// at most (a read of a hung device or mount may never complete, cancelled or not); then
    /// closes the files opened for nothing.
    pub(super) fn wait_all(
        &mut self,
        kernel: &mut Kernel,
        out: &mut Vec<ReadDone<'a>>,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        while self.any_in_kernel() {
            self.drain(kernel.completions(), out);
            if self.any_in_kernel() {
                kernel.wait(deadline)?;
            }
        }
        self.opens.close_answered();
        Ok(())
    }

    /// Reads and opens handed over and not yet collected, wherever they are.
    pub(super) fn len(&self) -> usize {
        self.reads.len() + self.opens.len()
    }

    /// Hands the opens the kernel answered over to `opens`, to be taken with those of
    /// helper threads (see `ring_opens::hand_over`).
    pub(super) fn hand_over_opens(&mut self, opens: &mut ThreadOpens) {
        ring_opens::hand_over(self.opens.take(), opens);
    }

    /// Whether an open the kernel made is answered and not yet handed over.
    pub(super) fn any_open_answered(&self) -> bool {
        self.opens.any_answered()
    }

    /// Opens the kernel has or answered, not yet handed over.
    pub(super) fn opens_len(&self) -> usize {
        self.opens.len()
    }

    /// Whether the kernel has any open.
    pub(super) fn any_open_in_kernel(&self) -> bool {
        self.opens.any_in_kernel()
    }

    /// Keeps a read completed without the kernel (copied at once) until it is collected.
    pub(super) fn push_ready(&mut self, done: ReadDone<'a>) {
        self.reads.push_ready(done);
    }

    /// Completions reaped and not yet collected.
    #[cfg(test)]
    pub(super) fn ready_len(&self) -> usize {
        self.reads.ready_len()
    }

    /// Whether the kernel has any read or open.
    pub(super) fn any_in_kernel(&self) -> bool {
        self.reads.any_in_kernel() || self.opens.any_in_kernel()
    }

    /// Reads and opens the kernel may still do: never freed (see `Reads::leak`,
    /// `RingOpens::leak`).
    pub(super) fn leak(&mut self) {
        self.reads.leak();
        self.opens.leak();
    }

    /// The same cancels and depth, for reads of another lifetime. Nothing may be in flight
    /// (no open either: `RingOpens` names no lifetime, and a new one is as good).
    pub(super) fn rebind<'b>(&mut self) -> InFlight<'b> {
        // Empty (nothing in flight); dropped for their allocations, as they name `'a`.
        drop(mem::take(&mut self.reads));
        InFlight {
            reads: Reads::with_capacity(self.depth),
            opens: RingOpens::default(),
            cancels: self.cancels,
            depth: self.depth,
        }
    }
}
