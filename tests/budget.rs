//! A scan of 64 threads on however few cores stays within its budget: over 20,000 tiny files
//! and 256 MiB of mixed sizes, cold, buffered and `O_DIRECT`, every file is read whole and
//! right, the process never has more threads than the scan's own, their io_uring workers,
//! their helper threads (opens) and a few more, and its resident memory grows by little more than the scan's pool memory.
//!
//! One test in this file, so that no other test's threads or memory are counted. Linux only:
//! the threads and memory are `/proc`'s, the workers io_uring's.
#![cfg(target_os = "linux")]

mod common;

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::*;
use readahead::{
    Backend, Outcome, Scan, ScanFile, SequentialFileReader, DEFAULT_SCAN_IO_WORKERS,
    DEFAULT_SCAN_MEMORY,
};

const THREADS: usize = 64;
/// Helper threads a reader has at most: the opens it has under way at once.
const HELPERS_PER_THREAD: usize = 4;
/// Threads of the process beyond the scan's own and their workers: room for the kernel's
/// and the test harness's.
const SLACK_TASKS: usize = 8;
/// Resident memory beyond the pools: the threads' stacks and heaps, the queued entries, the
/// test's own file list.
const SLACK_MEMORY: u64 = 64 << 20;

/// A data set on the disk: its files, and each file's blake3.
struct DataSet {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    hashes: Vec<blake3::Hash>,
}

#[test]
fn sixty_four_threads_stay_within_the_budget() {
    if !io_uring_here() {
        return;
    }
    let tiny = data_set("tiny", &[4096; 20_000]);
    let mixed = data_set("mixed", &mixed_sizes(256 << 20));
    for direct in [false, true] {
        if direct && !direct_io_here() {
            continue;
        }
        for set in [&tiny, &mixed] {
            if !evict_all(&set.paths) {
                return;
            }
            scan_within_budget(set, direct);
        }
    }
}

/// Sizes from 4 KiB to 4 MiB, log-uniform, not all whole pages, adding up to `total` at least.
fn mixed_sizes(total: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut sum = 0;
    for i in 0.. {
        if sum >= total {
            break;
        }
        let unit = (splitmix64(i) >> 11) as f64 / (1u64 << 53) as f64;
        let size = (4096.0 * 1024f64.powf(unit)) as usize;
        sizes.push(size);
        sum += size;
    }
    sizes
}

/// Files of `sizes`, with bytes of their own, written to the disk (`syncfs`), so that their
/// pages can be dropped.
fn data_set(name: &str, sizes: &[usize]) -> DataSet {
    let dir = tempdir();
    let mut buf = Vec::new();
    let (mut paths, mut hashes) = (Vec::new(), Vec::new());
    for (i, &size) in sizes.iter().enumerate() {
        buf.resize(size, 0);
        let seed = format!("{name} {i}");
        blake3::Hasher::new()
            .update(seed.as_bytes())
            .finalize_xof()
            .fill(&mut buf);
        let path = dir.path().join(format!("{i:05}"));
        std::fs::write(&path, &buf).expect("write a file of the data set");
        hashes.push(blake3::hash(&buf));
        paths.push(path);
    }
    let root = std::fs::File::open(dir.path()).expect("open the data set's directory");
    // SAFETY: a plain syscall on a descriptor `root` keeps open.
    assert_eq!(unsafe { libc::syncfs(root.as_raw_fd()) }, 0, "syncfs");
    DataSet {
        _dir: dir,
        paths,
        hashes,
    }
}

/// Drops every file's pages from the page cache (they were written out by `syncfs`, or
/// were read since and are clean); whether it worked, checked on the first file. As root,
/// drops the cached directory entries and inodes too, so that opens wait for the disk and go
/// to io_uring's kernel workers, whose cap is then what bounds the threads.
fn evict_all(paths: &[PathBuf]) -> bool {
    for path in paths {
        let file = std::fs::File::open(path).expect("open to evict");
        // SAFETY: a plain syscall on a descriptor `file` keeps open; no memory is passed.
        let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(ret, 0, "posix_fadvise(DONTNEED)");
    }
    let cold = evicted(&paths[0]);
    // After the opens above, which bring the entries back. SAFETY: geteuid reads no memory.
    if cold && unsafe { libc::geteuid() } == 0 {
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    }
    if !cold {
        skip_refused(
            "a cold read",
            format_args!("{} stays in the page cache", paths[0].display()),
        );
    }
    cold
}

