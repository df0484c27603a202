//! The parallel scan: every byte of every file once and in order, outcomes keyed by input
//! index, input order, bad files failing alone, closure errors; on both backends. How a scan
//! stops, what it counts and the descriptors it leaves: `scan_stops.rs`.

mod common;

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::scan_outcomes::*;
use common::*;
use proptest::prelude::*;
use readahead::{Entry, Outcome, Scan};

#[derive(Debug, Clone)]
struct Case {
    sizes: Vec<usize>,
    threads: usize,
    queue_ahead: usize,
    small_pool: bool,
    step: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let size = prop_oneof![
        0..=2usize,
        4094..=4098usize,
        0..=20_000usize,
        0..=200_000usize
    ];
    (
        prop::collection::vec(size, 0..24),
        1..=4usize,
        1..=8usize,
        any::<bool>(),
        prop_oneof![Just(usize::MAX), 1..=5000usize],
    )
        .prop_map(|(sizes, threads, queue_ahead, small_pool, step)| Case {
            sizes,
            threads,
            queue_ahead,
            small_pool,
            step,
        })
}

proptest! {
    #![proptest_config(proptest_config(16))]

    /// Every byte of every file exactly once and in order, against `std::fs::read`, whatever
    /// the threads, windows and pool.
    #[test]
    fn every_byte_of_every_file_once_and_in_order(case in case()) {
        let files = make_files(&case.sizes);
        let want = oracle_all(&files.paths);
        for &backend in backends_once() {
            let what = format!("{backend:?} {case:?}");
            let scan = Scan::new(&files.paths)
                .threads(case.threads)
                .queue_ahead(case.queue_ahead)
                .reader(builder(backend, case.small_pool));
            let (outcomes, summary) = collect(scan, |file| read_in_steps(file, case.step));
            let got = done_bytes(by_index(case.sizes.len(), outcomes), &what);
            assert_files_eq(&got, &want, &what);
            let bytes: usize = case.sizes.iter().sum();
            prop_assert_eq!(summary.progress.bytes, bytes as u64, "{}", what);
        }
    }
}

#[test]
fn outcomes_are_keyed_by_input_index_with_the_file_s_path_and_length() {
    let sizes = [10, 0, 5000, 70_000, 3, 4096, 1, 2];
    let files = make_files(&sizes);
    for &backend in backends_once() {
        let scan = Scan::new(&files.paths)
            .threads(3)
            .reader(builder(backend, false));
        let (outcomes, _) = collect(scan, |file| {
            let bytes = read_all(file)?;
            io::Result::Ok((
                file.index(),
                file.path().map(Path::to_path_buf),
                file.len(),
                bytes,
            ))
        });
        for (i, outcome) in by_index(files.paths.len(), outcomes)
            .into_iter()
            .enumerate()
        {
            let Outcome::Done((index, path, len, bytes)) = outcome else {
                panic!("{backend:?}: file #{i}: {outcome:?}")
            };
            assert_eq!(index, i, "{backend:?}");
            assert_eq!(
                path.as_deref(),
                Some(files.paths[i].as_path()),
                "{backend:?}"
            );
            assert_eq!(
                len,
                Some(sizes[i] as u64),
                "{backend:?}: the size, once read"
            );
            assert_bytes_eq(&bytes, &oracle(&files.paths[i], u64::MAX), &format!("#{i}"));
        }
    }
}

/// Each closure runs on a thread named `readahead-scan-N`, `N` below the thread count, as a
/// debugger or `top -H` shows it.
#[test]
fn the_threads_are_named_readahead_scan_n() {
    let files = make_files(&[100, 5000, 70_000, 3, 4096, 1, 2, 9000]);
    let threads = 3;
    let names: Vec<String> = (0..threads)
        .map(|i| format!("readahead-scan-{i}"))
        .collect();
    for &backend in backends_once() {
        let scan = Scan::new(&files.paths)
            .threads(threads)
            .reader(builder(backend, false));
        let (outcomes, _) = collect(scan, |file| {
            read_all(file)?;
            io::Result::Ok(std::thread::current().name().map(String::from))
        });
        for (i, outcome) in outcomes {
            let Outcome::Done(Some(name)) = outcome else {
                panic!("{backend:?}: file #{i}: {outcome:?}")
            };
            assert!(names.contains(&name), "{backend:?}: file #{i} on {name:?}");
        }
    }
}

