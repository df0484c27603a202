//! A bad file fails alone: its error names it, it keeps failing until the reader moves on,
//! and the files around it read exactly.

mod common;

use std::fs::File;
use std::io::{self, BufRead, ErrorKind, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use readahead::SequentialFileReader;

/// Good files to put around a bad one.
fn good_files() -> (Files, Vec<Vec<u8>>) {
    let files = make_files(&[70_000, 0, 5000]);
    let want = oracle_all(&files.paths);
    (files, want)
}

/// Queues a path; its error may come out of `push` (then it names the path
/// and the file is not queued) or out of reading it. Returns whether it was queued.
fn add_path(r: &mut SequentialFileReader<'_>, path: &Path) -> bool {
    match r.push(path.to_path_buf()) {
        Ok(()) => true,
        Err(e) => {
            assert_names(&e, &path.display().to_string());
            false
        }
    }
}

/// Reads good, bad, good, good, bad (the bad one twice) and checks the bad one fails as
/// `check` says while every good one reads exactly.
fn check_bad_path(bad: &Path, check: impl Fn(&io::Error)) {
    let (files, want) = good_files();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        let mut expect: Vec<Option<&[u8]>> = Vec::new();
        add_path(&mut r, &files.paths[0]);
        expect.push(Some(&want[0]));
        if add_path(&mut r, bad) {
            expect.push(None);
        }
        add_path(&mut r, &files.paths[1]);
        expect.push(Some(&want[1]));
        add_path(&mut r, &files.paths[2]);
        expect.push(Some(&want[2]));
        if add_path(&mut r, bad) {
            expect.push(None);
        }
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), expect.len(), "{name}");
        for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
            match (g, e) {
                (Ok(g), Some(w)) => assert_bytes_eq(g, w, &format!("{name}: file #{i}")),
                (Err(err), None) => {
                    assert_names(err, &bad.display().to_string());
                    check(err);
                }
                (Ok(g), None) => panic!("{name}: file #{i}: {} bytes from a bad file", g.len()),
                (Err(err), Some(_)) => panic!("{name}: file #{i}: {err}"),
            }
        }
    }
}

#[test]
fn a_missing_path_fails_alone_and_names_the_path() {
    let dir = tempdir();
    let missing = dir.path().join("no such file");
    check_bad_path(&missing, |e| {
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}")
    });
}

#[test]
fn a_directory_fails_alone_and_names_the_path() {
    let dir = tempdir();
    let sub = dir.path().join("a directory");
    std::fs::create_dir(&sub).unwrap();
    check_bad_path(&sub, |e| {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("it is a directory"), "{e}");
    });
}

#[test]
fn a_unix_socket_path_fails_alone_and_names_the_path() {
    let dir = tempdir();
    let sock = dir.path().join("sock");
    let _listener = UnixListener::bind(&sock).unwrap();
    check_bad_path(&sock, |_| {});
}

#[test]
fn a_character_device_path_fails_alone_and_names_the_path() {
    check_bad_path(Path::new("/dev/null"), |_| {});
    check_bad_path(Path::new("/dev/zero"), |_| {}); // What a first copy got is dropped.
}

#[test]
fn a_file_without_read_permission_fails_alone_and_names_the_path() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipping permissions: root reads every file");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let locked = make_file(dir.path(), "locked", 100);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    check_bad_path(&locked, |e| {
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}")
    });
}

/// Reads good, bad, good through each config, with `bad` made fresh for each reader, and
/// checks the bad one's error mentions `needle`.
fn check_bad_file(make_bad: impl Fn() -> File, needle: &str) {
    let (files, want) = good_files();
    for (name, b) in configs() {
        for owned in [false, true] {
            let bad = make_bad();
            let mut r = b.clone().build().unwrap();
            r.push(&files.paths[0]).unwrap();
            if owned {
                r.push(bad.try_clone().unwrap()).unwrap();
            } else {
                r.add_file_to_prefetch(&bad, u64::MAX).unwrap();
            }
            r.push(&files.paths[2]).unwrap();
            let got = read_all_files(&mut r);
            let name = format!("{name} owned={owned}");
            assert_eq!(got.len(), 3, "{name}");
            assert_bytes_eq(got[0].as_ref().unwrap(), &want[0], &name);
            let err = got[1].as_ref().expect_err("the bad file fails");
            assert_names(err, needle);
            assert_bytes_eq(got[2].as_ref().unwrap(), &want[2], &name);
        }
    }
}

