//! What a scan reads: a path, or an open file, each whole or a byte range of it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::consts::PAGE;
use crate::reader::SequentialFileReader;
use crate::source::Source;

/// One file of a [`Scan`](crate::Scan): a path, a file the caller keeps open (borrowed for
/// `'a`), or a file the scan takes over, whole or a byte range of it.
///
/// Paths, `&str`s, `String`s and `File`s convert into entries, so a scan takes a list of
/// paths as it is; [`range`](Self::range) narrows an entry to a byte range, and
/// [`exact_range`](Self::exact_range) to one the file must hold whole.
///
/// # Examples
///
/// ```
/// use std::path::PathBuf;
/// use readahead::Entry;
///
/// let whole = Entry::from(PathBuf::from("storage/0.bin"));
/// assert_eq!(whole.len(), None);
/// // A preallocated file whose data, by its own index, is 4096 bytes from byte 8192:
/// let data = Entry::path("storage/1.bin").range(8192, 4096);
/// assert_eq!((data.start(), data.len()), (8192, Some(4096)));
/// ```
#[derive(Debug)]
pub struct Entry<'a> {
    source: EntrySource<'a>,
    start: u64,
    len: u64,
    /// Whether a file that ends before `start + len` fails, rather than ends there.
    exact: bool,
}

/// Where an entry's bytes come from.
#[derive(Debug)]
enum EntrySource<'a> {
    Path(PathBuf),
    Borrowed(&'a File),
    Owned(File),
}

impl<'a> Entry<'a> {
    /// All of the file at `path`, opened (read-only) only when the read-ahead reaches it.
    pub fn path(path: impl Into<PathBuf>) -> Self {
        Self::whole(EntrySource::Path(path.into()))
    }

    /// All of a file the caller keeps open for `'a`.
    pub fn file(file: &'a File) -> Self {
        Self::whole(EntrySource::Borrowed(file))
    }

    /// All of a file the scan takes over, and closes once read.
    pub fn owned_file(file: File) -> Self {
        Self::whole(EntrySource::Owned(file))
    }

    fn whole(source: EntrySource<'a>) -> Self {
        Entry {
            source,
            start: 0,
            len: u64::MAX,
            exact: false,
        }
    }

    /// Only bytes `start..start + len` of the file (`len` of `u64::MAX`: from `start` to its
    /// end). A file that ends first ends the range there, without error; for an error
    /// instead, see [`exact_range`](Self::exact_range).
    #[must_use]
    pub fn range(self, start: u64, len: u64) -> Self {
        Entry {
            start,
            len,
            exact: false,
            ..self
        }
    }

