//! Soak run: scan, drop, rebuild and re-scan a FUSE data set with random faults and a real
//! on-disk data set, round after round for N minutes, checking every byte, the descriptors,
//! the mounts and the memory each round. Not part of CI: a stress run of its own, with the
//! tests' FUSE filesystem and checks (`tests/common/`), run by the `soak` example
//! (`examples/soak.rs` calls [`main`]).
//!
//! ```text
//! cargo run --release --example soak -- --minutes N [--seed S] [--fuse-files N] [--disk-mib M]
//! ```
//!
//! Needs Linux, root and `/dev/fuse` for the FUSE half (without them it says why and soaks
//! the disk half alone).
//!
//! Each round draws, from the seed and the round's number:
//! - a reader: backend (io_uring where the kernel allows it, or sync), `O_DIRECT` or not, pool
//!   size (64 KiB-32 MiB), largest read (512 B up to half the pool, at most 1 MiB), open-file
//!   cap (1-64);
//! - how the FUSE filesystem serves (page cache or `FOPEN_DIRECT_IO`) and its files: `--fuse-files`
//!   files (default 300) of up to 256 KiB with random faults (`common::fusefs::random_files`:
//!   EIO mid-file, failing and slow opens, latency, one very slow read, size changes, and where
//!   the kernel allows it short replies);
//! - whether to drop a reader part-way first: then a reader reads some of the files, is dropped
//!   with reads in flight, and a new one scans them all.
//!
//! The FUSE files are checked by what their faults allow (`common::fusecheck::check_file`:
//! good files exactly against the byte function, failed ones alone and with their path and
//! offset); the disk data set (`--disk-mib` MiB, default 64, files of 0-4 MiB in twelve
//! directories, made once in `$TMPDIR`) against `std::fs::read`. After every round (closes on
//! helper threads given a moment): no descriptor under the mount, the filesystem unmounts, the
//! process has as many descriptors as before the first round (and its first reader, which
//! opens the kernel's table of mounts for good), and its
//! resident memory is at most 64 MiB above what it was after the first round. Every scan has
//! two minutes before it counts as hung. (Memory is measured with one glibc malloc arena: with
//! one per thread, freed memory stays in each and resident memory grows with their number.)
//!
//! One line per round, then a summary. The first failure stops the run with a message naming
//! the round and the seed; `--seed S` runs the same rounds again.

#[path = "../common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../benches/scan/prng.rs"]
mod prng;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
#[cfg(target_os = "linux")]
use common::fusecheck::{assert_unmounts_clean, check_file, queue_of};
#[cfg(target_os = "linux")]
use common::fusefs::{random_files, FaultMount, Serve};
#[cfg(target_os = "linux")]
use common::scan::Got;
use common::scan::{scan, Queue};
use prng::Prng;
use readahead::{Backend, ReaderBuilder, SequentialFileReader};

const MIB: f64 = (1 << 20) as f64;
/// How long one scan may take before it counts as hung.
const SCAN_LIMIT: Duration = Duration::from_secs(120);
/// How far resident memory may grow above where the first round left it.
const RSS_SLACK: u64 = 64 << 20;

/// How the FUSE filesystem serves its files. Only Linux has the filesystem; elsewhere the
/// rounds draw this all the same, so that a seed draws the same readers everywhere.
#[cfg(not(target_os = "linux"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Serve {
    PageCache,
    DirectIo,
}

/// Soak run: scan, drop, rebuild and re-scan a FUSE data set with random faults and a real
/// on-disk data set, round after round, checking every byte, the descriptors, the mounts and
/// the memory each round.
///
/// The first failure stops the run with a message naming the round and the seed; --seed S
/// runs the same rounds again.
#[derive(Debug, Parser)]
#[command(name = "soak", max_term_width = 100)]
struct Options {
    /// How long to run, in minutes (fractions allowed)
    #[arg(long, value_name = "N", default_value_t = 1.0)]
    minutes: f64,
    /// The seed every round's settings are drawn from [default: the time]
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// FUSE files a round, each up to 256 KiB with random faults
    #[arg(long, value_name = "N", default_value_t = 300)]
    fuse_files: usize,
    /// The on-disk data set's size in MiB (files of 0-4 MiB, made once in $TMPDIR)
    #[arg(long, value_name = "M", default_value_t = 64)]
    disk_mib: u64,
}

