//! The system calls of every Unix. Where platforms differ, each function says which does what:
//! `O_NOATIME` and `cachestat(2)` are Linux's; `O_DIRECT` is Linux's and FreeBSD's, where
//! macOS has `fcntl(F_NOCACHE)`; a descriptor's path comes from `/proc/self/fd` on Linux and
//! `fcntl(F_GETPATH)` on macOS. Each `unsafe` call says what it relies on.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::PathBuf;
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

/// Turns the page cache off for `file` (`fcntl(F_NOCACHE)`, macOS's direct I/O); whether it
/// took.
#[cfg(target_vendor = "apple")]
pub(crate) fn set_nocache(file: &File) -> bool {
    fcntl(file, libc::F_NOCACHE, 1).is_ok()
}

/// No way to turn the page cache off for one file here.
#[cfg(not(target_vendor = "apple"))]
pub(crate) fn set_nocache(_file: &File) -> bool {
    false
}

/// A path that opens the file `file` is open on.
#[cfg(target_os = "linux")]
pub(super) fn reopen_path(file: &File) -> Option<PathBuf> {
    Some(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
}

/// A path that opens the file `file` is open on.
#[cfg(not(target_os = "linux"))]
pub(super) fn reopen_path(file: &File) -> Option<PathBuf> {
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

/// How many descriptors the process may open (`RLIMIT_NOFILE`); `None`: unlimited, or unknown.
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

/// The device of the filesystem `file` lies on, where it can be asked (`statx`).
pub(crate) fn device(file: &File) -> Option<u64> {
    file.metadata().ok().map(|meta| meta.dev())
}

/// The size of a regular file or block device (anything else cannot be read ahead), and
/// the device of its filesystem (`st_dev`), from one `fstat`.
pub(crate) fn size_and_device(file: &File) -> Result<(u64, Option<u64>), SizeError> {
    let meta = file.metadata().map_err(SizeError::Io)?;
    let (ft, dev) = (meta.file_type(), Some(meta.dev()));
    if ft.is_file() {
        return Ok((meta.len(), dev));
    }
    if ft.is_block_device() {
        return Ok((device_size(file).map_err(SizeError::Io)?, dev));
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

/// The size in bytes of a block device (`ioctl(BLKGETSIZE64)`). Each platform's
/// `device_size` asks the device rather than seek to its end: the descriptor may be the
/// caller's, whose file position (shared with its dups) is not the reader's to move.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn device_size(file: &File) -> io::Result<u64> {
    /// `_IOR(0x12, 114, size_t)` of `<linux/fs.h>`: the direction bits sit higher on these
    /// architectures (`_IOC_READ` is 2 in 3 bits from bit 29, not in 2 from bit 30).
    const READ: u64 = if cfg!(any(
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "sparc",
        target_arch = "sparc64"
    )) {
        2 << 29
    } else {
        2 << 30
    };
    const SIZE_T: u64 = std::mem::size_of::<usize>() as u64;
    const BLKGETSIZE64: u64 = READ | SIZE_T << 16 | 0x12 << 8 | 114;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, to `size`, live across the
    // call; the descriptor is open (`file`).
    let ret = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            BLKGETSIZE64 as libc::Ioctl,
            &mut size as *mut u64,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// The size in bytes of a disk device (`ioctl(DIOCGMEDIASIZE)`).
#[cfg(target_os = "freebsd")]
fn device_size(file: &File) -> io::Result<u64> {
    /// `_IOR('d', 129, off_t)` of `<sys/disk.h>`.
    const DIOCGMEDIASIZE: libc::c_ulong =
        0x4000_0000 | 8 << 16 | (b'd' as libc::c_ulong) << 8 | 129;
    let mut size: libc::off_t = 0;
    // SAFETY: DIOCGMEDIASIZE writes one off_t through the pointer, to `size`, live across
    // the call; the descriptor is open (`file`).
    let ret = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            DIOCGMEDIASIZE,
            &mut size as *mut libc::off_t,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size as u64)
}

/// The size in bytes of a disk device: its block count times its block size
/// (`ioctl(DKIOCGETBLOCKCOUNT)`, `ioctl(DKIOCGETBLOCKSIZE)`).
#[cfg(target_vendor = "apple")]
fn device_size(file: &File) -> io::Result<u64> {
    /// `_IOR('d', 24, uint32_t)` and `_IOR('d', 25, uint64_t)` of `<sys/disk.h>`.
    const DKIOCGETBLOCKSIZE: libc::c_ulong =
        0x4000_0000 | 4 << 16 | (b'd' as libc::c_ulong) << 8 | 24;
    const DKIOCGETBLOCKCOUNT: libc::c_ulong =
        0x4000_0000 | 8 << 16 | (b'd' as libc::c_ulong) << 8 | 25;
    let mut block: u32 = 0;
    let mut count: u64 = 0;
    // SAFETY: each ioctl writes one value of the type its number names through the pointer,
    // to `block` and `count`, live across the calls; the descriptor is open (`file`).
    let ret = unsafe {
        let fd = file.as_raw_fd();
        let r = libc::ioctl(fd, DKIOCGETBLOCKSIZE, &mut block as *mut u32);
        if r < 0 {
            r
        } else {
            libc::ioctl(fd, DKIOCGETBLOCKCOUNT, &mut count as *mut u64)
        }
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    count
        .checked_mul(u64::from(block))
        .ok_or_else(|| io::Error::other("the disk reports more bytes than 64 bits hold"))
}

/// No way here to size a block device without seeking it: refused.
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_vendor = "apple"
)))]
fn device_size(_file: &File) -> io::Result<u64> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "block devices cannot be sized on this platform without moving their file position",
    ))
}

