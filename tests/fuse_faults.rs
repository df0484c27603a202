//! Real kernel faults, from a FUSE filesystem (`common::fusefs`) that fails, stalls and
//! changes size under the reader: EIO mid-file, latency and one very slow read, slow and
//! failing opens, files that shrink or grow between `getattr` and the read, short replies.
//!
//! Each scenario mounts a fresh filesystem per setup (backend x `O_DIRECT` or not x how the
//! filesystem serves), queues every file (by path mostly, some as owned or borrowed `File`s),
//! reads them all on a thread with a time limit, twice: with `read_to_end`, and as a parser
//! of records would (`fill_buf_at_least` for headers and records, `skip` for some, where a
//! short answer says the file ends, so no fault may ever come out as one), and checks each
//! file against what its faults
//! allow (see [`check_file`]): a good file reads exactly, a failed one fails alone with an
//! error naming its path (and offset), no byte ever comes from another file or a stale region;
//! then that no descriptor under the mount is left and that it unmounts.
//!
//! Where `/dev/fuse` is missing or mounting is refused, each test says so and passes. Linux
//! only: the filesystem is served through `fuser`, a Linux-only dev-dependency.
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::fusecheck::{assert_unmounts_clean, check_file, queue_of};
use common::fusefs::{random_files, FaultMount, Faults, FileSpec, Serve};
use common::scan::{scan, scan_records, scan_with_stats, Got, Queue};
use common::*;
use fuser::Errno;
use readahead::Stats;
use readahead::{Backend, ReaderBuilder, SequentialFileReader};

/// The longest a scan may take before the test says it hangs.
const LIMIT: Duration = Duration::from_secs(20);

/// The reader's largest single read.
const READ_SIZE: usize = 32 << 10;

/// One way to read the filesystem.
#[derive(Clone, Copy, Debug)]
struct Setup {
    backend: Backend,
    /// The reader's `O_DIRECT`.
    direct: bool,
    serve: Serve,
}

impl Setup {
    /// Its reader: a small pool and few open files, so that reads wrap the pool, wait for the
    /// consumer, and paths are opened as the read-ahead reaches them.
    fn builder(self) -> ReaderBuilder {
        SequentialFileReader::builder()
            .backend(self.backend)
            .direct_io(self.direct)
            .buffer_size(256 << 10)
            .read_size(READ_SIZE)
            .max_open_files(8)
    }
}

/// Every setup of the backends to test, with `O_DIRECT` as in `directs` and the filesystem
/// serving as in `serves`.
fn setups(directs: &[bool], serves: &[Serve]) -> Vec<Setup> {
    let mut out = Vec::new();
    for &backend in backends_once() {
        for &direct in directs {
            for &serve in serves {
                out.push(Setup {
                    backend,
                    direct,
                    serve,
                });
            }
        }
    }
    out
}

/// Every setup where no file replies short: both backends, buffered and `O_DIRECT`, the
/// filesystem through the page cache and with `FOPEN_DIRECT_IO`.
fn all_setups() -> Vec<Setup> {
    setups(&[false, true], &[Serve::PageCache, Serve::DirectIo])
}

/// Mounts `files` afresh for each setup, scans them, checks every file (see [`check_file`]),
/// and that descriptors and the mount come back. Returns the mounts' stats, summed, or `None`
/// where FUSE is not available (the reason is printed).
fn run(what: &str, files: &[FileSpec], setups: Vec<Setup>) -> Option<fusefs::FsStats> {
    let whole = run_with(what, files, setups.clone(), scan_with_stats)?;
    let records = run_with(&format!("{what} records"), files, setups, scan_records)?;
    Some(whole + records)
}

/// One way of reading every file: what each gave, and the reader's counters.
type ReadAll = fn(&[std::path::PathBuf], &[Queue], ReaderBuilder) -> (Vec<Got>, Stats);

/// [`run`] with one way of reading: the documented loop with `read_to_end`, or a parser's
/// record loop (`fill_buf_at_least` and `skip`), where a short answer says the file ends.
fn run_with(
    what: &str,
    files: &[FileSpec],
    setups: Vec<Setup>,
    read: ReadAll,
) -> Option<fusefs::FsStats> {
    let mut total = fusefs::FsStats::default();
    for setup in setups {
        let m = match FaultMount::new(files.to_vec(), setup.serve) {
            Ok(m) => m,
            Err(why) => {
                eprintln!("{what}: skipped: {why}");
                return None;
            }
        };
        let name = format!("{what} {setup:?}");
        let (paths, b) = (m.paths(), setup.builder());
        let queue: Vec<Queue> = files
            .iter()
            .enumerate()
            .map(|(i, f)| queue_of(i, f))
            .collect();
        let (got, reader) = within(LIMIT, &name, move || read(&paths, &queue, b));
        for (i, g) in got.iter().enumerate() {
            check_file(&m, i, g, READ_SIZE, &name);
        }
        // FUSE takes O_DIRECT: a setup that claims it read with it.
        if reader.reads > 0 {
            assert_eq!(reader.reads_direct > 0, setup.direct, "{name}: {reader:?}");
        }
        let stats = m.stats();
        assert_unmounts_clean(m, &name);
        total = total + stats;
    }
    Some(total)
}