impl Options {
    /// The seed given, or the time in seconds.
    fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        })
    }
}

/// A round's reader and filesystem settings.
#[derive(Clone, Copy, Debug)]
struct Settings {
    backend: Backend,
    direct: bool,
    buffer_size: usize,
    read_size: usize,
    max_open_files: usize,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // FUSE is Linux's
    serve: Serve,
    /// Read this many files with a first reader, then drop it.
    drop_after: Option<usize>,
}

impl Settings {
    fn draw(rng: &mut Prng, backends: &[Backend]) -> Settings {
        let buffer_size = 1 << (16 + rng.next_u64() % 10);
        Settings {
            backend: backends[(rng.next_u64() % backends.len() as u64) as usize],
            direct: rng.next_u64().is_multiple_of(2),
            buffer_size,
            read_size: rng.log_uniform(512, (buffer_size as u64 / 2).min(1 << 20)) as usize,
            max_open_files: rng.log_uniform(1, 64) as usize,
            serve: [Serve::PageCache, Serve::DirectIo][(rng.next_u64() % 2) as usize],
            drop_after: rng
                .next_u64()
                .is_multiple_of(3)
                .then(|| (rng.next_u64() % 50) as usize),
        }
    }

    fn builder(&self) -> ReaderBuilder {
        SequentialFileReader::builder()
            .backend(self.backend)
            .direct_io(self.direct)
            .buffer_size(self.buffer_size)
            .read_size(self.read_size)
            .max_open_files(self.max_open_files)
    }

    /// The largest read the reader makes: `O_DIRECT` rounds reads up to 4 KiB.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // for the FUSE checks
    fn largest_read(&self) -> usize {
        if self.direct {
            self.read_size.next_multiple_of(4096)
        } else {
            self.read_size
        }
    }
}

impl std::fmt::Display for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = if self.backend == Backend::IoUring {
            "uring"
        } else {
            "sync"
        };
        let io = if self.direct { "direct" } else { "buffered" };
        write!(
            f,
            "{backend:5} {io:8} pool {:>5} KiB read {:>4} KiB open {:2}",
            self.buffer_size >> 10,
            self.read_size.div_ceil(1024),
            self.max_open_files
        )
    }
}

/// What the rounds have checked so far.
#[derive(Debug, Default)]
struct Totals {
    rounds: u64,
    uring_rounds: u64,
    drops: u64,
    fuse_files: u64,
    fuse_failed: u64,
    fuse_bytes: u64,
    disk_bytes: u64,
    peak_rss: u64,
}

