//! Opens done by the source: the cap on descriptors, failed and refused opens, `EMFILE`,
//! retries, and moving past or dropping files still being opened.

use super::*;
use crate::consts::MAX_RETRIES;
use crate::tests::direct_io_on;

/// A source that opens paths itself, completing opens and reads in `order`, and counts the
/// descriptors on `f`'s files.
fn opening(f: &Files, order: (bool, bool)) -> Scripted<'static> {
    let mut io = Scripted::new(|_| Act::Full).ordered(order);
    io.async_open = true;
    io.watch = Some(f.dir());
    io
}

/// Sizes for the open tests: empty files, files of one read and of several.
const OPEN_SIZES: [usize; 12] = [
    0, 1, 5000, 70_000, 4096, 0, 20_000, 3, 100_000, 8192, 1, 65_536,
];

/// An open answered while the engine still schedules is taken in the same round: an empty
/// file opened so is at its end, not a file no read could be issued for.
#[test]
fn opens_answered_while_scheduling_read_exactly_empty_files_too() {
    // An empty file alone (nothing else in flight), and files behind it.
    for sizes in [&[0][..], &[0, 0], &OPEN_SIZES] {
        let f = files(sizes);
        for order in ORDERS {
            let mut io = opening(&f, order);
            io.opens_answer_themselves = true;
            let mut e = engine_with(io, (64 << 10, 8192), |_| {});
            queue_paths(&mut e, &f);
            assert_exact(&read_all(&mut e), &f.data);
        }
    }
}

/// Opens answered where they start, as the kernel's caches answer them on the reader's
/// thread: every file read exactly, within the cap, with passing errors retried, `EMFILE` on
/// a later file and on the current one, and refused flags.
#[test]
fn opens_answered_on_the_spot_read_exactly_within_the_cap() {
    let f = files(&OPEN_SIZES);
    let (again, busy) = ((libc::EINTR, libc::EAGAIN), libc::EMFILE);
    let scripts: [&[(usize, i32)]; 5] = [
        &[],
        &[(1, again.0), (2, again.1), (3, again.1), (3, again.0)],
        &[(2, busy)],
        &[(0, busy)],
        &[(1, libc::EPERM), (5, libc::EINVAL)],
    ];
    for errors in scripts {
        for order in ORDERS {
            let what = format!("{errors:?}, order {order:?}");
            let mut io = opening_failing(&f, order, errors);
            io.opens_on_the_spot = true;
            let log = io.log.clone();
            let mut e = engine(io, 64 << 10, 8192);
            queue_paths(&mut e, &f);
            assert_exact(&read_all(&mut e), &f.data);
            assert_eq!(e.stats().files_failed, 0, "{what}");
            drop(e);
            assert_eq!(fds_under(&f.dir()), 0, "{what}: every file closed");
            let peak = log.lock().unwrap().peak_descriptors;
            assert!(
                (1..=4).contains(&peak),
                "{what}: {peak} descriptors at once"
            );
        }
    }
}

#[test]
fn paths_opened_by_the_source_read_exactly_within_the_cap() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        for max_open in [1, 2, 4] {
            let what = format!("order {order:?}, max_open {max_open}");
            let io = opening(&f, order);
            let log = io.log.clone();
            let mut e = engine_with(io, (64 << 10, 8192), |l| l.max_open = max_open);
            queue_paths(&mut e, &f);
            let got = read_all_checking(&mut e, |e| {
                // A file whose reads are all done holds no descriptor, while it is current.
                let front = e.stream.ahead.core.queue.front().unwrap();
                let Source::Path(path) = &front.source else {
                    unreachable!()
                };
                if front.all_issued() && front.progress().in_flight() == 0 {
                    let path = f.dir().join(path.file_name().unwrap());
                    assert_eq!(fds_under(&path), 0, "{what}: {path:?} still open");
                }
            });
            assert_exact(&got, &f.data);
            assert_eq!(fds_under(&f.dir()), 0, "{what}: every file closed");
            assert_eq!(e.stats().files_opened, f.paths.len() as u64, "{what}");
            assert_pool_empty(&e);
            drop(e);
            let log = log.lock().unwrap();
            for p in &f.paths {
                assert_eq!(log.opens_of(p), 1, "{what}: {p:?}");
            }
            assert!(log.sync_opens.is_empty(), "{what}");
            assert!(
                (1..=max_open).contains(&log.peak_descriptors),
                "{what}: {} descriptors at once",
                log.peak_descriptors
            );
        }
    }
}

#[test]
fn direct_opens_go_through_the_source_with_the_flag() {
    let f = files(&OPEN_SIZES);
    // On the disk, where the files take O_DIRECT (or the test fails under
    // READAHEAD_REQUIRE_URING=1: see `skip_refused`).
    let direct = direct_io_on(&f.paths[1]);
    for order in ORDERS {
        let io = opening(&f, order);
        let log = io.log.clone();
        let mut e = engine_with(io, (64 << 10, 8192), |l| l.direct = true);
        queue_paths(&mut e, &f);
        // Where the filesystem refuses O_DIRECT (EINVAL), the file is opened here without.
        assert_exact(&read_all(&mut e), &f.data);
        let reads_direct = e.stats().reads_direct;
        assert_eq!(reads_direct > 0, direct, "{order:?}: {reads_direct}");
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert!(log.opens.iter().all(|o| o.direct), "{order:?}");
        assert_eq!(log.opens.len(), f.paths.len(), "{order:?}");
    }
}

