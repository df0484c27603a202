//! The process's descriptors in bulk (Linux): a reader's finished files closed together,
//! and the table of descriptors grown at once for a scan's readers.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Closes every file of `files`, leaving it empty: each run of consecutive descriptor numbers
/// with one `close_range(2)` (Linux 5.9), the rest one by one. A cached small file costs a
/// handful of system calls, its close one of them: closing a reader's finished files in
/// batches saves all but one close a run. Only descriptors `files` owns are named, so no
/// other descriptor of the process is touched.
pub(crate) fn close_all(files: &mut Vec<File>) {
    files.sort_unstable_by_key(|f| f.as_raw_fd());
    let mut rest = files.drain(..);
    while let Some(first) = rest.next() {
        let start = first.as_raw_fd();
        let follow = rest.as_slice().iter().zip(1..);
        let len = 1 + follow
            .take_while(|&(f, i)| f.as_raw_fd() == start + i)
            .count();
        // SAFETY: the `len` descriptors from `start` are those of this run's `File`s,
        // which give them up below where the call closed them.
        let closed = len > 1 && unsafe { close_range(start, len) };
        for file in std::iter::once(first).chain(rest.by_ref().take(len - 1)) {
            if closed {
                _ = file.into_raw_fd(); // Closed by `close_range`.
            }
        }
    }
}

/// Grows the process's table of descriptors, where it is smaller, to hold `count` more
/// than the lowest free one, in one step. The kernel grows the table by doubling as
/// descriptors are opened, and in a process of more than one thread (io_uring's workers
/// count) each growth waits for an RCU grace period (`synchronize_rcu`, about 10 ms on a VM)
/// while every open of the process waits for it: 64 readers opening ahead grew it seven
/// times, one after the other. Made once, before they start, the growth waits once, or not
/// at all where the process has one thread. A table never shrinks: it costs 8 bytes a
/// descriptor for the process's life. The room asked for stops below the process's limit
/// (`RLIMIT_NOFILE`), which no descriptor reaches anyway.
pub(crate) fn reserve_descriptors(count: usize) {
    // An eventfd of its own to copy: no file, so neither its copy's close nor its own
    // flushes anything or drops a lock, and none can hang.
    // SAFETY: no pointer is passed; the descriptor returned is new and ours alone.
    let own = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if own < 0 {
        return;
    }
    let limit = super::descriptor_limit().map_or(u64::MAX, |l| l.saturating_sub(1));
    let lowest = u64::try_from(own).unwrap_or(0).saturating_add(count as u64);
    if let Ok(lowest) = libc::c_int::try_from(lowest.min(limit)) {
        // SAFETY: `F_DUPFD_CLOEXEC` takes an integer, not a pointer; it makes a new
        // descriptor for `own`, the lowest free one from `lowest`, ours alone, closed at once.
        let copy = unsafe { libc::fcntl(own, libc::F_DUPFD_CLOEXEC, lowest) };
        if copy >= 0 {
            // SAFETY: `copy` was made here, and nothing else names it.
            unsafe { libc::close(copy) };
        }
    }
    // SAFETY: `own` was made here, and nothing else names it.
    unsafe { libc::close(own) };
}

/// Closes the `len` descriptors from `start` with one `close_range(2)`; whether it did. Once
/// the kernel refuses the call (before Linux 5.9, or a seccomp filter), it is not asked again.
///
/// # Safety
///
/// Every one of the descriptors belongs to the caller, as a `File` that gives it up where
/// this returns `true` (and closes it where it returns `false`: the call closed none).
unsafe fn close_range(start: RawFd, len: usize) -> bool {
    static NO_CLOSE_RANGE: AtomicBool = AtomicBool::new(false);
    if NO_CLOSE_RANGE.load(Ordering::Relaxed) {
        return false;
    }
    let last = start + len as RawFd - 1;
    // SAFETY: the caller's: no descriptor of another owner is closed, and none twice. With
    // no flags, the call closes the whole range, or fails having closed none of it.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, start, last, 0) };
    if rc != 0 {
        NO_CLOSE_RANGE.store(true, Ordering::Relaxed);
    }
    rc == 0
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Whether `fd` is open on `path` (another test's thread may open a descriptor freed here).
    fn open_on(fd: RawFd, path: &Path) -> bool {
        std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|p| p == path)
    }

    /// The size of the process's table of descriptors (`FDSize` in its status).
    fn table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .unwrap();
        line.trim().parse().unwrap()
    }

    #[test]
    fn a_reservation_grows_the_table_of_descriptors() {
        let before = table_size();
        let limit = crate::sys::descriptor_limit().map_or(usize::MAX, |l| l as usize);
        if before * 2 >= limit {
            eprintln!("skipped: the table of descriptors ({before}) is near the limit ({limit})");
            return;
        }
        reserve_descriptors(before);
        assert!(table_size() > before, "{} after {before}", table_size());
        // Asked for more than the process's limit, the table grows to the limit at most
        // (tried where that table is small).
        if limit <= 1 << 16 {
            reserve_descriptors(limit);
            assert!(
                table_size() <= limit.next_power_of_two(),
                "{}",
                table_size()
            );
        }
    }

    /// Files closed together close every one of theirs, in runs or alone, in any order, and
    /// no descriptor between them that they do not own.
    #[test]
    fn close_all_closes_its_own_descriptors_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = &dir.path().join("file");
        std::fs::write(path, b"bytes").unwrap();
        let mut files: Vec<File> = (0..12).map(|_| File::open(path).unwrap()).collect();
        // Another owner's descriptors, in the middle of a run and at its end.
        let others = [files.remove(5), files.remove(9)];
        files.reverse();
        files.swap(1, 7);
        let fds: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        close_all(&mut files);
        assert!(files.is_empty());
        for fd in fds {
            assert!(!open_on(fd, path), "descriptor {fd} left open");
        }
        for other in &others {
            assert!(
                open_on(other.as_raw_fd(), path),
                "another owner's descriptor closed"
            );
        }
    }
}
