//! The reads the ring has handed over and not yet handed back (`Reads`): one place that adds
//! and takes them. No `unsafe` here: pushing an entry, and turning a reaped read back into a
//! loan, happen in `loans.rs`.

use std::mem;

use crate::io::{KernelRead, ReadDone};

use crate::backend::uring::OPEN;
use crate::id_map::IdMap;

/// Reads handed to the ring: with the kernel, never sent because the ring failed, or
/// completed and not yet collected.
#[derive(Default)]
pub(super) struct Reads<'a> {
    /// Reads the kernel has, by id.
    in_kernel: IdMap<KernelRead<'a>>,
    /// Reads handed over but not given to the kernel because the ring failed.
    unsent: Vec<KernelRead<'a>>,
    /// Completions reaped while submitting, or copied at once, not yet collected.
    ready: Vec<ReadDone<'a>>,
}

impl<'a> Reads<'a> {
    pub(super) fn with_capacity(depth: usize) -> Self {
        Reads {
            in_kernel: IdMap::with_capacity_and_hasher(depth, Default::default()),
            ..Reads::default()
        }
    }

    /// Panics unless `id` can name a read handed to the kernel: below the tags of opens and
    /// cancels, so a completion with it is taken for a read's, and not the id of a read in
    /// flight, whose
    /// region would otherwise be handed back on the first completion while the kernel still
    /// writes it for the second. Checked in every build, before the push.
    pub(super) fn check_id(&self, id: u64) {
        assert!(
            id < OPEN,
            "read id {id} lies among the tags of opens and cancels"
        );
        assert!(
            !self.in_kernel.contains_key(&id),
            "read id {id} is already in flight"
        );
    }

    /// The kernel has the read `id` now (its entry was queued).
    pub(super) fn sent(&mut self, id: u64, read: KernelRead<'a>) {
        let replaced = self.in_kernel.insert(id, read);
        debug_assert!(replaced.is_none(), "checked before the push");
    }

    /// The read could not be queued (the ring is broken): kept to hand back on shutdown.
    pub(super) fn not_sent(&mut self, read: KernelRead<'a>) {
        self.unsent.push(read);
    }

    /// Takes the read whose completion, tagged `id`, was just reaped.
    pub(super) fn completed(&mut self, id: u64) -> KernelRead<'a> {
        self.in_kernel
            .remove(&id)
            .expect("a completion for a read in flight")
    }

    /// Whether the kernel has the read `id`.
    pub(super) fn has(&self, id: u64) -> bool {
        self.in_kernel.contains_key(&id)
    }

    /// Whether the kernel has any read.
    pub(super) fn any_in_kernel(&self) -> bool {
        !self.in_kernel.is_empty()
    }

    /// The ids of the reads the kernel has.
    pub(super) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.in_kernel.keys().copied()
    }

    /// Reads handed over and not yet collected, wherever they are.
    pub(super) fn len(&self) -> usize {
        self.in_kernel.len() + self.unsent.len() + self.ready.len()
    }

    /// A completion to collect later.
    pub(super) fn push_ready(&mut self, done: ReadDone<'a>) {
        self.ready.push(done);
    }

    /// Moves the completions waiting to be collected to `out`.
    pub(super) fn take_ready(&mut self, out: &mut Vec<ReadDone<'a>>) {
        out.append(&mut self.ready);
    }

    /// The completions waiting to be collected, for the ring to add to while it holds them
    /// (`put_ready` gives them back).
    pub(super) fn lend_ready(&mut self) -> Vec<ReadDone<'a>> {
        mem::take(&mut self.ready)
    }

    pub(super) fn put_ready(&mut self, ready: Vec<ReadDone<'a>>) {
        debug_assert!(self.ready.is_empty(), "lent while taken");
        self.ready = ready;
    }

    /// Takes the reads that never reached the kernel.
    pub(super) fn take_unsent(&mut self) -> Vec<KernelRead<'a>> {
        mem::take(&mut self.unsent)
    }

    /// Reads the kernel may still write: never dropped (their loans keep the pool mapped).
    pub(super) fn leak(&mut self) {
        mem::forget(mem::take(&mut self.in_kernel));
    }

    #[cfg(test)]
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }
}
