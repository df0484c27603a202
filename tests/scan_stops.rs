//! The parallel scan stopping: panics in a closure, the sink or the ordered consumer, and
//! cancelling; its progress counters, the descriptors it leaves, and more paths than `ulimit -n`.

mod common;

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use common::scan_outcomes::*;
use common::*;
use readahead::{Entry, Outcome, Scan};

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
        // Once the warm-up's files are closed: a close on a helper thread may still be due.
        let before = open_fds_settled();
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
        let after = settled(before, open_fds);
        assert_eq!(after, before, "{backend:?}: descriptors left open");
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
