//! Reading a list of files with one reader, queued in a mix of ways, keeping what each file
//! gave: shared by the FUSE tests (through `fusecheck`) and the soak example.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::PathBuf;

use readahead::{ReaderBuilder, SequentialFileReader, Stats};

/// How a file is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    Path,
    Owned,
    Borrowed,
}

/// What reading one file gave.
#[derive(Debug, Default)]
pub struct Got {
    /// Its bytes, up to its error if it had one; zeros where they were skipped.
    pub bytes: Vec<u8>,
    /// Ranges passed over with `skip` (offset, length): never read, zeros in `bytes`.
    pub skipped: Vec<(u64, u64)>,
    /// Whether a short answer of `fill_buf_at_least` or `skip`, which says the file ends
    /// there, was followed by more bytes or an error.
    pub short_not_at_end: bool,
    pub error: Option<io::Error>,
    /// Whether the error came out of queuing it rather than reading it.
    pub at_queue: bool,
    /// After an error from reading: whether reading again failed again.
    pub error_kept: bool,
}

/// Reads every file with the documented loop, keeping each file's bytes up to its error.
pub fn scan(paths: &[PathBuf], queue: &[Queue], b: ReaderBuilder) -> Vec<Got> {
    scan_with_stats(paths, queue, b).0
}

/// [`scan`], and the reader's counters at the end.
pub fn scan_with_stats(paths: &[PathBuf], queue: &[Queue], b: ReaderBuilder) -> (Vec<Got>, Stats) {
    scan_with(paths, queue, b, read_whole)
}

/// Reads every file as a parser of records would (see [`read_records`]).
pub fn scan_records(paths: &[PathBuf], queue: &[Queue], b: ReaderBuilder) -> (Vec<Got>, Stats) {
    scan_with(paths, queue, b, read_records)
}

/// Reads the current file with `read_to_end`.
fn read_whole(r: &mut SequentialFileReader<'_>, g: &mut Got) {
    if let Err(e) = r.read_to_end(&mut g.bytes) {
        g.error = Some(e);
        g.error_kept = r.read(&mut [0; 64]).is_err();
    }
}

/// A record's header, as in a validator's account storage files.
const HEADER: usize = 136;

/// The length of the body of the record at `offset`: made up from the offset (the files'
/// bytes are not records), up to 12 KiB, so records straddle reads and the pool's end.
fn body_len(offset: u64) -> usize {
    (offset.wrapping_mul(2_654_435_761) >> 7) as usize % 12_000
}

/// Reads the current file as records: a header with `fill_buf_at_least`, then the whole
/// record with it too, or passed over with `skip` (one in three, and now and then 40 KiB
/// at once, so whole reads are never issued). A short answer of either says the file ends
/// there; an error is the file's, and the bytes before it then come out of `fill_buf`.
fn read_records(r: &mut SequentialFileReader<'_>, g: &mut Got) {
    let mut n = 0u64;
    loop {
        let len = HEADER + body_len(g.bytes.len() as u64);
        n += 1;
        let step = if n.is_multiple_of(3) {
            skip_record(r, g, if n.is_multiple_of(7) { 40 << 10 } else { len })
        } else {
            take_record(r, g, len)
        };
        match step {
            Ok(true) => {}
            Ok(false) => {
                // The end: nothing may follow, neither bytes nor an error.
                g.short_not_at_end = !matches!(r.fill_buf(), Ok([]));
                return;
            }
            Err(e) => return drain_to_error(r, g, e),
        }
    }
}

/// Takes a header, then a record of `len` bytes; whether the file goes on.
fn take_record(r: &mut SequentialFileReader<'_>, g: &mut Got, len: usize) -> io::Result<bool> {
    let header = r.fill_buf_at_least(HEADER)?;
    if header.len() < HEADER {
        let k = header.len();
        g.bytes.extend_from_slice(header);
        r.consume(k);
        return Ok(false);
    }
    let record = r.fill_buf_at_least(len)?;
    let k = record.len().min(len);
    g.bytes.extend_from_slice(&record[..k]);
    r.consume(k);
    Ok(k == len)
}

/// Passes over `len` bytes; whether the file goes on.
fn skip_record(r: &mut SequentialFileReader<'_>, g: &mut Got, len: usize) -> io::Result<bool> {
    let at = g.bytes.len() as u64;
    let k = r.skip(len as u64)?;
    assert_eq!(
        r.file_offset(),
        at + k,
        "skip moves the offset by what it returns"
    );
    g.skipped.push((at, k));
    g.bytes.resize(g.bytes.len() + k as usize, 0);
    Ok(k == len as u64)
}

/// After an error of the record API: the bytes before the failure come out of `fill_buf`,
/// then the error again (which is the one kept).
fn drain_to_error(r: &mut SequentialFileReader<'_>, g: &mut Got, first: io::Error) {
    loop {
        match r.fill_buf() {
            Ok([]) => {
                // The error went away: an end after it.
                g.error = Some(first);
                return;
            }
            Ok(buf) => {
                let k = buf.len();
                g.bytes.extend_from_slice(buf);
                r.consume(k);
            }
            Err(e) => {
                g.error = Some(e);
                g.error_kept = r.fill_buf_at_least(1).is_err() && r.skip(1).is_err();
                return;
            }
        }
    }
}

/// Reads every file with `read` between the documented loop's moves.
fn scan_with(
    paths: &[PathBuf],
    queue: &[Queue],
    b: ReaderBuilder,
    read: fn(&mut SequentialFileReader<'_>, &mut Got),
) -> (Vec<Got>, Stats) {
    let borrowed: Vec<Option<File>> = queue
        .iter()
        .zip(paths)
        .map(|(q, p)| (*q == Queue::Borrowed).then(|| File::open(p).unwrap()))
        .collect();
    let mut r = b.build().unwrap();
    let mut got: Vec<Got> = paths.iter().map(|_| Got::default()).collect();
    let mut order = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let queued = match queue[i] {
            Queue::Path => r.push(path),
            Queue::Owned => r.push(File::open(path).unwrap()),
            Queue::Borrowed => r.add_file_to_prefetch(borrowed[i].as_ref().unwrap(), u64::MAX),
        };
        match queued {
            Ok(()) => order.push(i),
            Err(e) => {
                got[i].error = Some(e);
                got[i].at_queue = true;
            }
        }
    }
    for (k, &i) in order.iter().enumerate() {
        if k > 0 {
            assert!(r.move_to_next_file().unwrap(), "file {i} is queued");
        }
        read(&mut r, &mut got[i]);
    }
    assert!(!r.move_to_next_file().unwrap(), "a file past the last");
    (got, r.stats())
}
