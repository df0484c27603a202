//! What the consumer calls of the engine: `fill_buf` and `consume` (the spill's bytes
//! first), `fill_buf_at_least` (a record in one piece, without copying where its bytes lie
//! in adjacent regions, else copied into the spill), `skip` (ranges passed over are not
//! read), where it is in the current file, and moving on.

use std::fs::File;
use std::io;

use super::spill::Spill;
use super::whole;
use super::{front, Engine, ReadAhead, Stream};
use crate::source::raw_fd;

/// How a run of `n` bytes from the consumer's position can be had.
enum Gather {
    /// In place: this many bytes lie contiguous in the pool (all the file has left, where
    /// that is fewer than `n`).
    InPlace(usize),
    /// Only by copying: they straddle the pool's end, or the pool cannot hold them at once.
    Spill,
}

impl<'a> Engine<'a> {
    /// The current file's next bytes, `&[]` at its end: what waits in the spill, else the
    /// front chunk's bytes.
    #[inline]
    pub(crate) fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.spill.pending() == 0 && self.stream.holds(1) {
            return Ok(self.stream.handed());
        }
        self.fill_buf_again()
    }

    /// `fill_buf` where the bytes handed out last are all consumed.
    fn fill_buf_again(&mut self) -> io::Result<&[u8]> {
        self.stream.settle();
        if self.spill.pending() > 0 {
            return Ok(self.spill.expose());
        }
        // Every file's last call: told at once where its bytes were copied whole.
        if self.stream.at_front_end() {
            return Ok(&[]);
        }
        if whole::copy(&mut self.stream.ahead, &mut self.spill)? {
            return Ok(self.spill.expose());
        }
        self.stream.fill()
    }

    /// Marks `amt` bytes of the last `fill_buf` (or `fill_buf_at_least`) as read; clamps to
    /// what it returned.
    #[inline]
    pub(crate) fn consume(&mut self, amt: usize) {
        if self.spill.pending() == 0 {
            return self.stream.consume(amt);
        }
        self.consume_spilled(amt);
    }

    fn consume_spilled(&mut self, amt: usize) {
        let amt = self.spill.consume(amt);
        self.stream.ahead.core.stats.consumed(amt as u64);
    }

    /// At least `n` contiguous bytes of the current file, or all it has left; see
    /// `SequentialFileReader::fill_buf_at_least`.
    #[inline]
    pub(crate) fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        // Most records lie inside the bytes handed out last: as std's `BufReader` hands out
        // its buffer, with no chunk or region looked at again.
        if self.spill.pending() == 0 && self.stream.holds(n) {
            return Ok(self.stream.handed());
        }
        // Likewise the records of a file copied whole (see `whole.rs`), which the spill
        // holds: no larger than the pool, so `n` is too.
        if self.spill.pending() >= n.max(1) {
            return Ok(self.spill.expose());
        }
        fill_at_least(&mut self.stream, &mut self.spill, n)
    }

    /// Passes over `n` bytes of the current file; see `SequentialFileReader::skip`.
    pub(crate) fn skip(&mut self, n: u64) -> io::Result<u64> {
        skip(&mut self.stream, &mut self.spill, n)
    }

    /// The offset in the current file of the next byte the consumer gets: past what it was
    /// handed from the pool, less what waits for it in the spill.
    #[inline]
    pub(crate) fn file_offset(&self) -> u64 {
        let front = self.stream.ahead.core.queue.front();
        let unsettled = self.stream.unsettled() as u64;
        front.map_or(0, |f| {
            f.progress().consumed() + unsettled - self.spill.pending() as u64
        })
    }

    /// The error of a read that wanted `missing` more bytes of the current file than it has:
    /// which file, and where it ended.
    pub(crate) fn ended_early(&self, missing: usize) -> io::Error {
        let front = self.stream.ahead.core.queue.front();
        let Some(name) = front.map(|f| f.name().to_string()) else {
            let why = format!("no current file (none queued, or all read): {missing} bytes asked");
            return io::Error::new(io::ErrorKind::UnexpectedEof, why);
        };
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{name} ended at offset {}, {missing} bytes short of what was asked",
                self.file_offset()
            ),
        )
    }

    /// Opens the current file if it is not yet, and sizes it (see `ReadAhead::open_current`):
    /// a file to be copied whole (see `whole.rs`) by that copy, made now and left in the
    /// spill for the first read, so that a scan's closure knows the length of a small cached
    /// file before it reads, for no seek where the copy tells its end.
    ///
    /// # Errors
    ///
    /// The backend's (its ring failed), not the file's: a file that cannot be opened keeps
    /// its error for reading it to report.
    pub(crate) fn open_current(&mut self) -> io::Result<()> {
        // A file at its end has nothing left to copy: `whole::copy` declines it. A sized
        // file has nothing to learn from a copy now: it waits for the closure's first read,
        // which may be a record parser's, whose large files are read ahead.
        let sized = (self.stream.ahead.core.queue.front()).is_some_and(|f| f.status().is_sized());
        if self.spill.pending() == 0 && !sized {
            whole::copy(&mut self.stream.ahead, &mut self.spill)?;
        }
        self.stream.ahead.open_current()
    }

    /// Drops the rest of the current file; whether another file is now current.
    pub(crate) fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.spill.clear();
        self.stream.move_to_next_file()
    }

    /// Makes the caller's `(file, limit)` current; see `SequentialFileReader::activate_file`.
    pub(crate) fn activate(&mut self, file: &'a File, limit: u64) -> io::Result<()> {
        if self.spill.pending() > 0 && self.untouched(file, limit) {
            // The current file again, none of it taken: its bytes in the spill are kept, as
            // its regions read ahead would be (see `Stream::activate`).
            self.spill.hide();
            self.stream.settle();
            return Ok(());
        }
        self.spill.clear();
        self.stream.activate(file, limit)
    }

    /// Whether `(file, limit)` is the current file, without an error, and the caller has
    /// taken none of it.
    fn untouched(&self, file: &File, limit: u64) -> bool {
        let front = self.stream.ahead.core.queue.front();
        front.is_some_and(|f| {
            f.matches(raw_fd(file), limit)
                && f.error().is_none()
                && f.status().start() == self.file_offset()
        })
    }
}

