//! How far one queued file has been asked for, brought in and consumed.
//!
//! Invariants of a [`FileProgress`]:
//! - `consumed <= next_read` once reads are issued, but where an `O_DIRECT` read starts
//!   aligned below the consumer; both stay `<= stop()` of the file once it is set up.
//! - `in_flight` counts the reads sent and not yet back (or dropped in flight): the file
//!   keeps its descriptor while it is not 0.

/// How far one queued file has been asked for, brought in and consumed.
#[derive(Debug)]
pub(crate) struct FileProgress {
    /// The first byte no read has been issued for.
    next_read: u64,
    /// The offset of the next byte the consumer gets.
    consumed: u64,
    /// Reads of this file in flight.
    in_flight: usize,
    /// The end of the bytes reads brought in so far (not past `stop()` for the consumer).
    read_end: u64,
}

impl FileProgress {
    /// Nothing asked for or consumed yet of a file read from `start`.
    pub(super) fn new(start: u64) -> Self {
        FileProgress {
            next_read: start,
            consumed: start,
            in_flight: 0,
            read_end: 0,
        }
    }

    /// The first byte no read has been issued for.
    pub(crate) fn next_read(&self) -> u64 {
        self.next_read
    }

    /// The offset of the next byte the consumer gets.
    #[inline]
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Reads of this file in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The end of the bytes reads brought in so far.
    pub(crate) fn read_end(&self) -> u64 {
        self.read_end
    }

    /// A read of `len` bytes from `next_read` was sent.
    pub(crate) fn issued(&mut self, len: usize) {
        self.next_read += len as u64;
        self.in_flight += 1;
    }

    /// A read of this file came back, or was dropped in flight: it counts no more.
    pub(crate) fn read_done(&mut self) {
        self.in_flight -= 1;
    }

    /// A read brought the file's bytes up to `end`.
    pub(crate) fn read_up_to(&mut self, end: u64) {
        self.read_end = self.read_end.max(end);
    }

    /// `n` bytes from `next_read`, where the consumer is, were copied to it at once (see
    /// the engine's `whole.rs`): read, and consumed, with no read in flight.
    pub(crate) fn copied(&mut self, n: u64) {
        debug_assert!(self.next_read == self.consumed && self.in_flight == 0);
        self.next_read += n;
        self.consumed += n;
        self.read_end = self.read_end.max(self.next_read);
    }

    /// The consumer took `n` bytes.
    pub(crate) fn consume(&mut self, n: u64) {
        self.consumed += n;
    }

    /// The consumer skipped to `to`: reads not issued yet start there (aligned down to
    /// `align` for `O_DIRECT`, the consumer starting inside the first; not at all past
    /// `stop`), never before what was issued already.
    pub(crate) fn skip_to(&mut self, to: u64, stop: u64, align: u64) {
        self.consumed = to;
        if self.next_read < to {
            self.next_read = aligned_start(to, stop, align);
        }
    }

    /// The file was sized, its bytes stopping at `stop`: where nothing was issued yet, the
    /// first read starts at the consumer, aligned down to `align` for `O_DIRECT`.
    pub(super) fn sized(&mut self, stop: u64, align: u64) {
        if self.next_read == self.consumed {
            self.next_read = aligned_start(self.consumed, stop, align);
        }
    }

    /// Forgets every read and what was consumed, to read the file again from `start`.
    pub(super) fn rewind(&mut self, start: u64) {
        debug_assert_eq!(self.in_flight, 0, "rewind with reads in flight");
        *self = FileProgress::new(start);
    }
}

/// Where reads start for a consumer at `at` in a file whose bytes stop at `stop`: `at`,
/// aligned down to `align` for `O_DIRECT`; but at the end there is nothing to read, and an
/// aligned read of bytes before it would be asked for nothing (and could fail for nothing).
fn aligned_start(at: u64, stop: u64, align: u64) -> u64 {
    if at >= stop {
        at
    } else {
        at / align * align
    }
}
