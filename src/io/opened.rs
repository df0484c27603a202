//! A queued file set up for reading (`Opened`): its descriptor, its size, whether it reads
//! `O_DIRECT`, and whether the reader owns the descriptor.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, FileName};
use crate::source::{FdRef, Spares};
use crate::sys;

/// A file set up for reading.
#[derive(Debug)]
pub(crate) struct Opened<'a> {
    pub(crate) fd: FdRef<'a>,
    pub(crate) direct: bool,
    /// Whether `fd` is the reader's own descriptor (opened, reopened or duplicated here),
    /// counted against `max_open_files` and closed once the file's reads are done.
    pub(crate) opened_here: bool,
    /// `None`: not sized yet, a buffered descriptor of the reader's own on a filesystem
    /// known local, whose first copy from the page cache may tell its end, saving a seek
    /// (see `Core::size_open`).
    pub(crate) size: Option<u64>,
}

impl Opened<'_> {
    /// The same file, knowing whether its filesystem may hang (`fstatfs`, which a hung
    /// mount may never answer). Its device came with its size.
    pub(crate) fn located(self) -> Self {
        self.fd.shared().set_local(!sys::may_hang(self.fd.file()));
        self
    }

    /// The same file, for a reader of another lifetime: its descriptor borrows nothing.
    pub(crate) fn attach<'b>(self) -> Opened<'b> {
        Opened {
            fd: self.fd.attach(),
            direct: self.direct,
            opened_here: self.opened_here,
            size: self.size,
        }
    }
}

/// The size of a descriptor of the reader's own on a filesystem known local: by a seek to
/// its end, or `fstat` where a seek does not tell it (see `sys::seek_size`), which also
/// tells a file that cannot be read ahead (a directory, a device of characters).
pub(crate) fn size_local(file: &File) -> Result<u64, sys::SizeError> {
    match sys::seek_size(file) {
        Some(size) => Ok(size),
        None => sys::size_and_device(file).map(|(size, _)| size),
    }
}

/// Sets up a file just opened from `path` with `flags` from an
/// [`Opener`](crate::sys::Opener), where direct I/O was asked (`direct`) or not: sized, but
/// where `local` (see `Opened::size`). `local`:
/// opened beneath a directory on a mount checked local (see `dirs.rs`), on this thread or
/// by the ring; it keeps the `O_NONBLOCK` it was opened with, a system call a file saved
/// (its reads do not need it cleared: the read of what is cached, with `RWF_NOWAIT`, and
/// `pread` ignore it, the ring retries a read of a file that can wait, Linux 5.11, and a
/// ring read answered `EAGAIN` all the same clears it then: `made_blocking` in the engine).
/// A file opened anywhere else has it cleared, and may hang until
/// [`located`](Opened::located). Its descriptor takes an allocation of `spares` where there
/// is one.
pub(crate) fn finish_open(
    file: File,
    (flags, direct): (i32, bool),
    path: &Path,
    local: bool,
    spares: &mut Spares,
) -> Result<Opened<'static>, Error> {
    let name = || FileName::Path(path.to_path_buf());
    if !local {
        sys::clear_nonblock(&file, flags).map_err(|source| Error::Open {
            path: name(),
            source,
        })?;
    }
    // A descriptor of the reader's own on a local filesystem is sized later, by its first
    // copy or a seek (`size_local`: elsewhere a seek may ask a hung mount), but for a direct
    // one, whose reads are aligned by its size; its device is asked only where uncached
    // reads need it (see `FdRef::device`).
    let direct = sys::bypasses_cache(&file, flags, direct);
    let (size, device) = match local {
        true if direct => (Some(size_local(&file).map_err(|e| e.naming(name()))?), None),
        true => (None, None),
        false => sys::size_and_device(&file)
            .map(|(size, device)| (Some(size), device))
            .map_err(|e| e.naming(name()))?,
    };
    Ok(Opened {
        direct,
        fd: FdRef::new(spares.descriptor(file, local)).with_device(device),
        opened_here: true,
        size,
    })
}
