//! Every system call outside the ring: opening, sizing, descriptor flags, page-cache hints
//! and questions, positional reads, and the pool's memory; and one hint to the CPU. The
//! rest of the crate calls only the functions here, whatever the platform; which file
//! implements them is chosen by `cfg`:
//!
//! - `unix`: every Unix, with what differs between them (`O_NOATIME` and `cachestat` on
//!   Linux, `O_DIRECT` where it exists, `F_NOCACHE` and `F_GETPATH` on macOS)
//!   marked per function.
//! - `open`: how paths are opened on Unix, and what the kernel refused.
//! - `mapping`: memory of its own for the pool and the spill, mapped on Unix.
//! - `mounts`: which mount a descriptor lies on, and whether the kernel's table of mounts
//!   names its filesystem one known local; `local`: the table of filesystems known local,
//!   which that and `may_hang` share (Linux).
//! - `fd`: descriptors in bulk, on Linux: many closed at once, the table grown at once.
//! - `windows`: enough for the portable backend; no hints, no direct I/O.
//! - `cpu`: a hint to the CPU itself (a prefetch), on every platform (a no-op off x86-64).
//! - `clock`: a clock cheap enough to read for every file (`CoarseInstant`), on every
//!   platform.
//!
//! The files that call the kernel or the CPU directly (`unix`, `mapping`, `fd`, `cpu`, `clock`) say
//! `#![allow(unsafe_code)]` for their own calls; this file holds none.

use std::fs::File;
use std::io;
use std::sync::Mutex;

use crate::error::{Error, FileName};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(unix)]
mod mapping;
#[cfg(unix)]
pub(crate) use mapping::Mapping;

#[cfg(unix)]
mod open;
#[cfg(unix)]
pub(crate) use open::*;

#[cfg(target_os = "linux")]
mod local;

#[cfg(unix)]
mod mounts;
#[cfg(unix)]
pub(crate) use mounts::{mount_id, mount_known_local};

#[cfg(target_os = "linux")]
mod fd;
#[cfg(target_os = "linux")]
pub(crate) use fd::{close_all, reserve_descriptors};

/// Off Linux, files close one by one.
#[cfg(not(target_os = "linux"))]
pub(crate) fn close_all(files: &mut Vec<File>) {
    files.clear();
}

/// Off Linux, the table of descriptors is left to grow as descriptors are opened.
#[cfg(not(target_os = "linux"))]
pub(crate) fn reserve_descriptors(_count: usize) {}

mod cpu;
pub(crate) use cpu::prefetch;

mod clock;
pub(crate) use clock::CoarseInstant;

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

/// Off Linux, reads are never sent uncached (see `Limits::uncached`): a plain `pread`.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_uncached_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    read_at(file, buf, offset)
}

/// Off Linux, the kernel cannot tell what it has cached.
#[cfg(not(target_os = "linux"))]
pub(crate) fn pages_cached(_file: &File, _offset: u64, _len: u64) -> Option<(u64, u64)> {
    None
}

/// Off Linux, reads are never uncached, so nothing is dropped behind them.
#[cfg(not(target_os = "linux"))]
pub(crate) fn drop_from_cache(_file: &File, _offset: u64, _len: u64) {}

/// Off Linux, reads are never uncached, so readahead is left alone.
#[cfg(not(target_os = "linux"))]
pub(crate) fn no_readahead(_file: &File) {}

/// The size of a regular file or block device; anything else cannot be read ahead (see
/// `size_and_device`).
pub(crate) fn file_size(file: &File) -> Result<u64, SizeError> {
    size_and_device(file).map(|(size, _)| size)
}

/// The size of a file the reader opened itself, told by a seek to its end: a third of what
/// `statx` costs, which a scan of small cached files feels (one per file). `None` where a
/// seek does not tell it: at 0 (an empty file, or a device or pipe that seeks nowhere), an
/// error, or an end no file reaches (a directory's on some filesystems), which
/// [`size_and_device`] tells apart. A directory that seeks to a size of its own is found by
/// its first read (`EISDIR`: see [`Error::read`](crate::error::Error::read)).
///
/// It moves the file's position, which a descriptor handed in shares with its caller: only
/// for a descriptor of the reader's own.
pub(crate) fn seek_size(mut file: &File) -> Option<u64> {
    use std::io::{Seek, SeekFrom};
    /// Past any file's size: ext4 says a hashed directory ends here.
    const NO_FILE_ENDS: u64 = 1 << 62;
    let end = file.seek(SeekFrom::End(0)).ok()?;
    (1..NO_FILE_ENDS).contains(&end).then_some(end)
}

/// The filesystems (by device) that refused an uncached read, for the whole process: a
/// filesystem's support does not change while it is mounted, so every reader's next files
/// there are read buffered at once, and their pages dropped behind, without a refused read
/// each. A handful at most, so a list.
static UNCACHED_REFUSED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Remembers that the filesystem on `device` refused an uncached read.
pub(crate) fn note_uncached_refused(device: Option<u64>) {
    let Some(device) = device else { return };
    let mut refused = UNCACHED_REFUSED.lock().unwrap_or_else(|e| e.into_inner());
    if !refused.contains(&device) {
        refused.push(device);
    }
}

/// Whether the filesystem on `device` refused an uncached read before.
pub(crate) fn uncached_refused(device: Option<u64>) -> bool {
    device.is_some_and(|device| {
        let refused = UNCACHED_REFUSED.lock().unwrap_or_else(|e| e.into_inner());
        refused.contains(&device)
    })
}
