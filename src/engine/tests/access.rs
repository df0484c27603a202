//! What the tests ask of an engine beyond what the reader does.

use std::io;

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
        &self.stream.ahead.core.pool
    }

    /// Tests: every region is filled with `byte` before it is read into.
    pub(crate) fn set_poison(&mut self, byte: u8) {
        self.core_mut().poison = Some(byte);
    }
}
