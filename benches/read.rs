//! Warm page cache: readahead's `SequentialFileReader` beside std's `BufReader<File>` over the
//! same files, with the same consumer (a cheap checksum of every byte).
//!
//! Two data sets, made once in a temporary directory and read once before measuring so they
//! are in the page cache: many small files (2,000 of 4-64 KiB) and few large ones (4 of
//! 16 MiB). Each iteration of `readahead` is a whole scan, building the reader included, as a
//! one-off caller would do it; `readahead_reused` keeps one reader across scans, to show what
//! the setup costs.
//!
//! ```text
//! cargo bench --bench read
//! ```

#[path = "../examples/support/checksum.rs"]
mod checksum;
#[path = "../examples/support/prng.rs"]
mod prng;

use std::fs::{self, File};
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Duration;

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

/// Feeds the rest of the current file to a checksum, straight from the reader's buffer.
fn checksum_file(reader: &mut impl BufRead) -> u64 {
    let mut sum = Checksum::default();
    loop {
        let chunk = reader.fill_buf().expect("read a data file");
        if chunk.is_empty() {
            return sum.finish();
        }
        sum.update(chunk);
        let n = chunk.len();
        reader.consume(n);
    }
}

/// Folds per-file checksums in order.
fn fold(all: u64, file: u64) -> u64 {
    all.rotate_left(7) ^ file
}

/// One scan with a new default `SequentialFileReader`, every path queued up front.
fn scan_readahead(paths: &[PathBuf]) -> u64 {
    let mut reader = SequentialFileReader::new().expect("a reader");
    scan_with(&mut reader, paths)
}

/// One scan with `reader`, which is left empty, ready for the next.
fn scan_with(reader: &mut SequentialFileReader<'_>, paths: &[PathBuf]) -> u64 {
    for path in paths {
        reader.add_path_to_prefetch(path).expect("queue a path");
    }
    let mut all = 0;
    for _ in paths {
        all = fold(all, checksum_file(reader));
        reader.move_to_next_file().expect("move on");
    }
    all
}

/// One scan with `BufReader::with_capacity(DEFAULT_READ_SIZE, File)` per file.
fn scan_std(paths: &[PathBuf]) -> u64 {
    let mut all = 0;
    for path in paths {
        let file = File::open(path).expect("open a data file");
        let mut reader = BufReader::with_capacity(DEFAULT_READ_SIZE, file);
        all = fold(all, checksum_file(&mut reader));
    }
    all
}

/// The two readers side by side over one data set.
fn bench_data_set(c: &mut Criterion, set: &DataSet) {
    // Warms the page cache and checks both read the same bytes.
    assert_eq!(
        scan_readahead(&set.paths),
        scan_std(&set.paths),
        "{}",
        set.name
    );
    let mut group = c.benchmark_group(set.name);
    group
        .throughput(Throughput::Bytes(set.bytes))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("readahead", |b| {
        b.iter(|| black_box(scan_readahead(black_box(&set.paths))))
    });
    // The same scan without building the reader (its pool) each time: what setup costs.
    let mut reader = SequentialFileReader::new().expect("a reader");
    group.bench_function("readahead_reused", |b| {
        b.iter(|| black_box(scan_with(&mut reader, black_box(&set.paths))))
    });
    group.bench_function("std_bufreader", |b| {
        b.iter(|| black_box(scan_std(black_box(&set.paths))))
    });
    group.finish();
}

fn warm_scans(c: &mut Criterion) {
    let small = make_data_set("many_small_2000x4-64KiB", 2000, 4 << 10, 64 << 10);
    bench_data_set(c, &small);
    let large = make_data_set("few_large_4x16MiB", 4, 16 << 20, 16 << 20);
    bench_data_set(c, &large);
}

criterion_group!(benches, warm_scans);
criterion_main!(benches);
