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

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fusefs::{FaultMount, Faults, FileSpec, Serve};
use common::runtimes::runtimes;
use common::*;
use readahead::{AsyncSequentialFileReader, Backend, ReaderBuilder};
use tokio::io::AsyncReadExt;

/// The reader's drain timeout: how long a call may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Far beyond what the reading should take: a check that it returns at all, not a timing.
const HANG: Duration = Duration::from_secs(60);
/// The longest the ticker may go without a tick: far above its period, and well below
/// [`TIMEOUT`], which a runtime thread held by a hung call would make it wait. A bound that
/// shows nothing blocked, not a timing.
const MAX_GAP: Duration = Duration::from_secs(1);
const FILES: usize = 12;
const HUNG_OPENS: [usize; 2] = [3, 7];
const HUNG_READ: usize = 9;
const HANG_AT: u64 = 100 << 10;

/// A mount of [`FILES`] files of a few hundred KiB, hanging as the constants say; `None`
/// where FUSE is not available here (said on stderr).
fn mount() -> Option<FaultMount> {
    let files = (0..FILES)
        .map(|i| {
            let faults = Faults {
                hang_open: HUNG_OPENS.contains(&i),
                hang_at: (i == HUNG_READ).then_some(HANG_AT),
                ..Faults::default()
            };
            FileSpec::new(((i as u64 * 37) % 5 + 1) * (60 << 10)).with(faults)
        })
        .collect();
    FaultMount::new(files, Serve::PageCache)
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// Ticks every 10 ms until `stop`: the longest gap between two ticks.
async fn ticker(stop: Arc<AtomicBool>) -> Duration {
    let (mut last, mut longest) = (Instant::now(), Duration::ZERO);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        longest = longest.max(last.elapsed());
        last = Instant::now();
    }
    longest
}

/// Reads every file of `m` with one async reader on `backend`, beside a ticker: each file's
/// bytes or error, and the ticker's longest gap while the reader read.
async fn read_beside_a_ticker(
    m: &FaultMount,
    backend: Backend,
) -> (Vec<io::Result<Vec<u8>>>, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = tokio::spawn(ticker(stop.clone()));
    // A pool the files fit in whole: the hung read keeps its region, never reached again.
    let b = ReaderBuilder::new()
        .backend(backend)
        .buffer_size(16 << 20)
        .drain_timeout(TIMEOUT);
    let mut r = AsyncSequentialFileReader::new(b.build().unwrap()).unwrap();
    for p in m.paths() {
        r.push(p).unwrap();
    }
    let mut got = Vec::new();
    loop {
        let mut bytes = Vec::new();
        got.push(r.read_to_end(&mut bytes).await.map(|_| bytes));
        if !r.move_to_next_file().await.unwrap() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let gap = ticks.await.unwrap();
    // The hung read is still in flight: the drop cancels it and gives up on it after
    // `drain_timeout`, leaking the pool and counting it, rather than hold the thread longer.
    let abandoned = readahead::drains_abandoned();
    drop(r);
    assert_eq!(readahead::drains_abandoned(), abandoned + 1, "{backend:?}");
    (got, gap)
}

#[test]
fn hung_opens_and_a_hung_read_fail_alone_and_stall_no_other_task() {
    for backend in backends_once().to_vec() {
        for (flavour, rt) in runtimes() {
            let Some(m) = mount() else {
                return;
            };
            let what = format!("{backend:?}, {flavour}");
            let run = rt.block_on(async {
                tokio::time::timeout(HANG, read_beside_a_ticker(&m, backend)).await
            });
            let (got, gap) = run.unwrap_or_else(|_| panic!("{what}: hung"));
            eprintln!("{what}: the ticker's longest gap {gap:?}");
            assert!(gap < MAX_GAP, "{what}: a task was stalled {gap:?}");
            assert_eq!(got.len(), FILES, "{what}");
            for (i, outcome) in got.into_iter().enumerate() {
                let hung = HUNG_OPENS.contains(&i) || i == HUNG_READ;
                match outcome {
                    Err(e) if hung => {
                        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{what}, file {i}: {e}");
                        assert_names(&e, &m.path(i).display().to_string());
                    }
                    Ok(bytes) if !hung => {
                        assert_bytes_eq(&bytes, &m.expected(i), &format!("{what}, file {i}"))
                    }
                    other => panic!("{what}, file {i}: {other:?}"),
                }
            }
            assert!(
                m.abandon(),
                "the connection must end, or the threads never exit"
            );
        }
    }
}
