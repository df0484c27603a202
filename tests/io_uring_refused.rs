//! Where a seccomp filter refuses io_uring (as some container runtimes install), `Auto` falls
//! back to plain reads and reads exactly as `std::fs::read` does, and `IoUring` is an error
//! that says why and what to do instead.
//!
//! The filter goes on a child process: it cannot be taken off again, and this process runs
//! other tests on parallel threads.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;

use common::seccomp::refuse;
use common::*;
use readahead::{Backend, Entry, SequentialFileReader};

/// Set in the child process that runs [`child_under_a_seccomp_filter`].
const CHILD_ENV: &str = "READAHEAD_TEST_SECCOMP_CHILD";
const CHILD_TEST: &str = "child_under_a_seccomp_filter";

/// Under the filter, `io_uring_setup` itself fails with `EPERM`: the filter is in place, so
/// what the reader does next is the fallback, not io_uring.
fn assert_setup_refused() {
    // struct io_uring_params: 120 bytes.
    let mut params = [0u64; 15];
    // SAFETY: io_uring_setup(2, &params): `params` is as large as the struct the kernel reads
    // and writes, and lives across the call.
    let rc = unsafe { libc::syscall(libc::SYS_io_uring_setup, 2u32, params.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    if rc >= 0 {
        // SAFETY: a descriptor io_uring_setup just returned, owned by no one else.
        unsafe { libc::close(rc as i32) };
    }
    assert_eq!(rc, -1, "io_uring_setup went through the filter");
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
}

/// What the child's filter refuses: its `CHILD_ENV` value, and the system calls.
fn refused(mode: &str) -> &'static [libc::c_long] {
    match mode {
        // As container runtimes do (Docker's default profile, for one).
        "all" => &[
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ],
        "register" => &[libc::SYS_io_uring_register],
        "enter" => &[libc::SYS_io_uring_enter],
        _ => panic!("unknown mode {mode:?}"),
    }
}

/// io_uring refused by seccomp: the parent only checks the child passed.
#[test]
fn io_uring_refused_by_seccomp_falls_back_or_says_why() {
    run_in_child(CHILD_TEST, CHILD_ENV, "all");
}

/// Only `io_uring_register` refused: registering (buffers, worker limits, the opcode probe)
/// is refused, rings are not. The reader may read on io_uring without it, or say why not.
#[test]
fn io_uring_register_refused_by_seccomp_reads_or_says_why() {
    run_in_child(CHILD_TEST, CHILD_ENV, "register");
}

/// Only `io_uring_enter` refused: rings can be set up but nothing can be submitted, so
/// io_uring is refused all the same.
#[test]
fn io_uring_enter_refused_by_seccomp_falls_back_or_says_why() {
    run_in_child(CHILD_TEST, CHILD_ENV, "enter");
}

/// Does its work only in a child process started by a test above.
#[test]
fn child_under_a_seccomp_filter() {
    let Some(mode) = child_value(CHILD_ENV) else {
        return;
    };
    refuse(refused(&mode));
    let all = mode == "all";
    if all {
        assert_setup_refused();
        let err = readahead::io_uring_available().expect_err("io_uring under a filter refusing it");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    }
    eprintln!(
        "{mode}: io_uring_available() = {:?}",
        readahead::io_uring_available()
    );
    let files = Queue::new();
    check_io_uring_reads_or_says_why(&files, all);
    check_auto_reads_exactly(&files, all);
    println!("{CHILD_DONE}");
}

/// `Backend::IoUring` is an error naming the cause (`EPERM`) and saying what to do; where
/// io_uring is only partly refused, it may instead build and read exactly.
fn check_io_uring_reads_or_says_why(files: &Queue, must_fail: bool) {
    let builders = [
        SequentialFileReader::builder(),
        SequentialFileReader::builder().registered_buffers(true),
        SequentialFileReader::builder().direct_io(true),
        small_pool(SequentialFileReader::builder()),
    ];
    for b in builders {
        let what = format!("{b:?}");
        let err = match b.backend(Backend::IoUring).build() {
            Ok(r) => {
                assert!(
                    !must_fail,
                    "{what}: Backend::IoUring built under the filter"
                );
                files.check(r, &what);
                continue;
            }
            Err(err) => err,
        };
        let msg = err.to_string();
        eprintln!("Backend::IoUring: {msg}");
        match &err {
            readahead::Error::IoUringUnavailable { source } => {
                assert_eq!(source.raw_os_error(), Some(libc::EPERM), "{what}: {msg}");
            }
            other => panic!("{what}: not IoUringUnavailable: {other:?}"),
        }
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{what}: {msg}");
        assert!(msg.contains("io_uring"), "{what}: {msg}");
        assert!(msg.contains("not permitted"), "{what}: the cause: {msg}");
        assert!(
            msg.contains("Backend::Auto") && msg.contains("Backend::Pread"),
            "{what}: what to do: {msg}"
        );
        // Through `?` into an io::Error, as `SequentialFileReader::new()?` is used.
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), ErrorKind::PermissionDenied);
    }
}