/// `n` files of sizes that cycle through a few awkward ones (empty, under a page, unaligned,
/// several reads long).
fn sizes(n: usize) -> Vec<FileSpec> {
    const SIZES: [u64; 7] = [70_001, 4096, 0, 150_000, 1, 33_333, 65_536];
    (0..n)
        .map(|i| FileSpec::new(SIZES[i % SIZES.len()]))
        .collect()
}

#[test]
fn clean_files_read_exactly() {
    run("clean", &sizes(20), all_setups());
}

#[test]
fn eio_mid_file_fails_that_file_alone() {
    let mut files = sizes(24);
    let eio = |at| Faults {
        eio_at: Some(at),
        ..Faults::default()
    };
    // By path, owned and borrowed; at the first byte, mid-file, at the last byte.
    for (i, at) in [
        (0, 0),
        (3, 40_000),
        (6, 60_000),
        (10, 149_999),
        (13, 65_535),
        (15, 4095),
    ] {
        assert!(at < files[i].size, "file {i}");
        files[i].faults = eio(at);
    }
    let Some(stats) = run("eio", &files, all_setups()) else {
        return;
    };
    assert!(stats.eio_replies > 0, "{stats:?}");
}

#[test]
fn latency_on_every_read_and_one_very_slow_read() {
    let mut files = sizes(16);
    for f in &mut files {
        f.faults.latency = Duration::from_millis(1);
    }
    files[3].faults.slow_read = Some((100_000, Duration::from_millis(100)));
    let setups = all_setups();
    let n = setups.len() as u64;
    let start = Instant::now();
    let Some(stats) = run("latency", &files, setups) else {
        return;
    };
    // Each setup is read twice: with `read_to_end`, and with the record loop.
    assert_eq!(stats.slow_reads, 2 * n, "{stats:?}");
    eprintln!("latency: {n} setups in {:?}", start.elapsed());
}

#[test]
fn slow_and_failing_opens_fail_alone() {
    let mut files = sizes(20);
    for f in files.iter_mut().step_by(3) {
        f.faults.open_delay = Duration::from_millis(5);
    }
    files[4].faults.open_error = Some(Errno::EACCES);
    files[9].faults.open_error = Some(Errno::EIO);
    files[10].faults.open_error = Some(Errno::ENOENT);
    files[12].faults.open_delay = Duration::from_millis(100);
    run("opens", &files, all_setups());
}

/// A file that grows after the reader's `fstat` reads at least to its old size, at most to
/// its new one.
#[test]
fn files_that_grow_between_getattr_and_read() {
    let mut files = sizes(14);
    for (i, to) in [(0, 100_000), (2, 5), (4, 8192), (6, 200_000), (11, 70_000)] {
        files[i].faults.resize_to = Some(to);
    }
    run("grow", &files, all_setups());
}

/// A file that shrinks after the reader's `fstat` reads to its new size. The reads past the
/// new end get short replies, so: in page-cache mode, read buffered, where the kernel fills
/// the rest of their pages with zeros and, when two replies race, may take the later end for
/// the size and hand those zeros out (plain `read(2)` after `posix_fadvise(WILLNEED)` does it
/// too, about once in 200 fresh mounts here): exactly to the new size, then maybe zeros up
/// to the old one. The shrinking files come after 300 KiB of others, so that the reader's
/// 256 KiB pool is full of other bytes by then and a stale byte would not be a zero. And with
/// `FOPEN_DIRECT_IO` on the sync backend (not io_uring: see
/// [`short_replies_under_direct_io_are_short_reads`]): exactly to the new size.
#[test]
fn files_that_shrink_between_getattr_and_read() {
    let mut files = sizes(14);
    for (i, to) in [(7, 10_000), (8, 0), (10, 1), (12, 33_332), (13, 4096)] {
        files[i].faults.resize_to = Some(to);
    }
    let page_cache = setups(&[false], &[Serve::PageCache]);
    if run("shrink", &files, page_cache).is_none() {
        return;
    }
    let sync = setups(&[false, true], &[Serve::DirectIo])
        .into_iter()
        .filter(|s| s.backend == Backend::Pread);
    run("shrink", &files, sync.collect());
}

