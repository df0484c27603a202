//! Letting go: reads left in flight by moving on (orphans) or restarting a file, a borrowed
//! file's duplicate closed once read, and dropping or draining with reads out.

use super::*;
use crate::source::raw_fd;

#[test]
fn moving_on_leaves_reads_in_flight_as_orphans() {
    let f = files(&[200_000, 5000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 128 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf().unwrap(), &f.data[0][..8192]);
    assert!(
        e.stream.ahead.core.io().in_flight() > 1,
        "read-ahead of the current file is in flight"
    );
    assert!(e.move_to_next_file().unwrap());
    let orphaned = e.stream.ahead.core.chunks.orphans() as u64;
    let discarded = e.stats().reads_discarded;
    assert!(orphaned > 0);
    let rest = read_all(&mut e);
    assert_exact(&rest, &f.data[1..]);
    drop(rest);
    // Each orphan came back once, counted as discarded, or is still out (and comes back
    // through the drain in `Drop`, which checks every loan returns).
    let came_back = e.stats().reads_discarded - discarded;
    assert_eq!(
        came_back + e.stream.ahead.core.chunks.orphans() as u64,
        orphaned
    );
}

#[test]
fn activating_a_partly_read_file_restarts_it() {
    let f = files(&[50_000, 3000]);
    let file = std::fs::File::open(&f.paths[0]).unwrap();
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 32 << 10, 4096);
    e.push_range(Source::Borrowed(&file), 0, u64::MAX, false)
        .unwrap();
    e.push_range(
        Source::Path(f.paths[1].as_path().into()),
        0,
        u64::MAX,
        false,
    )
    .unwrap();
    let n = e.fill_buf().unwrap().len();
    e.consume(n - 10);
    assert_eq!(e.file_offset(), (n - 10) as u64);
    e.activate(&file, u64::MAX).unwrap();
    assert_eq!(e.file_offset(), 0);
    // It reads again from byte 0, and the file queued behind it still follows.
    assert_exact(&read_all(&mut e), &f.data);
}

#[test]
fn a_borrowed_file_is_read_through_a_duplicate_closed_once_its_reads_are_done() {
    let f = files(&[50_000, 3000]);
    let (big, small) = (
        std::fs::File::open(&f.paths[0]).unwrap(),
        std::fs::File::open(&f.paths[1]).unwrap(),
    );
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 32 << 10, 4096);
    e.push_range(Source::Borrowed(&small), 0, u64::MAX, false)
        .unwrap();
    e.push_range(Source::Borrowed(&big), 0, u64::MAX, false)
        .unwrap();
    // Reads name the reader's own descriptor, never the caller's number.
    let dup = e
        .stream
        .ahead
        .core
        .queue
        .front()
        .unwrap()
        .fd()
        .unwrap()
        .raw();
    assert_ne!(dup, raw_fd(&small));
    assert_eq!(fds_under(&f.dir()), 4, "each file and its duplicate");
    assert_eq!(e.fill_buf().unwrap(), &f.data[1][..]);
    assert_eq!(fds_under(&f.dir()), 3, "the small file's reads are done");
    // Read again: duplicated again, and still found by the caller's descriptor.
    e.consume(10);
    e.activate(&small, u64::MAX).unwrap();
    assert_exact(&read_all(&mut e), &[f.data[1].clone(), f.data[0].clone()]);
    drop(e);
    assert_eq!(fds_under(&f.dir()), 2, "the caller's files alone");
}

#[test]
fn drop_with_reads_in_flight_gets_every_loan_back() {
    let f = files(&[300_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(pool(&e).lent() > 1);
    drop(e); // `Drop for Engine` debug-asserts that every loan came back.
}

/// A drain that times out (reads a hung device never completes) leaks the backend and the
/// pool rather than free them under the kernel, counts itself for the process, and `close`
/// says what happened; the drop after it does not wait again (`Drop for Engine` asserts the
/// pool it frees has no loan out).
#[test]
fn a_drain_that_times_out_leaks_counts_and_says_so() {
    let f = files(&[300_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    io.hung = true;
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(pool(&e).lent() > 1);
    let before = crate::stats::drains_abandoned();
    let err = e.close().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("gave up after"), "{err}");
    assert!(err.to_string().contains("leaked"), "{err}");
    assert!(crate::stats::drains_abandoned() > before);
}

/// The files an engine given up hands to another count once in the two engines' counters
/// together: the opens and failures of the one given up are its own files' alone.
#[test]
fn files_handed_on_from_an_engine_given_up_count_once() {
    let f = files(&[50_000, 3000, 4000, 100]);
    let io = fail_at(0, 100, libc::EIO);
    let mut e = engine(io, 256 << 10, 4096);
    queue_paths(&mut e, &f);
    // The first file's bytes are in: every file behind it is open (and the last failed).
    assert!(!e.fill_buf().unwrap().is_empty());
    let (old, behind) = given_up(e);
    assert_eq!(behind.len(), 3);
    let mut e = engine(Scripted::new(|_| Act::Full), 256 << 10, 4096);
    for file in behind {
        e.push_range(file.source, file.start, file.limit, false)
            .unwrap();
    }
    let got = read_all(&mut e);
    assert!(got.iter().all(Result::is_ok), "{got:?}");
    let mut total = old;
    total.add(&e.stats());
    assert_eq!(total.files_opened, 4, "{total:?}");
    assert_eq!(total.files_failed, 0, "{total:?}");
}

/// Gives `e` up: its counters, and the files behind its current one.
fn given_up(e: Engine<'_>) -> (Stats, Vec<QueuedFile<'_>>) {
    let (behind, stats) = e.abandon();
    (stats, behind)
}