/// One file to queue, and how.
enum Queued<'f> {
    Path(&'f Path),
    /// A missing path, or a directory: its error must name it.
    BadPath(&'f Path),
    Owned(&'f Path, u64),
    Borrowed(&'f File, &'f Path, u64),
}

/// Queues `q` and returns what reading it must give: its bytes, or an error naming this path.
/// A bad path's error may also come out of `push`, naming it; then it is
/// not queued (`None`).
fn queue<'f>(
    r: &mut SequentialFileReader<'f>,
    q: &Queued<'f>,
) -> Option<Result<Vec<u8>, &'f Path>> {
    match *q {
        Queued::Path(p) => {
            r.push(p).unwrap();
            Some(Ok(oracle(p, u64::MAX)))
        }
        Queued::BadPath(p) => match r.push(p) {
            Ok(()) => Some(Err(p)),
            Err(e) => {
                assert!(e.to_string().contains(&*p.to_string_lossy()), "{e}");
                None
            }
        },
        Queued::Owned(p, limit) => {
            r.push(Entry::owned_file(File::open(p).unwrap()).range(..limit))
                .unwrap();
            Some(Ok(oracle(p, limit)))
        }
        Queued::Borrowed(f, p, limit) => {
            r.add_file_to_prefetch(f, limit).unwrap();
            Some(Ok(oracle(p, limit)))
        }
    }
}

/// Files of several sizes, and a queue of them: paths, owned and borrowed files, with
/// limits, and bad paths in between.
struct Queue {
    files: Files,
    opened: Vec<File>,
    missing: std::path::PathBuf,
}

impl Queue {
    fn new() -> Queue {
        let files = make_files(&[0, 1, 4095, 4096, 100_000, (1 << 20) + 3, 70_000]);
        let opened = files.open_all();
        let missing = files.dir.path().join("missing");
        Queue {
            files,
            opened,
            missing,
        }
    }

    /// Queues every file in `r` and checks it reads each exactly as `std::fs::read` does,
    /// and fails each bad path with an error naming it.
    fn check<'f>(&'f self, mut r: SequentialFileReader<'f>, name: &str) {
        let (p, f) = (&self.files.paths, &self.opened);
        let items = [
            Queued::Path(&p[4]),
            Queued::BadPath(&self.missing),
            Queued::Path(&p[0]),
            Queued::BadPath(self.files.dir.path()),
            Queued::Owned(&p[5], u64::MAX),
            Queued::Borrowed(&f[6], &p[6], 12_345),
            Queued::Borrowed(&f[2], &p[2], u64::MAX),
            Queued::Owned(&p[5], 4097),
            Queued::Borrowed(&f[1], &p[1], 0),
            Queued::BadPath(&self.missing),
            Queued::Path(&p[3]),
            Queued::Path(&p[5]),
        ];
        let want: Vec<_> = items.iter().filter_map(|q| queue(&mut r, q)).collect();
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let what = format!("{name} on {:?}: file #{i}", r.backend());
            match (g, w) {
                (Ok(g), Ok(w)) => assert_bytes_eq(g, w, &what),
                (Err(e), Err(bad)) => assert!(
                    e.to_string().contains(&*bad.to_string_lossy()),
                    "{what}: {e} does not name {}",
                    bad.display()
                ),
                (Ok(g), Err(_)) => panic!("{what}: {} bytes from a bad path", g.len()),
                (Err(e), Ok(_)) => panic!("{what}: {e}"),
            }
        }
    }
}

/// `Auto` (and `new()`) read paths, owned and borrowed files, with limits and bad paths in
/// between, exactly as `std::fs::read` does; with io_uring refused outright, on `Pread`.
fn check_auto_reads_exactly(files: &Queue, on_sync: bool) {
    if on_sync {
        assert_eq!(
            SequentialFileReader::new().unwrap().backend(),
            Backend::Pread
        );
    }
    let auto = SequentialFileReader::builder();
    let configs = [
        ("Auto default", auto.clone()),
        ("Auto 64K/4K", small_pool(auto.clone())),
        ("Auto direct", auto.clone().direct_io(true)),
        ("Auto registered", auto.registered_buffers(true)),
    ];
    for (name, b) in configs {
        let r = b.build().unwrap();
        if on_sync {
            assert_eq!(r.backend(), Backend::Pread, "{name}");
        }
        files.check(r, name);
    }
}
