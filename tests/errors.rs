//! Configuration errors name the setting; backends are what was asked for; read errors are
//! `io::Error`s carrying a `readahead::Error` that names the file.

mod common;

use std::io::{BufRead, ErrorKind, Read};
use std::os::fd::OwnedFd;

use common::*;
use readahead::{Backend, Error, FileName, SequentialFileReader};

/// The message of a builder that must not build, checked to name `setting`.
#[track_caller]
fn refused(b: readahead::ReaderBuilder, setting: &str) -> String {
    let err = b.build().expect_err("an invalid configuration builds");
    let msg = err.to_string();
    assert!(msg.contains(setting), "{msg:?} does not name {setting}");
    assert!(
        matches!(&err, Error::InvalidConfig { what, .. } if *what == setting),
        "{err:?}"
    );
    assert!(!msg.ends_with('.'), "{msg:?}: no trailing period");
    assert_eq!(io_kind(err), ErrorKind::InvalidInput);
    msg
}

fn io_kind(e: Error) -> ErrorKind {
    std::io::Error::from(e).kind()
}

#[test]
fn zero_sizes_are_refused_and_named() {
    for (_, b) in builders() {
        refused(b.clone().buffer_size(0), "buffer_size");
        refused(b.clone().read_size(0), "read_size");
        refused(b.clone().queue_depth(0), "queue_depth");
        refused(b.clone().max_open_files(0), "max_open_files");
    }
}

/// What `ReaderBuilder::buffer_size` documents the pool gets: the size asked, rounded up to
/// whole pages and to at least one read (`read_size`, in whole pages).
fn pool_for(buffer_size: usize, read_size: usize) -> usize {
    buffer_size.max(read_size).next_multiple_of(4096)
}

#[test]
fn a_pool_smaller_than_one_aligned_read_is_rounded_up_and_reads() {
    let files = make_files(&[10_000, 3, 0, 9000, 4096]);
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        // (buffer_size, read_size, direct): as small as std's `BufReader::with_capacity`
        // takes, and as a validator's own reader is tested with (1,024 bytes, 512 a read).
        for (buffer, read, direct) in [
            (1024, 512, false),
            (1, 1, false),
            (4095, 100, false),
            (4096, 4097, false),
            (64 << 10, 65 << 10, false),
            (1024, 512, true),
            // Direct reads are whole pages: 5000 is 8192.
            (8191, 5000, true),
        ] {
            let what = format!("{backend:?}: buffer {buffer}, read {read}, direct {direct}");
            let b = b.clone().buffer_size(buffer).read_size(read);
            let mut r = b
                .direct_io(direct)
                .build()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let capacity = r.capacity();
            let read = if direct {
                read.next_multiple_of(4096)
            } else {
                read
            };
            assert_eq!(capacity, pool_for(buffer, read), "{what}");
            for p in &files.paths {
                r.push(p).unwrap();
            }
            assert_files_eq(&read_all_ok(&mut r), &want, &what);
            // The whole pool holds one run of bytes, and no more.
            r.push(&files.paths[0]).unwrap();
            let run = r.fill_buf_at_least(capacity).unwrap();
            assert_eq!(run, &want[0][..capacity.min(want[0].len())], "{what}");
            let e = r.fill_buf_at_least(capacity + 1).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
        }
    }
}

#[test]
fn sizes_beyond_what_can_work_are_refused() {
    for (_, b) in builders() {
        refused(b.clone().read_size(usize::MAX), "read_size");
        refused(
            b.clone().buffer_size(usize::MAX).read_size(4096),
            "buffer_size",
        );
        refused(b.clone().queue_depth(u32::MAX), "queue_depth");
    }
}

