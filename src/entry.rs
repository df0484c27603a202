//! What is read: a path, or an open file, each whole or a byte range of it. The one
//! description of a file both the reader ([`push`](crate::SequentialFileReader::push)) and
//! the scan take. Depends on `source` (where the bytes come from) and `consts`.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::ops::{Bound, Range, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::consts::PAGE;
use crate::source::{Descriptor, Source};

/// One file to read: a path or a file the caller keeps (borrowed for `'a`), or one the
/// reader takes over, whole or a byte range of it.
///
/// Paths, `&str`s, `String`s and `File`s convert into entries, so
/// [`SequentialFileReader::push`](crate::SequentialFileReader::push) and
/// [`Scan::new`](crate::Scan::new) take them as they are; [`range`](Self::range) narrows an
/// entry to a byte range, and [`exact_range`](Self::exact_range) to one the file must hold
/// whole. An entry is the whole file unless one of them says otherwise.
///
/// | entry | reads |
/// |---|---|
/// | `&Path`, `&PathBuf`, `&str`, `&OsStr` | the file at a path the caller keeps (borrowed for `'a`, not copied when queued), opened when the read-ahead reaches it |
/// | `PathBuf`, `String`, `OsString` (or [`Entry::path`]) | the same, the path taken over |
/// | `&file` (or [`Entry::file`]) | a `File` the caller keeps open |
/// | `file` (or [`Entry::owned_file`]) | a `File` the reader closes once it is done with it |
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
/// let data = Entry::path("storage/1.bin").range(8192..8192 + 4096);
/// assert_eq!((data.start(), data.len()), (8192, Some(4096)));
/// // All but a 512-byte header:
/// let body = Entry::path("storage/2.bin").range(512..);
/// assert_eq!((body.start(), body.len()), (512, None));
/// ```
pub struct Entry<'a> {
    source: Source<'a>,
    start: u64,
    /// `None`: from `start` to the end of the file.
    len: Option<u64>,
    /// Whether a file that ends before `start + len` fails, rather than ends there.
    exact: bool,
}

/// The file by its name (a path, or a descriptor's), and the range asked for.
impl std::fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("file", &self.source.name())
            .field("start", &self.start)
            .field("len", &self.len)
            .field("exact", &self.exact)
            .finish()
    }
}

impl<'a> Entry<'a> {
    /// All of the file at `path`, opened (read-only) only when the read-ahead reaches it;
    /// the entry owns the path (a copy, where given by reference). A path the caller keeps
    /// for as long as the reader queues it may be borrowed instead, with no copy:
    /// `Entry::from(&path)`.
    ///
    /// # Examples
    ///
    /// ```
    /// let entry = readahead::Entry::path("a.bin");
    /// assert_eq!(entry.as_path(), Some(std::path::Path::new("a.bin")));
    /// ```
    pub fn path(path: impl Into<PathBuf>) -> Self {
        Self::whole(Source::Path(Cow::Owned(path.into())))
    }

    /// All of a file the caller keeps open for `'a`; the same as `Entry::from(&file)`.
    ///
    /// # Examples
    ///
    /// See [`SequentialFileReader::push`](crate::SequentialFileReader::push).
    pub fn file(file: &'a File) -> Self {
        Self::whole(Source::Borrowed(file))
    }

    /// All of a file the reader takes over, and closes once read; the same as
    /// `Entry::from(file)`.
    ///
    /// # Examples
    ///
    /// See [`SequentialFileReader::push`](crate::SequentialFileReader::push).
    pub fn owned_file(file: File) -> Self {
        Self::whole(Source::Owned(Arc::new(Descriptor::new(file))))
    }

    fn whole(source: Source<'a>) -> Self {
        Entry {
            source,
            start: 0,
            len: None,
            exact: false,
        }
    }

