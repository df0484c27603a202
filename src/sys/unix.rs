//! Every system call outside the ring: opening, sizing, descriptor flags, page-cache hints
//! and questions, and the pool's mapping. The only module besides `pool` and the ring that
//! holds `unsafe`; each call says what it relies on.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::consts::PAGE;
use crate::error::{Error, FileName};

/// The flags `open_path` first tries (read-only is 0): close-on-exec, `O_NOATIME`,
/// `O_NONBLOCK`, and `O_DIRECT` where asked.
///
/// `O_NONBLOCK`, so that opening a FIFO with no writer does not hang: the opener clears it
/// (`clear_nonblock`) once the file is known to be a regular file or block device (io_uring
/// would otherwise fail reads that must wait for the disk with `EAGAIN`).
pub(crate) fn open_flags(direct: bool) -> i32 {
    let direct = if direct { libc::O_DIRECT } else { 0 };
    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOATIME | libc::O_NONBLOCK | direct
}

/// Whether `flags` (from `open_flags`) ask for `O_DIRECT`.
pub(crate) fn is_direct(flags: i32) -> bool {
    flags & libc::O_DIRECT != 0
}

/// The flags to open with again after an open with `flags` failed with `errno`, where the
/// failure is one of a flag the kernel may refuse: `O_NOATIME` (`EPERM`: files the process
/// does not own) or `O_DIRECT` (`EINVAL`: filesystems such as tmpfs). `None`: the failure
/// is final.
pub(crate) fn flags_without_refused(flags: i32, errno: i32) -> Option<i32> {
    match errno {
        libc::EPERM if flags & libc::O_NOATIME != 0 => Some(flags & !libc::O_NOATIME),
        libc::EINVAL if flags & libc::O_DIRECT != 0 => Some(flags & !libc::O_DIRECT),
        _ => None,
    }
}

/// Opens a path with `open_flags(direct)`, dropping `O_NOATIME` and `O_DIRECT` where the
/// kernel refuses them. Returns whether `O_DIRECT` is on.
pub(crate) fn open_path(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    let open = |flags: i32| OpenOptions::new().read(true).custom_flags(flags).open(path);
    let mut flags = open_flags(direct);
    loop {
        match open(flags) {
            Ok(f) => return Ok((f, is_direct(flags))),
            Err(e) => match e
                .raw_os_error()
                .and_then(|n| flags_without_refused(flags, n))
            {
                Some(fewer) => flags = fewer,
                None => return Err(e),
            },
        }
    }
}

/// A second descriptor with `O_DIRECT` for a file handed in, where the filesystem permits
/// it; `None` where it does not, or where the file is not open for reading (it must fail as
/// it would without direct I/O, not be reopened for reading), or is an `O_PATH` descriptor.
pub(crate) fn reopen_direct(file: &File) -> Option<File> {
    let readable = |f: i32| f & libc::O_ACCMODE != libc::O_WRONLY && f & libc::O_PATH == 0;
    if !status_flags(file).is_ok_and(readable) {
        return None;
    }
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match open_path(Path::new(&path), true) {
        Ok((f, true)) => Some(f),
        _ => None,
    }
}

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

/// The size of a regular file or block device; anything else cannot be read ahead.
pub(crate) fn file_size(file: &File) -> Result<u64, SizeError> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata().map_err(SizeError::Io)?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(meta.len());
    }
    if ft.is_block_device() {
        // A block device's size is where seeking to its end lands; put the position back.
        let mut f = file;
        let here = f.stream_position().map_err(SizeError::Io)?;
        let size = f.seek(SeekFrom::End(0)).map_err(SizeError::Io)?;
        f.seek(SeekFrom::Start(here)).map_err(SizeError::Io)?;
        return Ok(size);
    }
    let kind = if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "pipe"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    };
    Err(SizeError::NotAFile(kind))
}

/// The descriptor's status flags (`fcntl(F_GETFL)`): access mode, `O_NONBLOCK`, ...
pub(crate) fn status_flags(file: &File) -> io::Result<i32> {
    // SAFETY: a plain fcntl on a descriptor `file` keeps open; no memory is passed.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Clears `O_NONBLOCK` on a descriptor the reader opened (see `open_flags`).
pub(crate) fn clear_nonblock(file: &File) -> io::Result<()> {
    let flags = status_flags(file)?;
    // SAFETY: a plain fcntl on a descriptor `file` keeps open; no memory is passed.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tells the kernel a range of a file will be read soon (`POSIX_FADV_WILLNEED`), so its
/// readahead starts now. A hint: failures are ignored.
pub(crate) fn fadvise_willneed(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain syscall on a descriptor `file` keeps open; it touches no memory of ours.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
}

/// `cachestat(2)` (Linux 6.5). New system calls share one number on most architectures;
/// the three MIPS ABIs number theirs apart (and alpha, which Rust does not target).
#[cfg(target_arch = "mips")]
const SYS_CACHESTAT: libc::c_long = 4451;
#[cfg(all(target_arch = "mips64", target_pointer_width = "64"))]
const SYS_CACHESTAT: libc::c_long = 5451;
#[cfg(all(target_arch = "mips64", target_pointer_width = "32"))]
const SYS_CACHESTAT: libc::c_long = 6451;
#[cfg(not(any(target_arch = "mips", target_arch = "mips64")))]
const SYS_CACHESTAT: libc::c_long = 451;

/// Set once `cachestat` turned out to be missing, so it is not asked again.
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

/// Whether every page of `len` bytes of `file` at `offset` is in the page cache; `None`
/// where the kernel cannot tell (before Linux 6.5, or not a file it caches).
pub(crate) fn page_cache_holds(file: &File, offset: u64, len: u64) -> Option<bool> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct CacheStat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    if len == 0 || NO_CACHESTAT.load(Ordering::Relaxed) {
        return None;
    }
    let page = PAGE as u64;
    let first = offset / page * page;
    let range = Range {
        off: first,
        len: offset + len - first,
    };
    let mut stat = CacheStat::default();
    // SAFETY: the kernel reads `range` and writes `stat`, both live and of the layout
    // `cachestat(2)` defines, for the length of the call; the descriptor is open (`file`).
    let ret = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut CacheStat,
            0u32,
        )
    };
    if ret < 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            NO_CACHESTAT.store(true, Ordering::Relaxed);
        }
        return None;
    }
    Some(stat.nr_cache >= range.len.div_ceil(page))
}

/// A fresh anonymous private mapping of `len` bytes (a multiple of the page size):
/// page-aligned, and zero-filled by the kernel page by page as it is first touched, so every
/// byte is initialised without a memset of the whole. `None` if the kernel refuses it.
pub(crate) fn map_anonymous(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping aliases nothing of ours; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(ptr.cast::<u8>())
}

/// Unmaps what `map_anonymous` mapped.
///
/// # Safety
///
/// `ptr` and `len` are those of one `map_anonymous` call, unmapped only once, and nothing
/// (no reference, no read in the kernel's hands) reaches the memory any more.
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the caller guarantees the mapping is ours, whole, and no longer reachable.
    unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
}