/// Scans `set` on 64 threads with the default budget, watching the process's threads and
/// resident memory meanwhile; asserts every file's hash and the bounds.
fn scan_within_budget(set: &DataSet, direct: bool) {
    let what = format!("{} files, direct {direct}", set.paths.len());
    let before = settled_tasks();
    let rss_before = reset_peak_rss();
    let (peak_tasks, peak_rss_sampled) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let peak_workers = AtomicUsize::new(0);
    let scanning = AtomicBool::new(true);
    let summary = std::thread::scope(|scope| {
        scope.spawn(|| {
            while scanning.load(Relaxed) {
                peak_tasks.fetch_max(tasks(), Relaxed);
                peak_workers.fetch_max(most_workers_of_a_thread(), Relaxed);
                peak_rss_sampled.fetch_max(status_kib("VmRSS:") as usize, Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let builder = SequentialFileReader::builder()
            .backend(Backend::IoUring)
            .direct_io(direct);
        let summary = Scan::new(&set.paths)
            .threads(THREADS)
            .reader(builder)
            .map(hash)
            .for_each(|index, outcome| match outcome {
                Outcome::Done(hash) => assert_eq!(hash, set.hashes[index], "{what}: file {index}"),
                Outcome::Failed(e) => panic!("{what}: file {index} failed: {e}"),
                Outcome::NotRun => panic!("{what}: file {index} not run"),
            });
        scanning.store(false, Relaxed);
        summary.expect("the scan")
    });
    assert_eq!(summary.progress.files, set.paths.len() as u64, "{what}");
    assert_direct_reads(summary.stats, direct, &what);

    // Bounded workers, and one unbounded.
    let workers = peak_workers.into_inner();
    let cap = DEFAULT_SCAN_IO_WORKERS as usize + 1;
    eprintln!("{what}: at most {workers} io_uring workers for one thread (cap {cap})");
    assert!(
        workers <= cap,
        "{what}: {workers} workers for one thread, more than {cap}"
    );

    // The watcher is one of the tasks counted.
    let started = peak_tasks.into_inner().saturating_sub(before + 1);
    let per_thread = 1 + DEFAULT_SCAN_IO_WORKERS as usize + 1 + HELPERS_PER_THREAD;
    let most = THREADS * per_thread + SLACK_TASKS;
    eprintln!("{what}: {started} tasks started (at most {most})");
    assert!(
        started <= most,
        "{what}: {started} tasks started, more than {most}"
    );

    let peak = (status_kib("VmHWM:") << 10).max((peak_rss_sampled.into_inner() as u64) << 10);
    let grew = peak.saturating_sub(rss_before);
    let most = DEFAULT_SCAN_MEMORY as u64 + SLACK_MEMORY;
    eprintln!("{what}: resident memory grew by {} MiB", grew >> 20);
    assert!(
        grew <= most,
        "{what}: resident memory grew by {} MiB, more than {} MiB",
        grew >> 20,
        most >> 20
    );
}

/// The blake3 of a file's bytes, taken as they lie in the reader's pool.
fn hash(file: &mut ScanFile<'_, '_>) -> io::Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    loop {
        let bytes = file.fill_buf()?;
        if bytes.is_empty() {
            return Ok(hasher.finalize());
        }
        let n = bytes.len();
        hasher.update(bytes);
        file.consume(n);
    }
}

/// The threads of this process now (`/proc/self/task`), kernel workers included.
fn tasks() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// The most io_uring workers any one thread of this process has now: the kernel names each
/// `iou-wrk-TID`, after the thread whose rings it serves.
fn most_workers_of_a_thread() -> usize {
    let mut workers = HashMap::new();
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten() {
        let comm = task.map(|task| std::fs::read_to_string(task.path().join("comm")));
        if let Ok(Ok(comm)) = comm {
            if let Some(tid) = comm.trim().strip_prefix("iou-wrk-") {
                *workers.entry(tid.to_string()).or_insert(0) += 1;
            }
        }
    }
    workers.into_values().max().unwrap_or(0)
}

/// The threads of this process once those of an earlier scan have gone: a scan returns once
/// its closures have, and its threads (with their kernel workers) exit soon after.
fn settled_tasks() -> usize {
    let start = Instant::now();
    let mut last = tasks();
    while start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
        let now = tasks();
        if now == last && now < THREADS {
            return now;
        }
        last = now;
    }
    last
}

/// Resets the process's peak resident memory (`VmHWM`) to what is resident now (Linux 4.0),
/// and returns that, in bytes.
fn reset_peak_rss() -> u64 {
    // Where the reset is refused, `VmHWM` keeps an older peak, which can only be higher: the
    // sampled `VmRSS` is the bound then, and an old peak shows as growth (the data sets are
    // written a file at a time, so it is small).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kib("VmRSS:") << 10
}

/// A field of `/proc/self/status` in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}