/// Paths, borrowed and owned files, whole or a range from byte 0, mixed in one input.
#[test]
fn every_kind_of_entry_reads_its_bytes() {
    let files = make_files(&[3000, 70_000, 10, 200_000, 0, 9000]);
    let want = oracle_all(&files.paths);
    let borrowed = files.open_all();
    for &backend in backends_once() {
        let entries: Vec<Entry> = vec![
            Entry::path(&files.paths[0]),
            Entry::file(&borrowed[1]).range(..50_000),
            Entry::owned_file(File::open(&files.paths[2]).unwrap()),
            Entry::path(&files.paths[3]).range(..100_001),
            Entry::from(&borrowed[4]),
            Entry::from(File::open(&files.paths[5]).unwrap()).range(..1 << 40),
        ];
        let scan = Scan::new(entries).threads(2).reader(builder(backend, true));
        let (outcomes, _) = collect(scan, |file| {
            let bytes = read_all(file)?;
            io::Result::Ok((file.len(), bytes))
        });
        let outcomes = by_index(6, outcomes);
        let ends = [3000, 50_000, 10, 100_001, 0, 9000];
        // A range's length is cut at the file's size.
        let lens = ends.map(|end| Some(end as u64));
        for (i, outcome) in outcomes.into_iter().enumerate() {
            let Outcome::Done((len, bytes)) = outcome else {
                panic!("{backend:?}: entry #{i}: {outcome:?}")
            };
            assert_eq!(len, lens[i], "{backend:?}: entry #{i}");
            assert_bytes_eq(
                &bytes,
                &want[i][..ends[i]],
                &format!("{backend:?}: entry #{i}"),
            );
        }
    }
}

/// Ranges that start past byte 0: the bytes `start..start + len`, cut at the end of file,
/// with `file_offset` counting from the file's byte 0.
#[test]
fn ranges_past_byte_0_read_their_bytes() {
    let files = make_files(&[100_000, 100_000, 100_000, 5000]);
    let want = oracle_all(&files.paths);
    let borrowed = File::open(&files.paths[1]).unwrap();
    for &backend in backends_once() {
        let entries: Vec<Entry> = vec![
            Entry::path(&files.paths[0]).range(4096..14_096),
            Entry::file(&borrowed).range(12_345..62_345),
            Entry::owned_file(File::open(&files.paths[2]).unwrap()).range(99_000..104_000),
            Entry::path(&files.paths[3]).range(7000..7010),
        ];
        let scan = Scan::new(entries).threads(2).reader(builder(backend, true));
        let (outcomes, _) = collect(scan, |file| {
            let first = file.file_offset();
            io::Result::Ok((first, read_all(file)?))
        });
        let ranges = [
            (4096, 14_096),
            (12_345, 62_345),
            (99_000, 100_000),
            (5000, 5000),
        ];
        let starts = [4096, 12_345, 99_000, 7000];
        for (i, outcome) in by_index(4, outcomes).into_iter().enumerate() {
            let Outcome::Done((first, bytes)) = outcome else {
                panic!("{backend:?}: entry #{i}: {outcome:?}")
            };
            assert_eq!(first, starts[i], "{backend:?}: entry #{i}");
            let (start, end) = ranges[i];
            assert_bytes_eq(&bytes, &want[i][start..end], &format!("{backend:?}: #{i}"));
        }
    }
}

/// The ordered iterator yields every file in input order, and no thread starts a file more
/// than the window past the last outcome handed out, however slowly they are taken.
#[test]
fn ordered_outcomes_come_in_input_order_within_the_window() {
    let sizes: Vec<usize> = (0..120)
        .map(|i| if i % 17 == 3 { 300_000 } else { i * 37 })
        .collect();
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    let window = 5;
    for &backend in backends_once() {
        let furthest = AtomicUsize::new(0);
        let scan = Scan::new(&files.paths)
            .threads(3)
            .queue_ahead(4)
            .window(window)
            .reader(builder(backend, false));
        let (got, summary) = scan
            .map(|file| {
                furthest.fetch_max(file.index(), SeqCst);
                read_all(file)
            })
            .ordered(|outcomes| {
                let mut got = Vec::new();
                for (index, outcome) in outcomes {
                    assert_eq!(index, got.len(), "{backend:?}: input order");
                    let started = furthest.load(SeqCst);
                    assert!(
                        started <= index + window,
                        "{backend:?}: file {started} started while {index} was handed out"
                    );
                    got.push(outcome.into_result().unwrap().unwrap());
                    // A slow consumer: without the window the threads would run far ahead.
                    std::thread::sleep(Duration::from_millis(1));
                }
                got
            })
            .unwrap();
        assert_files_eq(&got, &want, &format!("{backend:?}"));
        assert_eq!(summary.progress.files, sizes.len() as u64);
    }
}

