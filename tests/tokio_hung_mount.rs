//! The reader under tokio over a mount whose calls never answer, on both backends and both
//! runtime flavours: files whose opens hang, and one whose read hangs, among healthy ones.
//! The hung files fail alone with `TimedOut`, naming themselves, every healthy file is read
//! whole, and a ticker task on the same runtime keeps ticking all along: no runtime thread
//! is held by a call that does not return (on the one-thread runtime, a held thread would
//! stop the ticker for the whole timeout).
//!
//! Dropped with the hung read in flight, the reader gives it up after the timeout, counted as
//! a drain abandoned. The hangs come from the FUSE test filesystem (`common::fusefs`); skipped, saying why,
//! where FUSE (or, for the ring, io_uring) is not available.
#![cfg(all(feature = "tokio", target_os = "linux"))]

mod common;

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::fusefs::{self, FaultMount, Faults};
use common::runtimes::{runtimes, ticker};
use common::*;
use readahead::{AsyncSequentialFileReader, Backend, ReaderBuilder};
use tokio::io::AsyncReadExt;
use tokio::runtime::Runtime;

/// The reader's drain timeout: how long a call may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Far beyond what the reading should take: a check that it returns at all, not a timing.
const HANG: Duration = Duration::from_secs(60);
/// The longest the ticker may go without a tick: far above its period, and well below
/// [`TIMEOUT`], which a runtime thread held by a hung call would make it wait. A bound that
/// shows nothing blocked, not a timing.
const MAX_GAP: Duration = Duration::from_secs(1);
const FILES: usize = 12;
/// The files whose opens (or, handed in, whose `fstat`) hang.
const HUNG_OPENS: [usize; 2] = [3, 7];
const HUNG_READ: usize = 9;
const HANG_AT: u64 = 100 << 10;

/// A mount of [`FILES`] files, hanging as `faults` says (see `fusefs::hang_test_mount`).
fn mount(faults: impl Fn(usize) -> Faults) -> Option<FaultMount> {
    fusefs::hang_test_mount(FILES, faults)
}

/// Runs `test` on each backend and runtime flavour, over a fresh mount of files hanging as
/// `faults` says, which it then ends; with a name for messages.
fn on_each_mount(
    faults: impl Fn(usize) -> Faults,
    test: impl Fn(&FaultMount, Backend, &Runtime, &str),
) {
    for backend in backends_once().to_vec() {
        for (flavour, rt) in runtimes() {
            let Some(m) = mount(&faults) else {
                return;
            };
            test(&m, backend, &rt, &format!("{backend:?}, {flavour}"));
            assert!(
                m.abandon(),
                "the connection must end, or the threads never exit"
            );
        }
    }
}

/// An async reader on `backend`, whose pool the files fit in whole: a hung read keeps its
/// region, which the reader never comes round to again.
fn async_reader<'a>(backend: Backend) -> AsyncSequentialFileReader<'a> {
    let b = ReaderBuilder::new()
        .backend(backend)
        .buffer_size(16 << 20)
        .drain_timeout(TIMEOUT);
    AsyncSequentialFileReader::new(b.build().unwrap()).unwrap()
}

/// Reads every queued file beside a ticker task: each file's bytes or error, and the
/// ticker's longest gap meanwhile.
async fn read_beside_a_ticker(
    r: &mut AsyncSequentialFileReader<'_>,
) -> (Vec<io::Result<Vec<u8>>>, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = tokio::spawn(ticker(stop.clone(), Duration::from_millis(10)));
    let mut got = Vec::new();
    loop {
        let mut bytes = Vec::new();
        got.push(r.read_to_end(&mut bytes).await.map(|_| bytes));
        if !r.move_to_next_file().await.unwrap() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    (got, ticks.await.unwrap())
}

/// Every file in `hung` failed with `TimedOut` naming itself, every other one is whole, and
/// the ticker never stalled.
fn check(
    m: &FaultMount,
    (got, gap): (Vec<io::Result<Vec<u8>>>, Duration),
    hung: &[usize],
    what: &str,
) {
    eprintln!("{what}: the ticker's longest gap {gap:?}");
    assert!(gap < MAX_GAP, "{what}: a task was stalled {gap:?}");
    assert_eq!(got.len(), FILES, "{what}");
    for (i, outcome) in got.into_iter().enumerate() {
        match outcome {
            Err(e) if hung.contains(&i) => {
                assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{what}, file {i}: {e}");
                assert_names(&e, &m.path(i).display().to_string());
            }
            Ok(bytes) if !hung.contains(&i) => {
                assert_bytes_eq(&bytes, &m.expected(i), &format!("{what}, file {i}"))
            }
            other => panic!("{what}, file {i}: {other:?}"),
        }
    }
}

#[test]
fn hung_opens_and_a_hung_read_fail_alone_and_stall_no_other_task() {
    let faults = |i| Faults {
        hang_open: HUNG_OPENS.contains(&i),
        hang_at: (i == HUNG_READ).then_some(HANG_AT),
        ..Faults::default()
    };
    on_each_mount(faults, |m, backend, rt, what| {
        let got = rt.block_on(async {
            let mut r = async_reader(backend);
            m.paths().into_iter().try_for_each(|p| r.push(p)).unwrap();
            let got = tokio::time::timeout(HANG, read_beside_a_ticker(&mut r)).await;
            // The hung read is still in flight: the drop cancels it and gives up on it
            // after `drain_timeout`, leaking the pool and counting it, rather than hold the
            // thread longer.
            let abandoned = readahead::drains_abandoned();
            drop(r);
            assert_eq!(readahead::drains_abandoned(), abandoned + 1, "{what}");
            got.expect("hung")
        });
        let mut hung = HUNG_OPENS.to_vec();
        hung.push(HUNG_READ);
        check(m, got, &hung, what);
    });
}

/// Files handed in, opened by the caller, whose `fstat` hangs: the reader sizes them on
/// helper threads, never on the runtime's, and they fail alone.
#[test]
fn files_handed_in_whose_fstat_hangs_fail_alone_and_stall_no_other_task() {
    let faults = |i| Faults {
        hang_getattr: HUNG_OPENS.contains(&i),
        ..Faults::default()
    };
    on_each_mount(faults, |m, backend, rt, what| {
        let files: Vec<File> = m.paths().iter().map(|p| File::open(p).unwrap()).collect();
        let got = rt.block_on(async {
            let mut r = async_reader(backend);
            files.iter().try_for_each(|f| r.push(f)).unwrap();
            tokio::time::timeout(HANG, read_beside_a_ticker(&mut r)).await
        });
        check(m, got.expect("hung"), &HUNG_OPENS, what);
        assert!(m.stats().hung_calls > 0, "{what}: no fstat hung");
    });
}
