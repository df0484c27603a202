//! The system calls on Windows: enough for the portable backend. Reads are positional
//! (`seek_read`), there are no read-ahead hints, and direct I/O is ignored
//! (`FILE_FLAG_NO_BUFFERING` would need sector-aligned reads the engine does not promise off
//! Linux). The pool comes from std's allocator, page-aligned.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::fs::FileExt;
use std::os::windows::io::AsRawHandle;
use std::path::Path;
use std::ptr::NonNull;

use crate::consts::PAGE;
use crate::error::FileName;

use super::SizeError;

/// How the crate names a handle (for errors, and to find a queued file again). Windows keeps
/// handle values within 32 bits so that 32- and 64-bit processes can share them, so the
/// truncation loses nothing.
pub(crate) type RawFd = i32;

/// The handle of `file`, as a number.
pub(crate) fn raw_fd(file: &File) -> RawFd {
    file.as_raw_handle() as usize as i32
}

/// How a reader opens paths: plainly, as there are no flags to try here (see the Unix
/// `Opener`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Opener;

impl Opener {
    /// Takes in what the kernel refused another copy: nothing here.
    pub(crate) fn learn(&mut self, _other: Opener) {}

    /// No open is known to stay beneath a directory here: every one goes to
    /// [`open`](Self::open).
    pub(crate) fn open_beneath(
        &self,
        _dir: &File,
        _name: &Path,
        _direct: bool,
    ) -> io::Result<(File, i32)> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Opens `path` for reading. Returns the file and its flags: none here.
    pub(crate) fn open(&mut self, path: &Path, _direct: bool) -> io::Result<(File, i32)> {
        Ok((OpenOptions::new().read(true).open(path)?, 0))
    }
}

/// Direct I/O is not offered here: never.
pub(crate) fn bypasses_cache(_file: &File, _flags: i32, _direct: bool) -> bool {
    false
}

/// A file handed in is read through the caller's own open file description here.
pub(crate) fn reopen_blocking(_file: &File, _opener: &mut Opener) -> Option<File> {
    None
}

/// Direct I/O is not offered here: a file handed in is read as it is.
pub(crate) fn reopen_direct(_file: &File, _opener: &mut Opener) -> Option<(File, i32)> {
    None
}

/// No directory is opened here without asking the filesystem.
pub(crate) fn cached_dir(_dir: &Path) -> io::Result<File> {
    Err(io::ErrorKind::Unsupported.into())
}

/// No directory is opened here (see `cached_dir`).
pub(crate) fn cached_dir_beneath(_dir: &File, _path: &Path) -> io::Result<File> {
    Err(io::ErrorKind::Unsupported.into())
}

/// A file handed in is never opened again here.
pub(crate) fn readable(_file: &File) -> bool {
    false
}

/// No mount is known here without asking the filesystem.
pub(crate) fn mount_id(_file: &File) -> Option<u64> {
    None
}

/// No mount is known here (see `mount_id`).
pub(crate) fn mount_known_local(_mount: u64) -> bool {
    false
}

/// The filesystem is not asked here: every file is taken as one that may hang, so that its
/// directory's other files are opened on helper threads too.
pub(crate) fn may_hang(_file: &File) -> bool {
    true
}

/// No `O_NONBLOCK` on files here: the duplicate it is.
pub(crate) fn reopen_if_nonblocking(_file: &File, _opener: &mut Opener) -> Option<File> {
    None
}

/// How errors name a file handed in: by its handle (its path is not looked up).
pub(crate) fn name_of(file: &File) -> FileName {
    FileName::Fd(raw_fd(file))
}

/// No per-process limit on handles worth sharing out here.
pub(crate) fn descriptor_limit() -> Option<u64> {
    None
}

/// Reads at `offset`. Unlike `pread`, `seek_read` moves the file's position.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

/// No device numbers here.
pub(crate) fn device(_file: &File) -> Option<u64> {
    None
}

/// The size of a regular file (anything else cannot be read ahead); no device numbers here.
pub(crate) fn size_and_device(file: &File) -> Result<(u64, Option<u64>), SizeError> {
    let meta = file.metadata().map_err(SizeError::Io)?;
    if meta.is_file() {
        return Ok((meta.len(), None));
    }
    Err(SizeError::NotAFile(if meta.is_dir() {
        "directory"
    } else {
        "special file"
    }))
}

/// Nothing to clear: files are not opened non-blocking here.
pub(crate) fn clear_nonblock(_file: &File, _flags: i32) -> io::Result<()> {
    Ok(())
}

/// Direct I/O is never turned on here.
pub(crate) fn set_direct(_file: &File) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Nothing to turn off: files are never opened for direct I/O here.
pub(crate) fn clear_direct(_file: &File) -> io::Result<()> {
    Ok(())
}

/// Bytes from std's allocator, zeroed, with a page-aligned run of the length asked for in
/// them; freed when dropped (see the Unix `Mapping` for the contract).
pub(crate) struct Mapping {
    bytes: Vec<u8>,
    /// Where the page-aligned run starts in `bytes`.
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} pages)", self.len / PAGE)
    }
}

impl Mapping {
    /// `len` bytes (a multiple of the page size); `None` if the allocator refuses them.
    /// `huge` is Linux's advice, not asked here.
    pub(crate) fn new(len: usize, _huge: bool) -> Option<Mapping> {
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(len.checked_add(PAGE)?).ok()?;
        bytes.resize(len + PAGE, 0);
        let start = (bytes.as_ptr() as usize).wrapping_neg() % PAGE;
        Some(Mapping { bytes, start, len })
    }

    /// The address of its first byte. Pointers from it stay valid while the `Vec` is neither
    /// reallocated nor borrowed again, which nothing does.
    pub(crate) fn as_mut_ptr(&mut self) -> NonNull<u8> {
        NonNull::from(self.as_mut_slice()).cast()
    }

    /// Its bytes (see the Unix `Mapping`).
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }

    /// Its bytes, to write (see the Unix `Mapping`).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}
