//! A scan over a mount whose calls never answer, on both backends: ten files whose opens
//! hang, queued behind healthy ones, plus one whose read hangs; and files whose `fstat`
//! hangs. The call returns; each hung file fails alone with `TimedOut`, naming itself; every
//! healthy file is read whole. Hung opens are waited for together, so they cost about one
//! drain timeout, not one each.
//!
//! The hangs come from the FUSE test filesystem (`common::fusefs`), which holds the replies.
//! Skips, saying why, where FUSE (or, for the ring, io_uring) is not available. Each test
//! ends the mount's connection at the end, so that the threads left in the kernel go. Linux
//! only: the filesystem is served through `fuser`.
#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::time::{Duration, Instant};

use common::fusefs::{self, FaultMount, Faults};
use common::scan_outcomes::{collect, read_all};
use common::*;
use readahead::{Backend, Outcome, ReaderBuilder, Scan};

/// The readers' drain timeout: how long a call may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Far beyond what the scan should take: a check that it returns at all, not a timing.
const HANG: Duration = Duration::from_secs(90);
const FILES: usize = 40;
/// The files whose opens hang: ten, each behind healthy files.
const HUNG_OPENS: [usize; 10] = [3, 6, 9, 12, 15, 18, 21, 24, 27, 30];
/// The file whose read hangs, and where.
const HUNG_READ: usize = 33;
const HANG_AT: u64 = 100 << 10;
/// The files whose `fstat` hangs.
const HUNG_FSTATS: [usize; 2] = [4, 9];

/// A mount of [`FILES`] files, hanging as `faults` says (see `fusefs::hang_test_mount`).
fn mount(faults: impl Fn(usize) -> Faults) -> Option<FaultMount> {
    fusefs::hang_test_mount(FILES, faults)
}

/// Each file's outcome, by its index.
type Outcomes = Vec<(usize, Outcome<Vec<u8>, io::Error>)>;

/// Scans every file of `m` on 2 threads with `backend`: each outcome, and how long it took.
fn scan(m: &FaultMount, backend: Backend) -> (Outcomes, Duration) {
    let paths = m.paths();
    let reader = ReaderBuilder::new()
        .backend(backend)
        .buffer_size(2 << 20)
        .read_size(64 << 10)
        .drain_timeout(TIMEOUT);
    within(HANG, "a scan over a hung mount", move || {
        let start = Instant::now();
        let (outcomes, summary) = collect(Scan::new(paths).threads(2).reader(reader), read_all);
        assert_eq!(summary.progress.files, FILES as u64);
        (outcomes, start.elapsed())
    })
}