#[test]
fn the_smallest_valid_configs_build_and_read() {
    let files = make_files(&[10_000, 3]);
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        for b in [
            b.clone().buffer_size(4096).read_size(1),
            b.clone().buffer_size(4096).read_size(4096),
            b.clone().buffer_size(4096).read_size(1).queue_depth(1),
            b.clone().max_open_files(1).io_workers(1),
            b.clone().registered_buffers(false),
        ] {
            let what = format!("{backend:?}: {b:?}");
            let mut r = b.build().unwrap_or_else(|e| panic!("{what}: {e}"));
            for p in &files.paths {
                r.push(p).unwrap();
            }
            assert_files_eq(&read_all_ok(&mut r), &want, &what);
        }
    }
}

#[test]
fn each_backend_is_what_was_asked_for_and_never_auto() {
    let sync = SequentialFileReader::builder()
        .backend(Backend::Pread)
        .build()
        .unwrap();
    assert_eq!(sync.backend(), Backend::Pread);

    let auto = SequentialFileReader::builder()
        .backend(Backend::Auto)
        .build()
        .unwrap();
    assert_ne!(auto.backend(), Backend::Auto);
    assert_ne!(
        SequentialFileReader::new().unwrap().backend(),
        Backend::Auto
    );

    let uring = SequentialFileReader::builder()
        .backend(Backend::IoUring)
        .build();
    match readahead::io_uring_available() {
        Ok(()) => {
            assert_eq!(uring.unwrap().backend(), Backend::IoUring);
            assert_eq!(auto.backend(), Backend::IoUring, "Auto prefers io_uring");
        }
        Err(reason) => {
            // The refused case is checked too, unless io_uring is required here.
            skip_refused("io_uring", reason);
            let err = uring.expect_err("io_uring is refused, so IoUring cannot build");
            assert!(matches!(err, Error::IoUringUnavailable { .. }), "{err:?}");
            assert!(err.to_string().contains("io_uring"), "{err}");
            assert_eq!(auto.backend(), Backend::Pread);
        }
    }
}

#[test]
fn the_default_backend_is_auto() {
    assert_eq!(Backend::default(), Backend::Auto);
}

#[test]
fn error_is_send_sync_static_and_an_error() {
    fn assert_bounds<T: Send + Sync + 'static + std::error::Error>() {}
    assert_bounds::<Error>();
}

#[test]
fn a_read_error_carries_a_readahead_error_naming_the_path() {
    let dir = tempdir();
    let missing = dir.path().join("missing file");
    for (backend, b) in builders() {
        let mut r = b.build().unwrap();
        if let Err(e) = r.push(&missing) {
            // Failing at queuing is allowed: the same checks apply.
            check_missing(&e, &missing);
            continue;
        }
        let e = r.fill_buf().unwrap_err();
        check_missing(&e, &missing);
        let e = r.read(&mut [0; 1]).unwrap_err();
        check_missing(&e, &missing);
        assert!(!r.move_to_next_file().unwrap(), "{backend:?}");
    }
}

fn check_missing(e: &std::io::Error, missing: &std::path::Path) {
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let inner = inner_error(e).unwrap_or_else(|| panic!("no readahead::Error in {e:?}"));
    match inner {
        Error::Open { path, source } => {
            assert_eq!(path, &FileName::Path(missing.to_path_buf()));
            assert_eq!(source.kind(), ErrorKind::NotFound);
        }
        other => panic!("expected Error::Open, got {other:?}"),
    }
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
}

#[test]
fn a_pipe_error_is_not_a_file_of_kind_pipe() {
    for (backend, b) in builders() {
        let (reader, writer) = std::io::pipe().unwrap();
        let pipe = std::fs::File::from(OwnedFd::from(reader));
        let mut r = b.build().unwrap();
        r.add_file_to_prefetch(&pipe, u64::MAX).unwrap();
        let e = r.fill_buf().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{backend:?}: {e}");
        match inner_error(&e) {
            Some(Error::NotAFile { kind, .. }) => assert_eq!(*kind, "pipe"),
            other => panic!("{backend:?}: expected Error::NotAFile, got {other:?}"),
        }
        drop(writer);
    }
}

