//! The current file's bytes as the consumer is handed them from the pool: the front chunk's
//! (`fill`), consumed (`consume`), moving on and activating.

use std::fs::File;
use std::io;
use std::path::Path;

use super::{front, ReadAhead};
use crate::pool::Span;
use crate::source::{raw_fd, Source};

/// The current file's bytes, as the consumer is handed them from the pool.
pub(super) struct Stream<'a> {
    pub(super) ahead: ReadAhead<'a>,
    /// The bytes the last `fill_buf` returned from the pool, and how far the consumer has
    /// come into them. Anything that changes the current file settles it first.
    handout: Handout,
}

/// The bytes last handed to the consumer, kept as std's `BufReader` keeps `pos` and
/// `filled`: a span of the pool, checked once when handed out, and how far into it the
/// consumer has come. Consuming inside it moves only `pos`; the chunks and the file's
/// progress learn of it (`settle`) before anything else looks at them. So a record that lies
/// inside it costs a compare to hand out and an add to consume.
#[derive(Debug, Default)]
struct Handout {
    span: Span,
    pos: usize,
}

impl Handout {
    /// Bytes handed out and not consumed yet: what `consume` may take.
    #[inline]
    fn left(&self) -> usize {
        self.span.len() - self.pos
    }
}

/// Where the current file stands for `fill`.
enum FrontPoll {
    /// Its front chunk has bytes to read.
    Readable,
    /// It has no more bytes (or no file is current).
    End,
    /// Something was done (a chunk consumed, a wait, reads issued): look again.
    Again,
}

impl<'a> Stream<'a> {
    pub(super) fn new(ahead: ReadAhead<'a>) -> Self {
        Stream {
            ahead,
            handout: Handout::default(),
        }
    }

    /// The current file's path, when it was queued by path.
    pub(super) fn current_path(&self) -> Option<&Path> {
        match &self.ahead.core.queue.front()?.source {
            Source::Path(path) => Some(path),
            _ => None,
        }
    }

    /// The current file's position among the files queued since the engine was made.
    pub(super) fn current_index(&self) -> Option<u64> {
        self.ahead.core.queue.front().map(|f| f.id)
    }

    /// Whether the bytes handed out hold `n` (at least one) not consumed yet, and may still
    /// be read (`Pool::holds`).
    #[inline]
    pub(super) fn holds(&self, n: usize) -> bool {
        self.handout.left() >= n.max(1) && self.ahead.core.pool().holds(&self.handout.span)
    }

    /// The bytes handed out and not consumed yet, once `holds` said they may be read.
    #[inline]
    pub(super) fn handed(&self) -> &[u8] {
        let pool = self.ahead.core.pool();
        pool.span_bytes(&self.handout.span, self.handout.pos)
    }

    /// Bytes consumed that the chunks and the file's progress have not learnt of yet.
    #[inline]
    pub(super) fn unsettled(&self) -> usize {
        self.handout.pos
    }

    /// Whether the consumer is at the current file's end with nothing of it left in the
    /// pool (a file copied whole, after its bytes): what [`fill`](Self::fill) would find,
    /// told without its look at the chunks and the scheduler. Settled first.
    pub(super) fn at_front_end(&self) -> bool {
        let core = &self.ahead.core;
        core.queue.front().is_some_and(|front| {
            front.consumed_to_end() && core.chunks.front().is_none_or(|c| c.file_id() != front.id)
        })
    }

    /// The front chunk's unread bytes, `&[]` at the current file's end.
    pub(super) fn fill(&mut self) -> io::Result<&[u8]> {
        self.settle();
        loop {
            match self.poll_front()? {
                FrontPoll::Readable => break,
                FrontPoll::End => return Ok(&[]),
                FrontPoll::Again => {}
            }
        }
        let core = &self.ahead.core;
        let (Some(front), Some(c)) = (core.queue.front(), core.chunks.front()) else {
            unreachable!("the loop breaks only on a readable chunk")
        };
        let region = c.region().expect("checked readable");
        let len = c.valid(front.stop()) - c.pos();
        self.handout.span = core.pool().span(region, c.pos(), len);
        Ok(self.handed())
    }

    /// Hands out `len` contiguous bytes from the consumer's position, as many chunks as they
    /// span (see `front::run_len`).
    pub(super) fn expose_run(&mut self, len: usize) -> &[u8] {
        debug_assert_eq!(self.handout.pos, 0, "settled before the run was measured");
        let core = &self.ahead.core;
        match core.chunks.front() {
            Some(c) if len > 0 => {
                let region = c.region().expect("a readable front chunk");
                self.handout.span = core.pool().span(region, c.pos(), len);
                self.handed()
            }
            _ => &[],
        }
    }

