//! A file taken back from an engine given up (`QueuedFile`), to be queued into another.

use crate::source::Source;

/// A file taken back from an engine given up: queue it again elsewhere.
#[derive(Debug)]
pub(crate) struct QueuedFile<'a> {
    pub(crate) source: Source<'a>,
    pub(crate) start: u64,
    pub(crate) limit: u64,
    /// Whether the file must hold the whole range (see `Engine::push_range`).
    pub(crate) exact: bool,
}
