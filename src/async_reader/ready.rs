//! What an async reader waits on between two calls that would have blocked (`Ready`): the
//! ring's descriptor, which polls readable once the kernel completed something; a socket the
//! helper threads write a byte to after each answer (an open, a `pread` read); and a timer
//! at the engine's next deadline (a wait that reaches `drain_timeout`, an open timing out).
//! All three wake the task through the runtime: none blocks a thread. The socket is a
//! datagram pair: a helper answering after the reader is gone writes to a closed peer, which
//! a datagram socket answers with an error, where a stream socket would raise `SIGPIPE`.
//!
//! Missed wakeups: a readiness is cleared before the call is made again, never after, so a
//! completion that lands between the call and the next wait makes the next wait return at
//! once; the helpers' socket is emptied before its readiness is cleared, for the same reason.

use std::future::Future;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::UnixDatagram;
use tokio::time::Sleep;

use crate::helpers::Wake;

/// What an async reader waits on between two calls that would have blocked.
#[derive(Debug)]
pub(super) struct Ready {
    /// A duplicate of the ring's descriptor: the reactor polls the ring through it, and it
    /// is closed (with `Ready`) before the reader closes the ring's own.
    ring: Option<AsyncFd<OwnedFd>>,
    /// The end the helper threads' answers make readable.
    helpers: UnixDatagram,
    /// The engine's next deadline, once one was waited for.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Ready {
    /// Registers `ring` (the ring's descriptor, if any) with the runtime's reactor, and a
    /// socket for the helper threads; the [`Wake`] they are to call.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled.
    pub(super) fn new(ring: Option<BorrowedFd<'_>>) -> io::Result<(Ready, Wake)> {
        let (theirs, ours) = std::os::unix::net::UnixDatagram::pair()?;
        theirs.set_nonblocking(true)?;
        ours.set_nonblocking(true)?;
        let wake = Wake::new(move || {
            // A full socket is readable already: nothing more to say.
            let _ = theirs.send(&[1]);
        });
        let ring = match ring {
            // The constructor every tokio 1.x has; what its successor's `# Safety` asks (the
            // descriptor open and the same for the `AsyncFd`'s life) an `OwnedFd` holds.
            #[allow(deprecated)]
            Some(fd) => Some(AsyncFd::with_interest(
                fd.try_clone_to_owned()?,
                Interest::READABLE,
            )?),
            None => None,
        };
        let helpers = UnixDatagram::from_std(ours)?;
        let timer = None;
        Ok((
            Ready {
                ring,
                helpers,
                timer,
            },
            wake,
        ))
    }

    /// `Ready` where something may have come since the last call (the call is to be made
    /// again), or `deadline` passed; else `Pending`, the task to be woken when either
    /// happens.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        deadline: Option<Instant>,
    ) -> Poll<io::Result<()>> {
        if let Some(ring) = &self.ring {
            if let Poll::Ready(guard) = ring.poll_read_ready(cx) {
                guard?.clear_ready();
                return Poll::Ready(Ok(()));
            }
        }
        if let Poll::Ready(ready) = self.helpers.poll_recv_ready(cx) {
            ready?;
            // Emptied until it would block, which clears its readiness.
            let mut byte = [0; 1];
            while self.helpers.try_recv(&mut byte).is_ok() {}
            return Poll::Ready(Ok(()));
        }
        let Some(at) = deadline else {
            return Poll::Pending;
        };
        let at = tokio::time::Instant::from_std(at);
        let timer = (self.timer).get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if timer.deadline() != at {
            timer.as_mut().reset(at);
        }
        timer.as_mut().poll(cx).map(Ok)
    }
}
