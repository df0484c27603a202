//! The settings the engine works by (`Limits`), fixed when it is made.

use std::time::Duration;

/// Settings the engine works by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) read_size: usize,
    pub(crate) direct: bool,
    pub(crate) depth: usize,
    pub(crate) max_open: usize,
    /// Pool bytes the read-ahead may hold while reads of the files ahead go to the disk
    /// through the page cache (`O_DIRECT` reads may fill the pool).
    pub(crate) cold_window: usize,
    /// Pool bytes the read-ahead may hold while the files ahead are in the page cache and
    /// kernel workers copy their large reads.
    pub(crate) warm_window: usize,
    /// The same while the consumer's thread copies them: the copies land this far ahead of
    /// the consumer at most, in the same few pages each time.
    pub(crate) inline_window: usize,
    /// The same while those reads are small (below `OFFLOAD_MIN`): they are copied on the
    /// consumer's thread, so this is how far ahead of it the copies land.
    pub(crate) small_window: usize,
    /// Offloaded reads in flight at most.
    pub(crate) offload_depth: usize,
    /// Whether kernel workers copy large reads of cached files (`offload(true)`).
    pub(crate) offload: bool,
    /// Whether buffered reads leave the page cache as they found it (`uncached(true)`, never
    /// with `direct`): a cold file read `O_DIRECT`, others sent with `RWF_DONTCACHE`, or
    /// dropped behind where it is refused.
    pub(crate) uncached: bool,
    /// Whether uncached reads are dropped behind even where `RWF_DONTCACHE` and `O_DIRECT`
    /// are taken (`uncached_fallback(true)`, for measuring the fallback).
    pub(crate) uncached_fallback: bool,
    /// The longest the reads in flight are waited for when the engine is dropped, rebound or
    /// closed (see `drain`).
    pub(crate) drain_timeout: Duration,
    /// Opens under way at once at most, each on a helper thread (those most likely hung not
    /// counted: see `ThreadOpens::slow`).
    pub(crate) open_depth: usize,
}

impl Limits {
    /// The window of small cached reads. Where kernel workers copy large reads, the window
    /// must hold those in flight too, or a small file behind a large one would stall the
    /// pipeline; else a smaller one keeps the copies in the CPU's cache until consumed.
    pub(super) fn small_reads_window(&self) -> usize {
        if self.offload {
            self.warm_window
        } else {
            self.small_window
        }
    }
}
