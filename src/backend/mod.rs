//! The backends: each implements [`Io`](crate::io::Io) and never reaches into the engine.
//!
//! - [`uring`]: one io_uring ring, reads and opens submitted and reaped in batches.
//! - [`sync`]: plain `pread` on the calling thread, with read-ahead hints.

pub(crate) mod sync;
pub(crate) mod uring;
