//! The parallel scan: every byte of every file once and in order, outcomes keyed by input
//! index, input order, bad files failing alone, closure errors, panics, cancelling, progress,
//! descriptors, and more paths than `ulimit -n`; on both backends.

mod common;

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, Read};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use readahead::{Backend, Entry, Outcome, ReaderBuilder, Scan, ScanFile, ScanSummary};

/// Outcomes with their input index, in the order they came.
type Outcomes<T, E> = Vec<(usize, Outcome<T, E>)>;

/// The outcomes of a finished scan, by input index; asserts each index came once.
fn by_index<T, E>(n: usize, outcomes: Outcomes<T, E>) -> Vec<Outcome<T, E>> {
    let mut slots: Vec<Option<Outcome<T, E>>> = (0..n).map(|_| None).collect();
    for (index, outcome) in outcomes {
        assert!(index < n, "index {index} of {n} entries");
        assert!(slots[index].is_none(), "index {index} came twice");
        slots[index] = Some(outcome);
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("no outcome for index {i}")))
        .collect()
}

/// Runs `scan` with `f`, collecting the outcomes as they come.
fn collect<'a, I, T, E>(
    scan: Scan<'a, I>,
    f: impl Fn(&mut ScanFile<'_, 'a>) -> Result<T, E> + Sync,
) -> (Outcomes<T, E>, ScanSummary)
where
    I: Iterator + Send,
    I::Item: Into<Entry<'a>>,
    T: Send,
    E: From<io::Error> + Send,
{
    let mut outcomes = Vec::new();
    let summary = scan
        .map(f)
        .for_each(|index, outcome| outcomes.push((index, outcome)))
        .expect("the scan runs");
    (outcomes, summary)
}

/// Reads the rest of the file with `fill_buf`/`consume`, at most `step` bytes at a time.
fn read_in_steps(file: &mut ScanFile, step: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let bytes = file.fill_buf()?;
        if bytes.is_empty() {
            return Ok(out);
        }
        let n = bytes.len().min(step);
        out.extend_from_slice(&bytes[..n]);
        file.consume(n);
    }
}

fn read_all(file: &mut ScanFile) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    file.read_to_end(&mut out)?;
    Ok(out)
}

/// The bytes every file gave, by index, each unwrapped naming the file.
fn done_bytes(outcomes: Vec<Outcome<Vec<u8>, io::Error>>, what: &str) -> Vec<Vec<u8>> {
    outcomes
        .into_iter()
        .enumerate()
        .map(|(i, o)| match o {
            Outcome::Done(bytes) => bytes,
            Outcome::Failed(e) => panic!("{what}: file #{i} failed: {e}"),
            Outcome::NotRun => panic!("{what}: file #{i} did not run"),
        })
        .collect()
}

fn builder(backend: Backend, small_pool: bool) -> ReaderBuilder {
    let b = ReaderBuilder::new().backend(backend);
    if small_pool {
        common::small_pool(b)
    } else {
        b
    }
}

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

/// Sets its flag when dropped: in a closure that panics, once the panic has left it.
struct SetOnDrop<'f>(&'f AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// Waits until `flag` is set, then a little longer: long enough for a thread to set the
/// scan's stop flag after a panic left its closure (unwinding a few frames).
fn wait_for(flag: &AtomicBool) {
    while !flag.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
}

/// A panic in a closure stops the scan: the other thread finishes its file and starts no
/// other; the panic comes out of the call, with its own payload, once no closure runs.
#[test]
fn a_panic_in_a_closure_is_raised_again_after_every_thread_stopped() {
    let files = make_files(&[10; 500]);
    for &backend in backends_once() {
        let (started, running) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let (other_inside, unwound) = (AtomicBool::new(false), AtomicBool::new(false));
        let scan = Scan::new(&files.paths)
            .threads(2)
            .queue_ahead(1)
            .reader(builder(backend, false));
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            collect(scan, |file| {
                started.fetch_add(1, SeqCst);
                running.fetch_add(1, SeqCst);
                if file.index() == 0 {
                    let _unwound = SetOnDrop(&unwound);
                    while !other_inside.load(SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    panic!("file 0 is cursed");
                }
                other_inside.store(true, SeqCst);
                wait_for(&unwound);
                let bytes = read_all(file);
                running.fetch_sub(1, SeqCst);
                bytes
            })
        }));
        let payload = result.expect_err("the panic comes out of the scan");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"file 0 is cursed"));
        assert_eq!(
            running.load(SeqCst),
            1,
            "{backend:?}: only the panicked closure"
        );
        assert_eq!(
            started.load(SeqCst),
            2,
            "{backend:?}: file 0, and one on the other thread"
        );
    }
}

