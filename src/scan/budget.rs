//! What a scan's readers may hold together, whatever the number of threads: pool memory (a
//! total, shared out among the threads), buffered reads from the device (likewise, past two
//! threads), io_uring kernel workers (a cap on each thread's), and open descriptors (a share
//! of the process's limit each, with room made for them all at once in the process's table
//! of descriptors).

use crate::config::ReaderBuilder;
use crate::consts::PAGE;
use crate::sys;

/// The pool memory of a scan's readers together, by default (see
/// [`Scan::memory`](super::Scan::memory)).
pub const DEFAULT_SCAN_MEMORY: usize = 256 << 20;
/// The bounded io_uring kernel workers of each of a scan's threads, by default (see
/// [`Scan::io_workers`](super::Scan::io_workers)).
pub const DEFAULT_SCAN_IO_WORKERS: u32 = 2;
/// The smallest pool a scan gives a reader, whatever its share of
/// [`Scan::memory`](super::Scan::memory): below two reads of the default size, a reader stops
/// reading ahead.
const MIN_SHARE: usize = 1 << 20;
/// The buffered reads from the device a scan's readers hold in their pools together, where
/// it has more than two: each reader's share of it, or one read where that is more (past 16
/// threads of 512 KiB reads, so the total grows again, by one read a thread). The kernel's own
/// read-ahead keeps the device busy behind buffered reads, so many readers need not each
/// hold the window one does (`COLD_WINDOW`); each byte they hold was first written where a
/// page fault brought it, and 64 readers of small cold files each marched through theirs.
const SCAN_COLD_WINDOW: usize = 2 * crate::consts::COLD_WINDOW;

/// The settings of each of `threads` readers: `builder` within its share of `memory`, of the
/// buffered reads from the device and of the descriptors, its kernel workers capped where it
/// does not say otherwise.
pub(super) fn share(builder: ReaderBuilder, memory: usize, threads: usize) -> ReaderBuilder {
    let builder = share_memory(builder, memory, threads);
    let mut builder = share_cold_window(share_descriptors(builder, threads), threads);
    if builder.io_workers.is_none() {
        // With a shared submission thread, its workers serve every reader.
        let readers = if builder.sq_poll.is_some() {
            threads
        } else {
            1
        };
        let cap = DEFAULT_SCAN_IO_WORKERS.saturating_mul(readers.try_into().unwrap_or(u32::MAX));
        builder = builder.io_workers(cap);
    }
    builder
}

/// `builder` holding its share of `SCAN_COLD_WINDOW` in buffered reads from the device,
/// where there are more than two threads: one or two keep a reader's own window, which is
/// half of it (`reader::build` keeps one read at least).
fn share_cold_window(mut builder: ReaderBuilder, threads: usize) -> ReaderBuilder {
    if threads > 2 {
        builder.cold_window = Some((SCAN_COLD_WINDOW / threads).next_multiple_of(PAGE));
    }
    builder
}

/// `builder` with its pool lowered, where needed, to its share of `memory` (at least
/// `MIN_SHARE`), and its reads to half of that pool, so that the pool still holds two.
fn share_memory(builder: ReaderBuilder, memory: usize, threads: usize) -> ReaderBuilder {
    let share = (memory / threads.max(1)).max(MIN_SHARE);
    if builder.buffer_size <= share {
        return builder;
    }
    let share = share / PAGE * PAGE;
    // Whole pages, so that two reads still fit once each is rounded up to one.
    let read_size = builder.read_size.min(share / 2 / PAGE * PAGE).max(PAGE);
    builder.buffer_size(share).read_size(read_size)
}

/// Descriptors a reader holds beside the files it opens ahead: its ring, directory handles
/// and the mounts' it checked, the helper threads' wake-up.
const OTHER_DESCRIPTORS: usize = 8;

/// Makes room in the process's table of descriptors, at once, for those `threads` readers
/// built from `builder` may hold together (see `sys::reserve_descriptors`: each growth of
/// the table as they open would stall every open of the process).
pub(super) fn reserve_descriptors(builder: &ReaderBuilder, threads: usize) {
    let each = builder.max_open_files.saturating_add(OTHER_DESCRIPTORS);
    sys::reserve_descriptors(threads.saturating_mul(each));
}

