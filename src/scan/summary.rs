//! What a scan did, once every thread has stopped (`ScanSummary`), and how the threads'
//! ends add up to it.

use std::io;
use std::panic;
use std::thread;

use super::handle::ScanHandle;
use super::progress::ScanProgress;
use super::readers::ThreadEnd;
use crate::io::Backend;
use crate::stats::Stats;

/// What a scan did, once every thread has stopped: returned by
/// [`ScanMap::for_each`](crate::ScanMap::for_each) and
/// [`ScanMap::ordered`](crate::ScanMap::ordered) (see [`Scan`'s
/// examples](crate::Scan#examples)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanSummary {
    /// The counters at the end: files, failures, bytes, files not run.
    pub progress: ScanProgress,
    /// Whether [`ScanHandle::cancel`] stopped it.
    pub cancelled: bool,
    /// The readers' backend (`None` if no thread had a file to read).
    pub backend: Option<Backend>,
    /// The readers' counters added up (the peaks: the largest of any reader).
    pub stats: Stats,
}

/// What every thread came to: the first panic raised again, else the first error, else the
/// readers' counters together.
pub(super) fn summarize(
    ends: impl Iterator<Item = thread::Result<io::Result<ThreadEnd>>>,
    handle: &ScanHandle,
) -> io::Result<ScanSummary> {
    let mut summary = ScanSummary {
        progress: ScanProgress::default(),
        cancelled: false,
        backend: None,
        stats: Stats::default(),
    };
    let mut error = None;
    for end in ends {
        match end {
            Err(payload) => panic::resume_unwind(payload),
            Ok(Err(e)) => error = error.or(Some(e)),
            Ok(Ok(None)) => {}
            Ok(Ok(Some((stats, backend)))) => {
                summary.stats.add(&stats);
                summary.backend = summary.backend.or(Some(backend));
            }
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    summary.progress = handle.progress();
    summary.cancelled = handle.is_cancelled();
    Ok(summary)
}