/// A panic on the caller's thread, in the sink, stops the threads too.
#[test]
fn a_panic_in_the_sink_stops_the_threads_and_is_raised_again() {
    let files = make_files(&[10; 300]);
    let started = AtomicUsize::new(0);
    let scan = Scan::new(&files.paths).threads(1).queue_ahead(1);
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        scan.map(|file| {
            started.fetch_add(1, SeqCst);
            // Slow enough that the sink gets the first batch long before the last file.
            std::thread::sleep(Duration::from_millis(1));
            read_all(file)
        })
        .for_each(|index, _| {
            assert_ne!(index, 0, "the sink panics");
        })
    }));
    let payload = result.expect_err("the panic comes out of the scan");
    assert!(payload
        .downcast_ref::<String>()
        .unwrap()
        .contains("the sink panics"));
    // A thread sends outcomes a batch (of 32) at a time: the sink sees file 0 with the
    // first batch at the latest, and the thread stops at its next file, far from the end.
    assert!(
        started.load(SeqCst) <= 100,
        "{} files started",
        started.load(SeqCst)
    );
}

/// A panic in the consumer of ordered outcomes wakes the threads waiting for the window to
/// move, and comes out of the call.
#[test]
fn a_panic_in_the_ordered_consumer_stops_the_threads_at_the_window() {
    let result = within(
        Duration::from_secs(60),
        "a scan whose consumer panicked",
        || {
            let files = make_files(&[10; 50]);
            panic::catch_unwind(AssertUnwindSafe(|| {
                Scan::new(&files.paths)
                    .threads(2)
                    .queue_ahead(1)
                    .window(1)
                    .map(read_all)
                    .ordered(|mut outcomes| {
                        outcomes.next();
                        panic!("the consumer panics");
                    })
            }))
            .is_err()
        },
    );
    assert!(result, "the panic comes out of the scan");
}

/// Cancelling: files started finish, files taken but not started come out as not run, each
/// index once, and the counters agree with the outcomes.
#[test]
fn cancelling_reports_the_files_not_started_as_not_run() {
    let files = make_files(&[100; 50]);
    for &backend in backends_once() {
        for threads in [1, 3] {
            let scan = Scan::new(&files.paths)
                .threads(threads)
                .queue_ahead(8)
                .reader(builder(backend, false));
            let handle = scan.handle();
            let (outcomes, summary) = collect(scan, |file| {
                match file.index() {
                    2 => handle.cancel(),
                    // File 2 is the first file of the thread that takes it, so the others
                    // can wait for its cancel without waiting on each other: else they
                    // could finish the input before it lands, and nothing would be left.
                    3.. => wait_until(|| handle.is_cancelled()),
                    _ => {}
                }
                read_all(file)
            });
            let what = format!("{backend:?} {threads} threads");
            let indexes: HashSet<usize> = outcomes.iter().map(|(i, _)| *i).collect();
            assert_eq!(indexes.len(), outcomes.len(), "{what}: each index once");
            let not_run = outcomes.iter().filter(|(_, o)| o.is_not_run()).count();
            let done = outcomes.len() - not_run;
            assert!(done < 50, "{what}");
            for (index, outcome) in &outcomes {
                if let Outcome::Done(bytes) = outcome {
                    assert_eq!(bytes.len(), 100, "{what}: #{index}");
                }
            }
            assert!(summary.cancelled, "{what}");
            assert_eq!(summary.progress.not_run, not_run as u64, "{what}");
            assert_eq!(summary.progress.files, done as u64, "{what}");
            if threads == 1 {
                // The one thread stops right after the file that cancelled, with the files it
                // had taken past it (its batches: 1, then 2, then 4) not started.
                assert_eq!(done, 3, "{what}");
                assert_eq!(not_run, 4, "{what}: files were queued and not started");
                // What it took: a prefix of the input, of no more than the two files before
                // and its window of 8 (the file that cancelled included).
                let n = indexes.len();
                assert_eq!(indexes, (0..n).collect(), "{what}: a prefix");
                assert!(n <= 2 + 8, "{what}: its window, and no more: {n}");
            }
        }
    }
}

