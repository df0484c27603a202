//! The FIFO of files: where each comes from, the range to read of it, where it stands, and
//! how far it has been asked for and consumed. No syscalls here; `Queue::prefetch_after`
//! hints the CPU's cache.
//!
//! Each file is in one [`FileState`] at a time, kept with its range in a [`Status`] (see
//! `status.rs` for their invariants), and how far it was read and consumed in a
//! [`FileProgress`] (`progress.rs`). Invariant of a [`FileEntry`]: `fd` is the descriptor reads
//! go to; an entry with reads in flight keeps it.

mod progress;
mod status;

use std::collections::VecDeque;
use std::io;

use crate::error::{Error, FileName};
use crate::source::{FdRef, RawFd, Source};
use crate::sys;

pub(crate) use progress::FileProgress;
pub(crate) use status::{FileState, Status};

/// How a file's buffered reads leave the page cache where the reader was asked to leave it
/// as found (`uncached(true)`): decided at its first read, and again where its filesystem
/// refuses `RWF_DONTCACHE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CacheUse {
    /// Not decided yet, or not asked: plain buffered reads.
    #[default]
    Undecided,
    /// Reads carry `RWF_DONTCACHE`.
    Uncached,
    /// No page of the file from `cold_from` on was cached at its first read: it is read with
    /// `O_DIRECT`, which brings none in (and, at depth, reads faster than the page cache
    /// fills). Where a filesystem takes the flag but serves some reads through the page
    /// cache all the same (btrfs inline and compressed extents, ext4 encrypted or journalled
    /// data), what they left is dropped once its reads are done; `None` once it was.
    Direct { cold_from: Option<u64> },
    /// The filesystem refuses `RWF_DONTCACHE`: plain buffered reads, the pages of those that
    /// brought them in dropped once read. `cold_from`: no page of the file from there on was
    /// cached when it was decided, so every page its reads find there was brought in by them.
    DropBehind { cold_from: Option<u64> },
}

/// One queued file.
#[derive(Debug)]
pub(crate) struct FileEntry<'a> {
    pub(crate) id: u64,
    pub(crate) source: Source<'a>,
    /// The range asked for, and where the file stands.
    status: Status,
    /// The descriptor reads go to, once set up.
    fd: Option<FdRef<'a>>,
    /// Whether `fd` was opened with `O_DIRECT`.
    direct: bool,
    /// Whether `fd` is a descriptor the reader opened, or duplicated from a borrowed file
    /// (counts against `max_open_files`).
    opened_here: bool,
    /// Whether `fd`'s open file description is the reader's alone (a path it opened, or a
    /// file handed in opened again), so that its flags and hints are the reader's to set.
    own_description: bool,
    /// How far it was asked for, brought in and consumed.
    progress: FileProgress,
    /// How its reads leave the page cache.
    cache_use: CacheUse,
}

impl<'a> FileEntry<'a> {
    fn new(id: u64, source: Source<'a>, start: u64, limit: u64, exact: bool) -> Self {
        FileEntry {
            id,
            source,
            status: Status::new(start, limit, exact),
            fd: None,
            direct: false,
            opened_here: false,
            own_description: false,
            progress: FileProgress::new(start),
            cache_use: CacheUse::Undecided,
        }
    }

    /// How its reads leave the page cache.
    pub(crate) fn cache_use(&self) -> CacheUse {
        self.cache_use
    }

    /// From now on, its reads leave the page cache this way.
    pub(crate) fn set_cache_use(&mut self, cache_use: CacheUse) {
        self.cache_use = cache_use;
    }

    /// The range asked for, and where the file stands: its state, size and end.
    pub(crate) fn status(&self) -> &Status {
        &self.status
    }