    /// Only the bytes of `range` of the file: `a..b`, or `a..` for all from byte `a`. A file
    /// that ends first ends the range there, without error; for an error instead, see
    /// [`exact_range`](Self::exact_range).
    ///
    /// The reader's [`file_offset`](crate::SequentialFileReader::file_offset) counts from
    /// the file's byte 0, so it starts at the range's start. Only the range is read (with
    /// [`direct_io`](crate::ReaderBuilder::direct_io), from its start aligned down to 4 KiB).
    ///
    /// # Panics
    ///
    /// Where the range ends before it starts, as slicing does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use readahead::{Entry, SequentialFileReader};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("f");
    /// # std::fs::write(&path, b"header:payload:padding")?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(Entry::from(&path).range(7..14))?;
    /// assert_eq!(reader.file_offset(), 7);
    /// let mut payload = String::new();
    /// reader.read_to_string(&mut payload)?;
    /// assert_eq!(payload, "payload");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn range(self, range: impl RangeBounds<u64>) -> Self {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        // An end past `u64::MAX` is the end of any file.
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        if let Some(end) = end {
            assert!(start <= end, "range starts at {start} but ends at {end}");
        }
        Entry {
            start,
            len: end.map(|end| end - start),
            exact: false,
            ..self
        }
    }

    /// Bytes `range` of the file, which it must hold whole: where it ends first, the file
    /// fails with an error of kind [`UnexpectedEof`](std::io::ErrorKind::UnexpectedEof)
    /// ([`Error::EndedEarly`]) naming it (its path where known) and the offset where it
    /// ended. For files whose length comes from elsewhere (an index, a listing) and must be
    /// there.
    ///
    /// A file that holds less than the range when it is opened fails at once, at its start:
    /// no byte of a range that cannot be whole comes out. One cut while it is read fails
    /// where its reads find the end, after the bytes before it. Either way every way out of
    /// the file (`read`, `fill_buf`, `fill_buf_at_least`, `skip`) gives the error, never a
    /// short answer that looks like the end; [`ScanFile::len`](crate::ScanFile::len) says
    /// how many bytes the file held when opened.
    ///
    /// [`Error::EndedEarly`]: crate::Error::EndedEarly
    ///
    /// # Panics
    ///
    /// Where the range ends before it starts, as slicing does.
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
    /// let entries = [&whole, &short].map(|p| Entry::path(p).exact_range(100..300));
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
    pub fn exact_range(self, range: Range<u64>) -> Self {
        Entry {
            exact: true,
            ..self.range(range)
        }
    }

    /// Where the entry's bytes start in its file (0 unless [`range`](Self::range) says).
    ///
    /// # Examples
    ///
    /// See the [type's](Self#examples).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The range's length, where one was given: `None` for a file read to its end.
    ///
    /// # Examples
    ///
    /// See the [type's](Self#examples).
    pub fn len(&self) -> Option<u64> {
        self.len
    }

    /// Whether the entry is a range of 0 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(readahead::Entry::path("a.bin").range(10..10).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == Some(0)
    }

    /// The path, for an entry given by path.
    ///
    /// # Examples
    ///
    /// See [`path`](Self::path).
    pub fn as_path(&self) -> Option<&Path> {
        match &self.source {
            Source::Path(path) => Some(path),
            _ => None,
        }
    }

    /// The bytes the entry stands for in a scan's hand-out of work: its length where known
    /// (for a file, from its size), else one page. A path is not looked up for its size: that
    /// would double the metadata lookups of a scan, on the thread that hands out the work.
    pub(crate) fn weight(&self) -> u64 {
        let known = match &self.source {
            _ if self.len.is_some() => self.len,
            Source::Path(_) => None,
            Source::Borrowed(file) => size_from(file, self.start),
            Source::Owned(file) => size_from(file, self.start),
        };
        known.unwrap_or(PAGE as u64)
    }

    /// The source, its start, its length (`u64::MAX`: to the end, the queue's own
    /// convention) and whether it must be whole: what the reader queues.
    pub(crate) fn into_parts(self) -> (Source<'a>, u64, u64, bool) {
        let len = self.len.unwrap_or(u64::MAX);
        (self.source, self.start, len, self.exact)
    }
}

/// The bytes of `file` from `start` to its end, where its size can be had.
fn size_from(file: &File, start: u64) -> Option<u64> {
    // A block device's metadata says 0 bytes; the reader sizes it as `sys` does.
    Some(crate::sys::file_size(file).ok()?.saturating_sub(start))
}

impl From<PathBuf> for Entry<'_> {
    fn from(path: PathBuf) -> Self {
        Entry::path(path)
    }
}

impl<'a> From<&'a Path> for Entry<'a> {
    fn from(path: &'a Path) -> Self {
        Entry::whole(Source::Path(Cow::Borrowed(path)))
    }
}

impl<'a> From<&'a PathBuf> for Entry<'a> {
    fn from(path: &'a PathBuf) -> Self {
        Entry::from(path.as_path())
    }
}

impl<'a> From<&'a str> for Entry<'a> {
    fn from(path: &'a str) -> Self {
        Entry::from(Path::new(path))
    }
}

impl From<String> for Entry<'_> {
    fn from(path: String) -> Self {
        Entry::path(path)
    }
}

impl<'a> From<&'a OsStr> for Entry<'a> {
    fn from(path: &'a OsStr) -> Self {
        Entry::from(Path::new(path))
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