/// The counters, read while the scan runs, never go back, and match the outcomes at the end.
#[test]
fn progress_is_readable_while_running_and_matches_at_the_end() {
    let mut sizes: Vec<usize> = (0..60).map(|i| i * 1000).collect();
    sizes[10] = 3 << 20;
    let files = make_files(&sizes);
    let mut paths = files.paths.clone();
    paths.insert(5, files.dir.path().join("missing"));
    for &backend in backends_once() {
        let scan = Scan::new(&paths).threads(2).reader(builder(backend, false));
        let handle = scan.handle();
        let seen = Mutex::new(Vec::new());
        let (outcomes, summary) = collect(scan, |file| {
            seen.lock().unwrap().push(handle.progress());
            read_in_steps(file, 100_000)
        });
        let seen = seen.into_inner().unwrap();
        for pair in seen.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(a.files <= b.files && a.bytes <= b.bytes && a.failed <= b.failed);
        }
        let p = summary.progress;
        assert_eq!(p, handle.progress(), "{backend:?}");
        assert_eq!(p.files, outcomes.len() as u64, "{backend:?}");
        assert_eq!(p.failed, 1, "{backend:?}");
        assert_eq!(p.not_run, 0, "{backend:?}");
        assert_eq!(p.bytes, sizes.iter().sum::<usize>() as u64, "{backend:?}");
        assert_eq!(summary.stats.files_failed, 1, "{backend:?}");
    }
}

/// Skipped bytes count as done; a closure that leaves early counts what it consumed.
#[test]
fn bytes_count_what_the_closures_consumed_or_skipped() {
    let files = make_files(&[10_000, 10_000, 10_000]);
    let (outcomes, summary) = collect(Scan::new(&files.paths).threads(1), |file| {
        match file.index() {
            0 => file.skip(4000).map(drop),
            1 => file.read_exact(&mut [0; 300]),
            _ => Ok(()),
        }
    });
    assert_eq!(outcomes.len(), 3);
    assert_eq!(summary.progress.bytes, 4300);
}

/// Set, in the child process of [`no_descriptor_is_left_open`], to anything.
const FD_CHILD_ENV: &str = "READAHEAD_TEST_SCAN_FD_CHILD";

/// Counts the process's descriptors around scans that read, fail, panic and are cancelled;
/// alone in a child process, so that no other test opens files meanwhile.
#[test]
fn no_descriptor_is_left_open() {
    run_in_child("child_leaves_no_descriptor_open", FD_CHILD_ENV, "1");
}

#[test]
fn child_leaves_no_descriptor_open() {
    if child_value(FD_CHILD_ENV).is_none() {
        return;
    }
    let files = make_files(&[100; 40]);
    let mut paths = files.paths.clone();
    paths.push(files.dir.path().join("missing"));
    for &backend in backends_once() {
        // Warm-up: whatever the first ring or thread of the process sets up once.
        let (_, _) = collect(Scan::new(&paths[..2]).threads(2), read_all);
        let before = open_fds();
        let owned = paths
            .iter()
            .filter_map(|p| File::open(p).ok())
            .map(Entry::from);
        let b = builder(backend, false);
        collect(Scan::new(&paths).threads(3).reader(b.clone()), read_all);
        collect(Scan::new(owned).threads(2).reader(b.clone()), read_all);
        let scan = Scan::new(&paths).threads(2).reader(b.clone());
        let handle = scan.handle();
        collect(scan, |file| {
            handle.cancel();
            read_all(file)
        });
        let _ = panic::catch_unwind(AssertUnwindSafe(|| {
            collect(Scan::new(&paths).threads(2).reader(b.clone()), |file| {
                assert_ne!(file.index(), 7, "a panic");
                read_all(file)
            })
        }));
        assert_eq!(open_fds(), before, "{backend:?}: descriptors left open");
    }
    println!("{CHILD_DONE}");
}

/// Set, to the `RLIMIT_NOFILE` to run under, in the child process of
/// [`more_paths_than_the_descriptor_limit_are_all_read`].
const NOFILE_CHILD_ENV: &str = "READAHEAD_TEST_SCAN_NOFILE_CHILD";

/// 3000 paths on 2 threads under `ulimit -n 64`, lowered in a child process only.
#[test]
fn more_paths_than_the_descriptor_limit_are_all_read() {
    run_in_child(
        "child_reads_more_paths_than_its_limit",
        NOFILE_CHILD_ENV,
        "64",
    );
}

#[test]
fn child_reads_more_paths_than_its_limit() {
    let Some(value) = child_value(NOFILE_CHILD_ENV) else {
        return;
    };
    limit_descriptors_to(&value);
    let dir = tempdir_for_many_files();
    let paths: Vec<PathBuf> = (0..3000)
        .map(|i| make_file(dir.path(), &format!("{i:06}"), i * 7 % 200))
        .collect();
    let want = oracle_all(&paths);
    for &backend in backends_once() {
        let scan = Scan::new(&paths).threads(2).reader(builder(backend, false));
        let (outcomes, summary) = collect(scan, read_all);
        let what = format!("{backend:?} under ulimit -n {value}");
        assert_files_eq(&done_bytes(by_index(3000, outcomes), &what), &want, &what);
        assert_eq!(summary.progress.failed, 0, "{what}");
    }
    println!("{CHILD_DONE}");
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

/// Polls `done` every millisecond until it holds; fails the test after 10 seconds.
fn wait_until(done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "waited 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}