/// At least `n` contiguous bytes of the current file, or all it has left: in place where
/// they lie in adjacent regions, else copied into the spill.
fn fill_at_least<'s>(
    stream: &'s mut Stream<'_>,
    spill: &'s mut Spill,
    n: usize,
) -> io::Result<&'s [u8]> {
    // Whatever comes of it, this call's answer replaces the last one's: an error hands out
    // nothing, so `consume` then takes nothing.
    spill.hide();
    stream.settle();
    let capacity = stream.ahead.core.pool().capacity();
    if n > capacity {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fill_buf_at_least({n}): more than the pool holds ({capacity} bytes); raise buffer_size"),
        ));
    }
    stream.ahead.sched.policy_mut().set_records();
    if spill.pending() == 0 && !whole::copy(&mut stream.ahead, spill)? {
        // Most records lie inside the front chunk: no run to measure, no waiting.
        let core = &stream.ahead.core;
        if let Some(len) = front::unread(core, n) {
            debug_assert!(
                front::run_len(core, n).0 == len,
                "the run gather would find"
            );
            return Ok(stream.expose_run(len));
        }
        match gather(stream, n) {
            Ok(Gather::InPlace(len)) => return Ok(stream.expose_run(len)),
            Ok(Gather::Spill) => {}
            // `gather` looks at the bytes through `fill`, which hands them out.
            Err(e) => {
                stream.settle();
                return Err(e);
            }
        }
    }
    fill_spill(stream, spill, n)?;
    Ok(spill.expose())
}

