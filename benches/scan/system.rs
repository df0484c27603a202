//! What the scan example asks of the system: CPU time, peak memory, making files durable,
//! dropping the page cache (all of it, or one file's), finding a program, and waiting for a
//! child with its resource usage.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};

/// Writing `3` here drops the page cache, dentries and inodes (root only).
pub const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// This process's resource usage so far.
fn rusage_self() -> libc::rusage {
    // SAFETY: all-zero bytes are a valid `rusage` (integers and timevals), and getrusage
    // writes only into the struct it is given, which lives for the whole call.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    }
}

/// Seconds in a `timeval`.
fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

/// User plus system CPU time of this process so far (all its threads, io_uring's workers
/// included), in seconds.
pub fn cpu_seconds() -> f64 {
    let usage = rusage_self();
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The most memory this process has had resident, in KiB: `VmHWM` from `/proc/self/status`,
/// or `getrusage`'s `ru_maxrss` where `/proc` cannot be read.
///
/// `VmHWM` comes first because it covers this program's own memory only: Linux carries the
/// peak of the process that spawned this one over into `ru_maxrss` at `exec` (a parent that
/// once held 200 MiB hands every child spawned afterwards an `ru_maxrss` of 200 MiB).
pub fn peak_rss_kib() -> u64 {
    let from_proc = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        });
    from_proc.unwrap_or_else(|| maxrss_kib(&rusage_self()))
}

/// `ru_maxrss` in KiB: macOS counts it in bytes, the others in KiB.
fn maxrss_kib(usage: &libc::rusage) -> u64 {
    let maxrss = usage.ru_maxrss.max(0) as u64;
    if cfg!(target_vendor = "apple") {
        maxrss / 1024
    } else {
        maxrss
    }
}

/// Flushes dirty pages (`sync`), then drops the page cache, dentries and inodes, so that the
/// next read comes from the device.
pub fn drop_caches() -> Result<(), String> {
    check_linux()?;
    // SAFETY: sync takes no arguments, touches none of this process's memory, and cannot fail.
    unsafe { libc::sync() };
    fs::write(DROP_CACHES, "3").map_err(|e| drop_caches_error(&e))
}

/// Whether `drop_caches` can work: opens the file for writing, drops nothing.
pub fn check_drop_caches() -> Result<(), String> {
    check_linux()?;
    match OpenOptions::new().write(true).open(DROP_CACHES) {
        Ok(_) => Ok(()),
        Err(e) => Err(drop_caches_error(&e)),
    }
}

/// `--drop-caches` is Linux's: elsewhere, why not.
fn check_linux() -> Result<(), String> {
    if cfg!(target_os = "linux") {
        return Ok(());
    }
    Err(format!(
        "--drop-caches needs Linux ({DROP_CACHES}); on this platform leave it out (cold runs \
         then depend on evicting each file, where the platform can)"
    ))
}

fn drop_caches_error(e: &io::Error) -> String {
    format!(
        "--drop-caches: cannot write {DROP_CACHES}: {e}; run as root, or leave out --drop-caches"
    )
}

/// Flushes every dirty page and inode of the filesystem holding `path` (`syncfs`): one call
/// instead of an `fsync` per file, and cheap when nothing is dirty. Off Linux, `sync`: every
/// filesystem.
#[cfg(not(target_os = "linux"))]
pub fn syncfs(_path: &Path) -> io::Result<()> {
    // SAFETY: sync takes no arguments, touches none of this process's memory, and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}

/// Flushes every dirty page and inode of the filesystem holding `path` (`syncfs`): one call
/// instead of an `fsync` per file, and cheap when nothing is dirty.
#[cfg(target_os = "linux")]
pub fn syncfs(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = File::open(path)?;
    // SAFETY: syncfs takes a descriptor, which `file` keeps open for the whole call, and
    // touches none of this process's memory.
    if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the tree under `dir` durable: `syncfs` writes it all back in one go, then every file
/// and directory in it is `fsync`ed (each cheap by then), so that nothing of it is left dirty
/// for the kernel to write back while a scan runs.
pub fn sync_tree(dir: &Path) -> io::Result<()> {
    syncfs(dir)?;
    fsync_tree(dir)
}

fn fsync_tree(path: &Path) -> io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        for entry in fs::read_dir(path)? {
            fsync_tree(&entry?.path())?;
        }
    }
    File::open(path)?.sync_all()
}

/// Drops the pages of `path` from the page cache, without root: `fsync` first (a dirty page
/// cannot be dropped), then `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file. That
/// drops only this file's clean, unmapped pages; its inode and directory entry stay cached,
/// and so does every other file. macOS has no such call: there it says so.
pub fn evict(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    file.sync_data()?;
    #[cfg(target_vendor = "apple")]
    return Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "dropping one file's pages needs posix_fadvise (Linux, FreeBSD), which macOS lacks",
    ));
    #[cfg(not(target_vendor = "apple"))]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise takes a descriptor, which `file` keeps open for the whole
        // call, and touches none of this process's memory.
        let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(())
    }
}

/// The first executable file called `name` in the directories of `$PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Waits for `child` to exit (its pipes must be drained first); its exit status and its peak
/// resident memory in KiB (`ru_maxrss`, which includes the peak of this process when it
/// spawned the child: see [`peak_rss_kib`]).
pub fn wait_with_peak_rss(child: Child) -> io::Result<(ExitStatus, u64)> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: all-zero bytes are a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our child, not yet reaped (`child` is never waited on; dropping a
        // `Child` does not wait); wait4 writes only into `status` and `usage`, which outlive
        // the call.
        let ret = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if ret == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    drop(child);
    Ok((ExitStatus::from_raw(status), maxrss_kib(&usage)))
}
