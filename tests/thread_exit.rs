//! A reader whose reads were submitted by a thread that has since exited, read on another
//! thread (the reader is `Send` and may move between threads mid-scan).
//!
//! io_uring retries a buffered read that had to wait for the disk in the context of the
//! thread that submitted it; when that thread has exited, the kernel fails the read with
//! `EFAULT` instead. Each test here drops its file from the page cache first, so that its
//! reads wait for the disk, and queues it on a thread that exits at once. The reader must
//! still read every byte, and must never panic.
//!
//! Linux only: what it tests is io_uring's.
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use readahead::{Backend, SequentialFileReader};

/// Writes `path` out to the disk and drops it from the page cache; whether that worked, so
/// that its reads will wait for the disk. Where not (the files are on the disk, in the target
/// directory: it should always work), see `skip_refused`: these tests would test nothing.
fn evict(path: &Path) -> bool {
    evict_from_page_cache(path);
    let cold = evicted(path);
    if !cold {
        skip_refused(
            "a cold read",
            format_args!("{} stays in the page cache", path.display()),
        );
    }
    cold
}

/// An io_uring reader with `paths` queued (so their first reads are submitted) by a thread
/// that then exits.
fn queued_by_an_exited_thread(paths: &[PathBuf]) -> SequentialFileReader<'static> {
    let paths = paths.to_vec();
    std::thread::spawn(move || {
        let mut r = SequentialFileReader::builder()
            .backend(Backend::IoUring)
            .build()
            .unwrap();
        for p in &paths {
            r.push(p.clone()).unwrap();
        }
        r
    })
    .join()
    .unwrap()
}

/// One read (the file is smaller than a read), waiting for the disk, submitted by a thread
/// that exits: it must complete with the file's bytes, not fail the file.
#[test]
fn a_read_submitted_by_an_exited_thread_reads_exactly() {
    if !io_uring_here() {
        return;
    }
    let files = make_files(&[256 << 10, 5000]);
    let want = oracle_all(&files.paths);
    for round in 0..10 {
        if !evict(&files.paths[0]) {
            return;
        }
        let mut r = queued_by_an_exited_thread(&files.paths);
        assert_files_eq(&read_all_ok(&mut r), &want, &format!("round {round}"));
    }
}

/// Set in the child process that runs `child_reads_many_reads_submitted_by_an_exited_thread`.
const CHILD_ENV: &str = "READAHEAD_TEST_THREAD_EXIT_CHILD";
const CHILD_TEST: &str = "child_reads_many_reads_submitted_by_an_exited_thread";

/// Many reads of one file in flight, all waiting for the disk, submitted by a thread that
/// exits: several fail at once, in any order. Whatever they return, the reader must not panic
/// (a panic there aborts the process while dropping the reader, hence the child process).
#[test]
fn many_failing_reads_of_one_file_do_not_panic() {
    if !io_uring_here() {
        return;
    }
    run_in_child(CHILD_TEST, CHILD_ENV, "1");
}

/// Does its work only in the child process started by the test above.
#[test]
fn child_reads_many_reads_submitted_by_an_exited_thread() {
    if child_value(CHILD_ENV).is_none() {
        return;
    }
    let files = make_files(&[8 << 20, 5000]);
    let want = oracle_all(&files.paths);
    for round in 0..5 {
        if !evict(&files.paths[0]) {
            break;
        }
        let mut r = queued_by_an_exited_thread(&files.paths);
        let got = read_all_files(&mut r);
        let what = format!("round {round}");
        assert_eq!(got.len(), 2, "{what}");
        // Retried, its reads should go through; if one failed past its retries, the file
        // fails alone, naming itself, and never ends early or with wrong bytes.
        match &got[0] {
            Ok(bytes) => assert_bytes_eq(bytes, &want[0], &what),
            Err(e) => assert_names(e, &files.paths[0].to_string_lossy()),
        }
        assert_bytes_eq(got[1].as_ref().unwrap(), &want[1], &what);
    }
    println!("{CHILD_DONE}");
}
