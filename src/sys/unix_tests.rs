//! What opening a file costs in system calls, counted on the test's thread (both backends
//! open, size and set up files on the consumer's thread): one `fcntl` per file, and
//! `O_NOATIME` tried once per reader where the kernel refuses it.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::super::open::counts::{self, FCNTL, NOATIME_OPENS};
use super::*;
use crate::{Backend, SequentialFileReader};

/// The backends to test: `Pread`, and `IoUring` where the kernel allows it (else says why).
fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Pread];
    match crate::io_uring_available() {
        Ok(()) => out.push(Backend::IoUring),
        Err(e) => eprintln!("skipping io_uring: {e}"),
    }
    out
}

/// `count` files of distinct sizes and bytes in `dir`, readable by every user.
fn make_files(dir: &Path, count: usize) -> (Vec<PathBuf>, Vec<Vec<u8>>) {
    let mut paths = Vec::new();
    let mut data = Vec::new();
    for i in 0..count {
        let path = dir.join(format!("f{i}"));
        let bytes: Vec<u8> = (0..1000 + 777 * i)
            .map(|j| (i * 31 + j % 251) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        paths.push(path);
        data.push(bytes);
    }
    (paths, data)
}

/// Reads every file of `paths` with a reader on `backend`, checking their bytes.
fn read_paths(
    backend: Backend,
    direct: bool,
    max_open: usize,
    paths: &[PathBuf],
    data: &[Vec<u8>],
) {
    let mut r = SequentialFileReader::builder()
        .backend(backend)
        .direct_io(direct)
        .max_open_files(max_open)
        .build()
        .unwrap();
    for p in paths {
        r.push(p).unwrap();
    }
    for (i, want) in data.iter().enumerate() {
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert!(got == *want, "{backend:?}: file {i}: {} bytes", got.len());
        assert_eq!(r.move_to_next_file().unwrap(), i + 1 < data.len());
    }
}

#[test]
fn each_opened_path_costs_one_fcntl() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, data) = make_files(dir.path(), 5);
    for backend in backends() {
        for direct in [false, true] {
            counts::take(&FCNTL);
            read_paths(backend, direct, 64, &paths, &data);
            let calls = counts::take(&FCNTL);
            let what = format!("{backend:?}, direct {direct}");
            assert_eq!(
                calls,
                paths.len(),
                "{what}: fcntl calls for {} files",
                paths.len()
            );
        }
    }
}

/// Set in the child process that runs [`child_opens_files_it_does_not_own`].
const CHILD_ENV: &str = "READAHEAD_TEST_NOATIME_CHILD";
const CHILD_TEST: &str = "sys::unix::tests::child_opens_files_it_does_not_own";

/// The user the child becomes: `nobody`, who owns none of the files.
const NOBODY: u32 = 65534;

#[test]
fn a_refused_noatime_is_not_tried_again() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, so files of another owner cannot be made here");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .env(CHILD_ENV, "1")
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("child: done"),
        "child: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    eprint!("{stderr}");
}

/// In the child only: as `nobody`, reads two files root owns. Each reader tries `O_NOATIME`
/// for the first only, as the kernel refuses it (`EPERM`) for files of other owners.
#[test]
fn child_opens_files_it_does_not_own() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The directory is nobody's, so that nobody can remove the files afterwards; they are
    // root's.
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let (paths, data) = make_files(dir.path(), 2);
    become_user(NOBODY, NOBODY).unwrap();
    for backend in backends() {
        counts::take(&NOATIME_OPENS);
        // One open at a time, so the second starts after the first was refused.
        read_paths(backend, false, 1, &paths, &data);
        let tries = counts::take(&NOATIME_OPENS);
        assert_eq!(tries, 1, "{backend:?}: opens tried with O_NOATIME");
    }
    eprintln!("child: done");
}

// Linux's flags: `O_DIRECT` is Linux's and FreeBSD's, `O_NOATIME` Linux's alone.
#[cfg(target_os = "linux")]
#[test]
fn clear_direct_turns_o_direct_off_on_the_same_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, data) = make_files(dir.path(), 1);
    let (file, flags) = Opener::default().open(&paths[0], true).unwrap();
    if flags & libc::O_DIRECT == 0 {
        eprintln!("skipped: {} refuses O_DIRECT", dir.path().display());
        return;
    }
    assert_ne!(status_flags(&file).unwrap() & libc::O_DIRECT, 0);
    clear_direct(&file).unwrap();
    let now = status_flags(&file).unwrap();
    assert_eq!(now & libc::O_DIRECT, 0, "flags {now:o}");
    assert_eq!(
        now & libc::O_NOATIME,
        flags & libc::O_NOATIME,
        "the rest kept"
    );
    // A read O_DIRECT refuses (unaligned) now goes through.
    let mut buf = [0u8; 10];
    assert_eq!(read_at(&file, &mut buf, 3).unwrap(), 10);
    assert_eq!(buf, data[0][3..13]);
}
