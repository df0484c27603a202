//! The backends: each implements [`Io`](crate::io::Io) and never reaches into the engine.
//!
//! - `uring`: one io_uring ring, reads submitted and reaped in batches (Linux only); `setup`
//!   makes the ring and checks what the kernel allows.
//! - [`pread`]: plain `pread` on helper threads (everywhere).
//!
//! Both open files on helper threads ([`ThreadOpens`](crate::io::ThreadOpens)).

pub(crate) mod pread;
#[cfg(target_os = "linux")]
mod setup;
#[cfg(target_os = "linux")]
pub(crate) mod uring;

use std::fs::File;
use std::io;
use std::time::Duration;

use crate::io::Io;
use crate::pool::Pool;

/// What the ring needs of the reader's settings.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the ring's alone
pub(crate) struct RingConfig<'c> {
    pub(crate) depth: u32,
    pub(crate) register: bool,
    pub(crate) io_workers: Option<u32>,
    /// A submission thread polling for this long when idle, shared with the ring of
    /// `File` (an io_uring descriptor) where there is one.
    pub(crate) sq_poll: Option<(Duration, Option<&'c File>)>,
    /// The longest an open (on a helper thread) is waited for: the reader's `drain_timeout`.
    pub(crate) open_timeout: Duration,
}

/// A ring for `pool`, or why the kernel refuses one.
#[cfg(target_os = "linux")]
pub(crate) fn ring<'a>(config: RingConfig, pool: &Pool) -> io::Result<Box<dyn Io<'a> + 'a>> {
    Ok(Box::new(uring::Ring::new(config, pool)?))
}

/// Whether this kernel and process allow a ring that can do what the backend needs.
#[cfg(target_os = "linux")]
pub(crate) fn probe() -> io::Result<()> {
    uring::probe()
}

/// io_uring exists only on Linux: there is never a ring here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn ring<'a>(_config: RingConfig, _pool: &Pool) -> io::Result<Box<dyn Io<'a> + 'a>> {
    Err(not_linux())
}

/// io_uring exists only on Linux: the probe always fails here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn probe() -> io::Result<()> {
    Err(not_linux())
}

/// Why there is no ring off Linux.
#[cfg(not(target_os = "linux"))]
fn not_linux() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "io_uring exists only on Linux")
}
