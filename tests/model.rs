//! Model-based property test of the whole public API.
//!
//! Random sequences of: queuing by path, by owned `File` and by borrowed `&File` (each file
//! with a random `read_limit`: none, 0, inside the file, beyond its end), queuing bad paths
//! (missing, a directory), `activate_file` (of a queued file, the partly read current one,
//! one never queued), `move_to_next_file`, `read` into random-sized buffers, `read_exact`
//! (within the file, to its end, past it), `fill_buf` + `consume` (of less than, exactly, or
//! more than `fill_buf` returned), `fill_buf_at_least` (from 1 byte to past the pool's size)
//! then `consume`, `skip` (0, within the file, past its end), `read_to_end`, `rebind`, then
//! either the documented read loop or dropping the reader with reads in flight.
//!
//! A plain in-memory model (each queued file's expected bytes, or the path its error must
//! name; a FIFO of them with their paths and positions in queuing order; the offset in the
//! front one) predicts every byte, every end of file, every error, every
//! `move_to_next_file` result, and after every step `file_offset`, `current_path` and
//! `current_index`. Each case runs on `Backend::Pread` and,
//! where the kernel allows it, `Backend::IoUring`, with a random pool and read size (down to
//! the smallest the builder allows: a 4 KiB pool, 1-byte reads), queue depth, and direct I/O
//! on some cases.

mod common;

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, ErrorKind, Read, Seek};
use std::path::{Path, PathBuf};

use common::*;
use proptest::prelude::*;
use readahead::{Backend, SequentialFileReader};

const KIB: usize = 1 << 10;
const PAGE: usize = 4096;
/// Files a case can queue; one more (the last) is only ever activated, never queued.
const FILES: usize = 4;

/// A `read_limit`, relative to the file it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// `u64::MAX`: all of it.
    All,
    Zero,
    /// Somewhere strictly inside the file (one of two places), where it has an inside.
    Inside(u8),
    /// Past its end.
    Beyond,
}

impl Limit {
    fn of(self, size: usize) -> u64 {
        let size = size as u64;
        match self {
            Limit::All => u64::MAX,
            Limit::Zero => 0,
            Limit::Inside(_) if size < 2 => size / 2,
            Limit::Inside(k) => 1 + (size - 2) * (u64::from(k) + 1) / 3,
            Limit::Beyond => size + 4097,
        }
    }
}

/// How many bytes a `read_exact` asks for, relative to what is left of the file.
#[derive(Debug, Clone, Copy)]
enum Want {
    Bytes(usize),
    /// Exactly what is left.
    Rest,
    /// What is left plus this many (at least 1): past the end.
    Past(usize),
}

/// How many bytes a `fill_buf_at_least` asks for.
#[derive(Debug, Clone, Copy)]
enum AtLeast {
    Bytes(usize),
    /// The pool's size exactly: the most allowed.
    Pool,
    /// More than the pool holds: an `InvalidInput` error.
    OverPool(usize),
}

/// How many bytes a `skip` passes over, relative to what is left of the file.
#[derive(Debug, Clone, Copy)]
enum SkipBy {
    Bytes(u64),
    /// What is left plus this many: past the end.
    Past(u64),
}

/// How many bytes to `consume` after a `fill_buf`, relative to what it returned.
#[derive(Debug, Clone, Copy)]
enum Consume {
    Bytes(usize),
    /// All it returned.
    All,
    /// All it returned plus this many (at least 1).
    Over(usize),
    /// `usize::MAX`.
    Max,
}

#[derive(Debug, Clone)]
enum Step {
    AddPath(usize),
    AddOwned(usize, Limit),
    AddBorrowed(usize, Limit),
    AddMissing,
    AddDirectory,
    /// Any file with any limit: often one not queued (always so for file `FILES`).
    Activate(usize, Limit),
    /// The n-th queued borrowed entry (modulo how many there are; the front among them).
    ActivateQueued(usize),
    Move,
    Read(usize),
    ReadExact(Want),
    FillConsume(Consume),
    FillAtLeast(AtLeast, Consume),
    Skip(SkipBy),
    ReadToEnd,
    /// `rebind`: the queue is emptied, positions count from 0 again.
    Rebind,
}

