//! `--records`: every record of every file parsed and its data hashed with blake3, as a
//! validator's startup scan of its account storage does (see `accounts.rs` for the layout).
//!
//! The loop is written once, over [`RecordSource`]: at least `n` contiguous bytes of the
//! current file, then `consume`. The reader is one as it is (`fill_buf_at_least`), a file of
//! the scan or a reader of its own; std's `BufReader` gets there through [`Spilling`], which
//! copies a record that straddles the end of its buffer into a spill `Vec`: that is what a
//! validator does today. The hashes are folded into a sum that does not depend on the order
//! of the records or the files ([`RecordSum`]), so that every backend and thread count agrees.

use std::io::{self, BufRead};

use indicatif::ProgressBar;
use readahead::{ScanFile, SequentialFileReader};

use super::accounts::{record_size, DATA_LEN_AT, HEADER};

/// Records up to this many bytes are asked for whole; longer ones are hashed as they stream
/// by, so that a bad length never asks for more memory than this.
pub const WHOLE_MAX: usize = 2 << 20;

/// Bytes of one file, a record at a time.
pub trait RecordSource {
    /// At least `n` contiguous bytes of the current file, or all that is left of it (fewer
    /// only at its end, none there).
    fn fill_at_least(&mut self, n: usize) -> io::Result<&[u8]>;
    /// Marks the first `n` bytes of what `fill_at_least` returned as used.
    fn consume(&mut self, n: usize);
}

/// A `BufRead` as a [`RecordSource`]: its own buffer where the bytes asked for are in it,
/// else a copy in `spill` of the bytes asked for, taken from as many of its fills as needed.
#[derive(Debug)]
pub struct Spilling<'s, R> {
    inner: R,
    /// `spill[start..]` is handed out before anything of `inner`.
    spill: &'s mut Vec<u8>,
    start: usize,
}

impl<'s, R: BufRead> Spilling<'s, R> {
    /// A source over `inner`, with `spill` (emptied here) for records that straddle.
    pub fn new(inner: R, spill: &'s mut Vec<u8>) -> Self {
        spill.clear();
        Spilling {
            inner,
            spill,
            start: 0,
        }
    }

    /// Bytes in the spill not consumed yet.
    fn spilled(&self) -> usize {
        self.spill.len() - self.start
    }

    /// Copies from `inner` until the spill holds `n` bytes or the file ends; never more than
    /// `n`, so that the spill empties with the record and the next one can be zero-copy.
    fn top_up(&mut self, n: usize) -> io::Result<()> {
        while self.spilled() < n {
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            // Fields, not `spilled()`: `chunk` still borrows `inner`.
            let take = chunk.len().min(n - (self.spill.len() - self.start));
            self.spill.extend_from_slice(&chunk[..take]);
            self.inner.consume(take);
        }
        Ok(())
    }
}

impl<R: BufRead> RecordSource for Spilling<'_, R> {
    fn fill_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.spilled() == 0 {
            let available = self.inner.fill_buf()?.len();
            if available >= n || available == 0 {
                // Asked again to hand out the borrow; the bytes are buffered, nothing is read.
                return self.inner.fill_buf();
            }
            self.spill.clear();
            self.start = 0;
        }
        self.top_up(n)?;
        Ok(&self.spill[self.start..])
    }

    fn consume(&mut self, n: usize) {
        if self.spilled() == 0 {
            return self.inner.consume(n);
        }
        assert!(
            n <= self.spilled(),
            "consume({n}) past the record handed out"
        );
        self.start += n;
        if self.spilled() == 0 {
            self.spill.clear();
            self.start = 0;
        }
    }
}

/// The reader's files as record sources, a file of the scan and the current file of a reader
/// alike: `fill_buf_at_least` returns a record in place, copying it only where it straddles
/// the end of the pool (see `Stats::bytes_spilled`).
macro_rules! in_place {
    ($($source:ty),*) => {$(
        impl RecordSource for $source {
            fn fill_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
                self.fill_buf_at_least(n)
            }

            fn consume(&mut self, n: usize) {
                BufRead::consume(self, n)
            }
        }
    )*};
}