/// A source like [`opening`] whose first opens of the given files fail with these errnos.
fn opening_failing(f: &Files, order: (bool, bool), errors: &[(usize, i32)]) -> Scripted<'static> {
    let mut io = opening(f, order);
    for &(i, errno) in errors {
        io.open_errors
            .entry(f.paths[i].clone())
            .or_default()
            .push_back(errno);
    }
    io
}

#[test]
fn a_failed_open_fails_that_file_alone_naming_it() {
    let f = files(&OPEN_SIZES[..6]);
    for order in ORDERS {
        let io = opening_failing(&f, order, &[(1, libc::ENOENT), (3, libc::EACCES)]);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        let got = read_all(&mut e);
        for (i, (g, want)) in got.iter().zip(&f.data).enumerate() {
            let errno = match i {
                1 => libc::ENOENT,
                3 => libc::EACCES,
                _ => {
                    assert_eq!(g.as_ref().unwrap(), want, "{order:?} file {i}");
                    continue;
                }
            };
            let msg = g.as_ref().unwrap_err();
            let os = io::Error::from_raw_os_error(errno).to_string();
            let path = f.paths[i].to_string_lossy();
            assert!(
                msg.contains(&*path) && msg.contains(&os),
                "{order:?}: {msg}"
            );
        }
        assert_eq!(e.stats().files_failed, 2);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert!(log.sync_opens.is_empty(), "no retry of a missing file");
        assert_eq!(log.opens.len(), f.paths.len());
    }
}

#[test]
fn refused_flags_fall_back_to_an_open_here() {
    let f = files(&OPEN_SIZES);
    let refused = [
        (1, libc::EPERM),
        (2, libc::EINVAL),
        (5, libc::EPERM),
        (8, libc::EINVAL),
    ];
    for order in ORDERS {
        let io = opening_failing(&f, order, &refused);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert_eq!(e.stats().files_opened, f.paths.len() as u64);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let mut log = log.lock().unwrap();
        let want: Vec<_> = refused.iter().map(|&(i, _)| f.paths[i].clone()).collect();
        log.sync_opens.sort();
        assert_eq!(log.sync_opens, want, "{order:?}");
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
    }
}

#[test]
fn emfile_on_a_later_file_lowers_the_cap_and_opens_it_later() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        let io = opening_failing(&f, order, &[(2, libc::EMFILE)]);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        // Remembered only once the cap was lowered.
        assert!(
            e.stream.ahead.sched.opens().lowered(),
            "{order:?}: the cap was lowered"
        );
        // Opens went through again, so the cap came back as configured.
        assert_eq!(
            e.stream
                .ahead
                .sched
                .opens()
                .max_open(e.stream.ahead.sched.limits(), false),
            4,
            "{order:?}: the cap recovers"
        );
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert_eq!(log.opens_of(&f.paths[2]), 2, "{order:?}: opened again");
        assert!(log.sync_opens.is_empty(), "{order:?}");
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
    }
}

#[test]
fn emfile_on_the_current_file_closes_files_opened_ahead_and_retries() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        let io = opening_failing(&f, order, &[(0, libc::EMFILE)]);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        assert_eq!(log.sync_opens, [f.paths[0].clone()], "{order:?}");
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
        if order == (true, false) {
            // Files 1 to 3 opened before file 0's open failed: closed, and opened again.
            for p in &f.paths[1..4] {
                assert_eq!(log.opens_of(p), 2, "{p:?}");
            }
        }
    }
}

#[test]
fn moving_past_a_file_being_opened_loses_nothing() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        let io = opening(&f, order);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert!(
            e.stream
                .ahead
                .core
                .queue
                .front()
                .unwrap()
                .status()
                .is_opening(),
            "{order:?}"
        );
        assert!(e.move_to_next_file().unwrap());
        // File 1's open started when it was queued; moving on reaped it, unless the source
        // completes only when the engine waits.
        let lazy = order.1;
        assert_eq!(
            e.stream
                .ahead
                .core
                .queue
                .front()
                .unwrap()
                .status()
                .is_opening(),
            lazy,
            "{order:?}"
        );
        assert!(e.move_to_next_file().unwrap());
        assert_exact(&read_all(&mut e), &f.data[2..]);
        assert_pool_empty(&e);
        // Late opens of the files moved past were closed as they came.
        let pending = e.stream.ahead.sched.opens().in_flight();
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}, {pending} opens pending");
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0);
        let log = log.lock().unwrap();
        for p in &f.paths {
            assert_eq!(log.opens_of(p), 1, "{order:?}: {p:?}");
        }
        assert!(
            log.peak_descriptors <= 4,
            "{order:?}: {}",
            log.peak_descriptors
        );
    }
}

