//! What parsers of records need: `fill_buf_at_least` (a record in one piece, without copying
//! where its bytes lie in adjacent regions) and `skip` (ranges passed over are not read).

use std::io;
use std::mem;

use super::Engine;
use crate::consts::DIRECT_ALIGN;
use crate::queue::State;

/// Bytes of the current file copied out of the pool because they straddle the pool's end or
/// regions that are not adjacent. While any wait, the consumer reads them first.
///
/// Invariant: `pos <= buf.len()`; the bytes `buf[pos..]` come right before the current
/// file's `consumed` offset.
#[derive(Debug, Default)]
pub(super) struct Spill {
    buf: Vec<u8>,
    pos: usize,
}

impl Spill {
    /// Bytes waiting for the consumer.
    pub(super) fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    pub(super) fn consume(&mut self, amt: usize) {
        debug_assert!(amt <= self.pending());
        self.pos += amt;
        if self.pos == self.buf.len() {
            self.clear();
        }
    }

    /// Passes over up to `n` waiting bytes; how many.
    fn skip(&mut self, n: u64) -> u64 {
        let n = n.min(self.pending() as u64);
        self.consume(n as usize);
        n
    }

    /// Forgets what waits (the current file changed); keeps the allocation.
    pub(super) fn clear(&mut self) {
        self.buf.clear();
        self.pos = 0;
    }

    /// Drops what was consumed, so that more can be appended after what waits.
    fn compact(&mut self) {
        self.buf.drain(..self.pos);
        self.pos = 0;
    }
}

/// How a run of `n` bytes from the consumer's position can be had.
enum Gather {
    /// In place: this many bytes lie contiguous in the pool (all the file has left, where
    /// that is fewer than `n`).
    InPlace(usize),
    /// Only by copying: they straddle the pool's end, or the pool cannot hold them at once.
    Spill,
}

