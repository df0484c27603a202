//! The system calls of every Unix. Where platforms differ, each function says which does what:
//! `O_NOATIME` and `cachestat(2)` are Linux's; `O_DIRECT` is Linux's and FreeBSD's, where
//! macOS has `fcntl(F_NOCACHE)`; read-ahead hints are `posix_fadvise` on Linux and FreeBSD and
//! `fcntl(F_RDADVISE)` on macOS; a descriptor's path comes from `/proc/self/fd` on Linux and
//! `fcntl(F_GETPATH)` on macOS. Each `unsafe` call says what it relies on.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(target_os = "linux")]
use crate::consts::PAGE;
use crate::error::FileName;

use super::SizeError;

/// How the crate names a descriptor (for errors, and to find a queued file again).
pub(crate) type RawFd = std::os::fd::RawFd;

/// The descriptor of `file`.
pub(crate) fn raw_fd(file: &File) -> RawFd {
    file.as_raw_fd()
}

/// `O_NOATIME` where it exists (Linux), else nothing.
#[cfg(any(target_os = "linux", target_os = "android"))]
const NOATIME: i32 = libc::O_NOATIME;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const NOATIME: i32 = 0;

/// `O_DIRECT` where it exists (Linux, FreeBSD), else nothing (macOS uses `F_NOCACHE`:
/// `set_nocache`).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const DIRECT: i32 = libc::O_DIRECT;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const DIRECT: i32 = 0;

/// The flags `open_path` first tries (read-only is 0): close-on-exec, `O_NOATIME` (Linux),
/// `O_NONBLOCK`, and `O_DIRECT` where asked and the platform has it.
///
/// `O_NONBLOCK`, so that opening a FIFO with no writer does not hang: the opener clears it
/// (`clear_nonblock`) once the file is known to be a regular file or block device (io_uring
/// would otherwise fail reads that must wait for the disk with `EAGAIN`).
pub(crate) fn open_flags(direct: bool) -> i32 {
    let direct = if direct { DIRECT } else { 0 };
    libc::O_RDONLY | libc::O_CLOEXEC | NOATIME | libc::O_NONBLOCK | direct
}

/// Whether `flags` (from `open_flags`) ask for `O_DIRECT`.
fn is_direct(flags: i32) -> bool {
    has(flags, DIRECT)
}

/// Whether `flags` hold `flag`; never where the platform lacks it (`flag` is 0 there).
fn has(flags: i32, flag: i32) -> bool {
    flags & flag != 0
}

/// The flags to open with again after an open with `flags` failed with `errno`, where the
/// failure is one of a flag the kernel may refuse: `O_NOATIME` (`EPERM`: files the process
/// does not own) or `O_DIRECT` (`EINVAL`: filesystems such as tmpfs). `None`: the failure
/// is final.
fn flags_without_refused(flags: i32, errno: i32) -> Option<i32> {
    match errno {
        libc::EPERM if has(flags, NOATIME) => Some(flags & !NOATIME),
        libc::EINVAL if has(flags, DIRECT) => Some(flags & !DIRECT),
        _ => None,
    }
}

/// Opens a path with `open_flags(direct)`, dropping `O_NOATIME` and `O_DIRECT` where the
/// kernel refuses them (on macOS, direct I/O is `F_NOCACHE`, set after opening). Returns
/// whether the file bypasses the page cache.
pub(crate) fn open_path(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    let open = |flags: i32| OpenOptions::new().read(true).custom_flags(flags).open(path);
    let mut flags = open_flags(direct);
    loop {
        match open(flags) {
            Ok(f) => {
                let uncached = is_direct(flags) || (direct && DIRECT == 0 && set_nocache(&f));
                return Ok((f, uncached));
            }
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

/// Turns the page cache off for `file` (`fcntl(F_NOCACHE)`, macOS's direct I/O); whether it
/// took.
#[cfg(target_vendor = "apple")]
fn set_nocache(file: &File) -> bool {
    // SAFETY: a plain fcntl on a descriptor `file` keeps open; no memory is passed.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_NOCACHE, 1) == 0 }
}

/// No way to turn the page cache off for one file here.
#[cfg(not(target_vendor = "apple"))]
fn set_nocache(_file: &File) -> bool {
    false
}

/// A second descriptor with direct I/O for a file handed in, where the platform and the
/// filesystem permit it; `None` where they do not, or where the file is not open for reading
/// (it must fail as it would without direct I/O, not be reopened for reading), or is an
/// `O_PATH` descriptor.
///
/// Linux reopens through `/proc/self/fd`, which finds the file itself even if it was renamed
/// or deleted; macOS reopens the path `F_GETPATH` reports; elsewhere there is no way.
pub(crate) fn reopen_direct(file: &File) -> Option<File> {
    let readable = |f: i32| f & libc::O_ACCMODE != libc::O_WRONLY && !has(f, O_PATH);
    if !status_flags(file).is_ok_and(readable) {
        return None;
    }
    let path = reopen_path(file)?;
    match open_path(&path, true) {
        Ok((f, true)) => Some(f),
        _ => None,
    }
}

/// `O_PATH` where it exists: a descriptor that names a file without opening it for reading.
#[cfg(any(target_os = "linux", target_os = "android"))]
const O_PATH: i32 = libc::O_PATH;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const O_PATH: i32 = 0;

/// A path that opens the file `file` is open on.
#[cfg(target_os = "linux")]
fn reopen_path(file: &File) -> Option<PathBuf> {
    Some(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
}

/// A path that opens the file `file` is open on.
#[cfg(not(target_os = "linux"))]
fn reopen_path(file: &File) -> Option<PathBuf> {
    fd_path(file)
}

/// The path the kernel reports for a descriptor (`/proc/self/fd`).
#[cfg(target_os = "linux")]
fn fd_path(file: &File) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// The path the kernel reports for a descriptor (`fcntl(F_GETPATH)`).
#[cfg(target_vendor = "apple")]
fn fd_path(file: &File) -> Option<PathBuf> {
    use std::ffi::{CStr, OsStr};
    use std::os::unix::ffi::OsStrExt;
    let mut buf = [0u8; libc::PATH_MAX as usize];
    // SAFETY: F_GETPATH writes at most PATH_MAX bytes, NUL included, into `buf`, which is
    // that long and lives for the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETPATH, buf.as_mut_ptr()) } < 0 {
        return None;
    }
    let path = CStr::from_bytes_until_nul(&buf).ok()?;
    Some(PathBuf::from(OsStr::from_bytes(path.to_bytes())))
}

/// No way to ask for a descriptor's path here.
#[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
fn fd_path(_file: &File) -> Option<PathBuf> {
    None
}

/// How errors name a file handed in: the path the kernel reports for its descriptor, if
/// any. Looked up only when an error is made, so naming costs nothing on the fast path.
pub(crate) fn name_of(file: &File) -> FileName {
    match fd_path(file) {
        Some(path) => FileName::Path(path),
        None => FileName::Fd(file.as_raw_fd()),
    }
}

/// How many descriptors the process may have open (`RLIMIT_NOFILE`'s soft limit); `None`
/// where it is unlimited or cannot be read.
// `rlim_t` is `u64` on Linux and macOS, `i64` on FreeBSD (never negative): a cast either way.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given, which outlives the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as u64)
}

/// Reads at `offset` without moving the file's position (`pread(2)`).
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.read_at(buf, offset)
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
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) fn fadvise_willneed(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain syscall on a descriptor `file` keeps open; it touches no memory of ours.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
}

/// Tells the kernel a range of a file will be read soon (`fcntl(F_RDADVISE)`), so its
/// readahead starts now. A hint: failures are ignored.
#[cfg(target_vendor = "apple")]
pub(crate) fn fadvise_willneed(file: &File, offset: u64, len: u64) {
    let Ok(ra_offset) = libc::off_t::try_from(offset) else {
        return;
    };
    let advice = libc::radvisory {
        ra_offset,
        ra_count: i32::try_from(len).unwrap_or(i32::MAX),
    };
    // SAFETY: the kernel reads `advice`, live and of the layout `F_RDADVISE` takes, for the
    // length of the call; the descriptor is open (`file`).
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDADVISE, &advice as *const _) };
}

