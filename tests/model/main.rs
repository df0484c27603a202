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

mod apply;
#[path = "../common/mod.rs"]
mod common;
mod steps;

use std::collections::VecDeque;
use std::io::Seek;
use std::path::{Path, PathBuf};

use apply::{apply, check_rest};
use common::*;
use proptest::prelude::*;
use readahead::{Backend, SequentialFileReader};
use steps::{case, Case, Step};

const KIB: usize = 1 << 10;
const PAGE: usize = 4096;
/// Files a case can queue; one more (the last) is only ever activated, never queued.
const FILES: usize = 4;

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