#[test]
fn a_write_only_descriptor_fails_alone_and_names_its_path() {
    let dir = tempdir();
    let target = make_file(dir.path(), "write only", 10_000);
    let needle = target.display().to_string();
    check_bad_file(
        || File::options().write(true).open(&target).unwrap(),
        &needle,
    );
}

fn pipe_file() -> File {
    let (reader, writer) = io::pipe().unwrap();
    // Keep the write end open so that a read would block rather than see EOF.
    std::mem::forget(writer);
    File::from(OwnedFd::from(reader))
}

#[test]
fn a_pipe_given_as_a_file_fails_alone() {
    check_bad_file(pipe_file, "pipe");
}

#[test]
fn a_socket_given_as_a_file_fails_alone() {
    check_bad_file(
        || {
            let (a, b) = UnixStream::pair().unwrap();
            std::mem::forget(b);
            File::from(OwnedFd::from(a))
        },
        "socket",
    );
}

#[test]
fn a_directory_given_as_a_file_fails_alone_and_names_its_path() {
    let dir = tempdir();
    let sub = dir.path().join("opened dir");
    std::fs::create_dir(&sub).unwrap();
    let needle = sub.display().to_string();
    check_bad_file(|| File::open(&sub).unwrap(), &needle);
}

/// A missing path (whose error may also come out of queuing it: then there is nothing to
/// read) and a directory handed in as a `File` (queued whatever it is, so it always fails
/// when read).
#[test]
fn after_an_error_the_file_keeps_failing_until_the_reader_moves_on() {
    let (files, want) = good_files();
    let missing = files.dir.path().join("missing");
    let directory = File::open(files.dir.path()).unwrap();
    let dir_name = files.dir.path().display().to_string();
    for (name, b) in configs() {
        let mut r = b.clone().build().unwrap();
        r.push(&files.paths[0]).unwrap();
        if add_path(&mut r, &missing) {
            let kind = keeps_failing(r, &files, &want, "missing", &format!("{name} missing"));
            assert_eq!(kind, ErrorKind::NotFound, "{name}");
        }
        let mut r = b.build().unwrap();
        r.push(&files.paths[0]).unwrap();
        r.add_file_to_prefetch(&directory, u64::MAX).unwrap();
        keeps_failing(r, &files, &want, &dir_name, &format!("{name} directory"));
    }
}

/// Reads the good file at the front of `r`, then the bad one queued behind it (its errors
/// naming `needle`) with every way of reading, several times, then a good one queued after
/// it; returns the kind of the bad file's errors.
fn keeps_failing<'a>(
    mut r: SequentialFileReader<'a>,
    files: &'a Files,
    want: &[Vec<u8>],
    needle: &str,
    name: &str,
) -> ErrorKind {
    r.push(&files.paths[2]).unwrap();
    assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[0], name);
    assert!(r.move_to_next_file().unwrap());
    let kind = r.fill_buf().unwrap_err().kind();
    for round in 0..4 {
        let e = r.fill_buf().unwrap_err();
        assert_names(&e, needle);
        let e = r.read(&mut [0; 10]).unwrap_err();
        assert_names(&e, needle);
        let e = r.read_exact(&mut [0; 10]).unwrap_err();
        assert_names(&e, needle);
        let e = r.read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), kind, "{name}: round {round}: {e}");
        r.consume(10);
        assert_eq!(r.file_offset(), 0, "{name}");
    }
    assert!(r.move_to_next_file().unwrap(), "{name}");
    assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[2], name);
    assert!(!r.move_to_next_file().unwrap());
    kind
}

