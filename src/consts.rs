//! Sizes, alignments and tunables: the numbers every other module works by. Depends on
//! nothing.

use std::time::Duration;

/// The size of a page, and the alignment of every region of the pool.
pub(crate) const PAGE: usize = 4096;
/// The alignment `O_DIRECT` needs of offsets, lengths and buffer addresses.
pub(crate) const DIRECT_ALIGN: usize = 4096;
/// The largest single read the crate asks for, below the little under 2 GiB that Linux
/// returns from one read at most.
pub(crate) const MAX_READ_SIZE: usize = 1 << 30;

/// Default pool size: room for 64 reads of the default size in flight or waiting, the depth
/// `O_DIRECT` reads need to keep a disk busy. Buffered reads hold only a small window of it
/// (`COLD_WINDOW`, `WARM_WINDOW`, `INLINE_WINDOW`), so most of it is never touched.
pub const DEFAULT_BUFFER_SIZE: usize = 32 << 20;
/// Default largest read sent to the device, or to kernel workers: large enough that the
/// device reads at its full speed, small enough that workers copying cached reads keep up
/// with the consumer (BENCHMARKS.md has the figures). Reads copied from the page cache on
/// the caller's thread are as large as `INLINE_WINDOW`.
pub const DEFAULT_READ_SIZE: usize = 512 << 10;
/// Default number of reads in flight at once.
pub const DEFAULT_QUEUE_DEPTH: u32 = 64;
/// Default number of queued paths the reader keeps open at once: while reads go to the
/// device, files opened this far ahead overlap more of their directories' and inodes' reads;
/// while they find the page cache warm, the reader holds at most `WARM_MAX_OPEN`
/// (BENCHMARKS.md, "What chose each constant").
pub const DEFAULT_MAX_OPEN_FILES: usize = 128;
/// Queued paths the reader keeps open at once at most while reads find the page cache warm:
/// a file opened further ahead of its copy has left the CPU's cache when it is read.
pub(crate) const WARM_MAX_OPEN: usize = 64;
/// Default longest wait, when a reader is dropped, rebound or closed, for the reads it has in
/// flight (see [`ReaderBuilder::drain_timeout`](crate::ReaderBuilder::drain_timeout)).
///
/// A disk that has not answered a read in 30 s is failing (30 s is also Linux's default SCSI
/// command timeout); a hung network mount may never answer.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Pool bytes the read-ahead holds while reads of the files ahead go to the device through
/// the page cache (not `O_DIRECT`): the CPU copies each as the device delivers it, and copies
/// that land far ahead of the consumer have left its cache when it gets to them. The kernel's
/// own read-ahead keeps the device busy meanwhile. `O_DIRECT` reads may fill the pool.
pub(crate) const COLD_WINDOW: usize = 4 << 20;
/// Pool bytes the read-ahead holds while the files ahead are in the page cache and kernel
/// workers copy them (`offload(true)`), or the consumer's thread copies them just after reads
/// went to the device: room for the copies in flight, still within the CPU's cache.
pub(crate) const WARM_WINDOW: usize = 4 << 20;
/// Pool bytes the read-ahead holds while the files ahead are in the page cache and the
/// consumer's thread copies them: one read of up to this size (or `read_size`, if larger),
/// into the region just consumed, as std's `BufReader` reuses its buffer; for a consumer of
/// records, reads of `read_size` within it (two at least), so that a record across two lies
/// in place unless it crosses the window's wrap. A copy has a fixed cost besides its bytes (a
/// system call, the page-cache lookup), small beside a MiB; larger copies leave the CPU's
/// cache before they are consumed, and touch more of the pool (BENCHMARKS.md has the
/// measurements).
pub(crate) const INLINE_WINDOW: usize = 1 << 20;
/// Pool bytes the read-ahead holds while the files ahead are in the page cache and their
/// reads are small (below `OFFLOAD_MIN`): enough for a batch of them per submission, close
/// enough to the consumer that the copies are still in its cache.
pub(crate) const SMALL_WINDOW: usize = 512 << 10;
/// Reads copied by kernel workers at once, at most (see `Stats::reads_offloaded`): two, so
/// one is ready while the other is copied; more land beyond the consumer's cache.
pub(crate) const OFFLOAD_DEPTH: usize = 2;
/// Reads smaller than this are never offloaded nor copied at once from the cache: handing
/// them to a kernel worker costs more than copying them, and they go in batches through the
/// ring, one submission for many.
pub(crate) const OFFLOAD_MIN: usize = 64 << 10;
/// Files with at most this many bytes left, while reads find the page cache warm, are
/// copied whole when the consumer gets to them, into a buffer of its own that stays in the
/// CPU's cache, as std's `BufReader` reuses its buffer (see the engine's `whole.rs`); larger
/// ones in copies of `INLINE_WINDOW`, and a file not sized yet with that much room first
/// (but for a record parser's or with `offload(true)`, copied with this much room first).
pub(crate) const COPY_WHOLE_MAX: usize = 128 << 10;
/// How often reads below `OFFLOAD_MIN` ask whether the page cache holds what they read (a
/// system call): often enough to notice a change within a few files.
pub(crate) const SMALL_READS_PER_HINT: u64 = 16;
/// How many times a read is retried after `EINTR`, `EAGAIN`, `ECANCELED` or `EFAULT`, or an
/// open after `EINTR` or `EAGAIN`, before its file fails.
pub(crate) const MAX_RETRIES: u32 = 16;
/// Opens a reader has under way at once, at most, each on a helper thread, where its
/// `io_workers` are not set: enough for a directory of small cold files to keep the device
/// busy. With `io_workers` set and not 0 (a scan sets them), two more than those.
pub(crate) const OPEN_DEPTH: usize = 16;