/// In page-cache mode the kernel takes a short reply as the end of the file, but fills the
/// rest of the reply's pages with zeros (FUSE's contract: "the rest of the data will be
/// substituted with zeroes"), and since the file's size is asked again each time, reads after
/// it can return those zeros, with either backend. So a file with short replies may read
/// short, or with zeros where a reply was cut; never with a byte of another file or a stale
/// one. The short files come after 300 KiB of others, so that the reader's 256 KiB pool is
/// full of other bytes by then and a stale byte would not be a zero.
#[test]
fn short_replies_in_page_cache_mode() {
    let mut files = sizes(14);
    for (i, short) in [(7, 3000), (10, 4096), (12, 1), (13, 8192)] {
        files[i].faults.short_replies = Some(short);
    }
    let Some(stats) = run("short", &files, setups(&[false], &[Serve::PageCache])) else {
        return;
    };
    assert!(stats.short_replies > 0, "{stats:?}");
}

/// With `FOPEN_DIRECT_IO` a short reply is only a short read, not the end of the file: the
/// file reads whole and exactly, buffered and `O_DIRECT`. On the sync backend only: through
/// io_uring the kernel asks again at the original offset and returns wrong bytes (a raw
/// io_uring read of 32 KiB, replied 3000 bytes at a time, returns 32768 bytes wrong from byte
/// 3000 on), which no reader can mend.
#[test]
fn short_replies_under_direct_io_are_short_reads() {
    let mut files = sizes(14);
    for (i, short) in [(0, 3000), (3, 4096), (5, 1), (6, 8192), (10, 5000)] {
        files[i].faults.short_replies = Some(short);
    }
    let sync = setups(&[false, true], &[Serve::DirectIo])
        .into_iter()
        .filter(|s| s.backend == Backend::Pread);
    run("short direct", &files, sync.collect());
}

/// Hundreds of files queued at once, with every fault at random: what each file may read as
/// depends on its faults alone, whatever its neighbours do.
#[test]
fn many_files_with_random_faults() {
    let seed = 11;
    let page_cache = setups(&[false], &[Serve::PageCache]);
    if run(
        "random",
        &random_files(300, 64 << 10, seed, true),
        page_cache,
    )
    .is_none()
    {
        return;
    }
    let (slow_eof, others): (Vec<Setup>, Vec<Setup>) = all_setups()
        .into_iter()
        .filter(|s| s.direct || s.serve == Serve::DirectIo)
        .partition(|s| s.backend == Backend::IoUring && s.direct && s.serve == Serve::DirectIo);
    let mut files = random_files(300, 64 << 10, seed + 1, false);
    run("random", &files, others);
    // io_uring asks again for the end of each file up to 128 times there (see
    // `common::fusefs`): the same files without latency, to keep the test short.
    for f in &mut files {
        f.faults.latency = Duration::ZERO;
    }
    run("random", &files, slow_eof);
}

/// Dropping a reader while a very slow read is in flight waits for it and leaves nothing
/// behind; a new reader then scans the same files exactly.
#[test]
fn dropping_with_a_slow_read_in_flight_then_scanning_again() {
    let slow = Duration::from_millis(150);
    for setup in all_setups() {
        let mut files = sizes(12);
        files[1].faults.slow_read = Some((0, slow));
        let m = match FaultMount::new(files.clone(), setup.serve) {
            Ok(m) => std::sync::Arc::new(m),
            Err(why) => return eprintln!("skipped: {why}"),
        };
        let name = format!("drop {setup:?}");
        let (m2, b) = (m.clone(), setup.builder());
        let in_flight = within(LIMIT, &name, move || {
            let mut r = reader_over(b, m2.paths());
            // io_uring reads ahead as the consumer calls in: read file 0 slowly until the
            // read-ahead reaches file 1, then give the read a moment to reach the filesystem.
            // Pread reads ahead only through the kernel's readahead, which a direct-I/O
            // filesystem has none of.
            let start = Instant::now();
            let mut more = true;
            while setup.backend == Backend::IoUring
                && m2.stats().slow_reads == 0
                && start.elapsed() < Duration::from_secs(2)
            {
                if more {
                    more = r.read(&mut [0; 100]).unwrap() > 0;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let in_flight = m2.stats().slow_reads == 1;
            drop(r);
            in_flight
        });
        if setup.backend == Backend::IoUring {
            assert!(in_flight, "{name}: the slow read was never sent");
        }
        let left = settled(0, || m.open_fds());
        assert_eq!(left, 0, "{name}: descriptors left after the drop");
        let m = std::sync::Arc::into_inner(m).unwrap();
        let (paths, queue) = (m.paths(), vec![Queue::Path; files.len()]);
        let got = within(LIMIT, &name, move || scan(&paths, &queue, setup.builder()));
        for (i, g) in got.iter().enumerate() {
            check_file(&m, i, g, READ_SIZE, &name);
        }
        assert_unmounts_clean(m, &name);
    }
}
