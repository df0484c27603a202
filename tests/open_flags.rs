//! Paths are opened read-only, close-on-exec and with `O_NOATIME` (so a scan writes nothing),
//! and with `O_DIRECT` where asked.
//!
//! Linux only: the flags are read from `/proc/self/fdinfo`, and `O_NOATIME` is Linux's.
#![cfg(target_os = "linux")]

mod common;

use std::fs::File;
use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::*;

/// The `flags:` of every descriptor of this process open on `path` (from
/// `/proc/self/fdinfo`).
fn flags_of_fds_on(path: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target != path {
            continue;
        }
        let fd = entry.file_name();
        let info = std::fs::read_to_string(Path::new("/proc/self/fdinfo").join(&fd));
        let Ok(info) = info else { continue };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| i32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        out.push(flags);
    }
    out
}

/// `flags_of_fds_on(path)` once at most `most` descriptors are left on it: a descriptor that
/// may hang its close (a file handed in, before its filesystem is known local) is closed on a
/// helper thread, which may not have got to it yet. Waits 10 s at most, then counts anyway.
fn flags_once_at_most(path: &Path, most: usize) -> Vec<i32> {
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let flags = flags_of_fds_on(path);
        if flags.len() <= most || std::time::Instant::now() >= give_up {
            return flags;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn queued_paths_are_opened_read_only_cloexec_noatime() {
    let files = make_files(&[100_000, 10]);
    let path = files.paths[0].canonicalize().unwrap();
    for (backend, b) in builders() {
        for direct in [false, true] {
            if direct && !direct_io_here() {
                continue;
            }
            // A pool of four reads: the file (25 reads) stays open while it is read.
            let b = b.clone().buffer_size(16 << 10).read_size(4 << 10);
            let mut r = b.direct_io(direct).build().unwrap();
            r.push(&path).unwrap();
            r.push(&files.paths[1]).unwrap();
            // Once its first bytes are in, the front file is open (an open through the ring
            // may still be in flight right after queuing), and it stays open while reads of
            // it are still to come.
            assert!(!r.fill_buf().unwrap().is_empty());
            let flags = flags_of_fds_on(&path);
            assert_eq!(flags.len(), 1, "{backend:?}: one descriptor on the file");
            let f = flags[0];
            let what = format!("{backend:?} direct={direct}: flags {f:o}");
            assert_eq!(f & libc::O_ACCMODE, libc::O_RDONLY, "{what}");
            assert_ne!(f & libc::O_CLOEXEC, 0, "{what}: O_CLOEXEC");
            // O_NOATIME is refused only for files of other owners; these are ours.
            assert_ne!(f & libc::O_NOATIME, 0, "{what}: O_NOATIME");
            // The files are on a disk that allows O_DIRECT (`direct_io_here`).
            assert_eq!(f & libc::O_DIRECT != 0, direct, "{what}: O_DIRECT");
            assert_files_eq(&read_all_ok(&mut r), &oracle_all(&files.paths), &what);
            assert_direct_reads(r.stats(), direct, &what);
            drop(r);
            assert!(flags_of_fds_on(&path).is_empty(), "{what}: closed");
        }
    }
}

#[test]
fn a_scan_leaves_access_times_alone() {
    let files = make_files(&[5000, 0, 70_000]);
    let want = oracle_all(&files.paths);
    // An access time well before the modification time: `relatime` would update it on read.
    let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
    let set_old = |p: &Path| {
        let f = File::options().write(true).open(p).unwrap();
        f.set_times(std::fs::FileTimes::new().set_accessed(old))
            .unwrap();
    };
    let atime = |p: &Path| std::fs::metadata(p).unwrap().accessed().unwrap();
    for (backend, b) in builders() {
        for p in &files.paths {
            set_old(p);
        }
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, "scan");
        drop(r);
        for p in &files.paths {
            assert_eq!(atime(p), old, "{backend:?}: {} was touched", p.display());
        }
    }
    // The check means something: a plain read does update the access time here.
    set_old(&files.paths[0]);
    std::fs::read(&files.paths[0]).unwrap();
    if atime(&files.paths[0]) == old {
        eprintln!("note: this filesystem does not update access times at all (noatime)");
    }
}

/// A file the caller opened with `O_NONBLOCK` is read through a descriptor without it, as a
/// queued path is (where the ring honours the flag, its uncached reads come back `EAGAIN`,
/// retried until the file failed); the caller's own descriptor keeps its flags.
#[test]
fn a_handed_in_nonblocking_file_is_read_through_a_blocking_descriptor() {
    use std::os::unix::fs::OpenOptionsExt;
    let files = make_files(&[100_000]);
    let path = files.paths[0].canonicalize().unwrap();
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        evict_from_page_cache(&path);
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        // A pool of four reads: the file (25 reads) stays open while it is read.
        let mut r = b.buffer_size(16 << 10).read_size(4 << 10).build().unwrap();
        r.push(&file).unwrap();
        assert!(!r.fill_buf().unwrap().is_empty());
        // The reader's duplicate of the caller's descriptor, which carries `O_NONBLOCK`, is
        // closed once the file is opened again without it: on a helper thread.
        let flags = flags_once_at_most(&path, 2);
        let octal: Vec<String> = flags.iter().map(|f| format!("{f:o}")).collect();
        let what = format!("{backend:?}: flags {octal:?}");
        assert_eq!(
            flags.len(),
            2,
            "{what}: the caller's descriptor and the reader's"
        );
        let nonblocking = flags.iter().filter(|&&f| f & libc::O_NONBLOCK != 0).count();
        assert_eq!(nonblocking, 1, "{what}: the caller's alone is O_NONBLOCK");
        assert_files_eq(&read_all_ok(&mut r), &want, &what);
        drop(r);
        let flags = flags_once_at_most(&path, 1);
        assert_eq!(flags.len(), 1, "{what}: the reader's is closed");
        assert_ne!(
            flags[0] & libc::O_NONBLOCK,
            0,
            "{what}: the caller's flags changed"
        );
    }
}
