//! Warm page cache: readahead's `SequentialFileReader` beside std's
//! `BufReader::with_capacity(DEFAULT_READ_SIZE, File)` over the same files, with the same
//! consumer.
//!
//! Three data sets, made once in a temporary directory and read once before measuring so they
//! are in the page cache: many small files (2,000 of 4-64 KiB), few large ones (4 of 16 MiB),
//! and mixed ones (100 of 4 KiB-4 MiB, log-uniform, about 60 MiB: the warm scenarios of
//! BENCHMARKS.md, scaled down). Every set is read with a cheap checksum of every byte as the
//! consumer; the mixed set also with blake3 of every file, where reading ahead can overlap the
//! consumer's own work. Each iteration of `readahead` is a whole scan, building the reader
//! included, as a one-off caller would do it; `readahead_reused` keeps one reader across scans,
//! to show what the setup costs. The whole run takes about a minute; no plots are drawn.
//!
//! ```text
//! cargo bench --bench read
//! cargo bench --bench read -- mixed     # the mixed set only
//! ```
//!
//! Not on Apple targets: criterion's `alloca` dependency builds C with the host's compiler,
//! which cannot build for macOS from Linux, so criterion is not a dependency there (see
//! Cargo.toml) and this bench only says so.
#![cfg_attr(target_vendor = "apple", allow(dead_code, unused_imports))]

#[path = "../examples/support/checksum.rs"]
mod checksum;
#[path = "../examples/support/prng.rs"]
mod prng;

use std::fs::{self, File};
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Duration;

#[cfg(not(target_vendor = "apple"))]
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use readahead::{SequentialFileReader, DEFAULT_READ_SIZE};

use checksum::Checksum;
use prng::Prng;

/// Files on disk for one group of benchmarks; deleted with the directory.
struct DataSet {
    name: &'static str,
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    bytes: u64,
}

/// Writes `count` files of log-uniform sizes in `lo..=hi` bytes, of random bytes.
fn make_data_set(name: &'static str, count: usize, lo: u64, hi: u64) -> DataSet {
    let dir = tempfile::Builder::new()
        .prefix("readahead-bench-")
        .tempdir()
        .expect("a temporary directory");
    let mut rng = Prng::new(count as u64 ^ lo ^ hi);
    let mut buf = Vec::new();
    let mut paths = Vec::with_capacity(count);
    let mut bytes = 0;
    for i in 0..count {
        let size = rng.log_uniform(lo, hi);
        buf.resize(size as usize, 0);
        rng.fill(&mut buf);
        let path = dir.path().join(format!("{i:05}.bin"));
        fs::write(&path, &buf).expect("write a data file");
        paths.push(path);
        bytes += size;
    }
    DataSet {
        name,
        _dir: dir,
        paths,
        bytes,
    }
}

/// What is done with every byte.
#[derive(Clone, Copy, Debug)]
enum Consumer {
    /// The cheap checksum: the reading is what is measured.
    Checksum,
    /// blake3 of every file: work of the consumer's own, which reading ahead can overlap.
    Blake3,
}

impl Consumer {
    fn name(self) -> &'static str {
        match self {
            Consumer::Checksum => "checksum",
            Consumer::Blake3 => "blake3",
        }
    }
}

/// Feeds the rest of the current file to the consumer, straight from the reader's buffer;
/// the file's digest.
fn digest_file(reader: &mut impl BufRead, consumer: Consumer) -> u64 {
    match consumer {
        Consumer::Checksum => {
            let mut sum = Checksum::default();
            feed(reader, |chunk| sum.update(chunk));
            sum.finish()
        }
        Consumer::Blake3 => {
            let mut hasher = blake3::Hasher::new();
            feed(reader, |chunk| {
                hasher.update(chunk);
            });
            let hash = hasher.finalize();
            u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
        }
    }
}

