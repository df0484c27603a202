//! The portable backend: the same reads as plain `pread(2)` on the consumer's thread, with
//! read-ahead hints (`posix_fadvise(WILLNEED)`, `F_RDADVISE` on macOS; see `sys`) so the
//! kernel reads ahead while the consumer works. The only backend off Linux, and the fallback
//! where io_uring is refused.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use crate::consts::Backend;
use crate::error::Error;
#[cfg(target_os = "linux")]
use crate::io::FromCache;
use crate::io::{open_source, Io, Opened, ReadDone, ReadReq};
use crate::source::Source;
use crate::sys::{fadvise_willneed, read_at, Opener};

/// Reads with `pread`, one at a time, when the consumer waits.
#[derive(Debug, Default)]
pub(crate) struct SyncIo<'a> {
    /// Reads handed over, in order; each is done when the consumer waits for it.
    pending: VecDeque<ReadReq<'a>>,
    /// Reads done (or cancelled) and not yet collected.
    finished: Vec<ReadDone<'a>>,
    /// The flags paths are opened with, and what the kernel refused of them.
    opener: Opener,
}

impl<'a> Io<'a> for SyncIo<'a> {
    fn backend(&self) -> Backend {
        Backend::Pread
    }

    fn read(&mut self, req: ReadReq<'a>) {
        // Tell the kernel now, so its readahead runs while the consumer works on earlier bytes.
        if !req.is_direct() {
            fadvise_willneed(req.fd().file(), req.offset(), req.len() as u64);
        }
        self.pending.push_back(req);
    }

    /// A cached read is done at once, as std's `read` would do it, into the region just
    /// consumed; one that must wait for the device is left to `reap`, after its hint.
    #[cfg(target_os = "linux")]
    fn read_if_cached(&mut self, req: ReadReq<'a>) -> FromCache<'a> {
        req.read_cached(|done| self.finished.push(done))
    }

    fn cancel(&mut self, id: u64) {
        if let Some(i) = self.pending.iter().position(|r| r.id() == id) {
            let req = self.pending.remove(i).expect("found");
            self.finished.push(req.done(-libc::ECANCELED));
        }
    }

    fn submit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        if wait && self.finished.is_empty() {
            if let Some(req) = self.pending.pop_front() {
                self.finished.push(pread_all(req));
            }
        }
        out.append(&mut self.finished);
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.finished.len()
    }

    /// Never waits: reads are done on the caller's thread, so none is in flight here.
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>, _timeout: Duration) -> io::Result<()> {
        out.append(&mut self.finished);
        out.extend(self.pending.drain(..).map(|r| r.done(-libc::ECANCELED)));
        Ok(())
    }

    fn open(&mut self, source: &Source<'a>, direct: bool) -> Result<Opened<'a>, Error> {
        open_source(source, direct, &mut self.opener)
    }

    fn rebind<'b>(self: Box<Self>) -> Box<dyn Io<'b> + 'b> {
        assert_eq!(
            self.in_flight(),
            0,
            "rebinding a backend with reads in flight"
        );
        Box::new(SyncIo {
            opener: self.opener,
            ..SyncIo::default()
        })
    }
}

/// Reads the whole request (retrying `EINTR`, stopping at end of file): bytes read or
/// `-errno`.
pub(crate) fn pread_all(mut req: ReadReq<'_>) -> ReadDone<'_> {
    let (fd, offset) = (req.fd().clone(), req.offset());
    let buf = req.buf_mut();
    let mut done = 0;
    let result = loop {
        if done == buf.len() {
            break done as i32;
        }
        match read_at(fd.file(), &mut buf[done..], offset + done as u64) {
            Ok(0) => break done as i32,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if done > 0 => break done as i32,
            Err(e) => break -e.raw_os_error().unwrap_or(libc::EIO),
        }
    };
    req.done(result)
}