#[test]
fn dropping_with_opens_in_flight_leaks_nothing() {
    let f = files(&OPEN_SIZES);
    for order in ORDERS {
        for read_first in [false, true] {
            let mut e = engine(opening(&f, order), 64 << 10, 8192);
            queue_paths(&mut e, &f);
            if read_first {
                // File 0's bytes, or its end at once where it is empty (as it is here).
                let first = e.fill_buf().unwrap();
                assert!(f.data[0].starts_with(first), "{order:?}");
                assert_eq!(first.is_empty(), f.data[0].is_empty(), "{order:?}");
                assert!(e.move_to_next_file().unwrap());
                assert_eq!(e.fill_buf().unwrap()[0], f.data[1][0]);
            }
            assert!(
                e.stream.ahead.sched.opens().in_flight() > 0,
                "{order:?} {read_first}"
            );
            drop(e);
            assert_eq!(fds_under(&f.dir()), 0, "{order:?} {read_first}");
        }
    }
}

#[test]
fn moving_past_a_file_with_reads_in_flight_stays_within_the_cap() {
    let f = files(&[300_000, 10, 10]);
    let io = opening(&f, (false, true));
    let log = io.log.clone();
    let mut e = engine_with(io, (256 << 10, 16 << 10), |l| l.max_open = 2);
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(
        e.stream.ahead.core.io().in_flight() > 1,
        "file 0's read-ahead is in flight"
    );
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
    drop(e);
    let peak = log.lock().unwrap().peak_descriptors;
    assert!(
        peak <= 2,
        "{peak} descriptors held or being opened, max_open 2"
    );
}

#[test]
fn paths_the_source_opens_that_are_not_files_fail_alone() {
    let f = files(&[5000, 10]);
    let sub = f.dir().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let missing = f.dir().join("missing");
    for order in ORDERS {
        let mut e = engine(opening(&f, order), 64 << 10, 8192);
        for p in [&f.paths[0], &sub, &missing, &f.paths[1]] {
            e.push_range(Source::Path(p.as_path().into()), 0, u64::MAX, false)
                .unwrap();
        }
        let got = read_all(&mut e);
        assert_eq!(got[0].as_ref().unwrap(), &f.data[0]);
        let dir_err = got[1].as_ref().unwrap_err();
        assert!(
            dir_err.contains("sub") && dir_err.contains("directory"),
            "{dir_err}"
        );
        let missing_err = got[2].as_ref().unwrap_err();
        assert!(missing_err.contains("missing"), "{missing_err}");
        assert_eq!(got[3].as_ref().unwrap(), &f.data[1]);
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}");
    }
}

#[test]
fn passing_open_errors_are_retried() {
    let f = files(&OPEN_SIZES);
    // File 3 twice: a retried open may fail again.
    let errors = [
        (1, libc::EINTR),
        (2, libc::EAGAIN),
        (3, libc::EAGAIN),
        (3, libc::EINTR),
    ];
    for order in ORDERS {
        let io = opening_failing(&f, order, &errors);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert_eq!(e.stats().files_failed, 0, "{order:?}");
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}");
        let log = log.lock().unwrap();
        // Each file opened once, and once more for each passing error it got.
        for (i, p) in f.paths.iter().enumerate() {
            let want = 1 + errors.iter().filter(|&&(j, _)| j == i).count();
            assert_eq!(log.opens_of(p), want, "{order:?}: file {i}");
        }
        assert!(log.sync_opens.is_empty(), "{order:?}");
    }
}

#[test]
fn open_retries_are_bounded() {
    let f = files(&OPEN_SIZES[..4]);
    let errors = vec![(1, libc::EAGAIN); MAX_RETRIES as usize + 1];
    for order in ORDERS {
        let io = opening_failing(&f, order, &errors);
        let log = io.log.clone();
        let mut e = engine(io, 64 << 10, 8192);
        queue_paths(&mut e, &f);
        let got = read_all(&mut e);
        let msg = got[1].as_ref().unwrap_err();
        let os = io::Error::from_raw_os_error(libc::EAGAIN).to_string();
        assert!(
            msg.contains(&*f.paths[1].to_string_lossy()) && msg.contains(&os),
            "{msg}"
        );
        for i in [0, 2, 3] {
            assert_eq!(got[i].as_ref().unwrap(), &f.data[i], "{order:?}: file {i}");
        }
        drop(e);
        assert_eq!(fds_under(&f.dir()), 0, "{order:?}");
        let opens = log.lock().unwrap().opens_of(&f.paths[1]);
        assert_eq!(opens, MAX_RETRIES as usize + 1, "{order:?}");
    }
}

/// `peak_in_flight` counts reads: opens in flight beside them are not reads.
#[test]
fn the_peak_of_reads_in_flight_counts_no_opens() {
    let f = files(&[4096, 0, 0, 0, 0, 0, 0, 0]);
    let mut io = opening(&f, (false, true));
    io.watch = None;
    let mut e = engine(io, 64 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_eq!(e.stats().peak_in_flight, 1, "{:?}", e.stats());
}