/// Hands every chunk of the rest of the current file to `eat`.
fn feed(reader: &mut impl BufRead, mut eat: impl FnMut(&[u8])) {
    loop {
        let chunk = reader.fill_buf().expect("read a data file");
        if chunk.is_empty() {
            return;
        }
        eat(chunk);
        let n = chunk.len();
        reader.consume(n);
    }
}

/// Folds per-file checksums in order.
fn fold(all: u64, file: u64) -> u64 {
    all.rotate_left(7) ^ file
}

/// One scan with a new default `SequentialFileReader`, every path queued up front.
fn scan_readahead(paths: &[PathBuf], consumer: Consumer) -> u64 {
    let mut reader = SequentialFileReader::new().expect("a reader");
    scan_with(&mut reader, paths, consumer)
}

/// One scan with `reader`, which is left empty, ready for the next.
fn scan_with(reader: &mut SequentialFileReader<'_>, paths: &[PathBuf], consumer: Consumer) -> u64 {
    for path in paths {
        reader.add_path_to_prefetch(path).expect("queue a path");
    }
    let mut all = 0;
    for _ in paths {
        all = fold(all, digest_file(reader, consumer));
        reader.move_to_next_file().expect("move on");
    }
    all
}

/// One scan with `BufReader::with_capacity(DEFAULT_READ_SIZE, File)` per file.
fn scan_std(paths: &[PathBuf], consumer: Consumer) -> u64 {
    let mut all = 0;
    for path in paths {
        let file = File::open(path).expect("open a data file");
        let mut reader = BufReader::with_capacity(DEFAULT_READ_SIZE, file);
        all = fold(all, digest_file(&mut reader, consumer));
    }
    all
}

#[cfg(not(target_vendor = "apple"))]
/// The two readers side by side over one data set, with one consumer: the group
/// `SET/CONSUMER`.
fn bench_data_set(c: &mut Criterion, set: &DataSet, consumer: Consumer) {
    let name = format!("{}/{}", set.name, consumer.name());
    // Warms the page cache and checks both read the same bytes.
    assert_eq!(
        scan_readahead(&set.paths, consumer),
        scan_std(&set.paths, consumer),
        "{name}"
    );
    let mut group = c.benchmark_group(name);
    group
        .throughput(Throughput::Bytes(set.bytes))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("readahead", |b| {
        b.iter(|| black_box(scan_readahead(black_box(&set.paths), consumer)))
    });
    // The same scan without building the reader (its pool) each time: what setup costs.
    let mut reader = SequentialFileReader::new().expect("a reader");
    group.bench_function("readahead_reused", |b| {
        b.iter(|| black_box(scan_with(&mut reader, black_box(&set.paths), consumer)))
    });
    group.bench_function("std_bufreader", |b| {
        b.iter(|| black_box(scan_std(black_box(&set.paths), consumer)))
    });
    group.finish();
}

#[cfg(not(target_vendor = "apple"))]
fn warm_scans(c: &mut Criterion) {
    let small = make_data_set("many_small_2000x4-64KiB", 2000, 4 << 10, 64 << 10);
    bench_data_set(c, &small, Consumer::Checksum);
    drop(small);
    let large = make_data_set("few_large_4x16MiB", 4, 16 << 20, 16 << 20);
    bench_data_set(c, &large, Consumer::Checksum);
    drop(large);
    let mixed = make_data_set("mixed_100x4KiB-4MiB", 100, 4 << 10, 4 << 20);
    bench_data_set(c, &mixed, Consumer::Checksum);
    bench_data_set(c, &mixed, Consumer::Blake3);
}

#[cfg(not(target_vendor = "apple"))]
criterion_group! {
    name = benches;
    // Plots take longer to draw than the benchmarks take to run here.
    config = Criterion::default().without_plots();
    targets = warm_scans
}
#[cfg(not(target_vendor = "apple"))]
criterion_main!(benches);

#[cfg(target_vendor = "apple")]
fn main() {
    eprintln!("the benches need criterion, which is not a dependency on Apple targets");
}
