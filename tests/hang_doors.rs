//! Doors through which a hung mount could still hold a scan, each shut: the scan returns, on
//! both backends, every healthy file read whole and every hung one failed alone with
//! `TimedOut`, naming itself.
//!
//! - A close can hang too: FUSE sends a `FLUSH` on every `close(2)` of a file opened for
//!   reading, and waits for its answer. A file whose close never answers is read whole (or
//!   timed out), and the scan goes on; a file handed in `O_NONBLOCK` is read whole, the
//!   close of the reader's duplicate of it held by no open or read.
//! - A directory is not learned local from a file opened through it that lies elsewhere: a
//!   symbolic link in a FUSE directory to a local file opens a local file, but the
//!   directory's other files, whose opens hang, are still FUSE's.
//! - A FUSE directory bind-mounted into a local directory is not one of its files: its
//!   files' opens hang, and must not be made on the reader's thread, though the reader opens
//!   the local directories beside it in a handle of the directory above them. Nor is a FUSE
//!   file bind-mounted over the name of one of them.
//! - A directory known local in one scan, swapped for a symbolic link to a FUSE directory
//!   before the next, is not taken for local by that next scan in the same process.
//! - A reader rebound again and again leaks neither descriptors nor threads (in a child
//!   process of its own, where no other test opens files meanwhile).
//!
//! The hangs come from the FUSE test filesystem (`common::fusefs`), which holds the replies.
//! The tests of directories let the kernel cache the mount's names, as most FUSE filesystems
//! do, and look them up first: else the kernel itself would refuse to open a file of it from
//! its caches, and a reader that took the directory for local would still never hang there.
//! The bound on each scan checks that it returns at all, never how fast. Skips, saying why,
//! where FUSE (or, for the ring, io_uring, or a bind mount) is not available. Each test ends
//! its mount's connection at the end, so that the threads left in the kernel go. Linux only:
//! the filesystem is served through `fuser`.
#![cfg(target_os = "linux")]

mod common;

use std::io::{self, BufRead};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use common::fusefs::{FaultMount, Faults, FileSpec, Serve};
use common::scan_outcomes::{by_index, collect, read_all};
use common::*;
use readahead::{Backend, Outcome, ReaderBuilder, Scan, SequentialFileReader};

/// The readers' drain timeout: how long a call may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Far beyond what a scan should take: a check that it returns at all, not a timing.
const HANG: Duration = Duration::from_secs(60);
/// Files in a mount, unless a test says otherwise.
const FILES: usize = 30;
/// The files that hang, each behind healthy ones.
const HUNG: [usize; 6] = [2, 7, 12, 17, 22, 27];

/// What a file of a scan must come out as.
#[derive(Debug)]
enum Want {
    /// Read whole: these bytes.
    Bytes(Vec<u8>),
    /// Failed with `TimedOut`, naming its path.
    TimedOut,
    /// Either: a file whose only hang is its close.
    BytesOrTimedOut(Vec<u8>),
}

/// How long the mounts of the tests of directories let the kernel cache names and
/// attributes: longer than any test. Names cached (see [`warm`]), the kernel opens a file
/// of the mount from its caches (`RESOLVE_CACHED`) as one of a local disk, and only the open
/// itself reaches the filesystem, and hangs: uncached, the kernel would refuse such an open
/// before it could hang, and a door left open would go unseen.
const CACHED: Duration = Duration::from_secs(3600);

/// A mount of `n` files of [`fusefs::hang_test_size`], file `i` with `faults(i)`, its names
/// and attributes cached for `ttl`; `None` where FUSE is not available here (said on stderr).
fn mount(n: usize, ttl: Duration, faults: impl Fn(usize) -> Faults) -> Option<FaultMount> {
    let specs = (0..n).map(|i| FileSpec::new(fusefs::hang_test_size(i)).with(faults(i)));
    mount_specs(specs.collect(), ttl)
}