#[test]
fn many_bad_paths_in_a_row_then_good_ones() {
    let (files, want) = good_files();
    let bad: Vec<PathBuf> = (0..100)
        .map(|i| files.dir.path().join(format!("missing {i}")))
        .collect();
    for (name, b) in configs() {
        let mut r = b.clone().max_open_files(4).build().unwrap();
        let mut queued_bad = 0;
        for p in &bad {
            queued_bad += add_path(&mut r, p) as usize;
        }
        for p in &files.paths {
            r.push(p).unwrap();
        }
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), queued_bad + 3, "{name}");
        for (i, g) in got[..queued_bad].iter().enumerate() {
            let e = g.as_ref().expect_err("missing");
            assert_names(e, &bad[i].display().to_string());
        }
        let good: Vec<Vec<u8>> = got[queued_bad..]
            .iter()
            .map(|g| g.as_ref().unwrap().clone())
            .collect();
        assert_files_eq(&good, &want, &name);
    }
}

#[test]
fn activating_a_bad_file_gives_its_error_and_moving_on_works() {
    let (files, want) = good_files();
    let good = File::open(&files.paths[2]).unwrap();
    for (name, b) in configs() {
        let bad = pipe_file();
        let mut r = b.build().unwrap();
        r.push(&files.paths[0]).unwrap();
        r.add_file_to_prefetch(&bad, u64::MAX).unwrap();
        r.add_file_to_prefetch(&good, u64::MAX).unwrap();
        r.activate_file(&bad, u64::MAX).unwrap();
        assert_names(&r.fill_buf().unwrap_err(), "pipe");
        // Activating it again (it failed, so it starts again) fails the same way.
        r.activate_file(&bad, u64::MAX).unwrap();
        assert_names(&r.fill_buf().unwrap_err(), "pipe");
        assert!(r.move_to_next_file().unwrap(), "{name}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[2], &name);
    }
}

/// The path of a new FIFO in `dir`.
fn mkfifo(dir: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let path = dir.join("fifo");
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", io::Error::last_os_error());
    path
}

/// A FIFO queued by path is "a pipe": it must fail alone like any unseekable file, not block
/// the reader until some writer opens it.
#[test]
fn a_fifo_path_fails_alone_without_blocking() {
    let (files, want) = good_files();
    let fifo = mkfifo(files.dir.path());
    for (name, b) in configs() {
        let (tx, rx) = mpsc::channel();
        let (paths, fifo2) = (files.paths.clone(), fifo.clone());
        std::thread::spawn(move || {
            let mut r = b.build().unwrap();
            r.push(&paths[0]).unwrap();
            let queued = add_path(&mut r, &fifo2);
            r.push(&paths[2]).unwrap();
            let got: Vec<Result<Vec<u8>, String>> = read_all_files(&mut r)
                .into_iter()
                .map(|g| g.map_err(|e| e.to_string()))
                .collect();
            let _ = tx.send((queued, got));
        });
        let Ok((queued, got)) = rx.recv_timeout(Duration::from_secs(5)) else {
            // Unblock the stuck open(2) by opening the write end, so the thread can finish.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags_nonblock()
                .open(&fifo);
            panic!("{name}: reading past a FIFO path blocked for 5 s");
        };
        let mut i = 0;
        assert_bytes_eq(got[i].as_ref().unwrap(), &want[0], &name);
        i += 1;
        if queued {
            let e = got[i].as_ref().expect_err("a FIFO fails");
            assert!(e.contains(&fifo.display().to_string()), "{e}");
            i += 1;
        }
        assert_bytes_eq(got[i].as_ref().unwrap(), &want[2], &name);
    }
}

/// `O_NONBLOCK` on an `OpenOptions`, so that opening a FIFO's write end never waits.
trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK)
    }
}

/// The OS error code under the `readahead::Error` an `io::Error` carries.
fn os_error(e: &io::Error) -> Option<i32> {
    let inner: &dyn std::error::Error = inner_error(e)?;
    inner.source()?.downcast_ref::<io::Error>()?.raw_os_error()
}

#[test]
fn a_dangling_symlink_fails_alone_and_names_the_path() {
    let dir = tempdir();
    let link = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nothing here"), &link).unwrap();
    check_bad_path(&link, |e| assert_eq!(e.kind(), ErrorKind::NotFound, "{e}"));
}

#[test]
fn a_symlink_loop_fails_alone_and_names_the_path() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("loop a"), dir.path().join("loop b"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    check_bad_path(&a, |e| assert_eq!(os_error(e), Some(libc::ELOOP), "{e}"));
}