#[derive(Debug, Clone)]
struct Case {
    /// Sizes of files `0..=FILES`.
    sizes: Vec<usize>,
    buffer_size: usize,
    read_size: usize,
    queue_depth: u32,
    direct: bool,
    steps: Vec<Step>,
    /// Read everything left with the documented loop (else drop the reader where it is).
    finish: bool,
}

fn limit() -> impl Strategy<Value = Limit> {
    prop_oneof![
        Just(Limit::All),
        Just(Limit::Zero),
        (0..2u8).prop_map(Limit::Inside),
        Just(Limit::Beyond),
    ]
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![0..=16usize, 1..=5000usize, 1..=70_000usize]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0..FILES).prop_map(Step::AddPath),
        2 => (0..FILES, limit()).prop_map(|(f, l)| Step::AddOwned(f, l)),
        3 => (0..FILES, limit()).prop_map(|(f, l)| Step::AddBorrowed(f, l)),
        1 => Just(Step::AddMissing),
        1 => Just(Step::AddDirectory),
        1 => (0..=FILES, limit()).prop_map(|(f, l)| Step::Activate(f, l)),
        2 => (0..4usize).prop_map(Step::ActivateQueued),
        2 => Just(Step::Move),
        3 => len().prop_map(Step::Read),
        2 => prop_oneof![
            4 => len().prop_map(Want::Bytes),
            1 => Just(Want::Rest),
            1 => (1..=10_000usize).prop_map(Want::Past),
        ]
        .prop_map(Step::ReadExact),
        3 => consume().prop_map(Step::FillConsume),
        3 => (at_least(), consume()).prop_map(|(n, c)| Step::FillAtLeast(n, c)),
        2 => prop_oneof![
            Just(SkipBy::Bytes(0)),
            len().prop_map(|n| SkipBy::Bytes(n as u64)),
            (0..=5000u64).prop_map(SkipBy::Past),
        ]
        .prop_map(Step::Skip),
        1 => Just(Step::ReadToEnd),
        1 => Just(Step::Rebind),
    ]
}

fn at_least() -> impl Strategy<Value = AtLeast> {
    prop_oneof![
        4 => (1..=16usize).prop_map(AtLeast::Bytes),
        4 => (1..=200 * KIB).prop_map(AtLeast::Bytes),
        1 => Just(AtLeast::Pool),
        1 => (1..=PAGE).prop_map(AtLeast::OverPool),
    ]
}

