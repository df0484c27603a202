//! What a scan shares with the caller while it runs: progress counters, the flag that stops
//! it, and the gate that keeps the threads within the window of ordered results.
//!
//! Invariants of [`ScanState`]:
//! - `stop` is set once and never cleared; `cancelled` implies `stop`.
//! - `released` only grows; a thread waits on `moved` only while its file is at or past
//!   `released + window` and `stop` is clear, and whatever changes either notifies `moved`.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// What a scan has done so far: a snapshot of counters the threads keep as they go.
///
/// From [`ScanHandle::progress`] while the scan runs, and in its
/// [`ScanSummary`](crate::ScanSummary) at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Files whose closure returned (or that failed before it could run), failed ones
    /// included.
    pub files: u64,
    /// Of those, the files that failed: their error is their result.
    pub failed: u64,
    /// Bytes the closures consumed or skipped, counted as they go (every MiB, and at the end
    /// of each file).
    pub bytes: u64,
    /// Files taken from the input but never started, because the scan stopped first.
    pub not_run: u64,
}

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
    pub fn progress(&self) -> Progress {
        let s = &self.state;
        Progress {
            files: s.files.load(Relaxed),
            failed: s.failed.load(Relaxed),
            bytes: s.bytes.load(Relaxed),
            not_run: s.not_run.load(Relaxed),
        }
    }

    /// Stops the scan early: every thread stops before its next file, and the files taken
    /// from the input but not started are reported as [`Outcome::NotRun`](crate::Outcome);
    /// the rest of the input is not taken. Files being read finish.
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Relaxed);
        self.state.stop();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Relaxed)
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

/// The state behind a [`ScanHandle`].
#[derive(Debug, Default)]
pub(super) struct ScanState {
    stop: AtomicBool,
    cancelled: AtomicBool,
    files: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    not_run: AtomicU64,
    /// Results delivered in input order so far (ordered scans only).
    released: Mutex<usize>,
    moved: Condvar,
}

impl ScanState {
    /// Stops every thread before its next file, and wakes those waiting at the gate.
    pub(super) fn stop(&self) {
        self.stop.store(true, Relaxed);
        // Under the lock: a thread between its check of `stop` and its wait cannot miss this.
        let _released = self.lock_released();
        self.moved.notify_all();
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }

    /// Counts a file that ran (or failed before it could), and whether it failed.
    pub(super) fn count_file(&self, failed: bool) {
        self.files.fetch_add(1, Relaxed);
        if failed {
            self.failed.fetch_add(1, Relaxed);
        }
    }

    pub(super) fn count_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Relaxed);
    }

    pub(super) fn count_not_run(&self) {
        self.not_run.fetch_add(1, Relaxed);
    }

    /// Waits until file `index` is within `window` of the results delivered in order;
    /// `false` if the scan stopped instead.
    pub(super) fn wait_turn(
        &self,
        index: usize,
        window: usize,
        before_waiting: impl FnOnce(),
    ) -> bool {
        let mut released = self.lock_released();
        if index >= released.saturating_add(window) && !self.stopped() {
            // Not under the lock: it may block on the caller, who takes it to release.
            drop(released);
            before_waiting();
            released = self.lock_released();
        }
        while index >= released.saturating_add(window) && !self.stopped() {
            released = self
                .moved
                .wait(released)
                .unwrap_or_else(PoisonError::into_inner);
        }
        !self.stopped()
    }

    /// Says that the results before `index` have been delivered in order.
    pub(super) fn release(&self, index: usize) {
        let mut released = self.lock_released();
        if index > *released {
            *released = index;
            self.moved.notify_all();
        }
    }

    /// The lock on `released`; a panic elsewhere never leaves its count half-updated.
    fn lock_released(&self) -> MutexGuard<'_, usize> {
        self.released.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Stops the scan when dropped during a panic: a thread whose closure panicked, or a caller
/// whose consumer did, so that no other thread waits for it.
pub(super) struct StopOnPanic<'s>(pub(super) &'s ScanState);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop();
        }
    }
}