/// A mount of these entries, cached for `ttl`; `None` where FUSE is not available here
/// (said on stderr).
fn mount_specs(files: Vec<FileSpec>, ttl: Duration) -> Option<FaultMount> {
    FaultMount::with_ttl(files, Serve::PageCache, ttl)
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// Looks every path up (a `stat`, which no fault here holds), so that the kernel has their
/// names cached in a mount that lets it ([`CACHED`]).
fn warm(paths: &[PathBuf]) {
    for p in paths {
        std::fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
    }
}

/// Hung opens for the files in [`HUNG`].
fn hung_opens(i: usize) -> Faults {
    Faults {
        hang_open: HUNG.contains(&i),
        ..Faults::default()
    }
}

/// The readers of every scan here.
fn builder(backend: Backend) -> ReaderBuilder {
    ReaderBuilder::new()
        .backend(backend)
        .buffer_size(2 << 20)
        .read_size(64 << 10)
        .drain_timeout(TIMEOUT)
}

/// Scans `paths` on 2 threads with `backend`, each file read whole, within [`HANG`]: each
/// file's outcome, by index. Says on stderr how long it took.
fn scan(paths: Vec<PathBuf>, backend: Backend, what: &str) -> Vec<Outcome<Vec<u8>, io::Error>> {
    let n = paths.len();
    let reader = builder(backend);
    let (outcomes, took) = within(HANG, what, move || {
        let start = Instant::now();
        let (outcomes, summary) = collect(Scan::new(paths).threads(2).reader(reader), read_all);
        assert_eq!(summary.progress.files, n as u64);
        (outcomes, start.elapsed())
    });
    eprintln!("{backend:?}: {what}: returned after {took:?}");
    by_index(n, outcomes)
}

/// Every outcome is as `wants` says: checked against `paths`, by index.
#[track_caller]
fn check(
    outcomes: Vec<Outcome<Vec<u8>, io::Error>>,
    paths: &[PathBuf],
    wants: &[Want],
    what: &str,
) {
    assert_eq!(outcomes.len(), wants.len(), "{what}: one outcome a file");
    for (i, (outcome, want)) in outcomes.into_iter().zip(wants).enumerate() {
        let what = format!("{what}: file {i} ({})", paths[i].display());
        match (outcome, want) {
            (Outcome::Done(got), Want::Bytes(want) | Want::BytesOrTimedOut(want)) => {
                assert_bytes_eq(&got, want, &what)
            }
            (Outcome::Failed(e), Want::TimedOut | Want::BytesOrTimedOut(_)) => {
                assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{what}: {e}");
                assert_names(&e, &paths[i].display().to_string());
            }
            (other, want) => panic!("{what}: {other:?}, want {want:?}"),
        }
    }
}

/// What the files of `m` in `range` must come out as: whole, but for `hung` ones.
fn want_mount(m: &FaultMount, range: std::ops::Range<usize>, hung: &[usize]) -> Vec<Want> {
    range
        .map(|i| match hung.contains(&i) {
            true => Want::TimedOut,
            false => Want::Bytes(m.expected(i)),
        })
        .collect()
}

/// Ends `m`, whose held calls may keep threads in the kernel, for good.
fn end(m: FaultMount) {
    assert!(
        m.abandon(),
        "the connection must end, or the threads never exit"
    );
}

#[test]
fn files_whose_close_never_answers_do_not_hold_the_scan() {
    for backend in backends_once().to_vec() {
        let Some(m) = mount(FILES, Duration::ZERO, |i| Faults {
            hang_flush: HUNG.contains(&i),
            ..Faults::default()
        }) else {
            return;
        };
        let wants: Vec<Want> = (0..FILES)
            .map(|i| match HUNG.contains(&i) {
                true => Want::BytesOrTimedOut(m.expected(i)),
                false => Want::Bytes(m.expected(i)),
            })
            .collect();
        let outcomes = scan(m.paths(), backend, "six closes that never answer");
        check(outcomes, &m.paths(), &wants, &format!("{backend:?}"));
        // The closes were asked (here, or on a thread the reader left them to).
        let deadline = Instant::now() + HANG;
        while m.stats().hung_calls == 0 {
            assert!(Instant::now() < deadline, "{backend:?}: no close hung");
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("{backend:?}: {:?}", m.stats());
        end(m);
    }
}

/// A file handed in with `O_NONBLOCK` is read through a descriptor the reader opens again
/// without it; the reader's duplicate of the caller's descriptor is closed then, and that
/// close, which never answers here, must hold neither the open nor the read.
#[test]
fn a_handed_in_nonblocking_file_whose_close_never_answers_is_read_whole() {
    use std::os::unix::fs::OpenOptionsExt;
    for backend in backends_once().to_vec() {
        let spec = FileSpec::new(100_000).with(Faults {
            hang_flush: true,
            ..Faults::default()
        });
        let Some(m) = mount_specs(vec![spec], Duration::ZERO) else {
            return;
        };
        let (path, want) = (m.paths()[0].clone(), m.expected(0));
        let what = format!("{backend:?}: a nonblocking file whose close hangs");
        let got = within(HANG, &what, move || {
            let file = std::fs::File::options()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .unwrap();
            // The caller's own close would hang too: its descriptor is left open.
            let file: &'static std::fs::File = Box::leak(Box::new(file));
            let mut r = builder(backend).build().unwrap();
            r.push(file).unwrap();
            read_all_files(&mut r).pop().unwrap()
        });
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_bytes_eq(&got, &want, &what);
        end(m);
    }
}

/// A file handed in is sized when it is queued, on a helper thread where it may hang: a
/// `getattr` that never answers fails it with `TimedOut` after the timeout, and queuing it
/// returns, the file failed alone.
#[test]
fn a_handed_in_file_whose_size_never_comes_fails_alone() {
    for backend in backends_once().to_vec() {
        let hung = FileSpec::new(100_000).with(Faults {
            hang_getattr: true,
            ..Faults::default()
        });
        let Some(m) = mount_specs(vec![hung, FileSpec::new(50_000)], Duration::ZERO) else {
            return;
        };
        let (paths, want) = (m.paths(), m.expected(1));
        let what = format!("{backend:?}: a handed-in file whose getattr hangs");
        let got = within(HANG, &what, move || {
            // Opened before its getattr is asked; its close would not hang, but the
            // caller's descriptor is left open with the hung call's thread.
            let file = std::fs::File::open(&paths[0]).unwrap();
            let file: &'static std::fs::File = Box::leak(Box::new(file));
            let mut r = builder(backend).build().unwrap();
            r.push(file).unwrap();
            r.push(&paths[1]).unwrap();
            read_all_files(&mut r)
        });
        let [hung, healthy] = <[_; 2]>::try_from(got).expect("two outcomes");
        let e = hung.expect_err("the hung file fails");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{what}: {e}");
        assert_bytes_eq(&healthy.expect("the healthy file is read"), &want, &what);
        end(m);
    }
}

#[test]
fn a_symlink_to_a_local_file_ahead_of_hung_opens_does_not_make_the_mount_local() {
    for backend in backends_once().to_vec() {
        let local = make_files(&[300_000]);
        let target = local.paths[0].clone();
        let specs = (0..FILES)
            .map(|i| match i {
                0 => FileSpec::symlink(&target),
                _ => FileSpec::new(fusefs::hang_test_size(i)).with(hung_opens(i)),
            })
            .collect();
        let Some(m) = mount_specs(specs, CACHED) else {
            return;
        };
        warm(&m.paths());
        let mut wants = vec![Want::Bytes(
            std::fs::read(&target).expect("read the target"),
        )];
        wants.extend(want_mount(&m, 1..FILES, &HUNG));
        let what = "a symlink to a local file, then six hung opens";
        let outcomes = scan(m.paths(), backend, what);
        check(outcomes, &m.paths(), &wants, &format!("{backend:?}"));
        let stats = m.stats();
        assert!(stats.readlinks > 0, "{backend:?}: the link was never read");
        assert_eq!(stats.hung_calls, HUNG.len() as u64, "{backend:?}");
        end(m);
    }
}

/// A FUSE directory bound into a local directory, beside local directories beneath it, in
/// which a reader opens their siblings once it has found two of them local: the open of the
/// bound directory there crosses a mount, which the kernel refuses, and the directory is not
/// taken for one on the local directories' mount: its files' opens, which hang, are made on
/// helper threads.
#[test]
fn a_fuse_directory_bound_into_a_local_directory_is_not_taken_for_local() {
    const BOUND: usize = 12;
    const HUNG_HERE: [usize; 4] = [1, 4, 7, 10];
    for backend in backends_once().to_vec() {
        let Some(m) = mount(BOUND, CACHED, |i| Faults {
            hang_open: HUNG_HERE.contains(&i),
            ..Faults::default()
        }) else {
            return;
        };
        let base = tempdir();
        let local_in = |dir: &str| -> Vec<PathBuf> {
            let dir = base.path().join(dir);
            std::fs::create_dir(&dir).expect("make a local directory");
            (0..4)
                .map(|i| make_file(&dir, &format!("f{i}"), 5000 + 3000 * i))
                .collect()
        };
        // Three local directories before the bound one, so that each reader of the scan
        // finds two local, and one after it.
        let (a, b, c) = (local_in("a"), local_in("b"), local_in("c"));
        let d = local_in("d");
        let sub = base.path().join("sub");
        std::fs::create_dir(&sub).expect("make the bind's mount point");
        let binding = match fusefs::bind(m.dir(), &sub) {
            Ok(binding) => binding,
            Err(why) => {
                eprintln!("skipped: {why}");
                return end(m);
            }
        };
        let bound: Vec<PathBuf> = (0..BOUND).map(|i| sub.join(fusefs::file_name(i))).collect();
        warm(&bound);
        let local = [a, b, c].concat();
        let mut wants: Vec<Want> = oracle_all(&local).into_iter().map(Want::Bytes).collect();
        wants.extend(want_mount(&m, 0..BOUND, &HUNG_HERE));
        wants.extend(oracle_all(&d).into_iter().map(Want::Bytes));
        let paths = [local, bound, d].concat();
        let what = "local directories, a FUSE directory bound beside them, another local one";
        let outcomes = scan(paths.clone(), backend, what);
        check(outcomes, &paths, &wants, &format!("{backend:?}"));
        assert_eq!(m.stats().hung_calls, HUNG_HERE.len() as u64, "{backend:?}");
        drop(binding);
        end(m);
    }
}

/// A FUSE file bind-mounted over a local file's name: the open of that name in its local
/// directory crosses a mount, which the kernel refuses an open that must stay on the
/// directory's mount, so that the open is made on a helper thread, where its hang fails
/// that file alone.
#[test]
fn a_fuse_file_bound_over_a_local_file_is_not_opened_on_the_readers_thread() {
    const OVER: usize = 2;
    for backend in backends_once().to_vec() {
        let hung = |_| Faults {
            hang_open: true,
            ..Faults::default()
        };
        let Some(m) = mount(1, CACHED, hung) else {
            return;
        };
        let local = make_files(&[70_000, 5000, 1, 300_000, 20_000]);
        let mut wants: Vec<Want> = oracle_all(&local.paths)
            .into_iter()
            .map(Want::Bytes)
            .collect();
        wants[OVER] = Want::TimedOut;
        let fuse_file = m.dir().join(fusefs::file_name(0));
        let binding = match fusefs::bind(&fuse_file, &local.paths[OVER]) {
            Ok(binding) => binding,
            Err(why) => {
                eprintln!("skipped: {why}");
                return end(m);
            }
        };
        // Its name cached through the bind, so that only the open itself could hang.
        warm(&local.paths[OVER..=OVER]);
        let what = "local files, a FUSE file bound over one of them";
        let outcomes = scan(local.paths.clone(), backend, what);
        check(outcomes, &local.paths, &wants, &format!("{backend:?}"));
        assert_eq!(m.stats().hung_calls, 1, "{backend:?}");
        drop(binding);
        end(m);
    }
}

/// A mount of `n` files, those in `hung` with hung opens, cached; and a local directory `d`
/// (in a temporary directory, kept while it lives) of `n` files of the same names, to be
/// swapped for a link to the mount: the mount, the temporary directory, `d` and its files'
/// paths; `None` where FUSE is not available here.
fn swap_setup(n: usize, hung: &[usize]) -> Option<(FaultMount, TempDir, PathBuf, Vec<PathBuf>)> {
    let m = mount(n, CACHED, |i| Faults {
        hang_open: hung.contains(&i),
        ..Faults::default()
    })?;
    let base = tempdir();
    let d = base.path().join("d");
    std::fs::create_dir(&d).expect("make the local directory");
    let paths = (0..n)
        .map(|i| {
            make_file(
                &d,
                &fusefs::file_name(i),
                fusefs::hang_test_size(1) as usize,
            )
        })
        .collect();
    Some((m, base, d, paths))
}

#[test]
fn a_directory_swapped_for_a_symlink_to_a_fuse_directory_between_two_scans() {
    const SWAPPED: usize = 10;
    const HUNG_HERE: [usize; 2] = [3, 7];
    for backend in backends_once().to_vec() {
        let Some((m, base, d, paths)) = swap_setup(SWAPPED, &HUNG_HERE) else {
            return;
        };
        let wants: Vec<Want> = oracle_all(&paths).into_iter().map(Want::Bytes).collect();
        let outcomes = scan(paths.clone(), backend, "a local directory");
        check(outcomes, &paths, &wants, &format!("{backend:?}, local"));

        std::fs::rename(&d, base.path().join("d.old")).expect("move the directory away");
        std::os::unix::fs::symlink(m.dir(), &d).expect("link the FUSE directory in its place");
        warm(&paths);
        let what = "the same paths, through a symlink to a FUSE directory";
        let outcomes = scan(paths.clone(), backend, what);
        let wants = want_mount(&m, 0..SWAPPED, &HUNG_HERE);
        check(outcomes, &paths, &wants, &format!("{backend:?}, swapped"));
        assert_eq!(m.stats().hung_calls, HUNG_HERE.len() as u64, "{backend:?}");
        end(m);
    }
}

/// Reads every file queued in `r`, each as an outcome, within [`HANG`].
fn read_queued(
    r: SequentialFileReader<'static>,
    what: &str,
) -> (
    SequentialFileReader<'static>,
    Vec<Outcome<Vec<u8>, io::Error>>,
) {
    within(HANG, what, move || {
        let mut r = r;
        let got = read_all_files(&mut r);
        let outcomes = got.into_iter().map(|g| match g {
            Ok(bytes) => Outcome::Done(bytes),
            Err(e) => Outcome::Failed(e),
        });
        (r, outcomes.collect())
    })
}

/// One reader: a local directory read, swapped for a symbolic link to a FUSE directory,
/// the reader rebound, the same paths read again: the rebound reader looks the directory up
/// again (it keeps what it knows of mounts, never a directory's handle), so it reads the
/// FUSE files, the hung ones failing alone, never the old directory's.
#[test]
fn a_directory_swapped_between_two_rebinds_of_one_reader_is_looked_up_again() {
    const SWAPPED: usize = 6;
    const HUNG_HERE: [usize; 1] = [4];
    for backend in backends_once().to_vec() {
        let Some((m, base, d, paths)) = swap_setup(SWAPPED, &HUNG_HERE) else {
            return;
        };
        let mut r = builder(backend).build().expect("a reader");
        paths.iter().for_each(|p| r.push(p.clone()).unwrap());
        let wants: Vec<Want> = oracle_all(&paths).into_iter().map(Want::Bytes).collect();
        let (r, outcomes) = read_queued(r, "a local directory, one reader");
        check(outcomes, &paths, &wants, &format!("{backend:?}, local"));

        std::fs::rename(&d, base.path().join("d.old")).expect("move the directory away");
        std::os::unix::fs::symlink(m.dir(), &d).expect("link the FUSE directory in its place");
        warm(&paths);
        let mut r = r.rebind().expect("rebind");
        paths.iter().for_each(|p| r.push(p.clone()).unwrap());
        let (r, outcomes) = read_queued(r, "the same paths after a rebind");
        let wants = want_mount(&m, 0..SWAPPED, &HUNG_HERE);
        check(outcomes, &paths, &wants, &format!("{backend:?}, rebound"));
        drop(r);
        end(m);
    }
}

/// An open that answers after its file was given up on (`TimedOut`), once the reader was
/// rebound and a new file, whose id the rebound queue gives again, is being opened: the
/// late answer is never taken for the new file's, whose bytes come out, its own.
#[test]
fn a_late_open_answer_never_serves_a_file_of_the_rebound_reader() {
    let timeout = Duration::from_secs(3);
    let delays = [Duration::from_secs(5), Duration::from_millis(2500)];
    for backend in backends_once().to_vec() {
        let files = delays.iter().map(|&delay| {
            FileSpec::new(fusefs::hang_test_size(1)).with(Faults {
                open_delay: delay,
                ..Faults::default()
            })
        });
        let Some(m) = mount_specs(files.collect(), Duration::ZERO) else {
            return;
        };
        let mut r = builder(backend).drain_timeout(timeout).build().unwrap();
        r.push(m.path(0)).unwrap();
        let (r, first) = read_queued(r, "a file whose open answers late");
        assert!(
            matches!(&first[..], [Outcome::Failed(e)] if e.kind() == io::ErrorKind::TimedOut),
            "{backend:?}: {first:?}"
        );
        // File 1 opens while file 0's open answers, under the same id in the rebound queue.
        let mut r = r.rebind().expect("rebind");
        r.push(m.path(1)).unwrap();
        let (r, second) = read_queued(r, "a file opened as the late answer comes");
        let paths = [m.path(1)];
        check(
            second,
            &paths,
            &[Want::Bytes(m.expected(1))],
            &format!("{backend:?}"),
        );
        drop(r);
        end(m);
    }
}

/// Set in the child process that runs [`child_rebinds_a_reader_300_times`].
const CHILD_ENV: &str = "READAHEAD_TEST_REBIND_CHILD";
const CHILD_TEST: &str = "child_rebinds_a_reader_300_times";

/// In a child process of its own: this one's other tests open files and start threads
/// meanwhile.
#[test]
fn a_reader_rebound_300_times_holds_no_more_descriptors_than_after_10() {
    run_in_child(CHILD_TEST, CHILD_ENV, "1");
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("list /proc/self/task")
        .count()
}

/// Rebinds a reader of `backend` 300 times, each time after queuing a few files and reading
/// one a little: the (descriptors, threads) of the process after rounds 10 and 300, the
/// descriptors once the closes left to helper threads are done.
fn rebind_300_times(backend: Backend, files: &Files) -> [(usize, usize); 2] {
    let want = oracle(&files.paths[0], u64::MAX);
    let mut r: SequentialFileReader<'static> = SequentialFileReader::builder()
        .backend(backend)
        .build()
        .unwrap();
    let mut counts = Vec::new();
    for round in 1..=300 {
        files.paths.iter().for_each(|p| r.push(p.clone()).unwrap());
        let got = r.fill_buf().unwrap();
        let n = got.len().min(4096);
        assert_bytes_eq(
            &got[..n],
            &want[..n],
            &format!("{backend:?}: round {round}"),
        );
        r.consume(n);
        r = r.rebind().unwrap();
        if round == 10 || round == 300 {
            counts.push((open_fds_settled(), threads()));
        }
    }
    [counts[0], counts[1]]
}

/// Does its work only in the child process started by the test above.
#[test]
fn child_rebinds_a_reader_300_times() {
    if child_value(CHILD_ENV).is_none() {
        return;
    }
    for backend in backends_once().to_vec() {
        let files = make_files(&[300_000, 5000, 70_000, 1, 1 << 20]);
        let what = format!("{backend:?}: 300 rebinds");
        let (files, counts) = within(HANG, &what, move || {
            let counts = rebind_300_times(backend, &files);
            (files, counts)
        });
        drop(files);
        let [(fds_10, threads_10), (fds_300, threads_300)] = counts;
        eprintln!("{what}: {fds_10} then {fds_300} fds, {threads_10} then {threads_300} threads");
        assert!(
            fds_300 <= fds_10 + 2,
            "{what}: descriptors {fds_10} -> {fds_300}"
        );
        // Helper threads idle a while before they exit: room for a few.
        assert!(
            threads_300 <= threads_10 + 4,
            "{what}: threads {threads_10} -> {threads_300}"
        );
    }
    println!("{CHILD_DONE}");
}
