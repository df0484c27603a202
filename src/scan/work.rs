//! Handing out work: one cursor over the caller's iterator, from which each thread takes a
//! batch whenever its window runs low (see `Lane::top_up` for how much it takes).
//! The iterator is consumed lazily: a batch at a time, never collected.

use std::iter::Fuse;
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
    pub(super) fn new(iter: I) -> Self {
        Work {
            input: Mutex::new(Cursor {
                iter: iter.fuse(),
                next: 0,
            }),
        }
    }

    /// Takes the next entries into `out`: at most `files`, and no more once they weigh
    /// `bytes` or more (the entry that gets there is the last). Nothing once the input ends.
    ///
    /// A thread that panicked in the caller's iterator leaves the input poisoned: it ends
    /// there (the panic stops the scan anyway).
    pub(super) fn take(&self, files: usize, bytes: u64, out: &mut Vec<Taken<'a>>) {
        let Ok(mut cursor) = self.input.lock() else {
            return;
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
    }
}