/// Queued files each reader of a scan of more than two threads keeps open at most, whatever
/// its builder's cap: its readers together open enough ahead (64 threads ran no faster with
/// 128 each: BENCHMARKS.md, "What chose each constant"), and a scan of many threads holds
/// fewer descriptors.
const SCAN_MAX_OPEN: usize = 64;

/// `builder` with its cap on open descriptors lowered, past two threads, to
/// `SCAN_MAX_OPEN`, and to each reader's share of half what the process may open (the other
/// half left to the rest of the process). A reader copes with running out of descriptors by
/// keeping fewer, but not when the others hold them all: its current file would fail.
fn share_descriptors(mut builder: ReaderBuilder, threads: usize) -> ReaderBuilder {
    if threads > 2 {
        builder.max_open_files = builder.max_open_files.min(SCAN_MAX_OPEN);
    }
    let Some(limit) = sys::descriptor_limit() else {
        return builder;
    };
    let share = limit / 2 / threads as u64;
    let cap = usize::try_from(share).map_or(builder.max_open_files, |share| {
        builder.max_open_files.min(share.max(1))
    });
    builder.max_open_files(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::{DEFAULT_BUFFER_SIZE, DEFAULT_READ_SIZE};

    fn pool(builder: ReaderBuilder, memory: usize, threads: usize) -> (usize, usize) {
        let b = share(builder, memory, threads);
        (b.buffer_size, b.read_size)
    }

    #[test]
    fn the_default_leaves_up_to_8_threads_their_default_pool() {
        let defaults = (DEFAULT_BUFFER_SIZE, DEFAULT_READ_SIZE);
        assert_eq!(pool(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, 1), defaults);
        assert_eq!(pool(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, 8), defaults);
    }

    #[test]
    fn many_threads_share_the_memory() {
        let (size, read) = pool(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, 64);
        assert_eq!((size, read), (4 << 20, DEFAULT_READ_SIZE));
        let (size, _) = pool(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, 3);
        assert!(size * 3 <= DEFAULT_SCAN_MEMORY && size % PAGE == 0);
    }

    #[test]
    fn a_share_holds_two_reads_and_at_least_the_floor() {
        let big_reads = ReaderBuilder::new().read_size(8 << 20);
        assert_eq!(pool(big_reads, 256 << 20, 64), (4 << 20, 2 << 20));
        assert_eq!(
            pool(ReaderBuilder::new(), 1 << 20, 64),
            (MIN_SHARE, 512 << 10)
        );
    }

    #[test]
    fn past_two_threads_each_holds_its_share_of_the_buffered_reads() {
        let cold = |threads| share(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, threads).cold_window;
        assert_eq!((cold(1), cold(2)), (None, None));
        assert_eq!(cold(8), Some(SCAN_COLD_WINDOW / 8));
        // Below one read, the reader holds one read (`reader::build`).
        assert_eq!(cold(64), Some(SCAN_COLD_WINDOW / 64));
        assert_eq!(cold(3).map(|w| w % PAGE), Some(0));
    }

    #[test]
    fn past_two_threads_each_keeps_fewer_files_open() {
        let open = |threads| share(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, threads);
        let most = |threads| open(threads).max_open_files;
        assert!(most(3) <= SCAN_MAX_OPEN && most(64) <= SCAN_MAX_OPEN);
        if sys::descriptor_limit().is_none_or(|limit| limit >= 4 * 128) {
            assert_eq!(
                most(2),
                crate::consts::DEFAULT_MAX_OPEN_FILES,
                "two keep the default"
            );
        }
    }

    #[test]
    fn workers_are_capped_unless_the_builder_says() {
        let capped = share(ReaderBuilder::new(), DEFAULT_SCAN_MEMORY, 2);
        assert_eq!(capped.io_workers, Some(DEFAULT_SCAN_IO_WORKERS));
        let own = share(ReaderBuilder::new().io_workers(0), DEFAULT_SCAN_MEMORY, 2);
        assert_eq!(own.io_workers, Some(0));
        let polled = ReaderBuilder::new().sq_poll(std::time::Duration::from_millis(1));
        let shared = share(polled, DEFAULT_SCAN_MEMORY, 4);
        assert_eq!(shared.io_workers, Some(4 * DEFAULT_SCAN_IO_WORKERS));
    }
}
