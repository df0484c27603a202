//! The caller's handle on a running scan (`ScanHandle`): its progress, and cancelling it.

use std::fmt;
use std::sync::Arc;

use super::progress::ScanProgress;
use super::state::ScanState;

/// A handle on a running scan, to watch its progress and to cancel it, from any thread.
///
/// Cloning it is cheap; every clone refers to the same scan. Get it with
/// [`Scan::handle`](crate::Scan::handle) before the scan runs.
///
/// # Examples
///
/// ```
/// use readahead::Scan;
///
/// # fn main() -> std::io::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let paths: Vec<_> = (0..3).map(|i| dir.path().join(i.to_string())).collect();
/// # for p in &paths { std::fs::write(p, b"bytes")?; }
/// let scan = Scan::new(&paths).threads(1);
/// let handle = scan.handle();
/// let summary = scan
///     .map(|file| {
///         handle.cancel(); // the first file is the last one started
///         std::io::copy(file, &mut std::io::sink())
///     })
///     .for_each(|index, outcome| println!("{index}: {outcome:?}"))?;
/// assert!(summary.cancelled);
/// assert_eq!(summary.progress.files, 1);
/// // Entries taken from the input but not started come out as not run; the rest are
/// // never taken (a thread's first take is one entry).
/// assert!(summary.progress.not_run <= 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ScanHandle {
    pub(super) state: Arc<ScanState>,
}

impl ScanHandle {
    /// A snapshot of the counters (each read atomically, the four not at one instant).
    pub fn progress(&self) -> ScanProgress {
        self.state.progress()
    }

    /// Stops the scan early: every thread stops before its next file, and the files taken
    /// from the input but not started are reported as [`Outcome::NotRun`](crate::Outcome);
    /// the rest of the input is not taken. Files being read finish.
    pub fn cancel(&self) {
        self.state.cancel();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.state.is_cancelled()
    }
}

impl fmt::Debug for ScanHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanHandle")
            .field("progress", &self.progress())
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}
