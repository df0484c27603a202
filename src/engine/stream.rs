//! The consumer's side: queuing files, the current file's bytes (`fill_buf`, `consume`),
//! moving on and activating.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use super::Engine;
use crate::source::Source;

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
    pub(crate) fn file_offset(&self) -> u64 {
        self.queue.front().map_or(0, |f| f.consumed)
    }

    /// Queues a file; it becomes current if the queue was empty.
    pub(crate) fn push(&mut self, source: Source<'a>, limit: u64) -> io::Result<()> {
        self.queue.push(source, limit);
        if self.queue.len() == 1 {
            self.refill()?;
        }
        Ok(())
    }

    /// The current file's next bytes, `&[]` at its end.
    pub(crate) fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.exposed = 0;
        loop {
            match self.poll_front()? {
                Front::Readable => break,
                Front::End => return Ok(&[]),
                Front::Again => {}
            }
        }
        let (Some(front), Some(c)) = (self.queue.front(), self.chunks.live.front()) else {
            unreachable!("the loop breaks only on a readable chunk")
        };
        let region = c.region.as_ref().expect("checked readable");
        let bytes = self.pool.bytes(region, c.pos..c.valid(front.end));
        self.exposed = bytes.len();
        Ok(bytes)
    }

    /// One step towards a readable front chunk.
    fn poll_front(&mut self) -> io::Result<Front> {
        let Some(front) = self.queue.front() else {
            return Ok(Front::End);
        };
        match self.chunks.live.front() {
            Some(c) if c.file == front.id && c.region.is_some() => {
                if c.pos < c.valid(front.end) {
                    return Ok(Front::Readable);
                }
                self.pop_chunk();
                self.refill()?;
            }
            Some(c) if c.file == front.id => self.wait()?,
            _ => return self.issue_for_front(),
        }
        Ok(Front::Again)
    }

    /// The current file has no chunk: its error, its end, or its next read issued (waiting
    /// for room where there is none).
    fn issue_for_front(&mut self) -> io::Result<Front> {
        let front = self.queue.front().expect("a current file");
        if let Some(e) = &front.error {
            return Err(e.duplicate().into());
        }
        if front.all_issued() {
            return Ok(Front::End);
        }
        let id = front.id;
        self.schedule()?;
        let issued = self.chunks.live.front().is_some_and(|c| c.file == id);
        let failed = self.queue.front().is_some_and(|f| f.error.is_some());
        if !issued && !failed {
            if self.io.in_flight() == 0 {
                return Err(io::Error::other(
                    "readahead: no read could be issued for the current file (this is a bug)",
                ));
            }
            self.wait()?;
        }
        Ok(Front::Again)
    }

    /// Marks `amt` bytes of the last `fill_buf` as read; clamps to what it returned.
    pub(crate) fn consume(&mut self, amt: usize) {
        let (Some(front), Some(c)) = (self.queue.front_mut(), self.chunks.live.front_mut()) else {
            return;
        };
        if c.file != front.id || c.region.is_none() {
            return;
        }
        let amt = amt.min(self.exposed);
        debug_assert!(c.pos + amt <= c.valid(front.end));
        self.exposed -= amt;
        c.pos += amt;
        front.consumed += amt as u64;
        self.stats.bytes_consumed += amt as u64;
    }

    /// Drops the rest of the current file; whether another file is now current.
    pub(crate) fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.exposed = 0;
        if self.queue.is_empty() {
            return Ok(false);
        }
        self.drop_front_file();
        self.refill()?;
        Ok(!self.queue.is_empty())
    }

    /// Makes the caller's `(file, limit)` current; see `SequentialFileReader::activate_file`.
    pub(crate) fn activate(&mut self, file: &'a File, limit: u64) -> io::Result<()> {
        self.exposed = 0;
        match self.queue.position(file.as_raw_fd(), limit) {
            Some(i) => {
                for _ in 0..i {
                    self.drop_front_file();
                }
                let front = self.queue.front().expect("found at i");
                if front.consumed > 0 || front.error.is_some() {
                    self.restart();
                }
            }
            None => {
                while !self.queue.is_empty() {
                    self.drop_front_file();
                }
                self.queue.push(Source::Borrowed(file), limit);
            }
        }
        self.refill()
    }
}
