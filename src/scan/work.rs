//! Handing out work: one cursor over the caller's iterator, from which each thread takes a
//! batch whenever its window runs low (see `Lane::top_up` for how much it asks). Where the
//! input's length is known, a batch is also at most a share of what is left, so that the
//! batches shrink as the input ends, and the cursor tells a thread's share of what is left
//! (`Work::share_left`), to which a warm thread's window shrinks too.
//! The iterator is consumed lazily: a batch at a time, never collected.

use std::iter::Fuse;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::entry::Entry;

/// An entry with its index in the input.
pub(super) struct Taken<'a> {
    pub(super) index: usize,
    pub(super) entry: Entry<'a>,
    pub(super) weight: u64,
}

/// The shared cursor over the input.
pub(super) struct Work<I> {
    input: Mutex<Cursor<I>>,
    /// How many entries are left in an input of known length, as of the last batch taken
    /// (`usize::MAX`: not known).
    left: AtomicUsize,
    /// The scan's threads: a batch is at most a `1 / (2 * threads)` share of what is left of
    /// an input of known length, and `share_left` a `1 / threads` share.
    threads: usize,
}

struct Cursor<I> {
    iter: Fuse<I>,
    /// The index of the next entry `iter` yields.
    next: usize,
}

impl<'a, I> Work<I>
where
    I: Iterator,
    I::Item: Into<Entry<'a>>,
{
    /// The cursor over `iter`, for a scan of `threads` threads.
    pub(super) fn new(iter: I, threads: usize) -> Self {
        Work {
            input: Mutex::new(Cursor {
                iter: iter.fuse(),
                next: 0,
            }),
            left: AtomicUsize::new(usize::MAX),
            threads: threads.max(1),
        }
    }

    /// A thread's share of the entries left in an input of known length, as of the last
    /// batch taken (`None`: not known, or nothing taken yet).
    pub(super) fn share_left(&self) -> Option<usize> {
        let left = self.left.load(Ordering::Relaxed);
        (left != usize::MAX).then(|| left.div_ceil(self.threads))
    }

    /// Takes the next entries into `out`: at most `files`, and no more once they weigh
    /// `bytes` or more (the entry that gets there is the last). Nothing once the input ends.
    ///
    /// Where the input's length is known (its `size_hint` exact, as a slice's is), at most
    /// half a thread's share of what is left, and at least one: a thread reads what it took
    /// alone, so large batches taken last would leave one thread reading them while the
    /// others have nothing left (BENCHMARKS.md, "Warm", the scan on 2 threads).
    ///
    /// A thread that panicked in the caller's iterator leaves the input poisoned: it ends
    /// there (the panic stops the scan anyway).
    pub(super) fn take(&self, files: usize, bytes: u64, out: &mut Vec<Taken<'a>>) {
        let Ok(mut cursor) = self.input.lock() else {
            return;
        };
        let files = match known_left(&cursor.iter) {
            Some(left) => files.min(left.div_ceil(self.threads.saturating_mul(2)).max(1)),
            None => files,
        };
        let mut weight = 0u64;
        for _ in 0..files {
            if weight >= bytes {
                break;
            }
            let Some(item) = cursor.iter.next() else {
                break;
            };
            let entry: Entry<'a> = item.into();
            let taken = Taken {
                index: cursor.next,
                weight: entry.weight(),
                entry,
            };
            cursor.next += 1;
            weight = weight.saturating_add(taken.weight);
            out.push(taken);
        }
        if let Some(left) = known_left(&cursor.iter) {
            self.left.store(left, Ordering::Relaxed);
        }
    }
}

/// How many entries `iter` has left, where its `size_hint` is exact (a slice's is).
fn known_left(iter: &impl Iterator) -> Option<usize> {
    match iter.size_hint() {
        (left, Some(most)) if left == most => Some(left),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn paths(n: usize) -> Vec<PathBuf> {
        (0..n).map(|i| PathBuf::from(format!("f{i}"))).collect()
    }

    fn batches<'a, I>(work: &Work<I>, files: usize) -> Vec<usize>
    where
        I: Iterator,
        I::Item: Into<Entry<'a>>,
    {
        let mut sizes = Vec::new();
        let mut out = Vec::new();
        loop {
            work.take(files, u64::MAX, &mut out);
            if out.is_empty() {
                return sizes;
            }
            sizes.push(out.len());
            out.clear();
        }
    }

    #[test]
    fn batches_of_a_known_input_shrink_to_a_share_of_what_is_left() {
        let input = paths(100);
        let work = Work::new(input.iter(), 2);
        let sizes = batches(&work, 64);
        assert_eq!(&sizes[..4], &[25, 19, 14, 11]);
        assert_eq!(sizes.last(), Some(&1));
        assert_eq!(sizes.iter().sum::<usize>(), 100);
    }

    #[test]
    fn batches_of_an_input_of_unknown_length_are_what_is_asked() {
        let input = paths(100);
        let work = Work::new(input.iter().filter(|_| true), 2);
        assert_eq!(batches(&work, 64), [64, 36]);
    }

    #[test]
    fn the_cursor_tells_a_share_of_what_is_left_of_a_known_input() {
        let input = paths(100);
        let work = Work::new(input.iter(), 2);
        assert_eq!(work.share_left(), None, "nothing taken yet");
        work.take(10, u64::MAX, &mut Vec::new());
        assert_eq!(work.share_left(), Some(45));
        work.take(100, u64::MAX, &mut Vec::new());
        assert_eq!(work.share_left(), Some(34), "77 left after a batch of 13");
        let unknown = Work::new(input.iter().filter(|_| true), 2);
        unknown.take(10, u64::MAX, &mut Vec::new());
        assert_eq!(unknown.share_left(), None);
    }

    #[test]
    fn entries_keep_their_input_index() {
        let input = paths(10);
        let work = Work::new(input.iter(), 1);
        let mut out = Vec::new();
        work.take(3, u64::MAX, &mut out);
        work.take(3, u64::MAX, &mut out);
        let indices: Vec<usize> = out.iter().map(|t| t.index).collect();
        assert_eq!(indices, [0, 1, 2, 3, 4, 5]);
    }
}