/// No read-ahead hint on this platform: the kernel's own readahead does what it does.
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_vendor = "apple"
)))]
pub(crate) fn fadvise_willneed(_file: &File, _offset: u64, _len: u64) {
    // Nothing to ask for.
}

/// `cachestat(2)` (Linux 6.5). New system calls share one number on most architectures;
/// the three MIPS ABIs number theirs apart (and alpha, which Rust does not target).
#[cfg(target_os = "linux")]
#[cfg(target_arch = "mips")]
const SYS_CACHESTAT: libc::c_long = 4451;
#[cfg(target_os = "linux")]
#[cfg(all(target_arch = "mips64", target_pointer_width = "64"))]
const SYS_CACHESTAT: libc::c_long = 5451;
#[cfg(target_os = "linux")]
#[cfg(all(target_arch = "mips64", target_pointer_width = "32"))]
const SYS_CACHESTAT: libc::c_long = 6451;
#[cfg(target_os = "linux")]
#[cfg(not(any(target_arch = "mips", target_arch = "mips64")))]
const SYS_CACHESTAT: libc::c_long = 451;

/// Set once `cachestat` turned out to be missing, so it is not asked again.
#[cfg(target_os = "linux")]
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

/// Whether every page of `len` bytes of `file` at `offset` is in the page cache; `None`
/// where the kernel cannot tell (before Linux 6.5, or not a file it caches). Linux only: the
/// ring is its only user.
#[cfg(target_os = "linux")]
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

/// An anonymous private mapping: page-aligned, and zero-filled by the kernel page by page as
/// it is first touched, so every byte is initialised without a memset of the whole. Unmapped
/// when dropped: whoever hands out pointers into it must `mem::forget` it instead while any
/// may still be used (the pool does, while loans are out).
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping owns its memory; moving it to another thread moves that ownership.
unsafe impl Send for Mapping {}

impl Mapping {
    /// A fresh mapping of `len` bytes (a multiple of the page size); `None` if the kernel
    /// refuses it.
    pub(crate) fn new(len: usize) -> Option<Mapping> {
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
        // Transparent huge pages where the system gives them on request: the pool is walked
        // over and over, and 2 MiB pages spare the TLB and the page faults of 4 KiB ones.
        // Measured on records parsed from warm account files on two threads: 0.95x of std's
        // speed with the advice, 0.88x without, in the same run (Linux 6.18, which places
        // large anonymous mappings on 2 MiB boundaries; older kernels may not, and then the
        // pages at either end of the pool stay small). A hint: refused, it changes nothing.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        // SAFETY: advice on the mapping just made, of its own length; it changes neither the
        // mapping's addresses nor its contents.
        unsafe {
            libc::madvise(ptr, len, libc::MADV_HUGEPAGE)
        };
        let ptr = NonNull::new(ptr.cast::<u8>())?;
        Some(Mapping { ptr, len })
    }

    /// The address of its first byte.
    pub(crate) fn as_mut_ptr(&mut self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length and unmapped once, here; nothing reaches
        // the memory any more (see the type's docs: it is forgotten, not dropped, otherwise).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
