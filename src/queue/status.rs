//! Where one queued file stands: the range asked of it, where its bytes stop once it is
//! sized, and its [`FileState`], so that an offset means one thing: where a file ends and where
//! it failed are never the same field.
//!
//! Invariants of a [`Status`]:
//! - `sized_end` is `None` until the file is opened and sized, then `min(start + limit,
//!   size)`; only `rewind` goes back to it.
//! - An `exact` range never ends before `start + limit`: where the file holds less, it is
//!   failed, from its start where that is known when it is sized, else where a read found
//!   its end.

use std::cell::Cell;
use std::io;

use crate::error::{Error, FileName};

/// Where one queued file stands.
#[derive(Debug)]
pub(crate) enum FileState {
    /// Waiting to be opened (a path) or sized (a file handed in, or a path opened from the
    /// kernel's caches, which its first copy or a seek sizes: see `Opened::size`).
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

impl FileState {
    fn failed(error: Error, at: u64) -> FileState {
        FileState::Failed {
            error: Box::new(error),
            at,
            reported: Cell::new(false),
        }
    }

    /// The file's error, once it failed.
    pub(crate) fn error(&self) -> Option<&Error> {
        match self {
            FileState::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The file's error for the caller, once it failed (a copy: it sticks), noted as given.
    pub(crate) fn error_out(&self) -> Option<io::Error> {
        match self {
            FileState::Failed {
                error, reported, ..
            } => {
                reported.set(true);
                Some(error.duplicate().into())
            }
            _ => None,
        }
    }

    /// The file's error, if it failed and no caller was given it yet: then noted as given.
    pub(super) fn unreported_error_out(&self) -> Option<io::Error> {
        match self {
            FileState::Failed { reported, .. } if !reported.get() => self.error_out(),
            _ => None,
        }
    }
}

/// The range of a file asked for, and where the file stands in reading it. See the module
/// docs for its invariants.
#[derive(Debug)]
pub(crate) struct Status {
    /// The first byte to read.
    start: u64,
    /// The most bytes to read from `start` (`u64::MAX`: to the end of file).
    limit: u64,
    /// Whether the file must hold all of `start..start + limit` (`exact_range(0..u64::MAX)`
    /// too, which no file holds): an end of file before that is the file's error, not its
    /// end.
    exact: bool,
    state: FileState,
    /// `min(start + limit, size)` once sized, with the size the file had then.
    sized_end: Option<u64>,
}

impl Status {
    pub(super) fn new(start: u64, limit: u64, exact: bool) -> Self {
        Status {
            start,
            limit,
            exact,
            state: FileState::Queued,
            sized_end: None,
        }
    }

    /// The first byte to read.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// The most bytes to read from `start` (`u64::MAX`: to the end of file).
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn state(&self) -> &FileState {
        &self.state
    }

    /// Where the consumer's bytes stop: the end as sized, the end a read found, or the
    /// offset of the failure (`u64::MAX` before the file is set up). What the consumer
    /// meets there is `state`'s: an end, or the error.
    pub(crate) fn stop(&self) -> u64 {
        match self.state {
            FileState::Queued | FileState::Opening => self.sized_end.unwrap_or(u64::MAX),
            FileState::Reading => self.sized_end.expect("sized while reading"),
            FileState::Ended { len } => len,
            FileState::Failed { at, .. } => at,
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
        matches!(self.state, FileState::Opening)
    }

    /// Moves to `state`: `Opening` as the backend starts an open, `Queued` as it returns.
    pub(super) fn set(&mut self, state: FileState) {
        self.state = state;
    }

    /// Records the file's size once opened: it is read up to `min(start + limit, size)`,
    /// the end returned, with whether the file failed just now (an exact range it holds
    /// only part of).
    pub(super) fn set_size(&mut self, size: u64, name: impl FnOnce() -> FileName) -> (u64, bool) {
        let end = self.range_end().min(size);
        self.sized_end = Some(end);
        (end, self.start_reading(name))
    }

    /// Where the range asked for ends (`u64::MAX` for a file read to its end).
    fn range_end(&self) -> u64 {
        self.start.saturating_add(self.limit)
    }

    /// Reads the sized file; but an exact range the file holds only part of fails at once,
    /// at its start: no byte of a range that cannot be whole comes out. Whether it failed.
    fn start_reading(&mut self, name: impl FnOnce() -> FileName) -> bool {
        let end = self.sized_end.expect("sized");
        self.state = FileState::Reading;
        if !self.exact || end >= self.range_end() {
            return false;
        }
        self.state = FileState::failed(self.cut_short(name(), end), self.start);
        true
    }

    /// The error of an exact range whose file ends at `at`, before the range does.
    fn cut_short(&self, path: FileName, at: u64) -> Error {
        Error::EndedEarly {
            path,
            offset: at,
            range_end: self.range_end(),
        }
    }

    /// Fails at `at`, unless the bytes already stop before (see `FileEntry::fail`).
    pub(super) fn fail(&mut self, error: Error, at: u64) -> bool {
        if at > self.stop() {
            return false; // Past where its bytes already stop: nothing it could change.
        }
        let first = self.state.error().is_none();
        self.state = FileState::failed(error, at);
        first
    }

    /// A read found the end of file at `at` (see `FileEntry::end_at`).
    pub(super) fn end_at(&mut self, at: u64, name: impl FnOnce() -> FileName) -> bool {
        if at >= self.stop() {
            return false;
        }
        if self.exact {
            return self.fail(self.cut_short(name(), at), at);
        }
        self.state = FileState::Ended { len: at };
        false
    }

    /// Forgets the end and the error, to read the file again from its start.
    pub(super) fn rewind(&mut self, name: impl FnOnce() -> FileName) {
        match self.sized_end {
            Some(_) => _ = self.start_reading(name),
            None => self.state = FileState::Queued,
        }
    }

    /// The file's error, if it failed and no caller was ever given it.
    pub(super) fn into_unreported(self) -> Option<Error> {
        match self.state {
            FileState::Failed {
                error, reported, ..
            } if !reported.get() => Some(*error),
            _ => None,
        }
    }
}
