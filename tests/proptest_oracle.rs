//! Random file sets, sizes, limits, ways of queuing, pool and read sizes, queue depths and
//! ways of reading, on both backends with direct I/O on and off and uncached (the files
//! evicted first, so that those opened by path go `O_DIRECT` where the disk allows it),
//! against the oracle: `std::fs::read` cut at the limit.

mod common;

use std::fs::File;
use std::io::{BufRead, Read};

use common::*;
use proptest::prelude::*;
use readahead::{Backend, Entry, SequentialFileReader};

const KIB: usize = 1 << 10;
const PAGE: usize = 4096;

/// How a file is queued.
#[derive(Debug, Clone)]
enum Queued {
    Path,
    Borrowed(u64),
    Owned(u64),
}

impl Queued {
    fn limit(&self) -> u64 {
        match *self {
            Queued::Path => u64::MAX,
            Queued::Borrowed(l) | Queued::Owned(l) => l,
        }
    }
}

/// One step of reading the current file.
#[derive(Debug, Clone)]
enum Op {
    /// `fill_buf`, then `consume` of at most this many bytes.
    FillConsume(usize),
    /// `read` into a buffer of this size.
    Read(usize),
    /// `read_exact` of this many bytes, or of what is left if that is less.
    ReadExact(usize),
    /// `read_to_end`.
    ReadToEnd,
    /// `move_to_next_file` before the end (after at least one byte, or at once).
    MoveOn,
}

#[derive(Debug, Clone)]
struct Case {
    files: Vec<(usize, Queued)>,
    buffer_size: usize,
    read_size: usize,
    queue_depth: u32,
    ops: Vec<Op>,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![0..=2usize, PAGE - 2..=PAGE + 2, 0..=20 * KIB, 0..=300 * KIB,]
}

fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(0u64),
        0..=320 * KIB as u64,
        (1..80u64).prop_map(|pages| pages * PAGE as u64),
    ]
}

fn queued() -> impl Strategy<Value = Queued> {
    prop_oneof![
        Just(Queued::Path),
        limit().prop_map(Queued::Borrowed),
        limit().prop_map(Queued::Owned),
    ]
}

fn op_len() -> impl Strategy<Value = usize> {
    prop_oneof![1..=16usize, 1..=5000usize, 1..=70_000usize]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => op_len().prop_map(Op::FillConsume),
        4 => op_len().prop_map(Op::Read),
        3 => op_len().prop_map(Op::ReadExact),
        1 => Just(Op::ReadToEnd),
        1 => Just(Op::MoveOn),
    ]
}

/// A case: files, pool and read sizes (reads of up to the whole pool), depth and ops.
fn case() -> impl Strategy<Value = Case> {
    // read_size from the smallest allowed (1, taken as a page) up; buffer_size a multiple of
    // the aligned read.
    let read_size = prop_oneof![1..=PAGE, PAGE..=64 * KIB, 64 * KIB..=256 * KIB];
    // How many aligned reads the pool holds: at least 2, or often exactly 1.
    let reads = prop_oneof![Just(1usize), 1..=8usize];
    (
        prop::collection::vec((size(), queued()), 1..=12),
        read_size,
        reads,
        0..PAGE,
        1..=64u32,
        prop::collection::vec(op(), 1..=8),
    )
        .prop_map(move |(files, read_size, reads, slack, queue_depth, ops)| {
            // Room for `reads` direct reads (rounded up to 4 KiB, then to a page), plus some
            // bytes that are not a whole page.
            let aligned = read_size.next_multiple_of(PAGE);
            let buffer_size = if reads == 1 {
                aligned
            } else {
                aligned * reads + slack
            };
            Case {
                files,
                buffer_size,
                read_size,
                queue_depth,
                ops,
            }
        })
}

/// How the reader leaves the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Buffered,
    Direct,
    /// `uncached(true)`, every file evicted from the page cache first.
    Uncached,
}

