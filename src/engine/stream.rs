//! The consumer's side: queuing files, the current file's bytes (`fill_buf`, `consume`),
//! moving on and activating.

use std::fs::File;
use std::io;
use std::path::Path;

use super::Engine;
use crate::source::{raw_fd, Source};

/// Where the current file stands for `fill_buf`.
enum Front {
    /// Its front chunk has bytes to read.
    Readable,
    /// It has no more bytes (or no file is current).
    End,
    /// Something was done (a chunk consumed, a wait, reads issued): look again.
    Again,
}

impl<'a> Engine<'a> {
    /// The offset in the current file of the next byte the consumer gets: past what it was
    /// handed from the pool, less what waits for it in the spill.
    pub(crate) fn file_offset(&self) -> u64 {
        self.core
            .queue
            .front()
            .map_or(0, |f| f.progress().consumed() - self.spill.pending() as u64)
    }

    /// The current file's path, when it was queued by path.
    pub(crate) fn current_path(&self) -> Option<&Path> {
        match &self.core.queue.front()?.source {
            Source::Path(path) => Some(path),
            _ => None,
        }
    }

    /// The current file's position among the files queued since the engine was made.
    pub(crate) fn current_index(&self) -> Option<u64> {
        self.core.queue.front().map(|f| f.id)
    }

    /// Queues `limit` bytes of a file from `start`; it becomes current if the queue was
    /// empty. Its opening and reading start at once where the pipeline has room. Where
    /// starting them fails (the ring broke), the file is not queued: it is queued and `Ok`,
    /// or not queued and `Err`.
    pub(crate) fn push(&mut self, source: Source<'a>, start: u64, limit: u64) -> io::Result<()> {
        self.push_range(source, start, limit, false)
    }

    /// [`push`](Self::push), of a range the file must hold whole where `exact` (an end of
    /// file before `start + limit` fails it).
    pub(crate) fn push_range(
        &mut self,
        source: Source<'a>,
        start: u64,
        limit: u64,
        exact: bool,
    ) -> io::Result<()> {
        let id = self.core.queue.push_range(source, start, limit, exact);
        let scheduled = self.sched.schedule_unless_ahead(&mut self.core);
        if scheduled.is_err() {
            self.core.drop_back_file(id);
        }
        scheduled
    }

    /// The current file's next bytes, `&[]` at its end: what waits in the spill, else the
    /// front chunk's bytes.
    pub(crate) fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.spill.pending() > 0 {
            self.exposed = self.spill.pending();
            return Ok(self.spill.bytes());
        }
        self.fill_chunk()
    }

    /// The front chunk's unread bytes, `&[]` at the current file's end.
    pub(super) fn fill_chunk(&mut self) -> io::Result<&[u8]> {
        self.exposed = 0;
        loop {
            match self.poll_front()? {
                Front::Readable => break,
                Front::End => return Ok(&[]),
                Front::Again => {}
            }
        }
        let (Some(front), Some(c)) = (self.core.queue.front(), self.core.chunks.front()) else {
            unreachable!("the loop breaks only on a readable chunk")
        };
        let region = c.region().expect("checked readable");
        let bytes = self.core.pool.bytes(region, c.pos()..c.valid(front.stop()));
        self.exposed = bytes.len();
        Ok(bytes)
    }

    /// One step towards a readable front chunk.
    fn poll_front(&mut self) -> io::Result<Front> {
        let Some(front) = self.core.queue.front() else {
            return Ok(Front::End);
        };
        match self.core.chunks.front() {
            Some(c) if c.file() == front.id && !c.in_flight() => {
                if c.pos() < c.valid(front.stop()) {
                    return Ok(Front::Readable);
                }
                self.core.pop_chunk();
                self.refill()?;
            }
            Some(c) if c.file() == front.id => self.wait()?,
            _ => return self.issue_for_front(),
        }
        Ok(Front::Again)
    }

    /// The current file has no chunk: its error, its end, or its next read issued (waiting
    /// for room where there is none).
    fn issue_for_front(&mut self) -> io::Result<Front> {
        let front = self.core.queue.front().expect("a current file");
        if let Some(e) = front.error_out().or_else(|| front.skipped_past_end()) {
            return Err(e);
        }
        if front.all_issued() {
            return Ok(Front::End);
        }
        let id = front.id;
        self.schedule()?;
        let issued = self.core.chunks.front().is_some_and(|c| c.file() == id);
        let failed = self.core.queue.front().is_some_and(|f| f.error().is_some());
        if !issued && !failed {
            if self.core.io.in_flight() == 0 {
                if self.core.drop_read_ahead() {
                    return Ok(Front::Again);
                }
                return Err(io::Error::other(
                    "readahead: no read could be issued for the current file (this is a bug)",
                ));
            }
            self.wait()?;
        }
        Ok(Front::Again)
    }

    /// The error of a read that wanted `missing` more bytes of the current file than it has:
    /// which file, and where it ended.
    pub(crate) fn ended_early(&self, missing: usize) -> io::Error {
        let name = self.core.queue.front().map(|f| f.name().to_string());
        let name = name.as_deref().unwrap_or("no current file");
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{name} ended at offset {}, {missing} bytes short of what was asked",
                self.file_offset()
            ),
        )
    }

    /// Marks `amt` bytes of the last `fill_buf` (or `fill_buf_at_least`) as read; clamps to
    /// what it returned.
    pub(crate) fn consume(&mut self, amt: usize) {
        let amt = amt.min(self.exposed);
        if amt == 0 {
            return;
        }
        self.exposed -= amt;
        self.core.stats.bytes_consumed += amt as u64;
        if self.spill.pending() > 0 {
            self.spill.consume(amt);
        } else {
            self.advance(amt);
        }
    }

    /// Moves the consumer `amt` bytes on through the current file's readable chunks (as many
    /// as they hold, from the front: the bytes just exposed).
    pub(super) fn advance(&mut self, amt: usize) {
        let front = self.core.queue.front_mut().expect("bytes were exposed");
        front.progress_mut().consume(amt as u64);
        let mut left = amt;
        for c in self.core.chunks.iter_mut() {
            debug_assert!(c.file() == front.id && !c.in_flight());
            left -= c.advance(left, front.stop());
            if left == 0 {
                break;
            }
        }
        debug_assert_eq!(left, 0, "advanced past the bytes exposed");
    }

    /// Drops the rest of the current file; whether another file is now current.
    pub(crate) fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.exposed = 0;
        self.spill.clear();
        if self.core.queue.is_empty() {
            return Ok(false);
        }
        self.drop_front_file();
        self.refill()?;
        Ok(!self.core.queue.is_empty())
    }

    /// Makes the caller's `(file, limit)` current; see `SequentialFileReader::activate_file`.
    pub(crate) fn activate(&mut self, file: &'a File, limit: u64) -> io::Result<()> {
        self.exposed = 0;
        self.spill.clear();
        match self.core.queue.position(raw_fd(file), limit) {
            Some(i) => {
                for _ in 0..i {
                    self.drop_front_file();
                }
                let front = self.core.queue.front().expect("found at i");
                if front.progress().consumed() > front.status().start() || front.error().is_some() {
                    self.core.restart_front();
                }
            }
            None => {
                while !self.core.queue.is_empty() {
                    self.drop_front_file();
                }
                self.core.queue.push(Source::Borrowed(file), 0, limit);
            }
        }
        self.refill()
    }
}
