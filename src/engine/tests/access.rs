//! What the tests ask of an engine beyond what the reader does, and of the process: helper
//! functions of the tests, never methods of the engine's types.

use std::path::Path;

use super::super::Engine;
use crate::pool::Pool;

/// The engine's pool.
pub(crate) fn pool<'e>(e: &'e Engine<'_>) -> &'e Pool {
    e.stream.ahead.core.pool()
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
