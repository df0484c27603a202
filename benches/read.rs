//! Warm page cache: readahead's `SequentialFileReader` beside std's
//! `BufReader::with_capacity(DEFAULT_READ_SIZE, File)` over the same files, with the same
//! consumer.
//!
//! Four data sets, made once in a temporary directory and read once before measuring so they
//! are in the page cache: many small files (2,000 of 4-64 KiB), few large ones (4 of 16 MiB),
//! and mixed ones (100 of 4 KiB-4 MiB, log-uniform, about 60 MiB: the warm scenarios of
//! BENCHMARKS.md, scaled down). Every set is read with a cheap checksum of every byte as the
//! consumer; the mixed set also with blake3 of every file, where reading ahead can overlap the
//! consumer's own work. The fourth set is account storage (600 files, most of 15-115 KB, a few
//! up to 2 MiB, about 40 MiB; see `scan/accounts.rs`): every record is parsed and
//! its data hashed with blake3, as a validator's startup scan does, with `fill_buf_at_least`
//! beside std's `BufReader` of 1 MiB, which copies a record straddling its buffer's end into a
//! spill `Vec`. Each iteration of `readahead` is a whole scan, building the reader included, as
//! a one-off caller would do it; `readahead_reused` keeps one reader across scans, to show what
//! the setup costs. The whole run takes about a minute; no plots are drawn.
//!
//! ```text
//! cargo bench --bench read
//! cargo bench --bench read -- mixed     # the mixed set only
//! cargo bench --bench read -- records   # the records only
//! ```
//!
//! Not on Apple targets: criterion's `alloca` dependency builds C with the host's compiler,
//! which cannot build for macOS from Linux, so criterion is not a dependency there (see
//! Cargo.toml) and this bench only says so.
#![cfg_attr(target_vendor = "apple", allow(dead_code, unused_imports))]

// Benches build with `cfg(test)` but not their `#[test]`s: its tests' helper goes unused.
#[allow(dead_code)]
#[path = "scan/accounts.rs"]
mod accounts;
#[path = "scan/checksum.rs"]
mod checksum;
#[path = "scan/prng.rs"]
mod prng;

use std::fs::{self, File};
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Duration;

#[cfg(not(target_vendor = "apple"))]
use criterion::{
    criterion_group, criterion_main, measurement::WallTime, BenchmarkGroup, Criterion, Throughput,
};
use readahead::{SequentialFileReader, DEFAULT_READ_SIZE};

use accounts::{record_size, DATA_LEN_AT, HEADER};
use checksum::Checksum;
use prng::Prng;

/// The largest of the few account storage files beyond 115 KB.
const RECORD_FILE_MAX: u64 = 2 << 20;
/// std's buffer for the records: the 1 MiB readers the warm records goal compares with.
const STD_RECORD_BUFFER: usize = 1 << 20;

/// Files on disk for one group of benchmarks; deleted with the directory.
struct DataSet {
    name: &'static str,
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    bytes: u64,
}

/// Writes `count` files into a new temporary directory, each filled by `fill` from one
/// generator seeded with `seed`, so that every run reads the same bytes.
fn make_files(
    name: &'static str,
    seed: u64,
    count: usize,
    mut fill: impl FnMut(&mut Prng, &mut Vec<u8>),
) -> DataSet {
    let dir = tempfile::Builder::new()
        .prefix("readahead-bench-")
        .tempdir()
        .expect("a temporary directory");
    let mut rng = Prng::new(seed);
    let mut buf = Vec::new();
    let mut paths = Vec::with_capacity(count);
    let mut bytes = 0;
    for i in 0..count {
        fill(&mut rng, &mut buf);
        let path = dir.path().join(format!("{i:05}.bin"));
        fs::write(&path, &buf).expect("write a data file");
        paths.push(path);
        bytes += buf.len() as u64;
    }
    DataSet {
        name,
        _dir: dir,
        paths,
        bytes,
    }
}

/// Writes `count` files of log-uniform sizes in `lo..=hi` bytes, of random bytes.
fn make_data_set(name: &'static str, count: usize, lo: u64, hi: u64) -> DataSet {
    make_files(name, count as u64 ^ lo ^ hi, count, |rng, buf| {
        let size = rng.log_uniform(lo, hi);
        buf.resize(size as usize, 0);
        rng.fill(buf);
    })
}

/// Writes `count` account storage files as `accounts.rs` draws them: most of 15-115 KB, a few
/// of up to `RECORD_FILE_MAX`; most records 165 bytes of data, some up to 20 KiB, a few up to
/// 1 MiB.
fn make_record_set(name: &'static str, count: usize) -> DataSet {
    make_files(name, count as u64, count, |rng, buf| {
        let size = accounts::file_size(rng, RECORD_FILE_MAX);
        accounts::fill_file(rng, buf, size);
    })
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
fn scan_with<'p>(
    reader: &mut SequentialFileReader<'p>,
    paths: &'p [PathBuf],
    consumer: Consumer,
) -> u64 {
    for path in paths {
        reader.push(path).expect("queue a path");
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

/// Bytes of one file a record at a time: what the record loop asks of either reader.
trait Records {
    /// At least `n` contiguous bytes of the current file, or all that is left of it.
    fn fill_at_least(&mut self, n: usize) -> &[u8];
    /// Marks the first `n` bytes of what `fill_at_least` returned as used.
    fn consume(&mut self, n: usize);
}

/// The reader as it is: a record in place in its pool, copied only where it straddles the
/// pool's end.
impl Records for SequentialFileReader<'_> {
    fn fill_at_least(&mut self, n: usize) -> &[u8] {
        self.fill_buf_at_least(n).expect("read a record file")
    }

    fn consume(&mut self, n: usize) {
        BufRead::consume(self, n)
    }
}

/// std's `BufReader` with the record interface, as a validator reads today: a record in place
/// where it lies whole in the buffer, else copied into `spill` from as many fills as it takes.
/// A short form of `Spilling` in `scan/records.rs`: whole records only.
struct Spilling<'s, R> {
    inner: R,
    /// The record asked for, where it straddled the buffer's end; empty otherwise.
    spill: &'s mut Vec<u8>,
}