    /// The descriptor reads go to, once set up.
    pub(crate) fn fd(&self) -> Option<&FdRef<'a>> {
        self.fd.as_ref()
    }

    /// Whether the descriptor reads `O_DIRECT`.
    pub(crate) fn direct(&self) -> bool {
        self.direct
    }

    /// Whether the descriptor is one the reader opened (or duplicated), and closes.
    pub(crate) fn opened_here(&self) -> bool {
        self.opened_here
    }

    /// How far the file was asked for, brought in and consumed.
    #[inline]
    pub(crate) fn progress(&self) -> &FileProgress {
        &self.progress
    }

    /// The same, to move on.
    pub(crate) fn progress_mut(&mut self) -> &mut FileProgress {
        &mut self.progress
    }

    /// Whether the descriptor's open file description is the reader's alone (see the field).
    pub(crate) fn own_description(&self) -> bool {
        self.own_description
    }

    /// Reads go to `fd` from now on: the file opened again, with an open file description
    /// of the reader's own. Only before any read of it is in flight.
    pub(crate) fn set_own_fd(&mut self, fd: FdRef<'a>) {
        debug_assert_eq!(
            self.progress.in_flight(),
            0,
            "reads in flight on the old one"
        );
        self.fd = Some(fd);
        self.own_description = true;
    }

    /// The descriptor reads `O_DIRECT` from now on (turned on for a cold file read
    /// uncached).
    pub(crate) fn set_direct(&mut self) {
        self.direct = true;
    }

    /// The descriptor no longer reads `O_DIRECT` (the filesystem refused it).
    pub(crate) fn clear_direct(&mut self) {
        self.direct = false;
    }

    /// Where the consumer's bytes stop (see [`Status::stop`]).
    pub(crate) fn stop(&self) -> u64 {
        self.status.stop()
    }

    /// The file's error, once it failed.
    pub(crate) fn error(&self) -> Option<&Error> {
        self.status.state().error()
    }

    /// The file's error for the caller, once it failed (a copy: it sticks), noted as given.
    pub(crate) fn error_out(&self) -> Option<io::Error> {
        self.status.state().error_out()
    }

    /// Where a skip took the consumer past the end a read found later (the file was cut
    /// after it was opened, so the skip counted bytes it did not have): an error saying so,
    /// rather than an end at a place the file never reached.
    pub(crate) fn skipped_past_end(&self) -> Option<io::Error> {
        let FileState::Ended { len } = *self.status.state() else {
            return None;
        };
        let consumed = self.progress.consumed();
        (consumed > len).then(|| {
            let msg = format!(
                "{} ended at offset {len}, before offset {} that a skip passed to: it was cut \
                 after it was opened",
                self.name(),
                consumed
            );
            io::Error::new(io::ErrorKind::UnexpectedEof, msg)
        })
    }

    /// The file's error, if it failed and no caller was ever given it.
    pub(crate) fn into_unreported(self) -> Option<Error> {
        self.status.into_unreported()
    }

    /// The backend started opening the file.
    pub(crate) fn set_opening(&mut self) {
        // Queued, or sized once and opened again (its descriptor was closed meanwhile).
        debug_assert!(
            self.fd.is_none()
                && matches!(self.status.state(), FileState::Queued | FileState::Reading)
        );
        self.status.set(FileState::Opening);
    }

    /// The open the backend started came back (to be retried, or handled by the caller).
    pub(crate) fn set_open_returned(&mut self) {
        debug_assert!(self.status.is_opening());
        self.status.set(FileState::Queued);
    }

    /// Records the file's size once opened: it is read up to `min(start + limit, size)`.
    /// An `O_DIRECT` file's first read starts aligned, below the consumer where need be.
    /// Whether the file failed just now (an exact range it holds only part of).
    pub(crate) fn set_size(&mut self, size: u64, align: u64) -> bool {
        let (end, failed) = self.status.set_size(size, || self.source.name());
        self.progress.sized(end, align);
        failed
    }

    /// The file could not be set up, or reading at `at` failed: it fails there, unless its
    /// bytes already stop before (an earlier end or failure stays: the bytes before it were
    /// the file's). Whether the file failed just now, not before.
    pub(crate) fn fail(&mut self, error: Error, at: u64) -> bool {
        self.status.fail(error, at)
    }

    /// A read found the end of file at `at`: the file ends there if that is before where
    /// its bytes stopped so far; an exact range fails there instead. Whether it failed just
    /// now.
    pub(crate) fn end_at(&mut self, at: u64) -> bool {
        self.status.end_at(at, || self.source.name())
    }

    /// Whether the consumer is at the end of a file that reads found whole: every byte
    /// issued, none failed or found missing, and the consumer past the last.
    pub(crate) fn consumed_to_end(&self) -> bool {
        let stop = self.stop();
        matches!(self.status.state(), FileState::Reading)
            && self.progress.next_read() >= stop
            && self.progress.consumed() >= stop
    }

    /// Whether the engine has more to do for this file: open it, or issue reads.
    pub(crate) fn wants_reads(&self) -> bool {
        match self.status.state() {
            FileState::Queued | FileState::Opening => true,
            FileState::Reading | FileState::Ended { .. } => self.progress.next_read() < self.stop(),
            FileState::Failed { .. } => false,
        }
    }

    /// Whether the file is a path waiting to be opened (not open, not opening, not failed).
    pub(crate) fn wants_open(&self) -> bool {
        matches!(self.source, Source::Path(_))
            && self.fd.is_none()
            && !self.status.is_opening()
            && self.wants_reads()
    }

    /// Whether the whole file is asked for, from its start to its end, whatever that is: no
    /// range of it.
    pub(crate) fn is_whole_file(&self) -> bool {
        self.status.start() == 0 && self.status.limit() == u64::MAX && !self.status.is_exact()
    }

    /// Whether every byte of the file has been asked for (it was sized, and did not fail).
    pub(crate) fn all_issued(&self) -> bool {
        matches!(
            self.status.state(),
            FileState::Reading | FileState::Ended { .. }
        ) && self.progress.next_read() >= self.stop()
    }

    /// Whether nothing of the file is in flight and nothing more will be asked for: every
    /// byte was asked for, or it failed. Its descriptor may be closed then, not before (a
    /// read in flight may still need it to be continued).
    pub(crate) fn reads_finished(&self) -> bool {
        self.progress.in_flight() == 0
            && !matches!(self.status.state(), FileState::Queued | FileState::Opening)
            && !self.wants_reads()
    }

    /// The identity `activate_file` matches on: the caller's descriptor plus the limit, of a
    /// file read from its start.
    pub(crate) fn matches(&self, fd: RawFd, limit: u64) -> bool {
        self.source.raw_fd() == Some(fd) && self.status.start() == 0 && self.status.limit() == limit
    }

    /// How errors name this file.
    pub(crate) fn name(&self) -> FileName {
        self.source.name()
    }

    /// Forgets every read, its end and its error, to read the file again from its start.
    pub(crate) fn rewind(&mut self) {
        self.progress.rewind(self.status.start());
        self.status.rewind(|| self.source.name());
    }
}

