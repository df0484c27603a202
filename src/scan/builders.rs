//! How a scan's threads build their readers (`Builders`): from one set of settings, sharing
//! one submission thread where asked, and within the memory that readers given up on a hung
//! read may leave behind.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::config::ReaderBuilder;
use crate::reader::SequentialFileReader;

/// How the scan's threads build their readers: from the same settings; where they share one
/// submission thread, the first reader built starts it and the others attach to it.
pub(super) struct Builders {
    base: ReaderBuilder,
    /// With a shared submission thread: the settings that attach to it, once there is one.
    attach: Option<Mutex<Option<ReaderBuilder>>>,
    /// The pool bytes the readers given up on a hung read left behind, so far.
    left_behind: AtomicUsize,
    /// How many they may leave behind: the scan's memory budget, again.
    budget: usize,
}

impl Builders {
    /// Readers from `base`, sharing one submission thread where it asks for one; those given
    /// up may leave `budget` bytes of pools behind together.
    pub(super) fn new(base: ReaderBuilder, budget: usize) -> Self {
        let attach = base.sq_poll.is_some().then(Mutex::default);
        Builders {
            base,
            attach,
            left_behind: AtomicUsize::new(0),
            budget,
        }
    }

    /// Counts a reader given up on a hung read, whose pool stays behind for good (the
    /// kernel may still write into it).
    ///
    /// # Errors
    ///
    /// Where the pools left behind pass the budget: the scan then stops, rather than leave
    /// more memory behind.
    pub(super) fn leave_behind(&self) -> io::Result<()> {
        let pool = self.buffer_size();
        let total = self.left_behind.fetch_add(pool, Ordering::Relaxed) + pool;
        if total <= self.budget {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "readahead: the scan gave up {} readers on reads a hung mount never completed, \
                 leaving {} MiB of their pools behind, more than its memory budget ({} MiB, \
                 `Scan::memory`); it stops rather than leave more",
                total / pool,
                total >> 20,
                self.budget >> 20
            ),
        ))
    }

    /// The pool size of every reader.
    pub(super) fn buffer_size(&self) -> usize {
        // As `build()` will size it: whole pages, and room for one read.
        self.base
            .buffer_size
            .max(self.base.read_size)
            .next_multiple_of(crate::consts::PAGE)
    }

    /// A thread's reader, once `given_up` readers of the thread were given up on a hung read.
    pub(super) fn build<'a>(&self, given_up: u32) -> io::Result<SequentialFileReader<'a>> {
        let Some(attach) = &self.attach else {
            return Ok(with_workers_for(self.base.clone(), given_up).build()?);
        };
        let mut attach = attach.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(builder) = &*attach {
            return Ok(with_workers_for(builder.clone(), given_up).build()?);
        }
        let reader = with_workers_for(self.base.clone(), given_up).build()?;
        *attach = Some(self.base.clone().sq_poll_shared_with(&reader));
        Ok(reader)
    }
}

/// `builder` with its kernel workers' cap raised by the cap again for each reader given up:
/// the workers are the thread's, shared by all its rings, and a hung read keeps one for
/// good, so a reader given up may leave them all stuck. The kernel's own limit still holds.
fn with_workers_for(builder: ReaderBuilder, given_up: u32) -> ReaderBuilder {
    match builder.io_workers {
        Some(cap) if cap > 0 && given_up > 0 => {
            builder.io_workers(cap.saturating_mul(given_up.saturating_add(1)))
        }
        _ => builder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reader_given_up_adds_the_cap_again() {
        let workers = |b: ReaderBuilder, given_up| with_workers_for(b, given_up).io_workers;
        assert_eq!(workers(ReaderBuilder::new().io_workers(2), 0), Some(2));
        assert_eq!(workers(ReaderBuilder::new().io_workers(2), 2), Some(6));
        assert_eq!(workers(ReaderBuilder::new().io_workers(0), 2), Some(0));
        assert_eq!(workers(ReaderBuilder::new(), 2), None);
    }
}
