//! Building a reader: the pool, the engine's limits from the settings, and the backend
//! (io_uring where the kernel allows it and the settings ask for it, else `pread`).

use crate::backend::pread::PreadIo;
use crate::backend::{self, RingConfig};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ReaderBuilder, SharedRing};
use crate::consts::{COLD_WINDOW, INLINE_WINDOW, OFFLOAD_DEPTH, SMALL_WINDOW, WARM_WINDOW};
use crate::engine::{Engine, Limits};
use crate::error::Error;
use crate::io::{Backend, Io};
use crate::pool::Pool;

use super::SequentialFileReader;

impl ReaderBuilder {
    /// Checks the settings and builds the reader.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a setting that cannot work (it says which and why),
    /// [`Error::IoUringUnavailable`] for [`Backend::IoUring`] where the kernel refuses it, or
    /// anywhere but Linux,
    /// [`Error::OutOfMemory`] if the pool cannot be allocated.
    pub fn build<'a>(self) -> Result<SequentialFileReader<'a>, Error> {
        let config = self.validate()?;
        let bytes = config.buffer_size;
        // Only `O_DIRECT` reads (and uncached ones, which go `O_DIRECT` where nothing is
        // cached) fill the pool. Buffered reads hold a window of a few MiB, where huge pages
        // spare little and the first touch of each costs 2 MiB zeroed (BENCHMARKS.md).
        let huge = config.direct_io || config.uncached;
        let pool = Pool::with_capacity(bytes, huge).ok_or(Error::OutOfMemory { bytes })?;
        let io = pick_backend(&config, &pool)?;
        let limits = limits(&config, io.backend());
        Ok(SequentialFileReader {
            engine: Engine::new(io, pool, limits),
        })
    }
}

impl ReaderBuilder {
    /// The same settings, with the reader's ring sharing the submission thread of `reader`'s
    /// ring ([`sq_poll`](Self::sq_poll), `IORING_SETUP_ATTACH_WQ`): one kernel thread
    /// polling for several readers, instead of one each. Where `reader` has no such thread
    /// (it was not built with `sq_poll`, or the kernel refused it), this changes nothing.
    /// The builder keeps a descriptor of `reader`'s ring, so `reader` may be dropped before
    /// it builds. The thread's idle time is the longest of its rings' (this builder's
    /// `sq_poll`, or the kernel's default of a second where it has none).
    pub fn sq_poll_shared_with(mut self, reader: &SequentialFileReader<'_>) -> Self {
        if let Some(ring) = reader.engine.sq_poll_ring() {
            self.sq_poll_ring = Some(SharedRing(Arc::new(ring)));
            self.sq_poll.get_or_insert(Duration::ZERO);
        }
        self
    }
}

/// The backend the settings ask for: a ring for `pool` where the kernel allows one, else
/// `pread`, unless [`Backend::IoUring`] was asked for, which then fails.
fn pick_backend<'a>(config: &ReaderBuilder, pool: &Pool) -> Result<Box<dyn Io<'a> + 'a>, Error> {
    let shared = config.sq_poll_ring.as_ref().map(|ring| &*ring.0);
    let ring_config = RingConfig {
        depth: config.queue_depth,
        register: config.registered_buffers.unwrap_or(config.direct_io),
        io_workers: config.io_workers,
        sq_poll: config.sq_poll.map(|idle| (idle, shared)),
        open_timeout: config.drain_timeout,
    };
    Ok(match config.backend {
        Backend::Pread => Box::new(PreadIo::new(config.drain_timeout)),
        choice => match backend::ring(ring_config, pool) {
            Ok(ring) => ring,
            Err(source) if choice == Backend::IoUring => {
                return Err(Error::IoUringUnavailable { source })
            }
            Err(_) => Box::new(PreadIo::new(config.drain_timeout)),
        },
    })
}

/// What the engine works by, from the checked settings and the backend picked.
fn limits(config: &ReaderBuilder, backend: Backend) -> Limits {
    let window = |size: usize| size.max(config.read_size).min(config.buffer_size);
    let device_window = window;
    Limits {
        read_size: config.read_size,
        direct: config.direct_io,
        depth: config.queue_depth as usize,
        max_open: config.max_open_files,
        cold_window: device_window(config.cold_window.unwrap_or(COLD_WINDOW)),
        warm_window: device_window(WARM_WINDOW),
        inline_window: window(INLINE_WINDOW),
        small_window: SMALL_WINDOW.min(config.buffer_size),
        offload_depth: OFFLOAD_DEPTH,
        // Kernel workers are the ring's: `pread` copies every read on the caller's thread.
        offload: config.offload && backend == Backend::IoUring,
        // `O_DIRECT` leaves the cache alone already; the flag is Linux's.
        uncached: config.uncached && !config.direct_io && cfg!(target_os = "linux"),
        uncached_fallback: config.uncached_fallback,
        drain_timeout: config.drain_timeout,
        // Helper threads are to opens what kernel workers are to reads: a reader whose
        // workers are capped (each of a scan's) keeps as few helpers busy.
        open_depth: config
            .io_workers
            .filter(|&workers| workers > 0)
            .map_or(crate::consts::OPEN_DEPTH, |workers| workers as usize + 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cold_window_below_one_read_holds_one_read() {
        let mut builder = ReaderBuilder::new();
        assert_eq!(limits(&builder, Backend::IoUring).cold_window, COLD_WINDOW);
        builder.cold_window = Some(128 << 10);
        let limits = limits(&builder, Backend::IoUring);
        assert_eq!(limits.cold_window, builder.read_size);
    }
}
