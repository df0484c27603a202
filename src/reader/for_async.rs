//! What the async reader asks of a reader beyond its public methods: turning it to one that
//! never blocks, and what to wait on before calling it again.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use super::SequentialFileReader;
use crate::helpers::Wake;

impl SequentialFileReader<'_> {
    /// Turns the reader to one that never blocks: where it would wait for a read or an open,
    /// its calls fail with [`WouldBlock`](std::io::ErrorKind::WouldBlock) instead, having
    /// changed nothing the caller sees (see `Engine::set_nonblocking`). `wake` is called
    /// whenever a helper thread answered.
    pub(crate) fn set_nonblocking(&mut self, wake: Wake) {
        self.engine.set_nonblocking(wake);
    }

    /// When to call again if nothing woke the caller by then (a wait that reaches
    /// `drain_timeout`, an open that times out).
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        self.engine.wake_at()
    }

    /// A descriptor that polls readable when the kernel completed something: the ring's,
    /// `None` for the `pread` backend.
    pub(crate) fn ready_fd(&self) -> Option<BorrowedFd<'_>> {
        self.engine.ready_fd()
    }
}