fn consume() -> impl Strategy<Value = Consume> {
    prop_oneof![
        (0..=5000usize).prop_map(Consume::Bytes),
        Just(Consume::All),
        (1..=5000usize).prop_map(Consume::Over),
        Just(Consume::Max),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    // From the smallest read allowed (1 byte) up; tiny reads are rare, as they are slow.
    let read_size = prop_oneof![
        1 => 1..=64usize,
        2 => Just(PAGE),
        2 => 1000..=20 * KIB,
        2 => 20 * KIB..=128 * KIB,
    ];
    // How many aligned reads the pool holds: often exactly 1 (the smallest pool allowed).
    let reads = prop_oneof![Just(1usize), 2..=8usize];
    let size = prop_oneof![0..=2usize, PAGE - 2..=PAGE + 2, 0..=20 * KIB, 0..=300 * KIB];
    (
        prop::collection::vec(size, FILES + 1),
        read_size,
        reads,
        0..PAGE,
        1..=64u32,
        prop::bool::weighted(0.3),
        prop::collection::vec(step(), 1..60),
        prop::bool::weighted(0.7),
    )
        .prop_map(
            |(sizes, read_size, reads, slack, queue_depth, direct, steps, finish)| {
                // Room for `reads` reads, rounded up to 4 KiB as direct I/O needs.
                let aligned = read_size.next_multiple_of(PAGE);
                let buffer_size = if reads == 1 {
                    aligned
                } else {
                    aligned * reads + slack
                };
                // Tiny reads over large files take too long: keep those files small.
                let cap = if read_size < PAGE {
                    read_size * 64 + PAGE
                } else {
                    usize::MAX
                };
                Case {
                    sizes: sizes.into_iter().map(|s| s.min(cap)).collect(),
                    buffer_size,
                    read_size,
                    queue_depth,
                    direct,
                    steps,
                    finish,
                }
            },
        )
}

/// What the model expects of a queued file.
#[derive(Debug, Clone)]
enum Expect {
    /// Its bytes, cut at its limit.
    Bytes(Vec<u8>),
    /// An error naming this path (a missing path is `NotFound` too).
    Fails { path: PathBuf, missing: bool },
}

#[derive(Debug, Clone)]
struct Entry {
    /// `(file, limit)` for a borrowed file: what `activate_file` matches on.
    identity: Option<(usize, u64)>,
    expect: Expect,
    /// The path it was queued by, if it was.
    path: Option<PathBuf>,
    /// Its position among the files queued since the reader was built or rebound.
    index: usize,
}

/// The model: the FIFO of queued files, the offset in the front one, and how many files
/// were queued since the reader was built or rebound.
#[derive(Debug, Default)]
struct Model {
    queue: VecDeque<Entry>,
    at: usize,
    queued: usize,
}

impl Model {
    /// Queues a file at the back.
    fn push(&mut self, identity: Option<(usize, u64)>, expect: Expect, path: Option<&Path>) {
        self.queue.push_back(Entry {
            identity,
            expect,
            path: path.map(Path::to_path_buf),
            index: self.queued,
        });
        self.queued += 1;
    }

    fn front(&self) -> Option<&Expect> {
        self.queue.front().map(|e| &e.expect)
    }

    /// The rest of the front file, or `None` for a bad one (`Some(&[])` with no file).
    fn rest(&self) -> Option<&[u8]> {
        match self.front() {
            None => Some(&[]),
            Some(Expect::Bytes(b)) => Some(&b[self.at..]),
            Some(Expect::Fails { .. }) => None,
        }
    }
}

/// The fixture of one case: its files on disk and the borrowed ones opened.
struct Fixture {
    dir: Files,
    bytes: Vec<Vec<u8>>,
    missing: PathBuf,
    directory: PathBuf,
}

impl Fixture {
    fn new(sizes: &[usize]) -> Self {
        let dir = make_files(sizes);
        let bytes = oracle_all(&dir.paths);
        let missing = dir.dir.path().join("no such file");
        let directory = dir.dir.path().join("a directory");
        std::fs::create_dir(&directory).expect("make a directory");
        Fixture {
            dir,
            bytes,
            missing,
            directory,
        }
    }

    fn cut(&self, f: usize, limit: u64) -> Vec<u8> {
        let b = &self.bytes[f];
        b[..b.len().min(usize::try_from(limit).unwrap_or(usize::MAX))].to_vec()
    }
}

/// Checks an error against the bad file the model expects.
#[track_caller]
fn assert_fails_as(e: &std::io::Error, path: &Path, missing: bool, what: &str) {
    assert_names(e, &path.display().to_string());
    if missing {
        assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e}");
    }
}

