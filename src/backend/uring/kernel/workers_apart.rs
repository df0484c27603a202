//! Keeping a ring's kernel workers off its thread's CPU (`WorkersApart`), and undoing it.

use std::thread::ThreadId;

use io_uring::IoUring;

use crate::sys::other_cpus;

/// Whether a ring asked its thread's kernel workers to keep off that thread's CPU, and on
/// which thread, to be undone when the ring goes.
#[derive(Debug, Default)]
pub(in crate::backend::uring) struct WorkersApart {
    /// Asked already (once a ring, whatever came of it: a refusal is not asked again).
    asked: bool,
    /// The thread the setting was made for, where the kernel took it.
    set_on: Option<ThreadId>,
}

thread_local! {
    /// Rings of this thread whose setting stands: the last to go undoes it.
    static APART_RINGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl WorkersApart {
    /// Before the ring's first read handed to kernel workers, asks for the thread's workers
    /// to keep off the CPU it runs on now: the kernel starts them beside the thread whose
    /// copies they take over, where they only take turns with it. The setting is the
    /// thread's (Linux 5.14; the kernel has none for one ring), so it is undone when the
    /// last ring of the thread that asked goes, on that thread; a ring that moved to another
    /// thread, or that was leaked, leaves it. Not for a ring with a submission thread, whose
    /// workers are that thread's, shared with other rings.
    pub(in crate::backend::uring) fn ask(&mut self, ring: &IoUring) {
        if std::mem::replace(&mut self.asked, true) || ring.params().is_setup_sqpoll() {
            return;
        }
        let Some(cpus) = other_cpus() else { return };
        if ring.submitter().register_iowq_aff(&cpus).is_ok() {
            self.set_on = Some(std::thread::current().id());
            APART_RINGS.with(|n| n.set(n.get() + 1));
        }
    }

    /// Undoes `ask`, on the thread it was made for, once no other ring there relies on it.
    pub(in crate::backend::uring) fn undo(&self, ring: &IoUring) {
        if self.set_on != Some(std::thread::current().id()) {
            return;
        }
        let left = APART_RINGS.with(|n| {
            n.set(n.get().saturating_sub(1));
            n.get()
        });
        if left == 0 {
            let _ = ring.submitter().unregister_iowq_aff();
        }
    }
}
