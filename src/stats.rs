//! Counters a user needs to tune a reader, and the one count kept for the whole process
//! ([`drains_abandoned`](crate::drains_abandoned)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Drains given up by the readers of this process: see [`crate::drains_abandoned`].
static DRAINS_ABANDONED: AtomicU64 = AtomicU64::new(0);

/// Counts a drain given up, with its reader's pool and ring leaked.
pub(crate) fn count_abandoned_drain() {
    DRAINS_ABANDONED.fetch_add(1, Ordering::Relaxed);
}

/// Drains given up so far in this process.
pub(crate) fn drains_abandoned() -> u64 {
    DRAINS_ABANDONED.load(Ordering::Relaxed)
}

/// Counters of what a reader has done since it was built.
///
/// Read them with [`SequentialFileReader::stats`](crate::SequentialFileReader::stats), or a
/// scan's totals with [`ScanSummary::stats`](crate::ScanSummary::stats). All counts are
/// totals since the reader was built; what the process leaked on hung reads is
/// [`drains_abandoned`](crate::drains_abandoned).
///
/// # Examples
///
/// See [`add`](Self::add).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Bytes the backend read into the pool (including bytes later dropped unread).
    pub bytes_read: u64,
    /// Bytes handed to the consumer through `fill_buf`/`read`.
    pub bytes_consumed: u64,
    /// Bytes `fill_buf_at_least` copied to return them in one piece, where they straddled
    /// the end of the pool (or regions that are not adjacent).
    pub bytes_spilled: u64,
    /// Bytes passed over with `skip`.
    pub bytes_skipped: u64,
    /// Reads issued, continuations and retries included: those sent through the backend,
    /// and those copied at once on the reading thread ([`reads_cached`](Self::reads_cached)
    /// counts these too).
    pub reads: u64,
    /// Reads sent on an `O_DIRECT` descriptor (`F_NOCACHE` on macOS), one per read the
    /// read-ahead issues (the continuations and retries [`reads`](Self::reads) also counts
    /// are not counted again). 0 without [`direct_io`](crate::ReaderBuilder::direct_io);
    /// with it, the reads of the files whose filesystem let them be opened with `O_DIRECT`
    /// (the others are read buffered), a read it then refused (which goes on buffered)
    /// included.
    pub reads_direct: u64,
    /// Reads that returned fewer bytes than asked before the file's end.
    pub short_reads: u64,
    /// Reads copied at once on the reading thread, as far as the page cache held them
    /// (`preadv2` with `RWF_NOWAIT`), rather than sent through the ring: the large buffered
    /// reads of cached files, and the small cached files copied whole. Each large one that
    /// found only its front cached is also a short read.
    pub reads_cached: u64,
    /// Reads handed to kernel workers to copy from the page cache, so the copy overlaps the
    /// consumer's work: none unless the reader was built with
    /// [`offload(true)`](crate::ReaderBuilder::offload).
    pub reads_offloaded: u64,
    /// Reads sent with `RWF_DONTCACHE`, so that the kernel drops the pages they bring in
    /// (see [`uncached`](crate::ReaderBuilder::uncached)); continuations included.
    pub reads_uncached: u64,
    /// Files whose reads went out with `RWF_DONTCACHE` (see
    /// [`uncached`](crate::ReaderBuilder::uncached)). A file whose filesystem refused it is
    /// counted in [`files_dropped_behind`](Self::files_dropped_behind) instead.
    pub files_uncached: u64,
    /// Files read with [`uncached`](crate::ReaderBuilder::uncached) that had no page cached
    /// at their first read: read with `O_DIRECT`, which brings none in. Only on a filesystem
    /// that takes `O_DIRECT`, through a descriptor of the reader's own (a file handed in is
    /// opened again where its filesystem is known local); their reads are counted in
    /// [`reads_direct`](Self::reads_direct).
    pub files_direct: u64,
    /// Files read with [`uncached`](crate::ReaderBuilder::uncached) on a filesystem that
    /// refuses `RWF_DONTCACHE`: read buffered, the pages of their reads that found them not
    /// cached dropped after with `posix_fadvise(POSIX_FADV_DONTNEED)`.
    pub files_dropped_behind: u64,
    /// Bytes of [`files_dropped_behind`](Self::files_dropped_behind) that were dropped from
    /// the page cache once read (those of reads whose pages were cached before stay).
    pub bytes_dropped_behind: u64,
    /// Reads submitted again after `EINTR`, `EAGAIN`, `ECANCELED`, or `EFAULT` (which the
    /// kernel returns for a read whose submitting thread exited: the reader moved threads),
    /// and opens through the ring started again after `EINTR`, `EAGAIN` or `ECANCELED`.
    pub retries: u64,
    /// Reads whose completion was no longer wanted (the file was moved past).
    pub reads_discarded: u64,
    /// Times the consumer had to wait for a read to complete.
    pub waits: u64,
    /// Total time the consumer spent blocked waiting.
    pub wait_time: Duration,
    /// Files opened by the reader (queued paths, reopenings for direct I/O, and duplicates of
    /// borrowed files' descriptors).
    pub files_opened: u64,
    /// Files that failed (open or read errors).
    pub files_failed: u64,
    /// The most reads that were in flight at once (opens in flight beside them are not
    /// counted).
    pub peak_in_flight: u64,
    /// The most pool bytes that were in use at once.
    pub peak_pool_bytes: u64,
}