in_place!(ScanFile<'_, '_>, SequentialFileReader<'_>);

/// The records of some files, hashed: how many, and the wrapping sum of the first 16 bytes of
/// each record's blake3 hash (as a little-endian `u128`), which no order changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordSum {
    pub records: u64,
    pub sum: u128,
}

impl RecordSum {
    fn add(&mut self, hash: &blake3::Hash) {
        let first: [u8; 16] = hash.as_bytes()[..16].try_into().expect("16 of 32 bytes");
        self.sum = self.sum.wrapping_add(u128::from_le_bytes(first));
        self.records += 1;
    }

    /// Adds the records of `other`.
    pub fn merge(&mut self, other: RecordSum) {
        self.sum = self.sum.wrapping_add(other.sum);
        self.records += other.records;
    }
}

/// Parses and hashes every record of the rest of the current file; returns the bytes
/// consumed, and the file's records or the error that stopped it (a record that runs past the
/// end of the file, or a read's).
pub fn scan_file(
    source: &mut impl RecordSource,
    bar: Option<&ProgressBar>,
) -> (u64, io::Result<RecordSum>) {
    let (mut offset, mut sum) = (0, RecordSum::default());
    loop {
        match next_record(source, offset, &mut sum) {
            Ok(0) => return (offset, Ok(sum)),
            Ok(n) => {
                offset += n;
                if let Some(bar) = bar {
                    bar.inc(n);
                }
            }
            Err(e) => return (offset, Err(e)),
        }
    }
}

/// Hashes the record at `offset` into `sum`; the bytes it took, 0 at the end of the file.
fn next_record(
    source: &mut impl RecordSource,
    offset: u64,
    sum: &mut RecordSum,
) -> io::Result<u64> {
    let header = source.fill_at_least(HEADER)?;
    if header.is_empty() {
        return Ok(0);
    }
    if header.len() < HEADER {
        let msg = format!(
            "{} bytes left at offset {offset}, too few for a record's {HEADER}-byte header",
            header.len()
        );
        return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
    }
    let len_bytes = header[DATA_LEN_AT].try_into().expect("8 bytes");
    let data_len = u64::from_le_bytes(len_bytes);
    if data_len > (WHOLE_MAX - HEADER) as u64 {
        return stream_record(source, offset, data_len, sum);
    }
    let size = record_size(data_len) as usize;
    let end = HEADER + data_len as usize;
    if header.len() >= size {
        // The header's fill holds the whole record (the usual case): no second call.
        sum.add(&blake3::hash(&header[HEADER..end]));
        source.consume(size);
        return Ok(size as u64);
    }
    let record = source.fill_at_least(size)?;
    if record.len() < end {
        return Err(past_end(offset, data_len, record.len() - HEADER));
    }
    sum.add(&blake3::hash(&record[HEADER..end]));
    // The padding may be cut short by the end of the file.
    let taken = record.len().min(size);
    source.consume(taken);
    Ok(taken as u64)
}

/// Hashes a record too long to ask for whole, as it streams by.
fn stream_record(
    source: &mut impl RecordSource,
    offset: u64,
    data_len: u64,
    sum: &mut RecordSum,
) -> io::Result<u64> {
    source.consume(HEADER);
    let mut hasher = blake3::Hasher::new();
    let mut left = data_len;
    while left > 0 {
        let chunk = source.fill_at_least(1)?;
        if chunk.is_empty() {
            return Err(past_end(offset, data_len, (data_len - left) as usize));
        }
        let take = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        hasher.update(&chunk[..take]);
        source.consume(take);
        left -= take as u64;
    }
    let padding = (record_size(data_len) - HEADER as u64 - data_len) as usize;
    let taken = source.fill_at_least(padding)?.len().min(padding);
    source.consume(taken);
    sum.add(&hasher.finalize());
    Ok(HEADER as u64 + data_len + taken as u64)
}

fn past_end(offset: u64, data_len: u64, left: usize) -> io::Error {
    let msg = format!(
        "the record at offset {offset} holds {data_len} bytes of data, but only {left} are \
         left in the file"
    );
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