/// One big file among many tiny ones: all read, whatever thread gets the big one.
#[test]
fn one_big_file_among_many_tiny_ones_is_all_read() {
    let mut sizes = vec![100usize; 400];
    sizes[7] = 8 << 20;
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    for &backend in backends_once() {
        for threads in [2, 4] {
            let scan = Scan::new(&files.paths)
                .threads(threads)
                .reader(builder(backend, false));
            let (outcomes, summary) = collect(scan, read_all);
            let what = format!("{backend:?} {threads} threads");
            assert_files_eq(&done_bytes(by_index(400, outcomes), &what), &want, &what);
            assert_eq!(summary.progress.bytes, (8 << 20) + 399 * 100, "{what}");
        }
    }
}

/// Cached files of many sizes with the default window, so that the windows of threads
/// whose readers find the page cache warm are cut as the input ends: every byte once, by
/// index and in input order.
#[test]
fn windows_cut_as_a_cached_input_ends_lose_no_file() {
    let sizes: Vec<usize> = (0..700).map(|i| (i * 7919) % 90_000).collect();
    let files = make_files(&sizes);
    let want = oracle_all(&files.paths);
    for &backend in backends_once() {
        for threads in [2, 3] {
            let what = format!("{backend:?} {threads} threads");
            let scan = || {
                Scan::new(&files.paths)
                    .threads(threads)
                    .reader(builder(backend, false))
            };
            let (outcomes, _) = collect(scan(), read_all);
            assert_files_eq(&done_bytes(by_index(700, outcomes), &what), &want, &what);
            let (got, _) = scan()
                .map(read_all)
                .ordered(|outcomes| {
                    let mut got = Vec::new();
                    for (index, outcome) in outcomes {
                        assert_eq!(index, got.len(), "{what}: input order");
                        got.push(outcome.into_result().unwrap().unwrap());
                    }
                    got
                })
                .unwrap();
            assert_files_eq(&got, &want, &what);
        }
    }
}

#[test]
fn no_files_and_more_threads_than_files() {
    for &backend in backends_once() {
        let none: Vec<PathBuf> = Vec::new();
        let (outcomes, summary) = collect(Scan::new(none).threads(4), read_all);
        assert!(outcomes.is_empty());
        assert_eq!(summary.progress, Default::default());
        assert_eq!(summary.backend, None, "no file, no reader");

        let files = make_files(&[5, 6]);
        let scan = Scan::new(&files.paths)
            .threads(8)
            .reader(builder(backend, false));
        let (outcomes, summary) = collect(scan, read_all);
        let got = done_bytes(by_index(2, outcomes), &format!("{backend:?}"));
        assert_files_eq(&got, &oracle_all(&files.paths), &format!("{backend:?}"));
        assert_eq!(summary.backend, Some(backend));
    }
}

/// The input is taken a few entries at a time: an endless one scans until cancelled.
#[test]
fn the_input_is_taken_lazily() {
    let files = make_files(&[10, 20, 30]);
    let scan = Scan::new(files.paths.iter().cycle())
        .threads(2)
        .queue_ahead(4);
    let handle = scan.handle();
    let (outcomes, summary) = collect(scan, |file| {
        if file.index() == 100 {
            handle.cancel();
        }
        read_all(file)
    });
    assert!(summary.cancelled);
    assert!(outcomes.len() > 100, "{} outcomes", outcomes.len());
    assert!(
        outcomes.len() < 200,
        "{} entries taken after a cancel",
        outcomes.len()
    );
}

/// A missing path, a directory, a write-only descriptor and a path without read permission
/// each fail alone, their errors naming the file; the files around them read.
#[test]
fn bad_files_fail_alone_naming_the_path() {
    use std::os::unix::fs::PermissionsExt;
    let files = make_files(&[1000, 2000, 3000, 4000]);
    let want = oracle_all(&files.paths);
    let dir = files.dir.path();
    let missing = dir.join("missing");
    let subdir = dir.join("a directory");
    std::fs::create_dir(&subdir).unwrap();
    let write_only = make_file(dir, "write only", 100);
    let locked = make_file(dir, "locked", 100);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for &backend in backends_once() {
        let entries = vec![
            Entry::path(&files.paths[0]),
            Entry::path(&missing),
            Entry::path(&files.paths[1]),
            Entry::path(&subdir),
            Entry::path(&files.paths[2]),
            Entry::owned_file(File::options().write(true).open(&write_only).unwrap()),
            Entry::path(&locked),
            Entry::path(&files.paths[3]),
        ];
        let scan = Scan::new(entries)
            .threads(2)
            .reader(builder(backend, false));
        let (outcomes, summary) = collect(scan, read_all);
        let outcomes = by_index(8, outcomes);
        for (i, good) in [(0, 0), (2, 1), (4, 2), (7, 3)] {
            let Outcome::Done(bytes) = &outcomes[i] else {
                panic!("{backend:?}: entry #{i}: {:?}", outcomes[i])
            };
            assert_bytes_eq(bytes, &want[good], &format!("{backend:?}: entry #{i}"));
        }
        for (i, bad) in [(1, &missing), (3, &subdir), (5, &write_only)] {
            let Outcome::Failed(e) = &outcomes[i] else {
                panic!("{backend:?}: entry #{i}: {:?}", outcomes[i])
            };
            assert_names(e, &bad.display().to_string());
        }
        let locked_failed = !root;
        if locked_failed {
            let Outcome::Failed(e) = &outcomes[6] else {
                panic!("{:?}", outcomes[6])
            };
            assert_names(e, &locked.display().to_string());
        } else {
            eprintln!("skipping permissions: root reads every file");
        }
        assert_eq!(
            summary.progress.failed,
            3 + locked_failed as u64,
            "{backend:?}"
        );
        assert_eq!(summary.progress.files, 8, "{backend:?}");
    }
}