/// Every file in `hung` failed with `TimedOut` naming itself, and every other one is whole.
fn check(m: &FaultMount, outcomes: Outcomes, hung: &[usize]) {
    assert_eq!(outcomes.len(), FILES, "one outcome a file");
    let mut seen = BTreeSet::new();
    for (index, outcome) in outcomes {
        assert!(seen.insert(index), "file {index} twice");
        let what = format!("file {index}");
        match outcome {
            Outcome::Failed(e) if hung.contains(&index) => {
                assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{what}: {e}");
                assert_names(&e, &m.path(index).display().to_string());
            }
            Outcome::Done(bytes) if !hung.contains(&index) => {
                assert_bytes_eq(&bytes, &m.expected(index), &what);
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
fn ten_hung_opens_and_a_hung_read_fail_alone_and_together() {
    for backend in backends_once().to_vec() {
        let Some(m) = mount(|i| Faults {
            hang_open: HUNG_OPENS.contains(&i),
            hang_at: (i == HUNG_READ).then_some(HANG_AT),
            ..Faults::default()
        }) else {
            return;
        };
        let (outcomes, took) = scan(&m, backend);
        eprintln!("{backend:?}: ten hung opens and a hung read: returned after {took:?}");
        let mut hung = HUNG_OPENS.to_vec();
        hung.push(HUNG_READ);
        check(&m, outcomes, &hung);
        let stats = m.stats();
        assert_eq!(stats.hung_calls, HUNG_OPENS.len() as u64, "{backend:?}");
        assert!(stats.hung_reads > 0, "{backend:?}: no read hung");
        eprintln!(
            "{backend:?}: {} helper threads, {} drains abandoned",
            readahead::helper_threads(),
            readahead::drains_abandoned()
        );
        assert!(
            m.abandon(),
            "the connection must end, or the threads never exit"
        );
    }
}

#[test]
fn hung_fstats_fail_their_files_alone() {
    for backend in backends_once().to_vec() {
        let Some(m) = mount(|i| Faults {
            hang_getattr: HUNG_FSTATS.contains(&i),
            ..Faults::default()
        }) else {
            return;
        };
        let (outcomes, took) = scan(&m, backend);
        eprintln!("{backend:?}: two hung fstats: returned after {took:?}");
        check(&m, outcomes, &HUNG_FSTATS);
        assert!(m.stats().hung_calls > 0, "{backend:?}: no fstat hung");
        assert!(
            m.abandon(),
            "the connection must end, or the threads never exit"
        );
    }
}

#[test]
fn past_its_memory_budget_a_scan_stops_with_a_clear_error() {
    for backend in backends_once().to_vec() {
        // Two reads that hang, on one thread: each gives a reader up, and its pool, 1 MiB,
        // stays behind; the budget holds one.
        let Some(m) = mount(|i| Faults {
            hang_at: [1, 3].contains(&i).then_some(0),
            ..Faults::default()
        }) else {
            return;
        };
        let paths = m.paths();
        let reader = ReaderBuilder::new()
            .backend(backend)
            .buffer_size(1 << 20)
            .read_size(64 << 10)
            .drain_timeout(TIMEOUT);
        let e = within(HANG, "a scan past its budget", move || {
            Scan::new(paths)
                .threads(1)
                .memory(1 << 20)
                .reader(reader)
                .map(|file| io::copy(file, &mut io::sink()))
                .for_each(|_, _| {})
                .expect_err("the second reader given up passes the budget")
        });
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{backend:?}: {e}");
        assert!(e.to_string().contains("Scan::memory"), "{backend:?}: {e}");
        assert!(
            m.abandon(),
            "the connection must end, or the threads never exit"
        );
    }
}

/// A file bind-mounted from a hung mount into a local directory, among that directory's
/// files: its open hangs, on a helper thread, and it fails alone; the directory's other files
/// (opened on the reader's thread, the directory being local) are read whole.
#[test]
fn a_hung_file_bind_mounted_into_a_local_directory_fails_alone() {
    for backend in backends_once().to_vec() {
        let Some(m) = mount(|i| Faults {
            hang_open: i == 0,
            ..Faults::default()
        }) else {
            return;
        };
        let files = make_files(&[70_000, 5000, 1, 300_000, 20_000]);
        let want = oracle_all(&files.paths);
        // The third file is replaced, as its directory's dentry, by the hung one.
        let binding = match common::fusefs::bind(&m.path(0), &files.paths[2]) {
            Ok(binding) => binding,
            Err(why) => {
                eprintln!("skipped: {why}");
                assert!(m.abandon());
                return;
            }
        };
        let reader = ReaderBuilder::new().backend(backend).drain_timeout(TIMEOUT);
        let paths = files.paths.clone();
        let got = within(HANG, "a scan over a bind-mounted hung file", move || {
            let mut r = reader.build().unwrap();
            paths.iter().for_each(|p| r.push(p).unwrap());
            let mut got = Vec::new();
            loop {
                let mut bytes = Vec::new();
                got.push(r.read_to_end(&mut bytes).map(|_| bytes));
                if !r.move_to_next_file().unwrap() {
                    return got;
                }
            }
        });
        for (i, outcome) in got.into_iter().enumerate() {
            match outcome {
                Err(e) if i == 2 => {
                    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{backend:?}: {e}")
                }
                Ok(bytes) if i != 2 => assert_bytes_eq(&bytes, &want[i], &format!("file {i}")),
                other => panic!("{backend:?}: file {i}: {other:?}"),
            }
        }
        drop(binding);
        assert!(
            m.abandon(),
            "the connection must end, or the threads never exit"
        );
    }
}
