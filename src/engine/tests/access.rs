//! What the tests ask of an engine beyond what the reader does, and of the process.

use std::io;
use std::path::Path;

use super::super::{Core, Engine};
use crate::pool::Pool;
use crate::source::Source;

impl<'a> Engine<'a> {
    /// Queues a whole file, or its range `start..start + limit`.
    pub(crate) fn push(&mut self, source: Source<'a>, start: u64, limit: u64) -> io::Result<()> {
        self.push_range(source, start, limit, false)
    }

    fn core_mut(&mut self) -> &mut Core<'a> {
        &mut self.stream.ahead.core
    }

    pub(crate) fn pool(&self) -> &Pool {
        self.stream.ahead.core.pool()
    }

    /// Tests: every region is filled with `byte` before it is read into.
    pub(crate) fn set_poison(&mut self, byte: u8) {
        self.core_mut().poison = Some(byte);
    }
}

/// Descriptors of this process open on files under `dir`. Each test has its own directory,
/// so tests running alongside do not count.
pub(crate) fn fds_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}
