//! What a scan's threads and its caller share while it runs (`ScanState`): the progress
//! counters, the flag that stops it, and the gate that keeps the threads within the window of
//! ordered results; and stopping it on a panic (`StopOnPanic`).
//!
//! Invariants of [`ScanState`]:
//! - `stop` is set once and never cleared; `cancelled` implies `stop`.
//! - `released` only grows; a thread waits on `moved` only while its file is at or past
//!   `released + window` and `stop` is clear, and whatever changes either notifies `moved`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::progress::ScanProgress;

/// The state behind a [`ScanHandle`](super::ScanHandle).
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
    /// A snapshot of the counters (each read atomically, the four not at one instant).
    pub(super) fn progress(&self) -> ScanProgress {
        ScanProgress {
            files: self.files.load(Relaxed),
            failed: self.failed.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            not_run: self.not_run.load(Relaxed),
        }
    }

    /// Stops the scan, and says it was cancelled.
    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Relaxed);
        self.stop();
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Relaxed)
    }

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
