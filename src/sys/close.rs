//! Closing many descriptors at once (Linux): a reader's finished files, closed together.
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