impl Engine<'_> {
    /// At least `n` contiguous bytes of the current file, or all it has left; see
    /// `SequentialFileReader::fill_buf_at_least`.
    pub(crate) fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        if n > self.core.pool.capacity() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "fill_buf_at_least({n}): more than the pool holds ({} bytes); raise buffer_size",
                    self.core.pool.capacity()
                ),
            ));
        }
        self.sched.policy_mut().set_records();
        if self.spill.pending() == 0 {
            // Most records lie inside the front chunk: no run to measure, no waiting.
            if let Some(len) = self.front_unread(n) {
                debug_assert!(self.run_len(n).0 == len, "the run the slow path would find");
                return Ok(self.expose_run(len));
            }
            match self.gather(n)? {
                Gather::InPlace(len) => return Ok(self.expose_run(len)),
                Gather::Spill => {}
            }
        }
        self.fill_spill(n)?;
        self.exposed = self.spill.pending();
        Ok(self.spill.bytes())
    }

    /// The unread bytes of the current file's front chunk, if it is readable and holds at
    /// least `n` of them (and at least one).
    fn front_unread(&self, n: usize) -> Option<usize> {
        let (front, c) = (self.core.queue.front()?, self.core.chunks.front()?);
        let unread = c.valid(front.stop()).saturating_sub(c.pos());
        (c.file() == front.id && !c.in_flight() && unread >= n.max(1)).then_some(unread)
    }

    /// Waits and issues reads until `n` bytes (or the file's rest) lie contiguous in the pool
    /// from the consumer's position, or until that turns out impossible.
    fn gather(&mut self, n: usize) -> io::Result<Gather> {
        loop {
            if self.fill_chunk()?.is_empty() {
                return Ok(Gather::InPlace(0));
            }
            let (run, chunks) = self.run_len(n);
            let front = self.core.queue.front().expect("bytes were exposed");
            if run >= n {
                return Ok(Gather::InPlace(run));
            }
            if run as u64 >= front.stop().saturating_sub(front.progress().consumed()) {
                // Every byte up to where the file's bytes stop is here: fewer than `n` say
                // that the file ends there, so they are returned only if it does.
                return match front.error_out() {
                    Some(e) => Err(e),
                    None => Ok(Gather::InPlace(run)),
                };
            }
            let (id, next) = (front.id, self.core.chunks.get(chunks));
            match next {
                Some(c) if c.file() == id && c.in_flight() => self.wait()?,
                Some(c) if c.file() == id => return Ok(Gather::Spill),
                _ => {
                    if !self.issue_for_run(id, chunks)? {
                        return Ok(Gather::Spill);
                    }
                }
            }
        }
    }

    /// Issues the current file's next reads, past the window of cached reads if need be;
    /// whether one now follows the `chunks` chunks of the run.
    fn issue_for_run(&mut self, id: u64, chunks: usize) -> io::Result<bool> {
        self.sched.policy_mut().set_stretch(true);
        let scheduled = self.schedule();
        self.sched.policy_mut().set_stretch(false);
        scheduled?;
        Ok(self.core.chunks.get(chunks).is_some_and(|c| c.file() == id))
    }

    /// How many bytes lie contiguous in the pool from the consumer's position, counting no
    /// further than `n` once reached, and over how many chunks.
    fn run_len(&self, n: usize) -> (usize, usize) {
        let end = self.core.queue.front().expect("a current file").stop();
        let mut chunks = self.core.chunks.iter();
        let first = chunks.next().expect("a readable front chunk");
        let (mut run, mut count, mut prev) = (first.valid(end) - first.pos(), 1, first);
        for c in chunks {
            let (Some(a), Some(b)) = (prev.region(), c.region()) else {
                break;
            };
            let full = prev.valid(end);
            let joins = c.file() == prev.file()
                && full == a.len()
                && c.offset() == prev.offset() + full as u64
                && self.core.pool.adjacent(a, b);
            if run >= n || !joins {
                break;
            }
            run += c.valid(end);
            count += 1;
            prev = c;
        }
        (run, count)
    }

    /// Exposes `len` contiguous bytes from the consumer's position (see `run_len`).
    fn expose_run(&mut self, len: usize) -> &[u8] {
        self.exposed = len;
        match self.core.chunks.front() {
            Some(c) if len > 0 => {
                let region = c.region().expect("a readable front chunk");
                self.core.pool.span(region, c.pos(), len)
            }
            _ => &[],
        }
    }

    /// Copies the current file's next bytes into the spill until `n` wait there (or the file
    /// ends), freeing their regions as it goes, so that any `n` up to the pool's size fits.
    fn fill_spill(&mut self, n: usize) -> io::Result<()> {
        // Out of `self` while the pool's bytes are borrowed to be copied into it.
        let mut spill = mem::take(&mut self.spill);
        spill.compact();
        let copied = self.copy_into(&mut spill, n);
        self.spill = spill;
        copied
    }

    fn copy_into(&mut self, spill: &mut Spill, n: usize) -> io::Result<()> {
        while spill.pending() < n {
            let bytes = self.fill_chunk()?;
            if bytes.is_empty() {
                break;
            }
            let take = bytes.len().min(n - spill.pending());
            spill.buf.extend_from_slice(&bytes[..take]);
            self.exposed = 0;
            self.advance(take);
            self.core.stats.bytes_spilled += take as u64;
        }
        Ok(())
    }

    /// Passes over `n` bytes of the current file; see `SequentialFileReader::skip`.
    pub(crate) fn skip(&mut self, n: u64) -> io::Result<u64> {
        self.exposed = 0;
        let in_file = n.saturating_sub(self.spill.pending() as u64);
        if in_file > 0 && self.ensure_sized()? {
            self.check_passable(in_file)?;
        }
        let mut skipped = self.spill.skip(n);
        if skipped < n && self.core.queue.front().is_some() {
            skipped += self.skip_in_file(n - skipped);
            self.refill()?;
        }
        self.core.stats.bytes_skipped += skipped;
        Ok(skipped)
    }

    /// The current file's error, where skipping `n` bytes from the consumer would pass the
    /// offset it failed at: a skip never passes a failure for an end (and moves nothing then).
    fn check_passable(&self, n: u64) -> io::Result<()> {
        let front = self.core.queue.front().expect("sized, so current");
        match front.status().state() {
            State::Failed { at, .. } if front.progress().consumed().saturating_add(n) > *at => {
                Err(front.error_out().expect("failed"))
            }
            _ => Ok(()),
        }
    }

    /// Moves the consumer `n` bytes on in the current file (fewer at its end): chunks wholly
    /// passed over are freed unread (or their reads dropped), reads not issued yet never are.
    fn skip_in_file(&mut self, n: u64) -> u64 {
        let front = self.core.queue.front_mut().expect("sized, so current");
        let (id, from) = (front.id, front.progress().consumed());
        let stop = front.stop();
        let to = from.saturating_add(n).min(stop.max(from));
        // O_DIRECT reads start aligned; the consumer starts inside the first one.
        let align = if front.direct() {
            DIRECT_ALIGN as u64
        } else {
            1
        };
        front.progress_mut().skip_to(to, stop, align);
        while let Some(c) = self.core.chunks.front_mut() {
            if c.file() != id {
                break;
            }
            // A chunk with a byte of the file past `to` is kept; one whose bytes past `to`
            // lie past the file's end has nothing left to give (and its read, if it fails,
            // fails for nothing).
            if (c.offset() + c.want() as u64).min(stop) > to {
                c.skip_to(to);
                break;
            }
            let c = self.core.chunks.pop_front().expect("checked");
            self.core.drop_chunk(c);
        }
        to - from
    }

    /// Opens the current file if it is not yet, so that its size is known; `false` with no
    /// current file, its error if it cannot be opened. (A file that failed later was sized:
    /// where it failed is for the caller to check.)
    fn ensure_sized(&mut self) -> io::Result<bool> {
        self.open_current()?;
        let Some(front) = self.core.queue.front() else {
            return Ok(false);
        };
        if front.status().is_sized() {
            return Ok(true);
        }
        Err(front.error_out().expect("opened, or failed"))
    }

    /// Opens the current file if it is not yet (waiting for an open under way), until it is
    /// sized or has failed; its error is left for reading it to report. An error here is
    /// the backend's.
    pub(crate) fn open_current(&mut self) -> io::Result<()> {
        loop {
            let Some(front) = self.core.queue.front() else {
                return Ok(());
            };
            if front.status().is_sized() || front.error().is_some() {
                return Ok(());
            }
            self.schedule()?;
            let front = self.core.queue.front().expect("still current");
            if !front.status().is_sized() && front.error().is_none() {
                if self.core.io.in_flight() == 0 {
                    return Err(io::Error::other(
                        "readahead: the current file could not be opened (this is a bug)",
                    ));
                }
                self.wait()?;
            }
        }
    }
}