/// Runs the case on one backend.
fn run(case: &Case, fx: &Fixture, backend: Backend) {
    let name = format!("{backend:?} direct={}", case.direct);
    let opened = fx.dir.open_all();
    let mut r = SequentialFileReader::builder()
        .backend(backend)
        .buffer_size(case.buffer_size)
        .read_size(case.read_size)
        .queue_depth(case.queue_depth)
        .direct_io(case.direct)
        .build()
        .unwrap_or_else(|e| panic!("{name}: build: {e}"));
    let mut m = Model::default();
    let pool = case.buffer_size.next_multiple_of(PAGE);
    for (n, step) in case.steps.iter().enumerate() {
        let what = format!("{name}: step {n} {step:?}");
        if let Step::Rebind = step {
            r = r.rebind().unwrap_or_else(|e| panic!("{what}: {e}"));
            m = Model::default();
        } else {
            apply(&mut r, &mut m, (fx, pool), &opened, step, &what);
        }
        let at = if m.rest().is_some() { m.at } else { 0 };
        assert_eq!(r.file_offset(), at as u64, "{what}: file_offset");
        let front = m.queue.front();
        assert_eq!(r.current_index(), front.map(|e| e.index), "{what}");
        assert_eq!(
            r.current_path(),
            front.and_then(|e| e.path.as_deref()),
            "{what}"
        );
    }
    if case.finish {
        check_rest(&mut r, &m, &name);
    }
    // Direct where asked, on a disk that allows it (else read buffered): a case may read
    // nothing at all.
    let stats = r.stats();
    if stats.reads > 0 {
        assert_direct_reads(stats, case.direct && direct_io_here(), &name);
    }
    drop(r);
    // The reader reads at explicit offsets: the caller's files never moved.
    for (i, mut f) in opened.iter().enumerate() {
        assert_eq!(f.stream_position().unwrap(), 0, "{name}: file {i} moved");
    }
}