/// `fcntl(file, cmd, arg)` with an integer argument: what it returns, or the error.
pub(super) fn fcntl(file: &File, cmd: i32, arg: i32) -> io::Result<i32> {
    // SAFETY: an fcntl whose argument is an integer, not a pointer, on a descriptor `file`
    // keeps open: no memory of ours is read or written.
    let ret = unsafe { libc::fcntl(file.as_raw_fd(), cmd, arg) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// Whether `file` has a priority event (`POLLPRI`) waiting, or `poll` fails: asked without
/// waiting. `/proc/self/mountinfo` has one once a mount or unmount changed it.
#[cfg(target_os = "linux")]
pub(crate) fn priority_event(file: &File) -> bool {
    let mut poll = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: the kernel writes `revents` of the one `pollfd` borrowed for the call; the
    // descriptor is open (`file`). A timeout of 0: it never waits.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready != 0 || poll.revents != 0
}

/// Whether `file` may lie where calls wait on a server or daemon for good: anywhere but a
/// filesystem known to be local (FUSE, NFS, SMB, Ceph, 9P, AFS, Lustre, GPFS, BeeGFS, GFS2,
/// OCFS2, Coda, OrangeFS, and any kind not listed in `LOCAL`, may). Such a file's calls are
/// made on helper threads. Asked on a helper thread, as `fstatfs` itself may ask the server.
#[cfg(target_os = "linux")]
pub(crate) fn may_hang(file: &File) -> bool {
    // SAFETY: `statfs` is plain old data, which the kernel fills; the descriptor is open.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes one `statfs` into `fs`, borrowed mutably for the call.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 {
        return true; // Cannot tell: the cautious answer.
    }
    // `f_type`'s integer type differs between the C libraries.
    #[allow(clippy::unnecessary_cast)]
    let f_type = fs.f_type as i64 & 0xffff_ffff;
    !super::local::magic_is_local(f_type)
}

/// `openat2(2)` (Linux 5.6): opens `path` in the directory `dir` (else from the working
/// directory) with `flags`, resolved as `resolve` says (`RESOLVE_*`).
#[cfg(target_os = "linux")]
pub(crate) fn openat2(
    dir: Option<&File>,
    path: &std::path::Path,
    flags: i32,
    resolve: u64,
) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    // A name of a directory's file fits a buffer on the stack: no allocation an open.
    let bytes = path.as_os_str().as_bytes();
    let mut buf = [0u8; 256];
    let owned;
    let path: &std::ffi::CStr = match buf.get_mut(..bytes.len() + 1) {
        Some(room) => {
            room[..bytes.len()].copy_from_slice(bytes);
            std::ffi::CStr::from_bytes_with_nul(room)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?
        }
        None => {
            owned = std::ffi::CString::new(bytes)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            &owned
        }
    };
    // SAFETY: `open_how` is plain old data; zeroed is "no mode, no resolve flags".
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = resolve;
    let (at, size) = (
        dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd()),
        size_of::<libc::open_how>(),
    );
    // SAFETY: the kernel reads the NUL-terminated path and `how`, both alive for the call.
    let fd = unsafe { libc::syscall(libc::SYS_openat2, at, path.as_ptr(), &how, size) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a successful open returns a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// Off Linux, where the filesystem is not asked, every file is taken as one that may hang:
/// its directory's other files are opened on helper threads too.
#[cfg(not(target_os = "linux"))]
pub(crate) fn may_hang(_file: &File) -> bool {
    true
}

/// `cachestat(2)` (Linux 6.5). New system calls share one number on most architectures;
/// the three MIPS ABIs number theirs apart (and alpha, which Rust does not target).
#[cfg(target_arch = "mips")]
#[cfg(target_os = "linux")]
const SYS_CACHESTAT: libc::c_long = 4451;
#[cfg(all(target_arch = "mips64", target_pointer_width = "64"))]
#[cfg(target_os = "linux")]
const SYS_CACHESTAT: libc::c_long = 5451;
#[cfg(all(target_arch = "mips64", target_pointer_width = "32"))]
#[cfg(target_os = "linux")]
const SYS_CACHESTAT: libc::c_long = 6451;
#[cfg(not(any(target_arch = "mips", target_arch = "mips64")))]
#[cfg(target_os = "linux")]
const SYS_CACHESTAT: libc::c_long = 451;

/// Set once `cachestat` turned out to be missing, so it is not asked again.
#[cfg(target_os = "linux")]
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

/// Whether every page of `len` bytes of `file` at `offset` is in the page cache; `None`
/// where the kernel cannot tell (before Linux 6.5, or not a file it caches). Linux only.
#[cfg(target_os = "linux")]
pub(crate) fn page_cache_holds(file: &File, offset: u64, len: u64) -> Option<bool> {
    let (cached, pages) = pages_cached(file, offset, len)?;
    Some(cached >= pages)
}

/// How many of the pages that `len` bytes of `file` at `offset` lie on are in the page
/// cache, and how many pages that is (`cachestat(2)`); `None` where the kernel cannot tell.
#[cfg(target_os = "linux")]
pub(crate) fn pages_cached(file: &File, offset: u64, len: u64) -> Option<(u64, u64)> {
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
    Some((stat.nr_cache, range.len.div_ceil(page)))
}

/// Reads into `buf` from `file` at `offset` only as far as the page cache already holds it
/// (`preadv2` with `RWF_NOWAIT`, Linux 4.14): the bytes read, or `WouldBlock` where the
/// first page is not cached, or another error where the kernel or filesystem cannot do it.
/// Never waits for the device, so the caller's thread copies only what is ready. Where the
/// page cache misses, it may still start the kernel's readahead: `uncached` marks those
/// pages to be dropped once read (`RWF_DONTCACHE`), as the reads that then find them are.
#[cfg(target_os = "linux")]
pub(crate) fn read_cached_at(
    file: &File,
    buf: &mut [u8],
    offset: u64,
    uncached: bool,
) -> io::Result<usize> {
    let flags = libc::RWF_NOWAIT | if uncached { RWF_DONTCACHE } else { 0 };
    read_with_flags(file, buf, offset, flags)
}

/// `RWF_DONTCACHE` (Linux 6.14), spelt out: the C libraries of older systems lack it.
#[cfg(target_os = "linux")]
pub(crate) const RWF_DONTCACHE: i32 = 0x80;

/// Reads at `offset` through the page cache, asking the kernel to drop the pages this read
/// brings in once copied (`preadv2` with `RWF_DONTCACHE`, Linux 6.14); pages already cached
/// stay. `EOPNOTSUPP` (or `EINVAL`) where the kernel or filesystem refuses it.
#[cfg(target_os = "linux")]
pub(crate) fn read_uncached_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    read_with_flags(file, buf, offset, RWF_DONTCACHE)
}

