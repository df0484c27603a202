//! Any number of queued paths, whatever `ulimit -n` is: paths are opened only as the
//! read-ahead reaches them, at most `max_open_files` at a time.

mod common;

use std::path::PathBuf;
use std::time::Instant;

use common::*;
use readahead::Backend;

/// `n` files of 0 to 64 bytes in one directory (on tmpfs where there is one).
fn small_files(n: usize) -> Files {
    let dir = tempdir_for_many_files();
    let paths = (0..n)
        .map(|i| make_file(dir.path(), &format!("{i:06}"), i * 7 % 65))
        .collect();
    Files { dir, paths }
}

/// 20 000 queued paths of 20 000 files, in a scrambled order.
#[test]
fn twenty_thousand_paths_with_sixteen_open_at_most() {
    let start = Instant::now();
    let files = small_files(20_000);
    eprintln!("made 20000 files in {:?}", start.elapsed());
    let want = oracle_all(&files.paths);
    let order: Vec<usize> = (0..20_000).map(|i| i * 7919 % 20_000).collect();
    for (backend, b) in builders() {
        let start = Instant::now();
        let mut r = reader_over(b.max_open_files(16), order.iter().map(|&i| &files.paths[i]));
        let got = read_all_ok(&mut r);
        let expect: Vec<Vec<u8>> = order.iter().map(|&i| want[i].clone()).collect();
        assert_files_eq(&got, &expect, &format!("{backend:?}"));
        let stats = r.stats();
        assert_eq!(stats.files_failed, 0, "{backend:?}");
        assert_eq!(
            stats.files_opened,
            order.len() as u64,
            "{backend:?}: each path opened once: {stats:?}"
        );
        eprintln!("{backend:?}: read 20000 paths in {:?}", start.elapsed());
    }
}

#[test]
fn open_descriptors_stay_within_max_open_files() {
    let files = small_files(2000);
    let want = oracle_all(&files.paths);
    for (backend, b) in builders() {
        for cap in [1usize, 3] {
            let before = open_fds();
            let mut r = reader_over(b.clone().max_open_files(cap), &files.paths);
            // Tests on other threads open files too, so this bound is loose: it catches a
            // reader that opens every queued path, not one over by a few.
            assert!(
                open_fds() < before + 200,
                "{backend:?}: {} descriptors open after queuing",
                open_fds() - before
            );
            let got = read_all_ok(&mut r);
            assert_files_eq(&got, &want, &format!("{backend:?} cap {cap}"));
        }
    }
}

/// Descriptors this process holds open on files beneath `dir` (not on `dir` itself, which
/// a reader holds while it opens files there).
#[cfg(target_os = "linux")]
fn held_beneath(dir: &std::path::Path) -> usize {
    let targets = open_fd_targets();
    targets
        .iter()
        .filter(|t| t.starts_with(dir) && *t != dir)
        .count()
}

/// Files done with wait to be closed together, but count against `max_open_files` as the
/// files open do: at no file's end does the reader hold more than its cap of the queued
/// files, and once dropped it holds none.
#[cfg(target_os = "linux")]
#[test]
fn files_waiting_to_close_count_against_max_open_files() {
    // Files of a page or so on a disk's filesystem, which tells what it has cached: read
    // whole, one at a time, as the reader reaches them.
    let dir = tempdir();
    let paths: Vec<PathBuf> = (0..300)
        .map(|i| make_file(dir.path(), &format!("{i:06}"), 4000 + i % 200))
        .collect();
    let want = oracle_all(&paths);
    let dir = dir.path();
    for (backend, b) in builders() {
        for cap in [1usize, 3, 64] {
            let what = format!("{backend:?}, max_open_files {cap}");
            let mut r = reader_over(b.clone().max_open_files(cap), &paths);
            let peak = read_counting_held(&mut r, &want, dir, 0, &what);
            assert!(peak <= cap, "{what}: {peak} descriptors held at once");
            drop(r);
            assert_eq!(held_beneath(dir), 0, "{what}: left open after the drop");
        }
    }
}

/// Reads every file of `r`, one at a time, checking each against `want`; the most
/// descriptors held beneath `dir` at once at any file's end from file `from` on.
#[cfg(target_os = "linux")]
fn read_counting_held(
    r: &mut readahead::SequentialFileReader<'_>,
    want: &[Vec<u8>],
    dir: &std::path::Path,
    from: usize,
    what: &str,
) -> usize {
    let (mut n, mut peak) = (0, 0);
    let got = each_file(r, |r| {
        let bytes = consume_in_sizes(r, &[usize::MAX]);
        if n >= from {
            peak = peak.max(held_beneath(dir));
        }
        n += 1;
        bytes
    });
    assert_files_eq(&got, want, what);
    peak
}