/// One step on the reader and the model, checking the reader's answer against the model's.
fn apply<'a>(
    r: &mut SequentialFileReader<'a>,
    m: &mut Model,
    (fx, pool): (&Fixture, usize),
    opened: &'a [File],
    step: &Step,
    what: &str,
) {
    match *step {
        Step::AddPath(f) => {
            r.push(&fx.dir.paths[f]).unwrap();
            let expect = Expect::Bytes(fx.bytes[f].clone());
            m.push(None, expect, Some(&fx.dir.paths[f]));
        }
        Step::AddOwned(f, l) => {
            let limit = l.of(fx.bytes[f].len());
            let file = File::open(&fx.dir.paths[f]).unwrap();
            r.push(readahead::Entry::owned_file(file).range(..limit))
                .unwrap();
            m.push(None, Expect::Bytes(fx.cut(f, limit)), None);
        }
        Step::AddBorrowed(f, l) => {
            let limit = l.of(fx.bytes[f].len());
            r.add_file_to_prefetch(&opened[f], limit).unwrap();
            m.push(Some((f, limit)), Expect::Bytes(fx.cut(f, limit)), None);
        }
        Step::AddMissing | Step::AddDirectory => {
            let missing = matches!(step, Step::AddMissing);
            let path = if missing { &fx.missing } else { &fx.directory };
            match r.push(path) {
                Ok(()) => {
                    let expect = Expect::Fails {
                        path: path.clone(),
                        missing,
                    };
                    m.push(None, expect, Some(path));
                }
                // Failing at queuing is allowed: then the path is not queued.
                Err(e) => assert_fails_as(&e, path, missing, what),
            }
        }
        Step::Activate(f, l) => activate(r, m, fx, opened, (f, l.of(fx.bytes[f].len())), what),
        Step::ActivateQueued(n) => {
            let queued: Vec<(usize, u64)> = m.queue.iter().filter_map(|e| e.identity).collect();
            if let Some(&identity) = queued.get(n % queued.len().max(1)) {
                activate(r, m, fx, opened, identity, what);
            }
        }
        Step::Move => {
            m.queue.pop_front();
            m.at = 0;
            let moved = r
                .move_to_next_file()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(moved, !m.queue.is_empty(), "{what}");
        }
        Step::Read(len) => {
            let mut buf = vec![0xA5; len];
            let res = r.read(&mut buf);
            match (m.rest(), m.front()) {
                (Some(rest), _) => {
                    let n = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(n <= len, "{what}: {n} bytes into {len}");
                    assert_eq!(n == 0, len == 0 || rest.is_empty(), "{what}: {n} bytes");
                    assert_bytes_eq(&buf[..n], &rest[..n], what);
                    m.at += n;
                }
                (None, Some(Expect::Fails { path, missing })) => match res {
                    Err(e) => assert_fails_as(&e, path, *missing, what),
                    // An empty buffer may be filled with nothing rather than fail.
                    Ok(0) if len == 0 => {}
                    Ok(n) => panic!("{what}: {n} bytes from a bad file"),
                },
                (None, _) => unreachable!(),
            }
        }
        Step::ReadExact(want) => {
            let left = m.rest().map_or(0, <[u8]>::len);
            let len = match want {
                Want::Bytes(n) => n,
                Want::Rest => left,
                Want::Past(extra) => left + extra,
            };
            let mut buf = vec![0xA5; len];
            let res = r.read_exact(&mut buf);
            match (m.rest(), m.front()) {
                (Some(rest), _) if len <= rest.len() => {
                    res.unwrap_or_else(|e| panic!("{what}: read_exact({len}): {e}"));
                    assert_bytes_eq(&buf, &rest[..len], what);
                    m.at += len;
                }
                (Some(rest), _) => {
                    let e = res.expect_err("read_exact past the end succeeded");
                    assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{what}: {e}");
                    // As std says, how much was read is unspecified; never more than the file.
                    let at = r.file_offset() as usize;
                    assert!(
                        at >= m.at && at - m.at <= rest.len(),
                        "{what}: offset {at}, was {}",
                        m.at
                    );
                    m.at = at;
                }
                (None, Some(Expect::Fails { path, missing })) => match res {
                    Err(e) => assert_fails_as(&e, path, *missing, what),
                    Ok(()) if len == 0 => {}
                    Ok(()) => panic!("{what}: {len} bytes from a bad file"),
                },
                (None, _) => unreachable!(),
            }
        }
        Step::FillConsume(c) => {
            let res = r.fill_buf();
            let avail = check_filled(res, m, 1, what);
            consume_filled(r, m, avail, c);
        }
        Step::FillAtLeast(n, c) => {
            let n = match n {
                AtLeast::Bytes(n) => n,
                AtLeast::Pool => pool,
                AtLeast::OverPool(extra) => pool + extra,
            };
            let res = r.fill_buf_at_least(n);
            if n > pool {
                let e = res.expect_err("more than the pool holds");
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
                return;
            }
            let avail = check_filled(res, m, n, what);
            consume_filled(r, m, avail, c);
        }
        Step::Skip(by) => {
            let left = m.rest().map_or(0, <[u8]>::len) as u64;
            let n = match by {
                SkipBy::Bytes(n) => n,
                SkipBy::Past(extra) => left + extra,
            };
            let res = r.skip(n);
            match (m.rest(), m.front()) {
                (Some(_), _) => {
                    let skipped = res.unwrap_or_else(|e| panic!("{what}: skip({n}): {e}"));
                    assert_eq!(skipped, n.min(left), "{what}");
                    m.at += skipped as usize;
                }
                (None, Some(Expect::Fails { path, missing })) => match res {
                    Err(e) => assert_fails_as(&e, path, *missing, what),
                    // Skipping nothing may succeed rather than fail, as reading nothing may.
                    Ok(0) if n == 0 => {}
                    Ok(k) => panic!("{what}: skipped {k} bytes of a bad file"),
                },
                (None, _) => unreachable!(),
            }
        }
        Step::Rebind => unreachable!("run rebinds"),
        Step::ReadToEnd => {
            let mut v = b"before".to_vec();
            let res = r.read_to_end(&mut v);
            match (m.rest(), m.front()) {
                (Some(rest), _) => {
                    let n = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(n, rest.len(), "{what}");
                    assert_eq!(&v[..6], b"before", "{what}: appends");
                    assert_bytes_eq(&v[6..], rest, what);
                    m.at += n;
                }
                (None, Some(Expect::Fails { path, missing })) => {
                    assert_fails_as(&res.unwrap_err(), path, *missing, what);
                    assert_eq!(v, b"before", "{what}: nothing appended");
                }
                (None, _) => unreachable!(),
            }
        }
    }
}

