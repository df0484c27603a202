//! The FIFO of files: where each comes from, the range to read of it, where it stands, and
//! how far it has been asked for and consumed. No syscalls here.
//!
//! Each file is in one [`State`] at a time, so an offset means one thing: where a file
//! ends and where it failed are never the same field. Invariants of a [`FileEntry`]:
//! - `consumed <= next_read` once reads are issued, but where an `O_DIRECT` read starts
//!   aligned below the consumer; both stay `<= stop()` once set up.
//! - `sized_end` is `None` until the file is opened and sized, then `min(start + limit,
//!   size)`; only `rewind` goes back to it.
//! - An `exact` range never ends before `start + limit`: where the file holds less, it is
//!   failed, from its start where that is known when it is sized, else where a read found
//!   its end.
//! - `fd` is the descriptor reads go to; an entry with reads in flight keeps it (`in_flight`).

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;

use crate::error::{Error, FileName};
use crate::source::{FdRef, RawFd, Source};

/// Where one queued file stands.
#[derive(Debug)]
pub(crate) enum State {
    /// Waiting to be opened (a path) or sized (a file handed in).
    Queued,
    /// The backend is opening it (a path).
    Opening,
    /// Open and sized: its bytes run to `sized_end`.
    Reading,
    /// A read found its end of file at `len`, before the size it had when it was opened (it
    /// shrank): it ends there, as std's reads end at an end of file.
    Ended { len: u64 },
    /// Reading at `at` failed: every byte before `at` is good, and reading at `at` gives
    /// `error` until the reader moves on. `reported`: whether a caller was given it.
    Failed {
        error: Box<Error>,
        at: u64,
        reported: Cell<bool>,
    },
}

/// One queued file.
#[derive(Debug)]
pub(crate) struct FileEntry<'a> {
    pub(crate) id: u64,
    pub(crate) source: Source<'a>,
    /// The first byte to read.
    pub(crate) start: u64,
    /// The most bytes to read from `start` (`u64::MAX`: to the end of file).
    pub(crate) limit: u64,
    /// Whether the file must hold all of `start..start + limit` (never with `limit` of
    /// `u64::MAX`): an end of file before that is the file's error, not its end.
    exact: bool,
    /// The descriptor reads go to, once set up.
    pub(crate) fd: Option<FdRef<'a>>,
    /// Whether `fd` was opened with `O_DIRECT`.
    pub(crate) direct: bool,
    /// Whether `fd` is a descriptor the reader opened, or duplicated from a borrowed file
    /// (counts against `max_open_files`).
    pub(crate) opened_here: bool,
    state: State,
    /// `min(start + limit, size)` once sized, with the size the file had then.
    sized_end: Option<u64>,
    /// The first byte no read has been issued for.
    pub(crate) next_read: u64,
    /// The offset of the next byte the consumer gets.
    pub(crate) consumed: u64,
    /// Reads of this file in flight.
    pub(crate) in_flight: usize,
    /// The end of the bytes reads brought in so far (not past `stop()` for the consumer).
    pub(crate) read_end: u64,
}