impl Stats {
    /// Adds another reader's counters to these: counts add up, peaks keep the larger. The
    /// totals of readers run side by side, as a scan's
    /// [`ScanSummary::stats`](crate::ScanSummary::stats) has them.
    ///
    /// # Examples
    ///
    /// ```
    /// use readahead::{SequentialFileReader, Stats};
    ///
    /// # fn main() -> Result<(), readahead::Error> {
    /// let readers = [SequentialFileReader::new()?, SequentialFileReader::new()?];
    /// let mut total = Stats::default();
    /// for reader in &readers {
    ///     total.add(&reader.stats());
    /// }
    /// assert_eq!(total.reads, 0); // nothing queued, nothing read
    /// # Ok(())
    /// # }
    /// ```
    pub fn add(&mut self, other: &Stats) {
        self.bytes_read += other.bytes_read;
        self.bytes_consumed += other.bytes_consumed;
        self.bytes_spilled += other.bytes_spilled;
        self.bytes_skipped += other.bytes_skipped;
        self.reads += other.reads;
        self.reads_direct += other.reads_direct;
        self.short_reads += other.short_reads;
        self.reads_cached += other.reads_cached;
        self.reads_offloaded += other.reads_offloaded;
        self.reads_uncached += other.reads_uncached;
        self.files_uncached += other.files_uncached;
        self.files_direct += other.files_direct;
        self.files_dropped_behind += other.files_dropped_behind;
        self.bytes_dropped_behind += other.bytes_dropped_behind;
        self.retries += other.retries;
        self.reads_discarded += other.reads_discarded;
        self.waits += other.waits;
        self.wait_time += other.wait_time;
        self.files_opened += other.files_opened;
        self.files_failed += other.files_failed;
        self.peak_in_flight = self.peak_in_flight.max(other.peak_in_flight);
        self.peak_pool_bytes = self.peak_pool_bytes.max(other.peak_pool_bytes);
    }
}

/// How a reader moves its counters: one method for each thing it counts, and nothing else
/// in the crate writes a field. A file that changes how it is read (uncached to dropped
/// behind) moves from one count to the other in one call.
impl Stats {
    /// A read sent for the first time: `O_DIRECT` or not, with `RWF_DONTCACHE` or not.
    pub(crate) fn read_sent(&mut self, direct: bool, uncached: bool) {
        self.reads += 1;
        self.reads_direct += u64::from(direct);
        self.reads_uncached += u64::from(uncached);
    }

    /// The rest of a read sent again (a continuation of a short read, or a retry), which
    /// counts as a read but not again as an `O_DIRECT` one.
    pub(crate) fn read_resent(&mut self, uncached: bool) {
        self.reads += 1;
        self.reads_uncached += u64::from(uncached);
    }

    /// A read handed to kernel workers to copy from the page cache.
    pub(crate) fn read_offloaded(&mut self) {
        self.reads_offloaded += 1;
    }

    /// A read copied at once on the reading thread, as far as the page cache held it.
    pub(crate) fn read_cached(&mut self) {
        self.reads_cached += 1;
    }

    /// `bytes` a read brought in: into the pool, or a small file copied whole.
    pub(crate) fn read_in(&mut self, bytes: u64) {
        self.bytes_read += bytes;
    }

    /// A read that came back short of its file's end.
    pub(crate) fn read_short(&mut self) {
        self.short_reads += 1;
    }

    /// A read no longer wanted came back, with `bytes` (read all the same).
    pub(crate) fn read_discarded(&mut self, bytes: u64) {
        self.reads_discarded += 1;
        self.bytes_read += bytes;
    }

    /// A read, or an open through the ring, started again after a passing error.
    pub(crate) fn retried(&mut self) {
        self.retries += 1;
    }