impl<R: BufRead> Records for Spilling<'_, R> {
    fn fill_at_least(&mut self, n: usize) -> &[u8] {
        if self.spill.is_empty() {
            let available = self.inner.fill_buf().expect("read a record file").len();
            if available >= n || available == 0 {
                // Asked again to hand out the borrow; the bytes are buffered, nothing is read.
                return self.inner.fill_buf().expect("read a record file");
            }
        }
        // Never more than `n`, so that the spill empties with the record and the next one
        // can be taken in place.
        while self.spill.len() < n {
            let chunk = self.inner.fill_buf().expect("read a record file");
            if chunk.is_empty() {
                break;
            }
            let take = chunk.len().min(n - self.spill.len());
            self.spill.extend_from_slice(&chunk[..take]);
            self.inner.consume(take);
        }
        self.spill
    }

    fn consume(&mut self, n: usize) {
        if self.spill.is_empty() {
            return self.inner.consume(n);
        }
        // The record loop consumes whole records, so a spilled one is used up at once.
        assert_eq!(n, self.spill.len(), "consume a spilled record whole");
        self.spill.clear();
    }
}

/// Parses every record of the rest of the current file and hashes its data with blake3; the
/// wrapping sum of the first 8 bytes of the hashes, which no order of records changes.
fn hash_records(source: &mut impl Records) -> u64 {
    let mut sum = 0u64;
    loop {
        let header = source.fill_at_least(HEADER);
        if header.is_empty() {
            return sum;
        }
        assert!(header.len() >= HEADER, "a whole header");
        let data_len = u64::from_le_bytes(header[DATA_LEN_AT].try_into().expect("8 bytes"));
        let size = record_size(data_len) as usize;
        let record = source.fill_at_least(size);
        // The files end where a record does (`accounts::fill_file`).
        assert!(record.len() >= size, "a whole record");
        let hash = blake3::hash(&record[HEADER..HEADER + data_len as usize]);
        let first = hash.as_bytes()[..8].try_into().expect("8 of 32 bytes");
        sum = sum.wrapping_add(u64::from_le_bytes(first));
        source.consume(size);
    }
}

/// One record scan with a new default `SequentialFileReader`, every path queued up front.
fn scan_records(paths: &[PathBuf]) -> u64 {
    let mut reader = SequentialFileReader::new().expect("a reader");
    scan_records_with(&mut reader, paths)
}

/// One record scan with `reader`, which is left empty, ready for the next.
fn scan_records_with<'p>(reader: &mut SequentialFileReader<'p>, paths: &'p [PathBuf]) -> u64 {
    for path in paths {
        reader.push(path).expect("queue a path");
    }
    let mut sum = 0u64;
    for _ in paths {
        sum = sum.wrapping_add(hash_records(reader));
        reader.move_to_next_file().expect("move on");
    }
    sum
}

/// One record scan with `BufReader::with_capacity(STD_RECORD_BUFFER, File)` per file, one
/// spill reused across them.
fn scan_records_std(paths: &[PathBuf]) -> u64 {
    let mut spill = Vec::new();
    let mut sum = 0u64;
    for path in paths {
        let file = File::open(path).expect("open a record file");
        let inner = BufReader::with_capacity(STD_RECORD_BUFFER, file);
        let source = &mut Spilling {
            inner,
            spill: &mut spill,
        };
        sum = sum.wrapping_add(hash_records(source));
    }
    sum
}

#[cfg(not(target_vendor = "apple"))]
/// A group of ten samples of about two seconds, in bytes a second.
fn new_group<'c>(c: &'c mut Criterion, name: &str, bytes: u64) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .throughput(Throughput::Bytes(bytes))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group
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
    let mut group = new_group(c, &name, set.bytes);
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
/// The two readers side by side parsing every record of `set` and hashing its data: the group
/// `SET/blake3`.
fn bench_records(c: &mut Criterion, set: &DataSet) {
    let name = format!("{}/blake3", set.name);
    // Warms the page cache and checks both parse the same records.
    assert_eq!(
        scan_records(&set.paths),
        scan_records_std(&set.paths),
        "{name}"
    );
    let mut group = new_group(c, &name, set.bytes);
    group.bench_function("readahead", |b| {
        b.iter(|| black_box(scan_records(black_box(&set.paths))))
    });
    let mut reader = SequentialFileReader::new().expect("a reader");
    group.bench_function("readahead_reused", |b| {
        b.iter(|| black_box(scan_records_with(&mut reader, black_box(&set.paths))))
    });
    group.bench_function("std_bufreader", |b| {
        b.iter(|| black_box(scan_records_std(black_box(&set.paths))))
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
    drop(mixed);
    let records = make_record_set("records_600x15-115KB", 600);
    bench_records(c, &records);
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
