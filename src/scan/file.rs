//! What a scan's closure gets of one file (`ScanFile`): the reader, confined to that file.

use std::fmt;
use std::io::{self, BufRead, Read};
use std::path::Path;

use super::state::ScanState;
use crate::reader::SequentialFileReader;

/// Bytes consumed between updates of the scan's byte count.
const PUBLISH_EVERY: u64 = 1 << 20;

/// One file of a scan, as its closure sees it: its bytes through [`BufRead`] and [`Read`]
/// (which end at the end of the file, or of its range), [`fill_buf_at_least`] and [`skip`]
/// for records, and what the scan knows of it.
///
/// The bytes come from the thread's [`SequentialFileReader`], which has the files after this
/// one read ahead; the closure cannot move it to another file.
///
/// # Examples
///
/// See [`Scan`](crate::Scan#examples), and
/// [`Entry::exact_range`](crate::Entry::exact_range).
///
/// [`fill_buf_at_least`]: Self::fill_buf_at_least
/// [`skip`]: Self::skip
pub struct ScanFile<'r, 'a> {
    reader: &'r mut SequentialFileReader<'a>,
    index: usize,
    start: u64,
    len: Option<u64>,
    progress: Counted<'r>,
}

/// The bytes of one file added to the scan's count, a MiB at a time, so that a long file
/// shows in the progress as it is read.
struct Counted<'r> {
    state: &'r ScanState,
    /// The file offset up to which bytes were added to the scan's count.
    counted: u64,
}

impl Counted<'_> {
    /// The consumer is at `offset`: counts the bytes since the last count once they make a
    /// MiB.
    #[inline]
    fn at(&mut self, offset: u64) {
        if offset.saturating_sub(self.counted) >= PUBLISH_EVERY {
            self.count(offset);
        }
    }

    /// Counts the bytes up to `offset`.
    fn count(&mut self, offset: u64) {
        self.state.count_bytes(offset.saturating_sub(self.counted));
        self.counted = self.counted.max(offset);
    }
}

impl<'r, 'a> ScanFile<'r, 'a> {
    pub(super) fn new(
        reader: &'r mut SequentialFileReader<'a>,
        index: usize,
        start: u64,
        len: Option<u64>,
        state: &'r ScanState,
    ) -> Self {
        ScanFile {
            reader,
            index,
            start,
            len,
            progress: Counted {
                state,
                counted: start,
            },
        }
    }

    /// The file's index in the scan's input (0 for the first entry).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The file's path, for an entry given by path; `None` for a `File`.
    pub fn path(&self) -> Option<&Path> {
        self.reader.current_path()
    }

    /// The bytes of the entry: its range (or the whole file) cut at the file's size when it
    /// was opened, so never bytes the file did not have then. The file is open before the
    /// closure runs, so this is known from the start; `None` only for a file that could not
    /// be opened (reading it gives its error).
    ///
    /// A file found in the page cache is sized by copying it (up to 1 MiB, as std's `BufReader`
    /// of 1 MiB reads, or the pool where that is smaller) before the closure runs, where that
    /// copy tells its end, rather than by a seek: its bytes then wait for the closure's first
    /// read, and a closure that skips them or returns without reading has had them copied all
    /// the same.
    ///
    /// A file may still shrink after it was opened: a range that must be read whole is a
    /// [`Entry::exact_range`](crate::Entry::exact_range), whose example shows the
    /// error.
    pub fn len(&self) -> Option<u64> {
        self.reader.current_len()
    }

    /// Whether the entry is a byte range of its file (`Entry::range`), not the whole of
    /// it: `a..b`, or `a..` from a byte past the first.
    pub fn is_range(&self) -> bool {
        self.start > 0 || self.len.is_some()
    }

    /// Whether the entry has no bytes (as far as [`len`](Self::len) knows).
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// Where the entry's bytes start in the file (0 unless it is a range).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The offset in the file of the next byte, counted from the file's byte 0 (so from
    /// [`start`](Self::start) for a range).
    #[inline]
    pub fn file_offset(&self) -> u64 {
        self.reader.file_offset()
    }

    /// At least `n` contiguous bytes of the file, or all that is left of it (fewer only at
    /// its end): as [`SequentialFileReader::fill_buf_at_least`].
    ///
    /// # Errors
    ///
    /// As [`SequentialFileReader::fill_buf_at_least`]: `n` larger than the pool, or the
    /// file's error.
    #[inline]
    pub fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        self.reader.fill_buf_at_least(n)
    }

    /// Skips `n` bytes without reading them (but those copied before the closure ran: see
    /// [`len`](Self::len)); how many were skipped (fewer only at the end): as
    /// [`SequentialFileReader::skip`].
    ///
    /// # Errors
    ///
    /// The file's error.
    pub fn skip(&mut self, n: u64) -> io::Result<u64> {
        let skipped = self.reader.skip(n)?;
        self.count_if_due();
        Ok(skipped)
    }

    /// Adds the bytes consumed since the last count to the scan's, once they make a MiB.
    #[inline]
    fn count_if_due(&mut self) {
        self.progress.at(self.reader.file_offset());
    }

    /// Counts the rest of what the closure consumed.
    pub(super) fn finish(mut self) {
        self.progress.count(self.reader.file_offset());
    }
}

impl Read for ScanFile<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reader.read(buf)?;
        self.count_if_due();
        Ok(n)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let result = self.reader.read_exact(buf);
        self.count_if_due();
        result
    }

    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let result = self.reader.read_to_end(buf);
        self.count_if_due();
        result
    }
}

impl BufRead for ScanFile<'_, '_> {
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.reader.fill_buf()
    }

    #[inline]
    fn consume(&mut self, amt: usize) {
        self.reader.consume(amt);
        self.count_if_due();
    }
}

impl fmt::Debug for ScanFile<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanFile")
            .field("index", &self.index)
            .field("path", &self.path())
            .field("start", &self.start)
            .field("len", &self.len())
            .field("file_offset", &self.file_offset())
            .finish()
    }
}