    /// Bytes `start..start + len` of the file, which it must hold whole: where it ends
    /// first, the file fails with an error of kind
    /// [`UnexpectedEof`](std::io::ErrorKind::UnexpectedEof) ([`Error::EndedEarly`]) naming
    /// it (its path where known) and the offset where it ended. For files whose length
    /// comes from elsewhere (an index, a listing) and must be there.
    ///
    /// A file that holds less than the range when it is opened fails at once, at `start`:
    /// no byte of a range that cannot be whole comes out. One cut while it is read fails
    /// where its reads find the end, after the bytes before it. Either way every way out of
    /// the file (`read`, `fill_buf`, `fill_buf_at_least`, `skip`) gives the error, never a
    /// short answer that looks like the end; [`ScanFile::len`](crate::ScanFile::len) says
    /// how many bytes the file held when opened. With `len` of `u64::MAX` (to the end of
    /// the file, wherever it is) it is [`range`](Self::range).
    ///
    /// [`Error::EndedEarly`]: crate::Error::EndedEarly
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{self, Read};
    /// use readahead::{Entry, Outcome, Scan};
    ///
    /// # fn main() -> io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let (whole, short) = (dir.path().join("whole"), dir.path().join("short"));
    /// # std::fs::write(&whole, [1; 300])?;
    /// # std::fs::write(&short, [2; 150])?;
    /// // An index says each file holds 200 bytes from byte 100; `short` holds only 150.
    /// let entries = [&whole, &short].map(|p| Entry::path(p).exact_range(100, 200));
    /// let mut outcomes = Vec::new();
    /// Scan::new(entries)
    ///     .map(|file| {
    ///         let mut bytes = Vec::new();
    ///         file.read_to_end(&mut bytes)?; // the short file's error, with `?`
    ///         io::Result::Ok(bytes.len())
    ///     })
    ///     .for_each(|index, outcome| outcomes.push((index, outcome)))?;
    /// outcomes.sort_by_key(|(index, _)| *index);
    /// assert!(matches!(outcomes[0].1, Outcome::Done(200)));
    /// let Outcome::Failed(e) = &outcomes[1].1 else { panic!() };
    /// assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    /// assert!(e.to_string().contains("ends at offset 150"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn exact_range(self, start: u64, len: u64) -> Self {
        Entry {
            start,
            len,
            exact: len != u64::MAX,
            ..self
        }
    }

    /// Where the entry's bytes start in its file (0 unless [`range`](Self::range) says).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The range's length, where one was given: `None` for a file read to its end.
    pub fn len(&self) -> Option<u64> {
        (self.len != u64::MAX).then_some(self.len)
    }

    /// Whether the entry is a range of 0 bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path, for an entry given by path.
    pub fn as_path(&self) -> Option<&Path> {
        match &self.source {
            EntrySource::Path(path) => Some(path),
            _ => None,
        }
    }

    /// The bytes the entry stands for in the hand-out of work: its length where known (for
    /// a file, from its size), else one page. A path is not looked up for its size: that
    /// would double the metadata lookups of a scan, on the thread that hands out the work.
    pub(super) fn weight(&self) -> u64 {
        let known = match &self.source {
            _ if self.len != u64::MAX => Some(self.len),
            EntrySource::Path(_) => None,
            EntrySource::Borrowed(file) => size_from(file, self.start),
            EntrySource::Owned(file) => size_from(file, self.start),
        };
        known.unwrap_or(PAGE as u64)
    }

    /// Queues the entry into `reader`.
    pub(super) fn queue_into(self, reader: &mut SequentialFileReader<'a>) -> io::Result<()> {
        let Entry {
            source,
            start,
            len,
            exact,
        } = self;
        let source = match source {
            EntrySource::Path(path) => Source::Path(path.into()),
            EntrySource::Borrowed(file) => Source::Borrowed(file),
            EntrySource::Owned(file) => Source::Owned(Arc::new(file)),
        };
        reader.add_range(source, start, len, exact)
    }
}

/// The bytes of `file` from `start` to its end, where its size can be had.
fn size_from(file: &File, start: u64) -> Option<u64> {
    Some(file.metadata().ok()?.len().saturating_sub(start))
}

impl From<PathBuf> for Entry<'_> {
    fn from(path: PathBuf) -> Self {
        Entry::path(path)
    }
}

impl From<&Path> for Entry<'_> {
    fn from(path: &Path) -> Self {
        Entry::path(path)
    }
}

impl From<&PathBuf> for Entry<'_> {
    fn from(path: &PathBuf) -> Self {
        Entry::path(path)
    }
}

impl From<&str> for Entry<'_> {
    fn from(path: &str) -> Self {
        Entry::path(path)
    }
}

impl From<String> for Entry<'_> {
    fn from(path: String) -> Self {
        Entry::path(path)
    }
}

impl From<&OsStr> for Entry<'_> {
    fn from(path: &OsStr) -> Self {
        Entry::path(path)
    }
}

impl From<OsString> for Entry<'_> {
    fn from(path: OsString) -> Self {
        Entry::path(path)
    }
}

impl<'a> From<&'a File> for Entry<'a> {
    fn from(file: &'a File) -> Self {
        Entry::file(file)
    }
}

impl From<File> for Entry<'_> {
    fn from(file: File) -> Self {
        Entry::owned_file(file)
    }
}
