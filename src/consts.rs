//! Sizes, alignments, tunables and the choice of backend: the numbers every other module
//! works by. Depends on nothing.

use std::time::Duration;

/// Which I/O backend a reader uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// io_uring where the kernel allows it, else [`Backend::Sync`]. The default.
    #[default]
    Auto,
    /// io_uring, or an error from [`ReaderBuilder::build`](crate::ReaderBuilder::build)
    /// saying why it is refused. Needs Linux 5.6 or later with `kernel.io_uring_disabled = 0`
    /// and no seccomp filter refusing `io_uring_setup` (as some container runtimes install);
    /// on any other platform `build()` fails saying io_uring exists only on Linux.
    IoUring,
    /// Plain `pread(2)` on the calling thread, with read-ahead hints so the kernel reads
    /// ahead across files (`posix_fadvise(WILLNEED)` on Linux and FreeBSD, `F_RDADVISE` on
    /// macOS, none elsewhere). Works everywhere; the only backend off Linux.
    Sync,
}

/// The size of a page, and the alignment of every region of the pool.
pub(crate) const PAGE: usize = 4096;
/// The alignment `O_DIRECT` needs of offsets, lengths and buffer addresses.
pub(crate) const DIRECT_ALIGN: usize = 4096;
/// The largest single read: Linux caps one read at a little under 2 GiB.
pub(crate) const MAX_READ_SIZE: usize = 1 << 30;

/// Default pool size: room for 64 reads of the default size in flight or waiting.
///
/// Measured cold over 1 GiB of 4 KiB-4 MiB files (see the README's "Performance"): 16, 32
/// and 64 MiB pools read within the disk's run-to-run noise of each other with `O_DIRECT`;
/// 32 MiB keeps 64 reads of 512 KiB in flight. Buffered reads, cold or warm, hold only a
/// 4 MiB window of it (`COLD_WINDOW`, `WARM_WINDOW`), so most of it is never touched.
pub const DEFAULT_BUFFER_SIZE: usize = 32 << 20;
/// Default largest single read. 256 KiB, 512 KiB and 1 MiB measured alike cold; 512 KiB
/// is also what std's `BufReader` is compared with.
pub const DEFAULT_READ_SIZE: usize = 512 << 10;
/// Default number of reads in flight at once.
pub const DEFAULT_QUEUE_DEPTH: u32 = 64;
/// Default number of queued paths the reader keeps open at once.
pub const DEFAULT_MAX_OPEN_FILES: usize = 64;
/// Default longest wait, when a reader is dropped, rebound or closed, for the reads it has in
/// flight (see [`ReaderBuilder::drain_timeout`](crate::ReaderBuilder::drain_timeout)).
///
/// A disk that has not answered a read in 30 s is failing (30 s is also Linux's default SCSI
/// command timeout); a hung network mount may never answer.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Pool bytes the read-ahead holds while reads of the files ahead go to the disk through the
/// page cache (not `O_DIRECT`). The kernel's own read-ahead and the reads in flight keep the
/// disk busy; the CPU still copies every byte out of the page cache, as the disk delivers it,
/// and where those copies land far ahead of the consumer, their bytes have left the CPU's
/// cache when it gets to them. Measured on 1 GiB of 4 KiB-4 MiB files after `drop_caches`,
/// one thread, checksum, against std's `BufReader` (3 rounds each): the whole 32 MiB pool
/// 0.91x std's speed with 1.9x its CPU time; 16 MiB 0.91x; 12 MiB 0.95x; 8 MiB 1.23x; 4 MiB
/// 1.27-1.31x with 0.92-0.96x its CPU; 2 MiB 1.20x. `O_DIRECT` reads keep the whole pool:
/// the device writes them, and depth is what they need.
pub(crate) const COLD_WINDOW: usize = 4 << 20;
/// Pool bytes the read-ahead holds while the files ahead are in the page cache, so that
/// their bytes are still in the CPU's cache when the consumer gets them. Measured warm:
/// 4 MiB against 2 and 8 MiB (the whole 32 MiB pool read warm at 0.58x of std's speed).
pub(crate) const WARM_WINDOW: usize = 4 << 20;
/// Pool bytes the read-ahead holds while the files ahead are in the page cache and the
/// consumer's thread copies their large reads itself (see `engine::offload`): one read, so
/// each copy writes where the consumer has just read, still in its CPU's cache, as std's
/// `BufReader` does. Measured warm, 1 GiB of 4 KiB-4 MiB files, a sum of words, CPU time
/// ÷ std's (7-9 pairs each): 1.00x with 512 KiB (reads of 512 or 256 KiB), 1.03-1.04x
/// with 1 MiB, 1.10x with 2 MiB, 1.18x with the 4 MiB of `WARM_WINDOW`.
pub(crate) const INLINE_WINDOW: usize = 512 << 10;
/// Pool bytes the read-ahead holds while the files ahead are in the page cache and their
/// reads are small (below `OFFLOAD_MIN`, so copied on the consumer's thread): the copies land
/// at most this far ahead of the consumer, in the same few pages each time, so that the copy
/// and then the consumer find them in the CPU's cache. Measured on 1.5 GiB of account
/// storage files, records parsed and hashed on two threads (see the README): with the 4 MiB
/// window the reader took 19-26% more CPU than std's `BufReader`, with 128 KiB-1 MiB 10-13%.
pub(crate) const SMALL_WINDOW: usize = 512 << 10;
/// Reads copied by kernel workers at once, at most (see `Stats::reads_offloaded`).
/// Measured warm: 1 left the consumer waiting, 2 and 3 did alike, 4 did worse.
pub(crate) const OFFLOAD_DEPTH: usize = 2;
/// Reads smaller than this are never offloaded: handing them to a kernel worker costs more
/// than copying them.
pub(crate) const OFFLOAD_MIN: usize = 64 << 10;
/// How often reads below `OFFLOAD_MIN` ask whether the page cache holds what they read.
pub(crate) const SMALL_READS_PER_HINT: u64 = 16;
/// How many times a read is retried after `EINTR`, `EAGAIN`, `ECANCELED` or `EFAULT`, or an
/// open through the ring after `EINTR`, `EAGAIN` or `ECANCELED`, before its file fails.
pub(crate) const MAX_RETRIES: u32 = 16;
