//! Every system call outside the ring: opening, sizing, descriptor flags, page-cache hints
//! and questions, positional reads, and the pool's memory. The rest of the crate calls only
//! the functions here, whatever the platform; which file implements them is chosen by `cfg`:
//!
//! - [`unix`]: every Unix, with what differs between them (`O_NOATIME` and `cachestat` on
//!   Linux, `O_DIRECT` where it exists, `F_NOCACHE`, `F_RDADVISE` and `F_GETPATH` on macOS)
//!   marked per function.
//! - [`open`]: how paths are opened on Unix, and what the kernel refused.
//! - [`windows`]: enough for the portable backend; no hints, no direct I/O.
//!
//! Each platform file says `#![allow(unsafe_code)]` for its own calls; this file holds none.

use std::io;

use crate::error::{Error, FileName};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(unix)]
mod open;
#[cfg(unix)]
pub(crate) use open::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

/// Why a file cannot be sized for reading ahead.
#[derive(Debug)]
pub(crate) enum SizeError {
    /// Not a regular file or block device: what it is instead.
    NotAFile(&'static str),
    Io(io::Error),
}

impl SizeError {
    /// The error a reader reports for the file `path`.
    pub(crate) fn naming(self, path: FileName) -> Error {
        match self {
            SizeError::NotAFile(kind) => Error::NotAFile { path, kind },
            SizeError::Io(source) => Error::Open { path, source },
        }
    }
}
