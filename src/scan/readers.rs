//! A scan thread's readers (`Readers`): the one it reads with, built on its first entry, and
//! a new one past a hung read, with what those given up did added up.

use std::io;

use super::builders::Builders;
use crate::io::Backend;
use crate::reader::SequentialFileReader;
use crate::stats::Stats;

/// What a thread's reader did, if it built one.
pub(super) type ThreadEnd = Option<(Stats, Backend)>;

/// A thread's readers: the one it reads with, built on its first entry, and what those it
/// gave up on a hung read did.
pub(super) struct Readers<'a> {
    current: Option<SequentialFileReader<'a>>,
    /// The counters and backend of the readers given up on a hung read.
    retired: Option<(Stats, Backend)>,
    /// How many readers were given up on a hung read.
    given_up: u32,
}

impl<'a> Readers<'a> {
    /// No reader yet: the first is built when an entry is queued.
    pub(super) fn new() -> Self {
        Readers {
            current: None,
            retired: None,
            given_up: 0,
        }
    }

    /// The bytes queued into the current reader, by the sizes it found when it opened its
    /// paths ahead, one page a path until then (or until sized: see `Opened::size`).
    pub(super) fn queued_bytes(&self) -> u64 {
        self.current.as_ref().map_or(0, |r| r.queued_bytes())
    }

    /// Whether the current reader's reads find the page cache warm (none built: no).
    pub(super) fn cache_warm(&self) -> bool {
        self.current.as_ref().is_some_and(|r| r.cache_warm())
    }

    /// The current reader, built the first time an entry is queued (a thread with nothing
    /// to read builds none).
    pub(super) fn get(&mut self, builders: &Builders) -> io::Result<&mut SequentialFileReader<'a>> {
        if self.current.is_none() {
            self.current = Some(builders.build(self.given_up)?);
        }
        Ok(self.current.as_mut().expect("built above"))
    }

    /// The current reader, once an entry was queued into it.
    pub(super) fn built(&mut self) -> &mut SequentialFileReader<'a> {
        self.current.as_mut().expect("an entry was queued into it")
    }

    /// Gives up the current reader, which gave up on a hung read (the kernel may keep its
    /// region of the pool for good, so that it would soon wait again), and queues the `left`
    /// files behind its current one into a new one. An error is the new reader's.
    pub(super) fn replace(&mut self, builders: &Builders, left: usize) -> io::Result<()> {
        let old = self.current.take().expect("the reader that hung");
        let backend = old.backend();
        let (behind, stats) = old.abandon();
        builders.leave_behind()?;
        let retired = self.retired.get_or_insert((Stats::default(), backend));
        retired.0.add(&stats);
        self.given_up += 1;
        debug_assert_eq!(behind.len(), left, "the reader is in step");
        if behind.is_empty() {
            return Ok(()); // The next entry taken builds one.
        }
        let reader = self.get(builders)?;
        for file in behind {
            reader.requeue(file)?;
        }
        Ok(())
    }

    /// The counters and backend of its readers (those given up included), dropping them.
    pub(super) fn end(self) -> ThreadEnd {
        let now = self.current.map(|r| (r.stats(), r.backend()));
        match (self.retired, now) {
            (Some((mut stats, _)), Some((last, backend))) => {
                stats.add(&last);
                Some((stats, backend))
            }
            (retired, now) => now.or(retired),
        }
    }
}
