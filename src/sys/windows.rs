//! The system calls on Windows: enough for the portable backend. Reads are positional
//! (`seek_read`), there are no read-ahead hints, and direct I/O is ignored
//! (`FILE_FLAG_NO_BUFFERING` would need sector-aligned reads the engine does not promise off
//! Linux). The pool comes from std's allocator, page-aligned.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
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

/// Opens a path for reading. Direct I/O is not offered here: always `false`.
pub(crate) fn open_path(path: &Path, _direct: bool) -> io::Result<(File, bool)> {
    Ok((OpenOptions::new().read(true).open(path)?, false))
}

/// Direct I/O is not offered here: a file handed in is read as it is.
pub(crate) fn reopen_direct(_file: &File) -> Option<File> {
    None
}

/// How errors name a file handed in: by its handle (its path is not looked up).
pub(crate) fn name_of(file: &File) -> FileName {
    FileName::Fd(raw_fd(file))
}

/// Reads at `offset`. Unlike `pread`, `seek_read` moves the file's position.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

/// The size of a regular file; anything else cannot be read ahead.
pub(crate) fn file_size(file: &File) -> Result<u64, SizeError> {
    let meta = file.metadata().map_err(SizeError::Io)?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    Err(SizeError::NotAFile(if meta.is_dir() {
        "directory"
    } else {
        "special file"
    }))
}

/// Nothing to clear: files are not opened non-blocking here.
pub(crate) fn clear_nonblock(_file: &File) -> io::Result<()> {
    Ok(())
}

/// No read-ahead hint on this platform.
pub(crate) fn fadvise_willneed(_file: &File, _offset: u64, _len: u64) {
    // Nothing to ask for.
}

/// `len` bytes (a multiple of the page size) from std's allocator, page-aligned and zeroed.
/// `None` if the allocator refuses them.
pub(crate) fn map_anonymous(len: usize) -> Option<NonNull<u8>> {
    let layout = Layout::from_size_align(len, PAGE).ok()?;
    if layout.size() == 0 {
        return None;
    }
    // SAFETY: the layout's size is not zero (checked above); the result is checked.
    NonNull::new(unsafe { alloc::alloc_zeroed(layout) })
}

/// Frees what `map_anonymous` allocated.
///
/// # Safety
///
/// `ptr` and `len` are those of one `map_anonymous` call, freed only once, and nothing (no
/// reference, no read in progress) reaches the memory any more.
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    let layout = Layout::from_size_align(len, PAGE).expect("the layout map_anonymous used");
    // SAFETY: the caller guarantees `ptr` came from `alloc_zeroed` with this layout and is
    // no longer reachable.
    unsafe { alloc::dealloc(ptr.as_ptr(), layout) };
}
