//! A read that a hung mount never completes, in flight when its reader is dropped or closed:
//! cancelling does not end it, so the reader waits for it up to its drain timeout, then gives
//! up, leaking its pool and ring (the kernel may still write into them) and counting that for
//! the whole process. The drop returns instead of hanging for good, and `close` says what
//! happened. (A read still queued for a kernel worker is ended by the cancel: the test
//! waits for the read until the wait gives up first, so that a worker is all but surely
//! stuck in it, and asks the give-up of the drop or the close.)
//!
//! The hung read comes from the FUSE test filesystem (`common::fusefs`), which holds its
//! answer until the test releases it, served through the page cache: io_uring then waits for
//! it on a kernel worker. (Served with `FOPEN_DIRECT_IO`, the kernel reads inline in
//! `io_uring_enter`, so the hang takes the thread that submits the read, as `pread` would,
//! before any drop.) Each test skips, saying why, where io_uring or FUSE is not available.
//! Linux only: the filesystem is served through `fuser`.
#![cfg(target_os = "linux")]

mod common;

use std::io::{self, Read};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::fusefs::{FaultMount, Faults, FileSpec, Serve};
use common::*;
use readahead::{drains_abandoned, Backend, SequentialFileReader};

/// The readers' drain timeout here.
const TIMEOUT: Duration = Duration::from_millis(300);
/// Far beyond [`TIMEOUT`]: a drop that has not returned by then waits for the hung read,
/// not for the clock. A check for a hang, not a timing.
const HANG: Duration = Duration::from_secs(30);
/// Each file's size, and where its hung read is.
const SIZE: u64 = 1 << 20;
const HANG_AT: u64 = 512 << 10;

/// A mount of two files, each with a read that never answers, served through the page
/// cache; `None` where io_uring or FUSE is not available here (said on stderr).
fn hung_mount() -> Option<FaultMount> {
    if !backends_once().contains(&Backend::IoUring) {
        return None;
    }
    let hung = FileSpec::new(SIZE).with(Faults {
        hang_at: Some(HANG_AT),
        ..Faults::default()
    });
    FaultMount::new(vec![hung.clone(), hung], Serve::PageCache)
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// An io_uring reader of reads small enough that those before a file's hung read come
/// back, which gives up on a read after [`TIMEOUT`].
fn hung_mount_reader() -> SequentialFileReader<'static> {
    SequentialFileReader::builder()
        .backend(Backend::IoUring)
        .buffer_size(SIZE as usize)
        .read_size(64 << 10)
        .drain_timeout(TIMEOUT)
        .build()
        .unwrap()
}

/// An io_uring reader of file `i` of `m` that has read its first bytes, then waited for the
/// hung read until it gave up, so that the read is in flight (the mount's `hung` reads held
/// so far come to `hung`), and the thread that submitted its reads.
///
/// Each reader submits from a thread of its own, joined once the hung reads are answered: a
/// thread whose read never completes cannot exit before (the kernel waits for its io_uring
/// workers).
fn reader_with_a_hung_read(
    m: &FaultMount,
    i: usize,
    hung: u64,
) -> (SequentialFileReader<'static>, JoinHandle<()>) {
    let (path, head) = (m.path(i), m.bytes(i, 0, 4096));
    let (tx, rx) = mpsc::channel();
    let submitter = std::thread::spawn(move || {
        let mut r = hung_mount_reader();
        r.push(path).unwrap();
        let mut got = vec![0; head.len()];
        r.read_exact(&mut got).unwrap();
        assert_bytes_eq(&got, &head, "the bytes before the hang");
        // Reading on until the wait gives up leaves a kernel worker stuck in the reader's
        // read of the held page, all but surely: the filesystem may be asked for the page
        // by the kernel's readahead while that read still waits for a worker, and a cancel
        // (the wait's, or the drop's) ends a read that waits, cleanly.
        let e = r.read_to_end(&mut got).expect_err("the hung read");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        tx.send(r).unwrap();
    });
    let r = rx
        .recv_timeout(TIMEOUT + HANG)
        .expect("the first bytes, then a wait that gave up");
    let deadline = Instant::now() + HANG;
    while m.stats().hung_reads < hung {
        assert!(
            Instant::now() < deadline,
            "the hung read never reached the filesystem"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    (r, submitter)
}

/// Drops a reader with a hung read in flight, then closes another: each returns, the drop
/// quietly, the close with a `TimedOut` error saying what it gave up on, and each counts.
/// (The count is the process's: the other test's reader may add to it meanwhile.)
#[test]
fn a_read_a_hung_mount_never_completes_bounds_drop_and_close() {
    let Some(m) = hung_mount() else {
        return;
    };

    let (r, first) = reader_with_a_hung_read(&m, 0, 1);
    let before = drains_abandoned();
    within(TIMEOUT + HANG, "dropping", move || drop(r));
    let after_drop = drains_abandoned();
    if after_drop == before {
        eprintln!(
            "the drop found no read left in flight: it was cancelled before a worker took it"
        );
    }

    let (r, second) = reader_with_a_hung_read(&m, 1, 2);
    let closed = within(TIMEOUT + HANG, "closing", move || r.close());
    let close_gave_up = closed.is_err();
    match closed {
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
            assert_names(&e, "gave up after");
            assert_names(&e, "leaked");
            assert!(
                drains_abandoned() > after_drop,
                "the close gave up uncounted"
            );
        }
        // Where the read still waited for a worker, the cancel ended it: nothing is left in
        // flight, and the close is clean (seen once in a loaded run).
        Ok(()) => eprintln!("the hung read was cancelled: the close did not need to give up"),
    }
    assert!(
        after_drop > before || close_gave_up,
        "neither the drop nor the close was left a hung read to give up on"
    );

    // The leaked rings keep their files open: the mount cannot be unmounted, only aborted
    // and detached. Answered now, the reads complete into the leaked pools.
    let dir = m.dir().to_path_buf();
    assert!(
        m.abandon(),
        "the connection must end, or this process's exit flushes its files forever"
    );
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&*dir.to_string_lossy()), "still mounted");
    for submitter in [first, second] {
        within(HANG, "the submitting thread exiting", move || {
            submitter.join().unwrap()
        });
    }
}

/// Reading on up to a read that never completes: after the drain timeout the read returns an
/// error of kind `TimedOut` naming the file, after the bytes before it, rather than waiting
/// for good.
#[test]
fn a_wait_for_a_read_that_never_completes_gives_up_after_the_drain_timeout() {
    let Some(m) = hung_mount() else {
        return;
    };
    let (path, head) = (m.path(0), m.bytes(0, 0, HANG_AT as usize));
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = hung_mount_reader();
        r.push(path).unwrap();
        let mut got = Vec::new();
        let read = r.read_to_end(&mut got);
        tx.send((read, got)).unwrap();
    });
    let (read, got) = rx.recv_timeout(HANG).expect("the read gave up");
    let e = read.expect_err("a read that never completes is no end of file");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert_names(&e, &m.path(0).display().to_string());
    assert!(
        got.len() <= head.len(),
        "{} bytes, past the hang",
        got.len()
    );
    assert_bytes_eq(&got, &head[..got.len()], "the bytes before the hang");

    // The reading thread cannot exit before its hung read ends.
    assert!(m.abandon(), "the connection must end");
    within(HANG, "the reading thread exiting", move || {
        reader.join().unwrap()
    });
}