#[test]
fn a_path_through_a_regular_file_fails_alone_and_names_the_path() {
    let dir = tempdir();
    let file = make_file(dir.path(), "plain", 10);
    check_bad_path(&file.join("child"), |e| {
        assert_eq!(os_error(e), Some(libc::ENOTDIR), "{e}")
    });
}

#[test]
fn a_path_with_a_name_longer_than_name_max_fails_alone() {
    let dir = tempdir();
    let long = dir.path().join("x".repeat(300));
    check_bad_path(&long, |e| {
        assert_eq!(os_error(e), Some(libc::ENAMETOOLONG), "{e}")
    });
}

#[test]
fn an_empty_path_fails_alone() {
    check_bad_path(Path::new(""), |e| {
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}")
    });
}

#[test]
fn a_path_with_a_nul_byte_fails_alone_and_names_the_path() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempdir();
    let mut bytes = dir.path().as_os_str().as_bytes().to_vec();
    bytes.extend_from_slice(b"/nul\0byte");
    let nul = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes));
    check_bad_path(&nul, |e| {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}")
    });
}

#[test]
fn a_missing_path_that_is_not_utf8_fails_alone_and_names_the_path() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempdir();
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"not utf-8 \xff\xfe"));
    check_bad_path(&odd, |e| assert_eq!(e.kind(), ErrorKind::NotFound, "{e}"));
}

#[cfg(target_os = "linux")] // O_PATH as Linux has it
/// An `O_PATH` descriptor names a file without opening it for reading: reads through it fail
/// (`EBADF`), so it fails alone like a write-only descriptor.
fn o_path_file(path: &Path) -> File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .unwrap()
}

#[cfg(target_os = "linux")] // O_PATH as Linux has it
#[test]
fn an_o_path_descriptor_fails_alone() {
    let dir = tempdir();
    let target = make_file(dir.path(), "o_path", 10_000);
    let needle = target.display().to_string();
    check_bad_file(|| o_path_file(&target), &needle);
}

#[cfg(target_os = "linux")] // O_PATH as Linux has it
/// Direct I/O reopens a descriptor handed in through `/proc/self/fd`: an `O_PATH` descriptor
/// must still not be read through, as without direct I/O (the write-only case's rule).
#[test]
fn an_o_path_descriptor_is_not_read_with_direct_io() {
    if !direct_io_here() {
        return;
    }
    let (files, want) = good_files();
    for (backend, b) in builders() {
        let o_path = o_path_file(&files.paths[0]);
        let mut r = b.direct_io(true).build().unwrap();
        r.add_file_to_prefetch(&o_path, u64::MAX).unwrap();
        r.push(&files.paths[2]).unwrap();
        let got = read_all_files(&mut r);
        assert!(
            got[0].is_err(),
            "{backend:?}: read {} bytes through an O_PATH descriptor",
            got[0].as_ref().map_or(0, |v| v.len())
        );
        assert_bytes_eq(got[1].as_ref().unwrap(), &want[2], &format!("{backend:?}"));
        assert_direct_reads(r.stats(), true, &format!("{backend:?}"));
    }
}

/// A limit of 0 on a descriptor that cannot be read: nothing to read, yet the file is bad;
/// either way (empty, or its error) the files around it read exactly.
#[test]
fn a_zero_limit_on_a_bad_descriptor_fails_alone_or_reads_nothing() {
    let (files, want) = good_files();
    let dir = tempdir();
    for (name, b) in configs() {
        let bad: Vec<(&str, File)> = vec![
            ("pipe", pipe_file()),
            ("directory", File::open(dir.path()).unwrap()),
        ];
        for (kind, f) in &bad {
            let mut r = b.clone().build().unwrap();
            r.push(&files.paths[0]).unwrap();
            r.add_file_to_prefetch(f, 0).unwrap();
            r.push(&files.paths[2]).unwrap();
            let got = read_all_files(&mut r);
            let what = format!("{name}: {kind}");
            assert_eq!(got.len(), 3, "{what}");
            assert_bytes_eq(got[0].as_ref().unwrap(), &want[0], &what);
            match &got[1] {
                Ok(v) => assert!(v.is_empty(), "{what}: {} bytes", v.len()),
                Err(e) => assert_names(e, kind),
            }
            assert_bytes_eq(got[2].as_ref().unwrap(), &want[2], &what);
        }
    }
}