#[test]
fn errors_display_lowercase_without_a_trailing_period() {
    let dir = tempdir();
    let mut msgs = vec![SequentialFileReader::builder()
        .buffer_size(0)
        .build()
        .unwrap_err()
        .to_string()];
    for (backend, b) in builders() {
        let mut r = b.build().unwrap();
        // A missing path fails when queued or when read: either way its message is checked.
        let err = match r.push(dir.path().join("x")) {
            Err(e) => e,
            Ok(()) => r.fill_buf().expect_err("a missing path reads"),
        };
        let inner = inner_error(&err).unwrap_or_else(|| panic!("{backend:?}: {err:?}"));
        msgs.push(inner.to_string());
    }
    for m in msgs {
        assert!(m.starts_with(|c: char| c.is_lowercase()), "{m:?}");
        assert!(!m.ends_with('.'), "{m:?}");
    }
}

/// `take_unread_error` returns the first file error nobody read (a file moved past before
/// its error came out), naming the file, once; and `None` once every error was seen. `close`
/// says only how the shutdown went. A file handed in is set up as soon as it is queued
/// first, so the failure of a directory handed in is known before the move (a path's open
/// is under way then, on a helper thread; the engine's tests cover that order).
#[test]
fn take_unread_error_returns_the_first_error_nobody_read() {
    let dir = tempdir();
    let good = dir.path().join("good");
    std::fs::write(&good, vec![1u8; 10_000]).unwrap();
    let missing = dir.path().join("missing");
    let build = |backend| {
        SequentialFileReader::builder()
            .backend(backend)
            .build()
            .unwrap()
    };
    let directory = std::fs::File::open(dir.path()).unwrap();
    let mut r = build(Backend::Pread);
    r.push(&directory).unwrap();
    r.push(&good).unwrap();
    assert_eq!(r.stats().files_failed, 1, "known, not read");
    r.move_to_next_file().unwrap();
    assert_eq!(r.read_to_end(&mut Vec::new()).unwrap(), 10_000);
    let err = r.take_unread_error().expect("the directory's error");
    assert_names(&err, &dir.path().display().to_string());
    assert!(r.take_unread_error().is_none(), "taken");
    r.close().unwrap();
    // With the error read, nothing is left to say.
    for &backend in backends_once() {
        let mut r = build(backend);
        r.push(&missing).unwrap();
        r.push(&good).unwrap();
        assert!(r.read_to_end(&mut Vec::new()).is_err());
        r.move_to_next_file().unwrap();
        assert_eq!(r.read_to_end(&mut Vec::new()).unwrap(), 10_000);
        assert!(r.take_unread_error().is_none(), "{backend:?}: read");
        r.close().unwrap();
    }
}

/// A directory among files of its own directory, once that directory is known local: it is
/// opened on the reader's thread, where a seek to its end sizes a file; a directory's seek
/// tells no size here (ext4, tmpfs), or one its first read then fails (xfs, btrfs), and
/// either way it fails as the directory it is, between files that read exactly.
#[test]
fn a_directory_opened_beside_local_files_fails_alone_as_a_directory() {
    let files = make_files(&[70_000, 0, 5000]);
    let want = oracle_all(&files.paths);
    let sub = files.dir.path().join("a directory");
    std::fs::create_dir(&sub).unwrap();
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        r.push(&files.paths[0]).unwrap();
        let mut first = Vec::new();
        r.read_to_end(&mut first).unwrap();
        assert_bytes_eq(&first, &want[0], &name);
        // Time for the helper thread to find the directory's mount local (not needed for
        // the test to pass: opened on a helper thread, the directory fails the same way).
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.move_to_next_file().unwrap();
        r.push(&sub).unwrap();
        r.push(&files.paths[2]).unwrap();
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), 2, "{name}");
        let err = got[0].as_ref().expect_err("a directory fails");
        assert_names(err, &sub.display().to_string());
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{name}: {err}");
        assert!(
            err.to_string().contains("it is a directory"),
            "{name}: {err}"
        );
        assert_bytes_eq(got[1].as_ref().unwrap(), &want[2], &name);
    }
}