/// Passes over `n` bytes of the current file: those waiting in the spill first.
fn skip(stream: &mut Stream<'_>, spill: &mut Spill, n: u64) -> io::Result<u64> {
    stream.settle();
    spill.hide();
    let in_file = n.saturating_sub(spill.pending() as u64);
    if in_file > 0 && ensure_sized(stream)? {
        front::check_passable(&stream.ahead.core, in_file)?;
    }
    let mut skipped = spill.skip(n);
    let ahead = &mut stream.ahead;
    if skipped < n && ahead.core.queue.front().is_some() {
        skipped += front::skip(&mut ahead.core, n - skipped);
        ahead.refill()?;
    }
    ahead.core.stats.skipped(skipped);
    Ok(skipped)
}

/// Waits and issues reads until `n` bytes (or the file's rest) lie contiguous in the pool
/// from the consumer's position, or until that turns out impossible.
fn gather(stream: &mut Stream<'_>, n: usize) -> io::Result<Gather> {
    loop {
        if stream.fill()?.is_empty() {
            return Ok(Gather::InPlace(0));
        }
        let core = &stream.ahead.core;
        let (run, chunks) = front::run_len(core, n);
        let front = core.queue.front().expect("bytes were exposed");
        if run >= n {
            return Ok(Gather::InPlace(run));
        }
        if run as u64 >= front.stop().saturating_sub(front.progress().consumed()) {
            // Every byte up to where the file's bytes stop is here: fewer than `n` say that
            // the file ends there, so they are returned only if it does.
            return match front.error_out() {
                Some(e) => Err(e),
                None => Ok(Gather::InPlace(run)),
            };
        }
        let (id, next) = (front.id, core.chunks.get(chunks));
        match next {
            Some(c) if c.file_id() == id && c.in_flight() => stream.ahead.wait()?,
            Some(c) if c.file_id() == id => return Ok(Gather::Spill),
            _ => {
                if !issue_for_run(&mut stream.ahead, (id, n), chunks)? {
                    return Ok(Gather::Spill);
                }
            }
        }
    }
}

/// Issues the next reads of the current file `id`, past the window of cached reads if need
/// be for a run of `n` bytes; whether one now follows the `chunks` chunks of the run.
fn issue_for_run(
    ahead: &mut ReadAhead<'_>,
    (id, n): (u64, usize),
    chunks: usize,
) -> io::Result<bool> {
    ahead.sched.policy_mut().set_stretch(Some(n));
    let scheduled = ahead.schedule();
    ahead.sched.policy_mut().set_stretch(None);
    scheduled?;
    Ok(ahead
        .core
        .chunks
        .get(chunks)
        .is_some_and(|c| c.file_id() == id))
}

/// Copies the current file's next bytes into the spill until `n` wait there (or the file
/// ends), freeing their regions as it goes, so that any `n` up to the pool's size fits.
fn fill_spill(stream: &mut Stream<'_>, spill: &mut Spill, n: usize) -> io::Result<()> {
    if spill.pending() >= n {
        return Ok(()); // A file copied whole holds its records already (see `whole.rs`).
    }
    spill.make_room();
    while spill.pending() < n {
        let bytes = stream.fill()?;
        if bytes.is_empty() {
            break;
        }
        let take = bytes.len().min(n - spill.pending());
        spill.extend(&bytes[..take]);
        stream.settle();
        front::advance(&mut stream.ahead.core, take);
        stream.ahead.core.stats.spilled(take as u64);
    }
    Ok(())
}

/// Opens the current file if it is not yet, so that its size is known; `false` with no
/// current file, its error if it cannot be opened. (A file that failed later was sized:
/// where it failed is for the caller to check.)
fn ensure_sized(stream: &mut Stream<'_>) -> io::Result<bool> {
    stream.ahead.open_current()?;
    let Some(front) = stream.ahead.core.queue.front() else {
        return Ok(false);
    };
    if front.status().is_sized() {
        return Ok(true);
    }
    Err(front.error_out().expect("opened, or failed"))
}