/// A sysfs attribute claims 4096 bytes and holds a few: the file ends at its real end, with
/// exactly what `std::fs::read` gets. None here? Skipped with a reason.
#[test]
fn a_sysfs_file_shorter_than_its_size_reads_exactly() {
    let attr = Path::new("/sys/devices/system/cpu/possible");
    let Ok(want) = std::fs::read(attr) else {
        eprintln!("skipping sysfs: cannot read {}", attr.display());
        return;
    };
    let (files, good) = good_files();
    let opened = File::open(attr).unwrap();
    for (name, b) in configs() {
        for borrowed in [false, true] {
            let mut r = b.clone().build().unwrap();
            r.push(&files.paths[0]).unwrap();
            if borrowed {
                r.add_file_to_prefetch(&opened, u64::MAX).unwrap();
            } else {
                r.push(attr).unwrap();
            }
            r.push(&files.paths[2]).unwrap();
            let what = format!("{name} borrowed={borrowed}");
            assert_files_eq(
                &read_all_ok(&mut r),
                &[good[0].clone(), want.clone(), good[2].clone()],
                &what,
            );
        }
    }
}

/// A procfs file has size 0 whatever it holds, so the reader may read nothing of it; whatever
/// it reads is a prefix of the content, without error, and the files around it read exactly.
#[test]
fn a_proc_file_of_size_zero_reads_a_prefix_without_error() {
    let proc_file = Path::new("/proc/version");
    let Ok(want) = std::fs::read(proc_file) else {
        eprintln!("skipping procfs: cannot read {}", proc_file.display());
        return;
    };
    let (files, good) = good_files();
    for (name, b) in configs() {
        let mut r = reader_over(b, [&files.paths[0], proc_file, &files.paths[2]]);
        let got = read_all_ok(&mut r);
        assert_eq!(got.len(), 3, "{name}");
        assert_bytes_eq(&got[0], &good[0], &name);
        assert_bytes_eq(&got[1], &want[..got[1].len().min(want.len())], &name);
        assert_bytes_eq(&got[2], &good[2], &name);
    }
}

/// A sysfs attribute whose read fails with `EIO` (runtime power management's
/// `autosuspend_delay_ms` of a device without it), if this system has one.
fn eio_file() -> Option<PathBuf> {
    let devices = std::fs::read_dir("/sys/devices").ok()?;
    devices
        .filter_map(Result::ok)
        .map(|d| d.path().join("power/autosuspend_delay_ms"))
        .find(|p| {
            File::open(p).is_ok()
                && std::fs::read(p).is_err_and(|e| e.raw_os_error() == Some(libc::EIO))
        })
}

/// A file that opens but whose read fails in the kernel (`EIO`): the read error names the
/// path, queued by path or as a descriptor, and the files around it read exactly.
#[test]
fn a_file_whose_read_fails_with_eio_fails_alone_and_names_the_path() {
    let Some(eio) = eio_file() else {
        eprintln!("skipping EIO: no sysfs attribute here fails its read with EIO");
        return;
    };
    check_bad_path(&eio, |e| {
        assert_eq!(os_error(e), Some(libc::EIO), "{e}");
        assert!(
            matches!(
                inner_error(e),
                Some(readahead::Error::Read { offset: 0, .. })
            ),
            "{e:?}"
        );
    });
    let needle = eio.display().to_string();
    check_bad_file(|| File::open(&eio).unwrap(), &needle);
    // A read error, like an open error, keeps coming until the reader moves on.
    let (files, want) = good_files();
    for (name, b) in configs() {
        let mut r = reader_over(b, [&eio, &files.paths[2]]);
        for _ in 0..3 {
            assert_names(&r.fill_buf().unwrap_err(), &needle);
            assert_names(&r.read(&mut [0; 10]).unwrap_err(), &needle);
            r.consume(10);
            assert_eq!(r.file_offset(), 0, "{name}");
        }
        assert!(r.move_to_next_file().unwrap(), "{name}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[2], &name);
    }
}