/// The `soak` example's program: parses the command line and soaks.
pub fn main() -> ExitCode {
    let o = Options::parse();
    let seed = o.seed();
    // glibc gives threads arenas of their own and keeps what is freed in them, and every scan
    // runs on a new thread (to time it out): with one arena, resident memory measures the
    // reader rather than how many arenas have been made so far.
    // SAFETY: mallopt only changes an allocator setting, before any other thread exists.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1)
    };
    let backends = common::backends();
    let disk = make_disk_set(o.disk_mib, seed);
    let want = common::oracle_all(&disk.paths);
    let mut fuse_ok = true;
    // The process keeps the kernel's table of mounts open from the first directory a reader
    // checks (`sys::mounts`): one file read first, so that the count holds that descriptor.
    let mut first = SequentialFileReader::new().expect("a reader");
    first.push(disk.paths[0].as_path()).expect("queue a file");
    std::io::copy(&mut first, &mut std::io::sink()).expect("read a file");
    drop(first);
    let fds_before = common::open_fds();
    let mut rss_bound = None;
    let mut totals = Totals::default();
    let start = Instant::now();
    println!(
        "soak: seed {}, {:.1} minutes, {} FUSE files a round, disk set {} files, {:.1} MiB in {}",
        seed,
        o.minutes,
        o.fuse_files,
        disk.paths.len(),
        want.iter().map(Vec::len).sum::<usize>() as f64 / MIB,
        disk.dir.path().display()
    );
    while start.elapsed().as_secs_f64() < o.minutes * 60.0 {
        let round = totals.rounds + 1;
        let mut rng = Prng::new(seed ^ round.wrapping_mul(0xA076_1D64_78BD_642F));
        let s = Settings::draw(&mut rng, &backends);
        let what = format!("round {round} (--seed {seed}) {s}");
        let t = Instant::now();
        let fuse = if fuse_ok {
            let r = fuse_round(&s, o.fuse_files, rng.next_u64(), &what, &mut totals);
            fuse_ok = r.is_some();
            r.unwrap_or_else(|| "FUSE skipped".into())
        } else {
            "FUSE skipped".into()
        };
        disk_round(&s, &disk.paths, &want, &what, &mut totals);
        let fds = common::settled(fds_before, common::open_fds);
        assert_eq!(fds, fds_before, "{what}: descriptors before and after");
        let rss = common::resident_bytes();
        let bound = *rss_bound.get_or_insert(rss + RSS_SLACK);
        assert!(rss <= bound, "{what}: resident memory {rss} above {bound}");
        totals.peak_rss = totals.peak_rss.max(rss);
        totals.rounds = round;
        totals.uring_rounds += u64::from(s.backend == Backend::IoUring);
        totals.drops += u64::from(s.drop_after.is_some());
        let drop = s.drop_after.map_or(String::new(), |k| format!(" drop@{k}"));
        println!(
            "round {round:4} {:6.2}s {s} | {fuse} | disk ok{drop} | fds {fds} rss {:.0} MiB",
            t.elapsed().as_secs_f64(),
            rss as f64 / MIB
        );
    }
    print_summary(&totals, start.elapsed(), fds_before);
    ExitCode::SUCCESS
}

/// Makes the on-disk data set: files of 0-4 MiB, log-uniform, up to `mib` MiB in all.
fn make_disk_set(mib: u64, seed: u64) -> common::Files {
    let mut rng = Prng::new(seed);
    let mut sizes = Vec::new();
    let mut total = 0;
    while total < mib << 20 {
        let size = rng.log_uniform(1, 4 << 20) - 1;
        sizes.push(size as usize);
        total += size;
    }
    let mut files = common::make_files(&sizes);
    // In twelve directories two deep, each file in another than the one before: a reader
    // opens each directory beneath the one above them, once it holds that one, and by its
    // whole path before.
    for (i, path) in files.paths.iter_mut().enumerate() {
        let dir = files.dir.path().join(format!("d{}/e{}", i % 3, i / 3 % 4));
        std::fs::create_dir_all(&dir).expect("make a directory of the disk set");
        let moved = dir.join(path.file_name().expect("a file's name"));
        std::fs::rename(&*path, &moved).expect("move a file of the disk set");
        *path = moved;
    }
    files
}