/// While reads find the page cache warm, a reader holds at most 64 of its queued files open
/// (fewer than its default cap of 128, which it opens ahead while reads go to the device):
/// a file opened further ahead of its copy has left the CPU's cache when it is read.
#[cfg(target_os = "linux")]
#[test]
fn a_reader_over_cached_files_holds_fewer_open() {
    let dir = tempdir();
    let paths: Vec<PathBuf> = (0..400)
        .map(|i| make_file(dir.path(), &format!("{i:06}"), 4000 + i % 200))
        .collect();
    let want = oracle_all(&paths);
    if !all_cached(&paths) {
        return;
    }
    let dir = dir.path();
    for (backend, b) in builders() {
        let what = format!("{backend:?}");
        let mut r = reader_over(b, &paths);
        // From the 100th file on: before its first copy, a reader does not know the cache.
        let peak = read_counting_held(&mut r, &want, dir, 100, &what);
        // A page the host reclaimed meanwhile turns the reader cold, and it opens further.
        if peak > 64 && !all_cached(&paths) {
            return;
        }
        assert!(peak <= 64, "{what}: {peak} descriptors held at once");
    }
}

/// Set, to the `RLIMIT_NOFILE` to run under, in the child process that runs
/// [`child_reads_100k_paths_under_a_low_nofile`].
const CHILD_ENV: &str = "READAHEAD_TEST_LOW_NOFILE_CHILD";
const CHILD_TEST: &str = "child_reads_100k_paths_under_a_low_nofile";

/// Lowers `RLIMIT_NOFILE` to 64 in a child process (never in this one, whose other tests run
/// on parallel threads) and queues 100 000 paths there. 64 is also the default
/// `max_open_files`, so the reader runs out of descriptors before it reaches its own cap.
#[test]
fn a_hundred_thousand_paths_under_a_nofile_limit_of_64() {
    run_in_child(CHILD_TEST, CHILD_ENV, "64");
}

/// Does its work only in the child process started by the test above.
#[test]
fn child_reads_100k_paths_under_a_low_nofile() {
    let Some(value) = child_value(CHILD_ENV) else {
        return;
    };
    limit_descriptors_to(&value);
    let nofile: u64 = value.parse().expect("a descriptor limit");

    let start = Instant::now();
    let files = small_files(1000);
    let want = oracle_all(&files.paths);
    // 100 000 entries: every file 100 times, in a scrambled order.
    let order: Vec<usize> = (0..100_000).map(|i| i * 7919 % 1000).collect();
    let queued: Vec<&PathBuf> = order.iter().map(|&i| &files.paths[i]).collect();
    for (backend, b) in builders() {
        let mut r = reader_over(b, &queued);
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), order.len(), "{backend:?}");
        for (n, (g, &i)) in got.iter().zip(&order).enumerate() {
            let g = g
                .as_ref()
                .unwrap_or_else(|e| panic!("{backend:?}: entry {n}: {e}"));
            assert_bytes_eq(g, &want[i], &format!("{backend:?}: entry {n}"));
        }
        eprintln!(
            "{backend:?}: 100000 paths under ulimit -n {nofile} in {:?}",
            start.elapsed()
        );
        if backend == Backend::IoUring {
            assert_eq!(r.backend(), Backend::IoUring);
        }
    }
    // A cap above the limit, and reads deep enough to reach it: the reader runs out of
    // descriptors and must keep fewer open, not fail files.
    for (backend, b) in builders() {
        let mut r = reader_over(b.max_open_files(100_000).queue_depth(4096), &queued[..3000]);
        let got = read_all_files(&mut r);
        assert_eq!(got.len(), 3000, "{backend:?}");
        for (n, (g, &i)) in got.iter().zip(&order).enumerate() {
            let what = format!("{backend:?} over the limit: entry {n}");
            let g = g.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_bytes_eq(g, &want[i], &what);
        }
        let stats = r.stats();
        assert_eq!(stats.files_failed, 0, "{backend:?}");
        // Every in-flight read holds its file open, so the limit bounds them.
        assert!(stats.peak_in_flight < nofile, "{backend:?}: {stats:?}");
    }
    println!("{CHILD_DONE}");
}
