//! A thread's outcomes on their way to the caller (`Outbox`), a batch at a time.

use std::mem;
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use super::outcome::Outcome;
use super::state::ScanState;
use crate::sys::CoarseInstant;

/// An outcome on its way to the caller, with its index in the input.
pub(super) type Sent<T, E> = (usize, Outcome<T, E>);

/// What a thread sends the caller at once: the outcomes of up to [`SEND_BATCH`] files.
pub(super) type Batch<T, E> = Vec<Sent<T, E>>;

/// Outcomes a thread gathers before it sends them: one message, and at most one wake-up of
/// the caller's thread, per this many files, rather than per file: each message costs a
/// `futex` call or two, which small cached files feel (BENCHMARKS.md has the measurement).
const SEND_BATCH: usize = 256;

/// How long the first outcome of a batch waits for the rest at most: the caller hears of
/// large files, which gather slowly, about as soon as with a message each.
const SEND_AFTER: Duration = Duration::from_millis(10);

/// A thread's outcomes on their way to the caller, sent a batch at a time, and whatever is
/// gathered before the thread waits for the caller (`flush`) or ends, even by a panic.
pub(super) struct Outbox<'t, T, E> {
    tx: &'t SyncSender<Batch<T, E>>,
    state: &'t ScanState,
    batch: Batch<T, E>,
    /// `SEND_AFTER` past when the batch's first outcome was gathered: an instant to compare
    /// with each outcome's, not a duration to work out, of the coarse clock, which costs a
    /// file less to read (its steps of a few milliseconds only make a batch wait a tick
    /// longer or shorter).
    send_by: Option<CoarseInstant>,
}

impl<'t, T, E> Outbox<'t, T, E> {
    pub(super) fn new(tx: &'t SyncSender<Batch<T, E>>, state: &'t ScanState) -> Self {
        Outbox {
            tx,
            state,
            batch: Vec::with_capacity(SEND_BATCH),
            send_by: None,
        }
    }

    pub(super) fn push(&mut self, index: usize, outcome: Outcome<T, E>) {
        self.batch.push((index, outcome));
        let now = CoarseInstant::now();
        let send_by = *self.send_by.get_or_insert_with(|| now + SEND_AFTER);
        if self.batch.len() >= SEND_BATCH || now >= send_by {
            self.flush();
        }
    }

    pub(super) fn flush(&mut self) {
        self.send_by = None;
        if self.batch.is_empty() {
            return;
        }
        let batch = mem::replace(&mut self.batch, Vec::with_capacity(SEND_BATCH));
        if self.tx.send(batch).is_err() {
            // The caller has gone: nobody wants the rest.
            self.state.stop();
        }
    }
}

impl<T, E> Drop for Outbox<'_, T, E> {
    fn drop(&mut self) {
        self.flush();
    }
}