/// Mounts a FUSE data set with random faults, maybe drops a reader part-way through it, scans
/// it all and checks every file. Returns the round's summary, or `None` (saying why) where
/// FUSE is not available.
#[cfg(target_os = "linux")]
fn fuse_round(s: &Settings, n: usize, seed: u64, what: &str, t: &mut Totals) -> Option<String> {
    // Short replies (and shrinking) only where the kernel hands out right bytes for them:
    // page-cache mode, read buffered (see common::fusefs).
    let short_ok = s.serve == Serve::PageCache && !s.direct;
    let mut files = random_files(n, 256 << 10, seed, short_ok);
    if s.backend == Backend::IoUring && s.direct && s.serve == Serve::DirectIo {
        // io_uring asks again for each file's end up to 128 times there: no latency, or a
        // round takes minutes.
        files
            .iter_mut()
            .for_each(|f| f.faults.latency = Duration::ZERO);
    }
    let m = match FaultMount::new(files.clone(), s.serve) {
        Ok(m) => m,
        Err(why) => {
            println!("soak: FUSE skipped from now on: {why}");
            return None;
        }
    };
    let queue: Vec<Queue> = files
        .iter()
        .enumerate()
        .map(|(i, f)| queue_of(i, f))
        .collect();
    if let Some(k) = s.drop_after {
        let (paths, b) = (m.paths(), s.builder());
        common::within(SCAN_LIMIT, what, move || read_some_then_drop(&paths, k, b));
        // Files on a mount that may hang are closed on helper threads, which a drop does not
        // wait for (a FUSE close can hang): a moment after it.
        let left = common::settled(0, || m.open_fds());
        assert_eq!(left, 0, "{what}: descriptors under the mount after a drop");
    }
    let (paths, b, q) = (m.paths(), s.builder(), queue.clone());
    let got: Vec<Got> = common::within(SCAN_LIMIT, what, move || scan(&paths, &q, b));
    for (i, g) in got.iter().enumerate() {
        check_file(&m, i, g, s.largest_read(), what);
    }
    let failed = got.iter().filter(|g| g.error.is_some()).count();
    let bytes: usize = got.iter().map(|g| g.bytes.len()).sum();
    let stats = m.stats();
    assert_unmounts_clean(m, what);
    t.fuse_files += n as u64;
    t.fuse_failed += failed as u64;
    t.fuse_bytes += bytes as u64;
    let serve = match s.serve {
        Serve::PageCache => "page cache",
        Serve::DirectIo => "direct_io",
        Serve::KeepCache => "keep cache",
    };
    Some(format!(
        "FUSE {serve:10} {n} files {:5.1} MiB, {failed:2} failed as faulted, {} EIO, {} slow",
        bytes as f64 / MIB,
        stats.eio_replies,
        stats.slow_reads
    ))
}

/// The FUSE half: none off Linux, where the fault filesystem cannot be served.
#[cfg(not(target_os = "linux"))]
fn fuse_round(_: &Settings, _: usize, _: u64, _: &str, _: &mut Totals) -> Option<String> {
    println!("soak: FUSE skipped: the fault filesystem needs Linux (FUSE through fuser)");
    None
}

/// Scans the disk data set (maybe dropping a reader part-way first) with files queued every
/// way, and checks it against `std::fs::read`.
fn disk_round(s: &Settings, paths: &[PathBuf], want: &[Vec<u8>], what: &str, t: &mut Totals) {
    if let Some(k) = s.drop_after {
        let (p, b) = (paths.to_vec(), s.builder());
        common::within(SCAN_LIMIT, what, move || read_some_then_drop(&p, k, b));
    }
    let queue = (0..paths.len())
        .map(|i| [Queue::Path, Queue::Owned, Queue::Path, Queue::Borrowed][i % 4])
        .collect::<Vec<_>>();
    let (p, b) = (paths.to_vec(), s.builder());
    let got = common::within(SCAN_LIMIT, what, move || scan(&p, &queue, b));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if let Some(e) = &g.error {
            panic!("{what}: disk file {i}: {e}");
        }
        common::assert_bytes_eq(&g.bytes, w, &format!("{what}: disk file {i}"));
        t.disk_bytes += g.bytes.len() as u64;
    }
}

/// Queues every path, reads the first `k` files (errors and all), and drops the reader with
/// the read-ahead of the next ones in flight.
fn read_some_then_drop(paths: &[PathBuf], k: usize, b: ReaderBuilder) {
    let mut r = b.build().unwrap();
    for p in paths {
        let _ = r.push(p);
    }
    for _ in 0..k {
        let _ = common::rest_of_file(&mut r);
        if !matches!(r.move_to_next_file(), Ok(true)) {
            break;
        }
    }
}

fn print_summary(t: &Totals, elapsed: Duration, fds: usize) {
    println!(
        "soak: {} rounds in {:.1} min ({} io_uring, {} sync, {} with a drop part-way), all checked",
        t.rounds,
        elapsed.as_secs_f64() / 60.0,
        t.uring_rounds,
        t.rounds - t.uring_rounds,
        t.drops
    );
    println!(
        "soak: FUSE {} files, {:.1} MiB exact, {} failed as their faults said; disk {:.1} MiB exact",
        t.fuse_files,
        t.fuse_bytes as f64 / MIB,
        t.fuse_failed,
        t.disk_bytes as f64 / MIB
    );
    println!(
        "soak: descriptors back to {fds} every round, no mount left, peak RSS {:.0} MiB",
        t.peak_rss as f64 / MIB
    );
}
