//! Results in input order: outcomes arrive in the order files finish, and wait here until
//! every one before them has arrived. The threads keep within a window of the last result
//! handed out (see `ScanState::wait_turn`), so what waits here is bounded.

use std::collections::VecDeque;
use std::fmt;
use std::sync::mpsc::Receiver;

use super::outbox::Batch;
use super::state::ScanState;
use super::Outcome;

/// Outcomes handed out between two releases of the threads waiting at the window.
const RELEASE_EVERY: usize = 16;

/// The outcomes of an ordered scan, as an iterator of `(index, outcome)` in input order.
///
/// Given to the closure of [`ScanMap::ordered`](crate::ScanMap::ordered) while the scan
/// runs. Each outcome is handed out as soon as those of every file before it are; until then
/// it waits here, and a thread that gets a window ahead of the last outcome handed out waits
/// before its next file. Dropping it before its end stops the scan.
///
/// # Examples
///
/// See [`Scan`](crate::Scan#examples).
pub struct Ordered<'s, T, E> {
    results: Receiver<Batch<T, E>>,
    state: &'s ScanState,
    /// `waiting[i]` is the outcome of file `next + i`, once it has arrived.
    waiting: VecDeque<Option<Outcome<T, E>>>,
    next: usize,
}

impl<'s, T, E> Ordered<'s, T, E> {
    pub(super) fn new(results: Receiver<Batch<T, E>>, state: &'s ScanState) -> Self {
        Ordered {
            results,
            state,
            waiting: VecDeque::new(),
            next: 0,
        }
    }

    /// Files waiting here for those before them.
    fn waiting(&self) -> usize {
        self.waiting.iter().filter(|o| o.is_some()).count()
    }

    fn insert(&mut self, index: usize, outcome: Outcome<T, E>) {
        let at = index - self.next;
        if self.waiting.len() <= at {
            self.waiting.resize_with(at + 1, || None);
        }
        debug_assert!(self.waiting[at].is_none(), "one outcome per file");
        self.waiting[at] = Some(outcome);
    }
}

impl<T, E> Iterator for Ordered<'_, T, E> {
    type Item = (usize, Outcome<T, E>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(Some(_)) = self.waiting.front() {
                let outcome = self.waiting.pop_front().flatten()?;
                let index = self.next;
                self.next += 1;
                // Threads at the window's edge are let go every few outcomes, and always
                // before this waits for more (below), rather than woken for each one.
                if self.next.is_multiple_of(RELEASE_EVERY) {
                    self.state.release(self.next);
                }
                return Some((index, outcome));
            }
            self.state.release(self.next);
            // Once every thread has ended, a gap is a file whose closure panicked: the
            // panic is raised once the threads are joined, and nothing after it comes out.
            for (index, outcome) in self.results.recv().ok()? {
                self.insert(index, outcome);
            }
        }
    }
}

impl<T, E> fmt::Debug for Ordered<'_, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ordered")
            .field("next", &self.next)
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}
