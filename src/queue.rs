//! The FIFO of files: where each comes from, its limit, how far it has been asked for and
//! consumed, and its error. No syscalls here.
//!
//! Invariants of a [`FileEntry`]:
//! - `consumed <= next_read` once reads are issued from the start; both `<= end` once sized.
//! - `end` is `u64::MAX` until the file is sized, then `min(limit, size)`, and only ever
//!   lowered after that (a read that found the file's end earlier).
//! - `fd` is the descriptor reads go to; an entry with reads in flight keeps it (`in_flight`).

use std::collections::VecDeque;

use crate::error::{Error, FileName};
use crate::source::{FdRef, RawFd, Source};

/// One queued file.
#[derive(Debug)]
pub(crate) struct FileEntry<'a> {
    pub(crate) id: u64,
    pub(crate) source: Source<'a>,
    pub(crate) limit: u64,
    /// The descriptor reads go to, once set up.
    pub(crate) fd: Option<FdRef<'a>>,
    /// Whether `fd` was opened with `O_DIRECT`.
    pub(crate) direct: bool,
    /// Whether `fd` is a descriptor the reader opened (counts against `max_open_files`).
    pub(crate) opened_here: bool,
    /// Whether the backend is opening the file (a path) now.
    pub(crate) opening: bool,
    /// Whether the file's size is known (it was opened at least once).
    pub(crate) sized: bool,
    /// `min(limit, size)` once sized, `u64::MAX` before.
    pub(crate) sized_end: u64,
    /// Where the file ends: `sized_end`, or lower if a read found the end earlier.
    pub(crate) end: u64,
    /// The first byte no read has been issued for.
    pub(crate) next_read: u64,
    /// The offset of the next byte the consumer gets.
    pub(crate) consumed: u64,
    /// Reads of this file in flight.
    pub(crate) in_flight: usize,
    /// Why the file cannot be read further (boxed: most files never have one).
    pub(crate) error: Option<Box<Error>>,
}

impl<'a> FileEntry<'a> {
    fn new(id: u64, source: Source<'a>, limit: u64) -> Self {
        FileEntry {
            id,
            source,
            limit,
            fd: None,
            direct: false,
            opened_here: false,
            opening: false,
            sized: false,
            sized_end: u64::MAX,
            end: u64::MAX,
            next_read: 0,
            consumed: 0,
            in_flight: 0,
            error: None,
        }
    }

    /// Records the file's size once known.
    pub(crate) fn set_size(&mut self, size: u64) {
        self.sized = true;
        self.sized_end = size.min(self.limit);
        self.end = self.sized_end;
    }

    /// Whether the engine has more to do for this file: open it, or issue reads.
    pub(crate) fn wants_reads(&self) -> bool {
        self.error.is_none() && (!self.sized || self.next_read < self.end)
    }

    /// Whether the file is a path waiting to be opened (not open, not opening, not failed).
    pub(crate) fn wants_open(&self) -> bool {
        matches!(self.source, Source::Path(_))
            && self.fd.is_none()
            && !self.opening
            && self.wants_reads()
    }

    /// Whether every byte of the file has been asked for.
    pub(crate) fn all_issued(&self) -> bool {
        self.sized && self.next_read >= self.end
    }

    /// Whether nothing of the file is in flight and nothing more will be asked for: every
    /// byte was asked for, or it failed. Its descriptor may be closed then, not before (a
    /// read in flight may still need it to be continued).
    pub(crate) fn reads_finished(&self) -> bool {
        self.in_flight == 0 && (self.error.is_some() || (self.sized && self.next_read >= self.end))
    }

    /// The identity `activate_file` matches on: the caller's descriptor plus the limit.
    pub(crate) fn matches(&self, fd: RawFd, limit: u64) -> bool {
        self.source.raw_fd() == Some(fd) && self.limit == limit
    }

    /// How errors name this file.
    pub(crate) fn name(&self) -> FileName {
        self.source.name()
    }

    /// Forgets every read, to read the file again from byte 0.
    pub(crate) fn rewind(&mut self) {
        debug_assert_eq!(self.in_flight, 0, "rewind with reads in flight");
        self.next_read = 0;
        self.consumed = 0;
        self.end = self.sized_end;
        self.error = None;
    }
}

/// The FIFO of files. The front is the current file.
#[derive(Debug, Default)]
pub(crate) struct Queue<'a> {
    files: VecDeque<FileEntry<'a>>,
    next_id: u64,
    /// Index of the first file the engine may still have work for; every file before it
    /// has all its reads issued (or has failed).
    pub(crate) cursor: usize,
    /// Index of the first file the open-ahead has not looked at; every path before it is
    /// open, being opened, done or failed.
    pub(crate) open_cursor: usize,
    /// Files the reader opened itself that are still open (counted against the cap).
    pub(crate) open_here: usize,
}

