//! Read many files front to back, as fast as the storage allows.
//!
//! A [`SequentialFileReader`] keeps a FIFO of files. While the caller consumes the current
//! file through [`std::io::BufRead`], the reader keeps reads in flight for the rest of that
//! file and for the files queued behind it, on one io_uring ring (or plain `pread` where
//! io_uring is refused, and on every platform but Linux), into one fixed buffer pool.
//!
//! ```no_run
//! use std::io::Read;
//! use readahead::SequentialFileReader;
//!
//! # fn main() -> std::io::Result<()> {
//! let mut reader = SequentialFileReader::new()?;
//! for path in ["a.bin", "b.bin", "c.bin"] {
//!     reader.push(path)?; // opened when the read-ahead reaches it
//! }
//! let mut bytes = Vec::new();
//! loop {
//!     bytes.clear();
//!     reader.read_to_end(&mut bytes)?; // stops at the end of the current file
//!     println!("{} bytes", bytes.len());
//!     if !reader.move_to_next_file()? {
//!         break;
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! For many files on many cores, [`Scan`] runs one reader per thread, hands each file to
//! whichever thread is free, and runs a closure on every file: the whole job of a checksum
//! tool or a startup scan in one call (see its examples).
//!
//! # When not to use it
//!
//! For one file read once, `std::io::BufReader<File>` is simpler and as fast. For random
//! access, use `pread` or a memory map: this reader only goes forward.
//!
//! # The pool
//!
//! All read-ahead lives in one page-aligned allocation, handed out as regions in FIFO order,
//! each no longer than what its file has left, so a 4 KiB file ties up 4 KiB, and at most
//! `read_size` (512 KiB by default), but for a read copied at once from the page cache, which
//! takes up to 1 MiB (or `read_size`, if larger):
//!
//! ```text
//!   free_end (next region taken here)          oldest region (freed first)
//!          v                                    v
//! [ ...free... | f3:0..4K | f3:4K..8K | f4:0..1M |..free..| f1:3M..4M (consumer) | f2:0..64K ]
//!              ^-- in flight or waiting for the consumer ---------------------------------^
//! ```
//!
//! A region handed to the kernel is not touched again until its completion is reaped; the
//! consumer sees only the bytes a completed read wrote.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations)]

// The async reader waits on descriptors through tokio's `AsyncFd`: Unix only.
#[cfg(all(feature = "tokio", not(unix)))]
compile_error!("the `tokio` feature needs a Unix target (it polls descriptors with `AsyncFd`)");

// Modules in alphabetical order; ARCHITECTURE.md lists them from the bottom up, each using
// only modules above it there (`tests/layout.rs` checks there is no cycle among them).
#[cfg(feature = "tokio")]
mod async_reader;
mod backend;
mod config;
mod consts;
mod engine;
mod entry;
mod error;
mod helpers;
mod id_map;
mod io;
mod pool;
mod queue;
mod reader;
mod scan;
mod source;
mod stats;
mod sys;
// What the unit tests share (the rule for a refused io_uring or `O_DIRECT`, a directory on
// the disk).
#[cfg(test)]
mod tests;

#[cfg(feature = "tokio")]
pub use async_reader::AsyncSequentialFileReader;
pub use config::ReaderBuilder;
pub use consts::{
    DEFAULT_BUFFER_SIZE, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_OPEN_FILES, DEFAULT_QUEUE_DEPTH,
    DEFAULT_READ_SIZE,
};
pub use entry::Entry;
pub use error::{Error, FileName};
pub use io::Backend;
pub use reader::SequentialFileReader;
#[cfg(feature = "tokio")]
pub use scan::ScanStream;
pub use scan::{
    Ordered, Outcome, Scan, ScanFile, ScanHandle, ScanMap, ScanProgress, ScanSummary,
    DEFAULT_QUEUE_AHEAD, DEFAULT_SCAN_IO_WORKERS, DEFAULT_SCAN_MEMORY,
};
pub use stats::Stats;

/// Whether this kernel and process allow an io_uring ring (a probe that sets one up and tears
/// it down). Tests and tools use it to skip io_uring cases with a reason.
///
/// # Errors
///
/// The reason io_uring is refused: `EPERM` under a seccomp filter or with
/// `kernel.io_uring_disabled`, `ENOSYS` on kernels without it; anywhere but Linux, an
/// [`Unsupported`](std::io::ErrorKind::Unsupported) error saying io_uring exists only on Linux.
///
/// # Examples
///
/// ```
/// if let Err(why) = readahead::io_uring_available() {
///     eprintln!("reading with pread: io_uring is refused here ({why})");
/// }
/// ```
pub fn io_uring_available() -> std::io::Result<()> {
    backend::probe()
}

/// Readers of this process, alive or gone, whose drop,
/// [`rebind`](SequentialFileReader::rebind) or [`close`](SequentialFileReader::close) gave up
/// waiting for reads the kernel never completed (a hung device or mount: see
/// [`ReaderBuilder::drain_timeout`]), or whose ring failed while waiting. Each leaked its
/// buffer pool and ring, never to be freed, since the kernel may still write into them.
///
/// A count for the whole process, not a reader's [`Stats`]: a reader's counters go with it,
/// and a scan gives readers up on its own threads.
///
/// # Examples
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// let before = readahead::drains_abandoned();
/// let reader = readahead::SequentialFileReader::new()?;
/// reader.close()?; // nothing in flight: nothing to give up
/// assert_eq!(readahead::drains_abandoned(), before);
/// # Ok(())
/// # }
/// ```
pub fn drains_abandoned() -> u64 {
    stats::drains_abandoned()
}

/// Helper threads of this process now: the threads on which readers open files, and the
/// `pread` backend reads them, so that a call a hung mount never answers blocks a helper
/// thread and not the reader's caller. An idle one exits after a few seconds; one stuck in
/// such a call stays until the kernel answers (or for good), and counts here. At most 1,024
/// run at once; past that, opens and `pread` reads fail with an error that says why, until
/// some return.
///
/// # Examples
///
/// ```
/// // After a scan of a hung mount, what it left behind:
/// eprintln!("{} helper threads", readahead::helper_threads());
/// ```
pub fn helper_threads() -> usize {
    helpers::running()
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
