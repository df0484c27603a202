//! A kernel submission thread (`IORING_SETUP_SQPOLL`): a reader with one reads exactly, and
//! readers that share one (`sq_poll_shared_with`, the scan's `sq_poll`) start one thread in
//! all, where readers of their own start one each. One test, so that no other reader of this
//! binary starts threads while it counts them.
#![cfg(target_os = "linux")]

mod common;

use std::io::{self, Read};
use std::time::Duration;

use common::*;
use readahead::{Backend, Outcome, ReaderBuilder, Scan, SequentialFileReader};

/// The kernel's submission threads of this process (named `iou-sqp-PID`).
fn submission_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.starts_with("iou-sqp"))
        })
        .count()
}

/// Waits for the submission threads of rings closed before to exit (the kernel ends them
/// after the ring is freed, not at once); how many are left after at most 10 s.
fn settled_threads() -> usize {
    let start = std::time::Instant::now();
    while submission_threads() > 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    submission_threads()
}

fn builder() -> ReaderBuilder {
    SequentialFileReader::builder()
        .backend(Backend::IoUring)
        .buffer_size(256 << 10)
        .read_size(32 << 10)
        .sq_poll(Duration::from_millis(5))
}

#[test]
fn readers_with_a_submission_thread_read_exactly_and_share_it_where_asked() {
    if !io_uring_here() {
        return;
    }
    let files = make_files(&[0, 1, 70_000, 4096, 300_000, 12_345]);
    let want = oracle_all(&files.paths);
    assert_eq!(settled_threads(), 0);

    // Two readers of their own: a thread each.
    let mut a = reader_over(builder(), &files.paths);
    let mut b = reader_over(builder(), &files.paths);
    assert_eq!(submission_threads(), 2, "a thread each");
    assert_files_eq(&read_all_ok(&mut a), &want, "own");
    assert_files_eq(&read_all_ok(&mut b), &want, "own");
    a.close().unwrap();
    b.close().unwrap();
    assert_eq!(settled_threads(), 0, "ended with their rings");

    // Two sharing the first's: one thread.
    let a = builder().build().unwrap();
    let shared = builder().sq_poll_shared_with(&a);
    let mut a = reader_over_again(a, &files.paths);
    let mut b = reader_over(shared, &files.paths);
    assert_eq!(submission_threads(), 1, "shared");
    assert_files_eq(&read_all_ok(&mut a), &want, "first");
    assert_files_eq(&read_all_ok(&mut b), &want, "attached");
    drop((a, b));
    assert_eq!(settled_threads(), 0, "ended with their rings");

    // A scan of 3 threads: one thread in all, while every reader is alive.
    let seen = std::sync::atomic::AtomicUsize::new(0);
    let (outcomes, _) = Scan::new(&files.paths)
        .threads(3)
        .reader(builder())
        .map(|file| {
            seen.fetch_max(submission_threads(), std::sync::atomic::Ordering::Relaxed);
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            io::Result::Ok(bytes)
        })
        .ordered(|outcomes| outcomes.collect::<Vec<_>>())
        .unwrap();
    for ((i, outcome), want) in outcomes.into_iter().zip(&want) {
        let Outcome::Done(bytes) = outcome else {
            panic!("file {i}: {outcome:?}")
        };
        assert_bytes_eq(&bytes, want, &format!("scan, file {i}"));
    }
    assert_eq!(seen.into_inner(), 1, "the scan's readers share one thread");
}

/// Queues `paths` into a reader built already.
fn reader_over_again<'a>(
    mut r: SequentialFileReader<'a>,
    paths: &[std::path::PathBuf],
) -> SequentialFileReader<'a> {
    for p in paths {
        r.push(p.clone()).unwrap();
    }
    r
}