/// Checks what `fill_buf` or `fill_buf_at_least(at_least)` returned against the model: at
/// least `at_least` bytes of the file's rest, or all of it; its length (0 for a bad file).
fn check_filled(res: std::io::Result<&[u8]>, m: &Model, at_least: usize, what: &str) -> usize {
    match (m.rest(), m.front()) {
        (Some(rest), _) => {
            let avail = res.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(avail.len() <= rest.len(), "{what}: past the end");
            assert!(
                avail.len() >= at_least.min(rest.len()),
                "{what}: {} bytes of {} left",
                avail.len(),
                rest.len()
            );
            assert_bytes_eq(avail, &rest[..avail.len()], what);
            avail.len()
        }
        (None, Some(Expect::Fails { path, missing })) => {
            assert_fails_as(&res.unwrap_err(), path, *missing, what);
            0
        }
        (None, _) => unreachable!(),
    }
}

/// Consumes, as `c` says, after a fill that returned `avail` bytes.
fn consume_filled(r: &mut SequentialFileReader<'_>, m: &mut Model, avail: usize, c: Consume) {
    let amt = match c {
        Consume::Bytes(n) => n,
        Consume::All => avail,
        Consume::Over(extra) => avail + extra,
        Consume::Max => usize::MAX,
    };
    // Documented: `consume` clamps to what the fill returned.
    r.consume(amt);
    if m.rest().is_some() {
        m.at += amt.min(avail);
    }
}

/// `activate_file` on the reader and the model: the first entry matching `(file, limit)`
/// becomes current (what is ahead of it is dropped), else the queue holds it alone; it starts
/// at byte 0 either way.
fn activate<'a>(
    r: &mut SequentialFileReader<'a>,
    m: &mut Model,
    fx: &Fixture,
    opened: &'a [File],
    (f, limit): (usize, u64),
    what: &str,
) {
    r.activate_file(&opened[f], limit)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    match m.queue.iter().position(|e| e.identity == Some((f, limit))) {
        Some(i) => {
            m.queue.drain(..i);
        }
        None => {
            m.queue.clear();
            m.push(Some((f, limit)), Expect::Bytes(fx.cut(f, limit)), None);
        }
    }
    m.at = 0;
}

/// Reads everything left with the documented loop and checks it against the model.
fn check_rest(r: &mut SequentialFileReader<'_>, m: &Model, name: &str) {
    let got = read_all_files(r);
    let expected = m.queue.len().max(1); // The loop's one empty file on an empty reader.
    assert_eq!(got.len(), expected, "{name}: files left");
    for (i, g) in got.iter().enumerate() {
        let what = format!("{name}: the rest, file #{i}");
        match (g, m.queue.get(i).map(|e| &e.expect)) {
            (Ok(g), None) => assert!(g.is_empty(), "{what}"),
            (Ok(g), Some(Expect::Bytes(b))) => {
                let from = if i == 0 { m.at } else { 0 };
                assert_bytes_eq(g, &b[from..], &what);
            }
            (Err(e), Some(Expect::Fails { path, missing })) => {
                assert_fails_as(e, path, *missing, &what)
            }
            (Ok(g), Some(Expect::Fails { .. })) => {
                panic!("{what}: {} bytes from a bad file", g.len())
            }
            (Err(e), _) => panic!("{what}: {e}"),
        }
    }
}

proptest! {
    // 48 cases, each on every backend the kernel allows.
    #![proptest_config(proptest_config(48))]

    #[test]
    fn random_operations_match_the_model(case in case()) {
        let fx = Fixture::new(&case.sizes);
        for &backend in backends_once() {
            run(&case, &fx, backend);
        }
    }
}