#[derive(Debug)]
enum ParseError {
    Io(io::Error),
    Odd(usize),
}

impl From<io::Error> for ParseError {
    fn from(e: io::Error) -> Self {
        ParseError::Io(e)
    }
}

/// An error the closure returns is that file's outcome; the scan goes on.
#[test]
fn a_closure_s_error_is_its_file_s_outcome() {
    let files = make_files(&[1, 2, 3, 4, 5, 6, 7]);
    for &backend in backends_once() {
        let scan = Scan::new(&files.paths)
            .threads(2)
            .reader(builder(backend, false));
        let (outcomes, summary) = collect(scan, |file| {
            let len = read_all(file)?.len();
            if len % 2 == 1 {
                return Err(ParseError::Odd(len));
            }
            Ok(len)
        });
        for (i, outcome) in by_index(7, outcomes).into_iter().enumerate() {
            match outcome {
                Outcome::Done(len) => assert_eq!(len, i + 1),
                Outcome::Failed(ParseError::Odd(len)) => assert_eq!(len, i + 1),
                Outcome::Failed(ParseError::Io(e)) => panic!("{backend:?}: file #{i}: {e}"),
                other => panic!("{backend:?}: file #{i}: {other:?}"),
            }
        }
        assert_eq!(summary.progress.failed, 4, "{backend:?}");
        assert_eq!(summary.progress.files, 7, "{backend:?}");
    }
}

/// A closure that reads nothing still gets the next file's bytes right: the reader moves on
/// past what it left.
#[test]
fn a_closure_that_leaves_a_file_early_does_not_shift_the_next() {
    let files = make_files(&[50_000, 70_000, 1000, 90_000]);
    let want = oracle_all(&files.paths);
    let stopped_early = AtomicBool::new(false);
    for &backend in backends_once() {
        let scan = Scan::new(&files.paths)
            .threads(1)
            .reader(builder(backend, true));
        let (outcomes, _) = collect(scan, |file| {
            if file.index() % 2 == 0 {
                let mut head = vec![0; 100];
                file.read_exact(&mut head)?;
                stopped_early.store(true, SeqCst);
                return Ok(head);
            }
            read_all(file)
        });
        for (i, outcome) in by_index(4, outcomes).into_iter().enumerate() {
            let bytes = outcome.into_result().unwrap().unwrap();
            let end = if i % 2 == 0 { 100 } else { want[i].len() };
            assert_bytes_eq(&bytes, &want[i][..end], &format!("{backend:?}: #{i}"));
        }
    }
    assert!(stopped_early.load(SeqCst));
}

/// A few large files by path, equal work each, on 2 threads: both threads read a fair share.
/// No thread takes a long run of paths before their sizes are known: its first take is one
/// entry, each next twice as many, and none once the sizes it knows fill half its pool.
#[test]
fn a_few_large_paths_are_shared_between_the_threads() {
    let files = make_files(&[1 << 20; 16]);
    for &backend in backends_once() {
        let scan = Scan::new(&files.paths)
            .threads(2)
            .reader(builder(backend, false).buffer_size(4 << 20));
        let (outcomes, _) = collect(scan, |file| {
            let bytes = read_all(file)?;
            std::thread::sleep(std::time::Duration::from_millis(20));
            io::Result::Ok((std::thread::current().id(), bytes.len()))
        });
        let mut per_thread = std::collections::HashMap::new();
        for (i, outcome) in outcomes {
            let Outcome::Done((thread, len)) = outcome else {
                panic!("{backend:?}: #{i}: {outcome:?}")
            };
            assert_eq!(len, 1 << 20);
            *per_thread.entry(thread).or_insert(0) += 1;
        }
        let counts: Vec<usize> = per_thread.into_values().collect();
        assert_eq!(
            counts.len(),
            2,
            "{backend:?}: both threads read: {counts:?}"
        );
        assert!(counts.iter().all(|&n| n >= 4), "{backend:?}: {counts:?}");
    }
}
