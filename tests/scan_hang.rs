//! A scan over a file whose read a hung mount never completes: the call returns, that file
//! fails with `TimedOut` naming it, and every other file, those queued behind it on the same
//! thread included, comes out whole. The threads are named `readahead-scan-N`.
//!
//! The hung read comes from the FUSE test filesystem (`common::fusefs`), served through the
//! page cache, so that io_uring waits for it on a kernel worker (as in `drain_timeout.rs`).
//! The thread that submitted it cannot exit before it completes: the scan returns without
//! joining it, and the test ends the mount's connection so that it does. Skips, saying why,
//! where io_uring or FUSE is not available. Linux only: the filesystem is served through
//! `fuser`.
#![cfg(target_os = "linux")]

mod common;

use std::io::{self, Read};
use std::time::{Duration, Instant};

use common::fusefs::{FaultMount, Faults, FileSpec, Serve};
use common::*;
use readahead::{Backend, Outcome, ReaderBuilder, Scan};

/// The readers' drain timeout here: also how long a read may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Far beyond [`TIMEOUT`]: a scan that has not returned by then waits for the hung read, not
/// for the clock. A check that it returns, not a timing.
const HANG: Duration = Duration::from_secs(30);
/// The file that hangs, among [`FILES`], and where.
const HUNG: usize = 2;
const HANG_AT: u64 = 256 << 10;
/// Files in the mount: the hung one early, so that files queued behind it on its thread
/// must be read by another reader.
const FILES: usize = 8;

/// What a file's closure returns: its thread's name and its bytes.
type NameAndBytes = (Option<String>, Vec<u8>);

/// The mount, its files of several sizes, one of which hangs; `None` where io_uring or FUSE
/// is not available here (said on stderr).
fn hung_mount() -> Option<FaultMount> {
    if !backends_once().contains(&Backend::IoUring) {
        return None;
    }
    let files = (0..FILES)
        .map(|i| {
            let spec = FileSpec::new(((i as u64 * 37) % 5 + 1) * (100 << 10));
            match i {
                HUNG => FileSpec::new(1 << 20).with(Faults {
                    hang_at: Some(HANG_AT),
                    ..Faults::default()
                }),
                _ => spec,
            }
        })
        .collect();
    FaultMount::new(files, Serve::PageCache)
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// Scans every file of `m` on `threads` threads, each file read whole by its closure.
fn scan(m: &FaultMount, threads: usize) -> Vec<(usize, Outcome<NameAndBytes, io::Error>)> {
    let paths = m.paths();
    let reader = ReaderBuilder::new()
        .backend(Backend::IoUring)
        .buffer_size(1 << 20)
        .read_size(64 << 10)
        .drain_timeout(TIMEOUT);
    within(HANG, "the scan over a hung file", move || {
        let mut outcomes = Vec::new();
        let summary = Scan::new(paths)
            .threads(threads)
            .queue_ahead(FILES)
            .reader(reader)
            .map(|file| {
                let name = std::thread::current().name().map(String::from);
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)?;
                io::Result::Ok((name, bytes))
            })
            .for_each(|index, outcome| outcomes.push((index, outcome)))
            .expect("the scan itself does not fail");
        assert_eq!(summary.progress.files, FILES as u64);
        assert_eq!(summary.progress.failed, 1);
        assert!(
            readahead::drains_abandoned() > 0,
            "the reader with the hung read was given up uncounted"
        );
        outcomes
    })
}

/// Checks every outcome: the hung file failed with `TimedOut` naming it, every other one
/// whole, each read on a thread named `readahead-scan-N` with `N < threads`.
fn check(m: &FaultMount, threads: usize, outcomes: Vec<(usize, Outcome<NameAndBytes, io::Error>)>) {
    assert_eq!(outcomes.len(), FILES, "one outcome a file");
    let names: Vec<String> = (0..threads)
        .map(|i| format!("readahead-scan-{i}"))
        .collect();
    for (index, outcome) in outcomes {
        let what = format!("file {index} on {threads} threads");
        match outcome {
            Outcome::Failed(e) if index == HUNG => {
                assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{what}: {e}");
                assert_names(&e, &m.path(HUNG).display().to_string());
            }
            Outcome::Done((name, bytes)) if index != HUNG => {
                assert_bytes_eq(&bytes, &m.expected(index), &what);
                let name = name.unwrap_or_default();
                assert!(names.contains(&name), "{what}: read on thread {name:?}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// The threads of this process named as the scan's.
fn scan_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("list /proc/self/task");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("readahead-scan"))
        .count()
}

#[test]
fn a_scan_over_a_hung_file_returns_with_that_file_timed_out_and_the_rest_whole() {
    let Some(m) = hung_mount() else {
        return;
    };
    // One thread: every file after the hung one waits behind it in the same reader.
    for threads in [1, 2] {
        let start = Instant::now();
        let outcomes = scan(&m, threads);
        eprintln!("{threads} threads: returned after {:?}", start.elapsed());
        check(&m, threads, outcomes);
    }
    assert!(
        m.stats().hung_reads > 0,
        "no read hung: the test tested nothing"
    );

    // The threads that submitted the hung reads are still exiting: the kernel waits for
    // their reads. Answered once the connection ends, they go.
    assert!(
        m.abandon(),
        "the connection must end, or the threads never exit"
    );
    let deadline = Instant::now() + HANG;
    while scan_threads() > 0 {
        assert!(
            Instant::now() < deadline,
            "scan threads left after the reads ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