impl<'a> FileEntry<'a> {
    fn new(id: u64, source: Source<'a>, start: u64, limit: u64, exact: bool) -> Self {
        FileEntry {
            id,
            source,
            start,
            limit,
            exact: exact && limit != u64::MAX,
            fd: None,
            direct: false,
            opened_here: false,
            state: State::Queued,
            sized_end: None,
            next_read: start,
            consumed: start,
            in_flight: 0,
            read_end: 0,
        }
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// The file's error, once it failed.
    pub(crate) fn error(&self) -> Option<&Error> {
        match &self.state {
            State::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The file's error for the caller, once it failed (a copy: it sticks), noted as given.
    pub(crate) fn error_out(&self) -> Option<io::Error> {
        match &self.state {
            State::Failed {
                error, reported, ..
            } => {
                reported.set(true);
                Some(error.duplicate().into())
            }
            _ => None,
        }
    }

    /// The file's error, if it failed and no caller was given it yet: then noted as given.
    fn unreported_error_out(&self) -> Option<io::Error> {
        match &self.state {
            State::Failed { reported, .. } if !reported.get() => self.error_out(),
            _ => None,
        }
    }

    /// Where a skip took the consumer past the end a read found later (the file was cut
    /// after it was opened, so the skip counted bytes it did not have): an error saying so,
    /// rather than an end at a place the file never reached.
    pub(crate) fn skipped_past_end(&self) -> Option<io::Error> {
        let State::Ended { len } = self.state else {
            return None;
        };
        (self.consumed > len).then(|| {
            let msg = format!(
                "{} ended at offset {len}, before offset {} that a skip passed to: it was cut \
                 after it was opened",
                self.name(),
                self.consumed
            );
            io::Error::new(io::ErrorKind::UnexpectedEof, msg)
        })
    }

    /// The file's error, if it failed and no caller was ever given it.
    pub(crate) fn into_unreported(self) -> Option<Error> {
        match self.state {
            State::Failed {
                error, reported, ..
            } if !reported.get() => Some(*error),
            _ => None,
        }
    }

    /// Where the consumer's bytes stop: the end as sized, the end a read found, or the
    /// offset of the failure (`u64::MAX` before the file is set up). What the consumer
    /// meets there is `state`'s: an end, or the error.
    pub(crate) fn stop(&self) -> u64 {
        match self.state {
            State::Queued | State::Opening => self.sized_end.unwrap_or(u64::MAX),
            State::Reading => self.sized_end.expect("sized while reading"),
            State::Ended { len } => len,
            State::Failed { at, .. } => at,
        }
    }

    /// The bytes of the file to read, once sized: its range, cut at the size it had then.
    pub(crate) fn sized_len(&self) -> Option<u64> {
        Some(self.sized_end?.saturating_sub(self.start))
    }

    /// Whether the file was opened and sized (whatever happened since).
    pub(crate) fn is_sized(&self) -> bool {
        self.sized_end.is_some()
    }

    /// Whether the file must hold its whole range (see `exact`).
    pub(crate) fn is_exact(&self) -> bool {
        self.exact
    }

    /// Whether the backend is opening the file now.
    pub(crate) fn is_opening(&self) -> bool {
        matches!(self.state, State::Opening)
    }

    /// The backend started opening the file.
    pub(crate) fn set_opening(&mut self) {
        // Queued, or sized once and opened again (its descriptor was closed meanwhile).
        debug_assert!(self.fd.is_none() && matches!(self.state, State::Queued | State::Reading));
        self.state = State::Opening;
    }

    /// The open the backend started came back (to be retried, or handled by the caller).
    pub(crate) fn set_open_returned(&mut self) {
        debug_assert!(self.is_opening());
        self.state = State::Queued;
    }

    /// Records the file's size once opened: it is read up to `min(start + limit, size)`.
    /// An `O_DIRECT` file's first read starts aligned, below the consumer where need be.
    /// Whether the file failed just now (an exact range it holds only part of).
    pub(crate) fn set_size(&mut self, size: u64, align: u64) -> bool {
        let end = self.range_end().min(size);
        self.sized_end = Some(end);
        if self.next_read == self.consumed {
            self.next_read = aligned_start(self.consumed, end, align);
        }
        self.start_reading()
    }

    /// Where the range asked for ends (`u64::MAX` for a file read to its end).
    fn range_end(&self) -> u64 {
        self.start.saturating_add(self.limit)
    }

    /// Reads the sized file; but an exact range the file holds only part of fails at once,
    /// at its start: no byte of a range that cannot be whole comes out. Whether it failed.
    fn start_reading(&mut self) -> bool {
        let end = self.sized_end.expect("sized");
        self.state = State::Reading;
        if !self.exact || end >= self.range_end() {
            return false;
        }
        self.state = State::Failed {
            error: Box::new(self.cut_short(end)),
            at: self.start,
            reported: Cell::new(false),
        };
        true
    }

    /// The error of an exact range whose file ends at `at`, before the range does.
    fn cut_short(&self, at: u64) -> Error {
        Error::EndedEarly {
            path: self.name(),
            offset: at,
            range_end: self.range_end(),
        }
    }

    /// The file could not be set up, or reading at `at` failed: it fails there, unless its
    /// bytes already stop before (an earlier end or failure stays: the bytes before it were
    /// the file's). Whether the file failed just now, not before.
    pub(crate) fn fail(&mut self, error: Error, at: u64) -> bool {
        if at > self.stop() {
            return false; // Past where its bytes already stop: nothing it could change.
        }
        let first = self.error().is_none();
        self.state = State::Failed {
            error: Box::new(error),
            at,
            reported: Cell::new(false),
        };
        first
    }

    /// A read found the end of file at `at`: the file ends there if that is before where
    /// its bytes stopped so far; an exact range fails there instead. Whether it failed just
    /// now.
    pub(crate) fn end_at(&mut self, at: u64) -> bool {
        if at >= self.stop() {
            return false;
        }
        if self.exact {
            return self.fail(self.cut_short(at), at);
        }
        self.state = State::Ended { len: at };
        false
    }

    /// Whether the engine has more to do for this file: open it, or issue reads.
    pub(crate) fn wants_reads(&self) -> bool {
        match self.state {
            State::Queued | State::Opening => true,
            State::Reading | State::Ended { .. } => self.next_read < self.stop(),
            State::Failed { .. } => false,
        }
    }

    /// Whether the file is a path waiting to be opened (not open, not opening, not failed).
    pub(crate) fn wants_open(&self) -> bool {
        matches!(self.source, Source::Path(_))
            && self.fd.is_none()
            && !self.is_opening()
            && self.wants_reads()
    }

    /// Whether every byte of the file has been asked for (it was sized, and did not fail).
    pub(crate) fn all_issued(&self) -> bool {
        matches!(self.state, State::Reading | State::Ended { .. }) && self.next_read >= self.stop()
    }

    /// Whether nothing of the file is in flight and nothing more will be asked for: every
    /// byte was asked for, or it failed. Its descriptor may be closed then, not before (a
    /// read in flight may still need it to be continued).
    pub(crate) fn reads_finished(&self) -> bool {
        self.in_flight == 0
            && !matches!(self.state, State::Queued | State::Opening)
            && !self.wants_reads()
    }

    /// The identity `activate_file` matches on: the caller's descriptor plus the limit, of a
    /// file read from its start.
    pub(crate) fn matches(&self, fd: RawFd, limit: u64) -> bool {
        self.source.raw_fd() == Some(fd) && self.start == 0 && self.limit == limit
    }

    /// How errors name this file.
    pub(crate) fn name(&self) -> FileName {
        self.source.name()
    }

    /// Forgets every read, its end and its error, to read the file again from its start.
    pub(crate) fn rewind(&mut self) {
        debug_assert_eq!(self.in_flight, 0, "rewind with reads in flight");
        self.consumed = self.start;
        self.next_read = self.start;
        self.read_end = 0;
        match self.sized_end {
            Some(_) => _ = self.start_reading(),
            None => self.state = State::Queued,
        }
    }
}

/// Where reads start for a consumer at `at` in a file whose bytes stop at `stop`: `at`,
/// aligned down to `align` for `O_DIRECT`; but at the end there is nothing to read, and an
/// aligned read of bytes before it would be asked for nothing (and could fail for nothing).
pub(crate) fn aligned_start(at: u64, stop: u64, align: u64) -> u64 {
    if at >= stop {
        at
    } else {
        at / align * align
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
    /// Queues `limit` bytes of a file from `start`; its id.
    pub(crate) fn push(&mut self, source: Source<'a>, start: u64, limit: u64) -> u64 {
        self.push_range(source, start, limit, false)
    }

    /// Queues `limit` bytes of a file from `start`, which it must hold whole where `exact`
    /// (an end of file before `start + limit` is then its error); its id.
    pub(crate) fn push_range(
        &mut self,
        source: Source<'a>,
        start: u64,
        limit: u64,
        exact: bool,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.files
            .push_back(FileEntry::new(id, source, start, limit, exact));
        id
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

    /// The bytes the queued files have left for the consumer, as far as known: each sized
    /// file's rest, and `not_sized` for each file not opened yet.
    pub(crate) fn bytes_left(&self, not_sized: u64) -> u64 {
        self.files
            .iter()
            .map(|f| match f.sized_end {
                Some(_) => f.stop().saturating_sub(f.consumed),
                None => not_sized,
            })
            .sum()
    }

    /// The error of the first queued file that failed with no caller given its error, noted
    /// as given now (the file keeps it, for reading it to return).
    pub(crate) fn take_first_unreported(&self) -> Option<io::Error> {
        self.files.iter().find_map(FileEntry::unreported_error_out)
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

    /// Removes the file queued last, if its id is `id`.
    pub(crate) fn pop_back(&mut self, id: u64) {
        if self.files.back().is_none_or(|e| e.id != id) {
            return;
        }
        let e = self.files.pop_back().expect("checked");
        self.cursor = self.cursor.min(self.files.len());
        self.open_cursor = self.open_cursor.min(self.files.len());
        if e.opened_here && e.fd.is_some() {
            self.open_here -= 1;
        }
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
    use std::io;
    use std::os::fd::AsRawFd;
    use std::path::Path;

    use super::*;

    fn path(p: &str) -> Source<'static> {
        Source::Path(Path::new(p).into())
    }

    fn eio(at: u64) -> Error {
        Error::Read {
            path: FileName::Path("p".into()),
            offset: at,
            source: io::Error::from_raw_os_error(libc::EIO),
        }
    }

    #[test]
    fn ids_follow_order_and_survive_pops() {
        let mut q = Queue::default();
        for p in ["a", "b", "c"] {
            q.push(path(p), 0, u64::MAX);
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
            q.push(path("x"), 0, 10);
        }
        assert_eq!(q.next_with_work(), Some(0));
        let e = q.get_mut(0).unwrap();
        e.fd = Some(FdRef::new(std::sync::Arc::new(f)));
        e.set_size(100, 1);
        assert_eq!(e.stop(), 10, "the limit caps the end");
        e.next_read = 10;
        assert_eq!(q.next_with_work(), Some(1));
        q.pop_front();
        assert_eq!(q.cursor, 0);
        assert_eq!(q.next_with_work(), Some(0));
    }

    #[test]
    fn matches_on_descriptor_and_limit_from_the_start() {
        let f = tempfile::tempfile().unwrap();
        let mut q = Queue::default();
        q.push(path("p"), 0, 5);
        q.push(Source::Borrowed(&f), 0, 5);
        q.push(Source::Borrowed(&f), 0, 7);
        q.push(Source::Borrowed(&f), 3, 9);
        assert_eq!(q.position(f.as_raw_fd(), 7), Some(2));
        assert_eq!(q.position(f.as_raw_fd(), 5), Some(1));
        assert_eq!(q.position(f.as_raw_fd(), 6), None);
        assert_eq!(
            q.position(f.as_raw_fd(), 9),
            None,
            "a range is not from the start"
        );
    }

    #[test]
    fn rewind_restores_the_sized_end_and_forgets_the_failure() {
        let mut q = Queue::default();
        q.push(path("p"), 0, u64::MAX);
        let e = q.front_mut().unwrap();
        e.set_size(1000, 1);
        e.end_at(300); // a read found the end early
        e.next_read = 300;
        e.consumed = 200;
        e.rewind();
        assert_eq!((e.next_read, e.consumed, e.stop()), (0, 0, 1000));
        assert!(matches!(e.state(), State::Reading));
        e.fail(eio(500), 500);
        e.rewind();
        assert!(e.error().is_none());
        assert_eq!(e.stop(), 1000);
    }

    #[test]
    fn a_failure_is_never_an_end() {
        let mut q = Queue::default();
        q.push(path("p"), 0, u64::MAX);
        let e = q.front_mut().unwrap();
        e.set_size(1000, 1);
        e.next_read = 1000;
        assert!(e.all_issued());
        assert!(e.fail(eio(600), 600), "the first failure counts");
        assert_eq!(e.stop(), 600, "bytes stop at the failure");
        assert!(!e.all_issued(), "a failed file is not at its end");
        assert!(!e.wants_reads());
        assert!(e.reads_finished());
        assert!(
            !e.fail(eio(400), 400),
            "an earlier failure is the same file's"
        );
        assert_eq!(e.stop(), 400);
        e.end_at(500);
        assert!(
            e.error().is_some(),
            "an end past the failure changes nothing"
        );
        e.end_at(100);
        assert!(
            matches!(e.state(), State::Ended { len: 100 }),
            "bytes end first"
        );
        assert!(
            !e.fail(eio(200), 200),
            "a failure past the end is not the file's"
        );
        assert!(e.error().is_none());
    }

    #[test]
    fn a_range_starts_at_its_offset_and_ends_at_its_length() {
        let mut q = Queue::default();
        q.push(path("p"), 5000, 3000);
        let e = q.front_mut().unwrap();
        assert_eq!((e.consumed, e.next_read), (5000, 5000));
        e.set_size(1 << 20, 4096);
        assert_eq!(e.stop(), 8000);
        assert_eq!(
            (e.consumed, e.next_read),
            (5000, 4096),
            "direct reads start aligned"
        );
        e.set_size(6000, 1);
        assert_eq!(e.stop(), 6000, "the file's end comes first");
        q.push(path("p"), 8000, 100);
        let e = q.get_mut(1).unwrap();
        e.set_size(8000, 4096);
        assert_eq!(
            e.next_read, 8000,
            "at the end, no aligned read of bytes before it"
        );
        assert!(e.all_issued());
    }

    #[test]
    fn an_exact_range_the_file_holds_only_part_of_fails() {
        let mut q = Queue::default();
        q.push_range(path("p"), 1000, 5000, true);
        let e = q.front_mut().unwrap();
        assert!(e.set_size(3000, 1), "short when sized: failed at once");
        assert_eq!((e.stop(), e.sized_len()), (1000, Some(2000)));
        assert!(!e.wants_reads(), "no byte of a range that cannot be whole");
        let Some(Error::EndedEarly {
            offset, range_end, ..
        }) = e.error()
        else {
            panic!("{:?}", e.state())
        };
        assert_eq!((*offset, *range_end), (3000, 6000));
        e.rewind();
        assert!(e.error().is_some(), "read again, it is as short");
        // Whole when sized, cut while read: it fails where a read found the end.
        q.push_range(path("p"), 0, 5000, true);
        let e = q.get_mut(1).unwrap();
        assert!(!e.set_size(8000, 1));
        assert!(e.end_at(4000));
        assert_eq!(e.stop(), 4000);
        assert!(matches!(
            e.error(),
            Some(Error::EndedEarly { offset: 4000, .. })
        ));
        // To the end of the file, wherever it is: nothing to hold.
        q.push_range(path("p"), 0, u64::MAX, true);
        let e = q.get_mut(2).unwrap();
        assert!(!e.set_size(10, 1));
        assert!(!e.end_at(5));
        assert!(matches!(e.state(), State::Ended { len: 5 }));
    }

    #[test]
    fn opening_is_a_state_of_its_own() {
        let mut q = Queue::default();
        q.push(path("p"), 0, u64::MAX);
        let e = q.front_mut().unwrap();
        assert!(e.wants_open());
        e.set_opening();
        assert!(e.is_opening() && !e.wants_open() && e.wants_reads());
        e.set_open_returned();
        assert!(e.wants_open());
    }
}