    /// Moves the chunks and the file's progress on by what the consumer took of the bytes
    /// handed out, which stay handed out from where it is now: `consume` may still take
    /// them, as std's `BufReader` lets it after any call that reads nothing.
    pub(super) fn catch_up(&mut self) {
        let consumed = std::mem::take(&mut self.handout.pos);
        if consumed > 0 {
            self.ahead.core.stats.consumed(consumed as u64);
            front::advance(&mut self.ahead.core, consumed);
            self.handout.span = self.handout.span.after(consumed);
        }
    }

    /// Moves the chunks and the file's progress on by what the consumer took of the bytes
    /// handed out, and hands nothing out any more: before the consumer's position moves
    /// another way, or the chunks are looked at.
    pub(super) fn settle(&mut self) {
        self.catch_up();
        self.handout = Handout::default();
    }

    /// One step towards a readable front chunk.
    fn poll_front(&mut self) -> io::Result<FrontPoll> {
        let core = &mut self.ahead.core;
        let Some(front) = core.queue.front() else {
            return Ok(FrontPoll::End);
        };
        match core.chunks.front() {
            Some(c) if c.file_id() == front.id && !c.in_flight() => {
                if c.pos() < c.valid(front.stop()) {
                    return Ok(FrontPoll::Readable);
                }
                core.pop_chunk();
                self.ahead.refill()?;
            }
            Some(c) if c.file_id() == front.id => self.ahead.wait()?,
            _ => return self.issue_for_front(),
        }
        Ok(FrontPoll::Again)
    }

    /// The current file has no chunk: its error, its end, or its next read issued (waiting
    /// for room where there is none).
    fn issue_for_front(&mut self) -> io::Result<FrontPoll> {
        let front = self.ahead.core.queue.front().expect("a current file");
        if let Some(e) = front.error_out().or_else(|| front.skipped_past_end()) {
            return Err(e);
        }
        if front.all_issued() {
            return Ok(FrontPoll::End);
        }
        let (id, sized) = (front.id, front.status().is_sized());
        self.ahead.schedule()?;
        let core = &mut self.ahead.core;
        let issued = core.chunks.front().is_some_and(|c| c.file_id() == id);
        let front = core.queue.front();
        let failed = front.is_some_and(|f| f.error().is_some());
        // An open answered while scheduling (a helper thread's) sizes the file: an empty
        // one then has nothing to read, which the next look tells as its end.
        let opened = !sized && front.is_some_and(|f| f.status().is_sized());
        if !issued && !failed && !opened {
            let pool = self.ahead.core.pool().capacity();
            let front = self.ahead.core.queue.front().expect("a current file");
            if self.ahead.sched.copies_whole(front, pool) {
                // Held back to be copied whole (see `whole.rs`), but the consumer did not
                // copy it (or it was opened again while scheduling: its descriptor was
                // closed once its reads were done): read the usual way.
                self.ahead.sched.policy_mut().not_whole(id);
                return Ok(FrontPoll::Again);
            }
            if !self.ahead.anything_in_flight() {
                if self.ahead.core.drop_read_ahead() {
                    return Ok(FrontPoll::Again);
                }
                let name = self.ahead.core.queue.front().map(|f| f.name().to_string());
                return Err(io::Error::other(format!(
                    "readahead: no read could be issued for {} (this is a bug)",
                    name.as_deref().unwrap_or("the current file")
                )));
            }
            self.ahead.wait()?;
        }
        Ok(FrontPoll::Again)
    }

    /// Marks `amt` bytes of the last `fill` (or `expose_run`) as read; clamps to what it
    /// returned.
    #[inline]
    pub(super) fn consume(&mut self, amt: usize) {
        self.handout.pos += amt.min(self.handout.left());
    }

    /// Drops the rest of the current file; whether another file is now current.
    pub(super) fn move_to_next_file(&mut self) -> io::Result<bool> {
        self.settle();
        if self.ahead.core.queue.is_empty() {
            return Ok(false);
        }
        self.ahead.drop_front_file();
        self.ahead.refill()?;
        Ok(!self.ahead.core.queue.is_empty())
    }

    /// Makes the caller's `(file, limit)` current; see `SequentialFileReader::activate_file`.
    pub(super) fn activate(&mut self, file: &'a File, limit: u64) -> io::Result<()> {
        self.settle();
        match self.ahead.core.queue.position(raw_fd(file), limit) {
            Some(i) => {
                for _ in 0..i {
                    self.ahead.drop_front_file();
                }
                let front = self.ahead.core.queue.front().expect("found at i");
                if front.progress().consumed() > front.status().start() || front.error().is_some() {
                    self.ahead.core.restart_front();
                }
            }
            None => {
                while !self.ahead.core.queue.is_empty() {
                    self.ahead.drop_front_file();
                }
                self.ahead.core.queue.push(Source::Borrowed(file), 0, limit);
            }
        }
        self.ahead.refill()
    }
}