impl<'a> Queue<'a> {
    pub(crate) fn push(&mut self, source: Source<'a>, limit: u64) {
        let id = self.next_id;
        self.next_id += 1;
        self.files.push_back(FileEntry::new(id, source, limit));
    }

    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub(crate) fn front(&self) -> Option<&FileEntry<'a>> {
        self.files.front()
    }

    pub(crate) fn front_mut(&mut self) -> Option<&mut FileEntry<'a>> {
        self.files.front_mut()
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut FileEntry<'a>> {
        self.files.get_mut(index)
    }

    /// The index of the entry with this id (files are in id order).
    pub(crate) fn index_of(&self, id: u64) -> Option<usize> {
        let first = self.files.front()?.id;
        let i = usize::try_from(id.checked_sub(first)?).ok()?;
        (i < self.files.len()).then_some(i)
    }

    /// The entry with this id.
    pub(crate) fn by_id_mut(&mut self, id: u64) -> Option<&mut FileEntry<'a>> {
        let e = self.files.get_mut(self.index_of(id)?)?;
        debug_assert_eq!(e.id, id);
        Some(e)
    }

    /// Removes the current file.
    pub(crate) fn pop_front(&mut self) -> Option<FileEntry<'a>> {
        let e = self.files.pop_front()?;
        self.cursor = self.cursor.saturating_sub(1);
        self.open_cursor = self.open_cursor.saturating_sub(1);
        if e.opened_here && e.fd.is_some() {
            self.open_here -= 1;
        }
        Some(e)
    }

    /// The index of the first file matching `activate_file`'s identity.
    pub(crate) fn position(&self, fd: RawFd, limit: u64) -> Option<usize> {
        self.files.iter().position(|e| e.matches(fd, limit))
    }

    /// Moves the cursor past files with nothing left to issue and returns the first with
    /// work, if any.
    pub(crate) fn next_with_work(&mut self) -> Option<usize> {
        while let Some(e) = self.files.get(self.cursor) {
            if e.wants_reads() {
                return Some(self.cursor);
            }
            self.cursor += 1;
        }
        None
    }

    /// Closes the descriptor of an entry the reader opened, once it is no longer needed.
    pub(crate) fn release_fd(&mut self, index: usize) {
        let e = &mut self.files[index];
        if e.opened_here && e.fd.take().is_some() {
            self.open_here -= 1;
        }
    }

    /// Rewinds the file at `index`, to read it again from its first byte; its descriptor is
    /// kept. Files after it keep what was issued for them.
    pub(crate) fn rewind(&mut self, index: usize) {
        self.files[index].rewind();
        self.cursor = self.cursor.min(index);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::path::Path;

    use super::*;

    fn path(p: &str) -> Source<'static> {
        Source::Path(Path::new(p).into())
    }

    #[test]
    fn ids_follow_order_and_survive_pops() {
        let mut q = Queue::default();
        for p in ["a", "b", "c"] {
            q.push(path(p), u64::MAX);
        }
        assert_eq!(q.by_id_mut(1).unwrap().name(), FileName::Path("b".into()));
        q.pop_front();
        assert!(q.by_id_mut(0).is_none());
        assert_eq!(q.by_id_mut(2).unwrap().name(), FileName::Path("c".into()));
        assert!(q.by_id_mut(3).is_none());
    }

    #[test]
    fn cursor_skips_finished_files() {
        let mut q = Queue::default();
        let f = tempfile::tempfile().unwrap();
        for _ in 0..3 {
            q.push(path("x"), 10);
        }
        assert_eq!(q.next_with_work(), Some(0));
        let e = q.get_mut(0).unwrap();
        e.fd = Some(FdRef::Borrowed(&f));
        e.set_size(100);
        assert_eq!(e.end, 10, "the limit caps the end");
        e.next_read = 10;
        assert_eq!(q.next_with_work(), Some(1));
        q.pop_front();
        assert_eq!(q.cursor, 0);
        assert_eq!(q.next_with_work(), Some(0));
    }

    #[test]
    fn matches_on_descriptor_and_limit() {
        let f = tempfile::tempfile().unwrap();
        let mut q = Queue::default();
        q.push(path("p"), 5);
        q.push(Source::Borrowed(&f), 5);
        q.push(Source::Borrowed(&f), 7);
        assert_eq!(q.position(f.as_raw_fd(), 7), Some(2));
        assert_eq!(q.position(f.as_raw_fd(), 5), Some(1));
        assert_eq!(q.position(f.as_raw_fd(), 6), None);
    }

    #[test]
    fn rewind_restores_the_sized_end() {
        let mut q = Queue::default();
        q.push(path("p"), u64::MAX);
        let e = q.front_mut().unwrap();
        e.set_size(1000);
        e.end = 300; // a read found the end early
        e.next_read = 300;
        e.consumed = 200;
        e.rewind();
        assert_eq!((e.next_read, e.consumed, e.end), (0, 0, 1000));
    }
}