/// Runs `case` on `backend` in `mode` over the files at `paths`.
fn run(case: &Case, paths: &[std::path::PathBuf], backend: Backend, mode: Mode) {
    let name = format!("{backend:?} {mode:?}");
    if mode == Mode::Uncached {
        paths.iter().for_each(|p| evict_from_page_cache(p));
    }
    let borrowed: Vec<File> = paths.iter().map(|p| File::open(p).unwrap()).collect();
    let mut r = SequentialFileReader::builder()
        .backend(backend)
        .direct_io(mode == Mode::Direct)
        .uncached(mode == Mode::Uncached)
        .buffer_size(case.buffer_size)
        .read_size(case.read_size)
        .queue_depth(case.queue_depth)
        .build()
        .unwrap_or_else(|e| panic!("{name}: build: {e}"));
    let mut want = Vec::new();
    for (i, (_, q)) in case.files.iter().enumerate() {
        let p = &paths[i];
        match q {
            Queued::Path => r.push(p).unwrap(),
            Queued::Borrowed(l) => r.add_file_to_prefetch(&borrowed[i], *l).unwrap(),
            Queued::Owned(l) => r
                .push(Entry::owned_file(File::open(p).unwrap()).range(..*l))
                .unwrap(),
        }
        want.push(oracle(p, q.limit()));
    }
    let mut ops = case.ops.iter().cycle();
    for (i, w) in want.iter().enumerate() {
        let what = format!("{name}: file #{i}");
        let (got, whole) = read_file(&mut r, w, &mut ops, &what);
        if whole {
            assert_bytes_eq(&got, w, &what);
            assert_eq!(r.read(&mut [0; 8]).unwrap(), 0, "{what}: at its end");
        } else {
            assert_bytes_eq(&got, &w[..got.len().min(w.len())], &what);
        }
        assert_eq!(
            r.move_to_next_file().unwrap(),
            i + 1 < want.len(),
            "{what}: move"
        );
    }
    assert!(r.fill_buf().unwrap().is_empty(), "{name}: nothing after");
    // A case may read nothing at all (empty files, zero limits, moving on at once).
    let stats = r.stats();
    if stats.reads > 0 && mode != Mode::Uncached {
        assert_direct_reads(stats, mode == Mode::Direct, &name);
    }
}

/// Reads the current file with `ops` in turn; returns the bytes and whether it read to the
/// end (rather than moving on early).
fn read_file<'o>(
    r: &mut SequentialFileReader<'_>,
    want: &[u8],
    ops: &mut impl Iterator<Item = &'o Op>,
    what: &str,
) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    loop {
        assert_eq!(r.file_offset(), got.len() as u64, "{what}: file_offset");
        match ops.next().unwrap() {
            Op::FillConsume(n) => {
                let avail = r.fill_buf().unwrap();
                if avail.is_empty() {
                    return (got, true);
                }
                let k = avail.len().min(*n);
                got.extend_from_slice(&avail[..k]);
                r.consume(k);
            }
            Op::Read(n) => {
                let mut buf = vec![0; *n];
                let k = r.read(&mut buf).unwrap();
                if k == 0 {
                    return (got, true);
                }
                got.extend_from_slice(&buf[..k]);
            }
            Op::ReadExact(n) => {
                let n = (*n).min(want.len().saturating_sub(got.len()));
                if n == 0 {
                    if r.fill_buf().unwrap().is_empty() {
                        return (got, true);
                    }
                    // More bytes than the oracle has: let the comparison report it.
                    r.read_to_end(&mut got).unwrap();
                    return (got, true);
                }
                let mut buf = vec![0; n];
                r.read_exact(&mut buf)
                    .unwrap_or_else(|e| panic!("{what}: read_exact({n}) at {}: {e}", got.len()));
                got.extend_from_slice(&buf);
            }
            Op::ReadToEnd => {
                r.read_to_end(&mut got).unwrap();
                return (got, true);
            }
            Op::MoveOn => return (got, false),
        }
    }
}

/// Makes the case's files and runs it on every backend in every mode (direct I/O where the
/// disk allows it: see `direct_io_here`).
fn check(case: &Case) {
    let dir = tempdir();
    let paths: Vec<_> = case
        .files
        .iter()
        .enumerate()
        .map(|(i, (len, _))| make_file(dir.path(), &format!("{i:02}"), *len))
        .collect();
    for backend in backends_once() {
        for &mode in modes_once() {
            run(case, &paths, *backend, mode);
        }
    }
}

/// Buffered, uncached, and direct where the disk allows it, probed once per test binary.
fn modes_once() -> &'static [Mode] {
    static MODES: std::sync::OnceLock<Vec<Mode>> = std::sync::OnceLock::new();
    MODES.get_or_init(|| {
        let mut out = vec![Mode::Buffered, Mode::Uncached];
        if direct_io_here() {
            out.push(Mode::Direct);
        }
        out
    })
}

proptest! {
    // 48 cases, each on every backend in every mode.
    #![proptest_config(proptest_config(48))]

    /// Random scans, against the oracle, with reads of up to the whole pool.
    #[test]
    fn any_pool_and_read_sizes_match_the_oracle(case in case()) {
        check(&case);
    }
}

/// Not random: the smallest pool and read the builder allows, on every backend.
#[test]
fn the_smallest_pool_and_read_match_the_oracle() {
    let case = Case {
        files: vec![
            (0, Queued::Path),
            (1, Queued::Borrowed(u64::MAX)),
            (PAGE + 1, Queued::Owned(PAGE as u64)),
            (20_000, Queued::Path),
            (5, Queued::Owned(3)),
        ],
        buffer_size: PAGE,
        read_size: 1,
        queue_depth: 1,
        ops: vec![Op::FillConsume(3), Op::Read(7), Op::ReadExact(2)],
    };
    check(&case);
}