/// The FIFO of files. The front is the current file.
#[derive(Debug, Default)]
pub(crate) struct Queue<'a> {
    files: VecDeque<FileEntry<'a>>,
    next_id: u64,
    /// Index of the first file the engine may still have work for; every file before it
    /// has all its reads issued (or has failed).
    cursor: usize,
    /// Index of the first file the open-ahead has not looked at; every path before it is
    /// open, being opened, done or failed.
    open_cursor: usize,
    /// Whether a file was queued to be opened again since the open-ahead last moved
    /// `open_cursor` on ([`reopen_from`](Self::reopen_from)): its pass then leaves the
    /// cursor where that put it.
    reopened: bool,
    /// Files the reader opened itself that are still open (counted against the cap): those
    /// with `opened_here` and a descriptor, kept so by `set_descriptor`, `release_fd` and
    /// the pops.
    open_here: usize,
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

    #[inline]
    pub(crate) fn front(&self) -> Option<&FileEntry<'a>> {
        self.files.front()
    }

    pub(crate) fn front_mut(&mut self) -> Option<&mut FileEntry<'a>> {
        self.files.front_mut()
    }

    /// Brings into the CPU's cache, without waiting, what the open-ahead will look at of
    /// the files after `index`: the entry two on, and the path of the next (its entry
    /// brought in by the call before, where there was one). Files queued long ago have left
    /// the cache by the time they are opened, and every open in a scan of small cached files
    /// would otherwise wait on both loads. A hint: it changes nothing, and does nothing off
    /// x86-64.
    pub(crate) fn prefetch_after(&self, index: usize) {
        if let Some(entry) = self.files.get(index + 2) {
            prefetch_bytes(std::ptr::from_ref(entry).cast(), size_of::<FileEntry<'_>>());
        }
        if let Some(FileEntry {
            source: Source::Path(path),
            ..
        }) = self.files.get(index + 1)
        {
            let bytes = path.as_os_str().as_encoded_bytes();
            prefetch_bytes(bytes.as_ptr(), bytes.len());
        }
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
            .map(|f| {
                if f.status.is_sized() {
                    f.stop().saturating_sub(f.progress.consumed())
                } else {
                    not_sized
                }
            })
            .sum()
    }

    /// The error of the first queued file that failed with no caller given its error, noted
    /// as given now (the file keeps it, for reading it to return).
    pub(crate) fn take_first_unreported(&self) -> Option<io::Error> {
        self.files
            .iter()
            .find_map(|f| f.status.state().unreported_error_out())
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

    /// Lets go of the descriptor of an entry the reader opened, once it is no longer needed:
    /// the descriptor, for the caller to close (see `Core::close`).
    pub(crate) fn release_fd(&mut self, index: usize) -> Option<FdRef<'a>> {
        let e = &mut self.files[index];
        let fd = e.fd.take_if(|_| e.opened_here)?;
        self.open_here -= 1;
        Some(fd)
    }

    /// Files the reader opened itself that are still open.
    pub(crate) fn open_here(&self) -> usize {
        self.open_here
    }

    /// Where the open-ahead looks next: past the files it looked at, and past those with
    /// all their reads issued.
    pub(crate) fn open_from(&self) -> usize {
        self.open_cursor.max(self.cursor)
    }

    /// The open-ahead looked at every file before `index` (it looks at none of them again
    /// but after `reopen_from`, made during its pass too: the cursor then stays).
    pub(crate) fn looked_at_until(&mut self, index: usize) {
        if !std::mem::take(&mut self.reopened) {
            self.open_cursor = index;
        }
    }

    /// The open-ahead looks at the file at `index` again (its open is to be done again).
    pub(crate) fn reopen_from(&mut self, index: usize) {
        self.open_cursor = self.open_cursor.min(index);
        self.reopened = true;
    }

    /// The file at `index` is open on `fd` (`opened_here`: by the reader, which closes it),
    /// with `O_DIRECT` where `direct`.
    pub(crate) fn set_descriptor(
        &mut self,
        index: usize,
        fd: FdRef<'a>,
        direct: bool,
        opened_here: bool,
    ) {
        let e = &mut self.files[index];
        debug_assert!(e.fd.is_none(), "opened once");
        e.fd = Some(fd);
        e.direct = direct;
        e.own_description = matches!(e.source, Source::Path(_));
        // Closed before its first read and opened again: `O_DIRECT` was turned on for the
        // descriptor closed, so the file's way is decided again.
        if matches!(e.cache_use, CacheUse::Direct { .. }) {
            e.cache_use = CacheUse::Undecided;
        }
        e.opened_here = opened_here;
        if opened_here {
            self.open_here += 1;
        }
    }

    /// Rewinds the file at `index`, to read it again from its first byte; its descriptor is
    /// kept. Files after it keep what was issued for them.
    pub(crate) fn rewind(&mut self, index: usize) {
        self.files[index].rewind();
        self.cursor = self.cursor.min(index);
    }
}

/// A cache line's bytes on x86-64, the one CPU `sys::prefetch` asks.
const LINE: usize = 64;

/// Prefetches every cache line of the `len` bytes at `at`.
fn prefetch_bytes(at: *const u8, len: usize) {
    if len > 0 {
        for offset in (0..len).step_by(LINE).chain([len - 1]) {
            sys::prefetch(at.wrapping_add(offset));
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