    /// The consumer waited `time` for a read.
    pub(crate) fn waited(&mut self, time: Duration) {
        self.wait_started();
        self.wait_ended(time);
    }

    /// The consumer began to wait for a read, where its wait is made of many calls (an
    /// engine that never blocks): counted once, its time when it ends (`wait_ended`).
    pub(crate) fn wait_started(&mut self) {
        self.waits += 1;
    }

    /// A wait begun with `wait_started` ended after `time`.
    pub(crate) fn wait_ended(&mut self, time: Duration) {
        self.wait_time += time;
    }

    /// `bytes` handed to the consumer.
    pub(crate) fn consumed(&mut self, bytes: u64) {
        self.bytes_consumed += bytes;
    }

    /// `bytes` passed over with `skip`.
    pub(crate) fn skipped(&mut self, bytes: u64) {
        self.bytes_skipped += bytes;
    }

    /// `bytes` copied to hand a record over in one piece.
    pub(crate) fn spilled(&mut self, bytes: u64) {
        self.bytes_spilled += bytes;
    }

    /// A file the reader opened.
    pub(crate) fn file_opened(&mut self) {
        self.files_opened += 1;
    }

    /// A file that failed.
    pub(crate) fn file_failed(&mut self) {
        self.files_failed += 1;
    }

    /// A file, once its opens and failure are to be counted by the reader it is handed to
    /// (one that gives its reader up), counted no more here.
    pub(crate) fn file_handed_on(&mut self, opened: bool, failed: bool) {
        self.files_opened -= u64::from(opened);
        self.files_failed -= u64::from(failed);
    }

    /// An uncached file found with no page cached: read `O_DIRECT`.
    pub(crate) fn file_direct(&mut self) {
        self.files_direct += 1;
    }

    /// An uncached file read with `RWF_DONTCACHE`.
    pub(crate) fn file_uncached(&mut self) {
        self.files_uncached += 1;
    }

    /// An uncached file read buffered, its pages dropped after its reads.
    pub(crate) fn file_dropped_behind(&mut self) {
        self.files_dropped_behind += 1;
    }

    /// A file counted uncached whose filesystem refused `RWF_DONTCACHE`: dropped behind now.
    pub(crate) fn uncached_refused(&mut self) {
        self.files_uncached -= 1;
        self.files_dropped_behind += 1;
    }

    /// A file counted `O_DIRECT` that goes on buffered (a read of it refused `O_DIRECT`, or
    /// short of a block): dropped behind now.
    pub(crate) fn left_direct(&mut self) {
        self.files_direct -= 1;
        self.files_dropped_behind += 1;
    }

    /// `bytes` of a file dropped behind, dropped from the page cache.
    pub(crate) fn dropped_behind(&mut self, bytes: u64) {
        self.bytes_dropped_behind += bytes;
    }

    /// Reads in flight and pool bytes held now: each peak keeps the larger.
    pub(crate) fn peaks(&mut self, reads: u64, pool_bytes: u64) {
        self.peak_in_flight = self.peak_in_flight.max(reads);
        self.peak_pool_bytes = self.peak_pool_bytes.max(pool_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter set, each to a value of its own.
    fn reader() -> Stats {
        Stats {
            bytes_read: 1,
            bytes_consumed: 2,
            bytes_spilled: 3,
            bytes_skipped: 4,
            reads: 5,
            reads_direct: 6,
            short_reads: 7,
            reads_cached: 18,
            reads_offloaded: 8,
            reads_uncached: 19,
            files_uncached: 20,
            files_direct: 23,
            files_dropped_behind: 21,
            bytes_dropped_behind: 22,
            retries: 9,
            reads_discarded: 10,
            waits: 11,
            wait_time: Duration::from_millis(12),
            files_opened: 13,
            files_failed: 14,
            peak_in_flight: 15,
            peak_pool_bytes: 16,
        }
    }

    #[test]
    fn adding_a_reader_to_nothing_gives_its_every_counter() {
        let mut sum = Stats::default();
        sum.add(&reader());
        assert_eq!(sum, reader());
    }

    #[test]
    fn adding_two_readers_adds_counts_and_keeps_peaks() {
        let mut sum = reader();
        sum.add(&reader());
        let one = reader();
        assert_eq!(sum.reads_direct, 2 * one.reads_direct);
        assert_eq!(sum.bytes_read, 2 * one.bytes_read);
        assert_eq!(sum.wait_time, 2 * one.wait_time);
        assert_eq!(sum.peak_in_flight, one.peak_in_flight);
        assert_eq!(sum.peak_pool_bytes, one.peak_pool_bytes);
    }
}