/// `preadv2(file, buf, offset, flags)`: the bytes read.
#[cfg(target_os = "linux")]
fn read_with_flags(file: &File, buf: &mut [u8], offset: u64, flags: i32) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let offset = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which is borrowed
    // mutably for the length of the call; the descriptor is open (`file`).
    let ret = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, flags) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret as usize)
}

/// Turns the kernel's readahead off for `file` (`POSIX_FADV_RANDOM`): each read brings in
/// only its own pages, so that pages dropped behind one read are not brought in again by the
/// readahead of another that completes later. A hint: refused, it changes nothing.
#[cfg(target_os = "linux")]
pub(crate) fn no_readahead(file: &File) {
    // SAFETY: advice on a descriptor `file` keeps open; no memory of ours is passed.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
}

/// Drops `len` bytes of `file` at `offset` from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`): where uncached reads are refused, the pages a
/// reader brought in itself. A hint: refused, it changes nothing.
#[cfg(target_os = "linux")]
pub(crate) fn drop_from_cache(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: advice on a descriptor `file` keeps open; no memory of ours is passed.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
}

/// The CPUs this thread may run on (its affinity mask); `None` where it cannot be told.
#[cfg(target_os = "linux")]
fn allowed_cpus() -> Option<libc::cpu_set_t> {
    // SAFETY: a `cpu_set_t` is a plain bit array, valid when zeroed.
    let mut cpus: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size_of::<cpu_set_t>()` bytes into `cpus`, which
    // lives for the call.
    let ret = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&cpus), &mut cpus) };
    (ret == 0).then_some(cpus)
}

/// The CPUs this thread may run on, but the one it runs on now; `None` where that leaves
/// none (a single CPU) or cannot be told.
#[cfg(target_os = "linux")]
pub(crate) fn other_cpus() -> Option<libc::cpu_set_t> {
    let mut cpus = allowed_cpus()?;
    // SAFETY: no arguments, no memory of ours.
    let now = unsafe { libc::sched_getcpu() };
    let now = usize::try_from(now).ok()?;
    if now >= libc::CPU_SETSIZE as usize {
        return None;
    }
    // SAFETY: `now` is below `CPU_SETSIZE` (checked), so both stay inside the set.
    let left = unsafe {
        libc::CPU_CLR(now, &mut cpus);
        libc::CPU_COUNT(&cpus)
    };
    (left > 0).then_some(cpus)
}

/// Runs `f` in a child forked from this process, which then exits at once: whether `f`
/// returned there (a test's look at what a forked child shares with its parent).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn in_forked_child(f: impl FnOnce()) -> bool {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    // SAFETY: the child runs `f` on this one thread and exits without returning to the
    // caller; `f` takes no lock another thread may have held at the fork (the caller's
    // promise), and glibc's allocator is made whole again in the child.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let returned = catch_unwind(AssertUnwindSafe(f)).is_ok();
        // SAFETY: ends the child alone, running none of the parent's exit handlers.
        unsafe { libc::_exit(i32::from(!returned)) };
    }
    assert!(pid > 0, "fork: {}", io::Error::last_os_error());
    let mut status = 0;
    // SAFETY: the kernel writes the child's status into `status`, borrowed for the call.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

// Linux's flags: `O_DIRECT` is Linux's and FreeBSD's, `O_NOATIME` Linux's alone.
#[cfg(all(test, target_os = "linux"))]
#[path = "unix_tests.rs"]
mod tests;
