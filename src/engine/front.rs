//! The current file's chunks at the front of the pool: how many of their bytes lie
//! contiguous, whether a skip may pass, and moving the consumer on through them.

use std::io;

use super::Core;
use crate::consts::DIRECT_ALIGN;
use crate::queue::FileState;

/// Moves the consumer `amt` bytes on through the current file's readable chunks (as many
/// as they hold, from the front: the bytes just handed out).
pub(super) fn advance(core: &mut Core<'_>, amt: usize) {
    let front = core.queue.front_mut().expect("bytes were exposed");
    front.progress_mut().consume(amt as u64);
    let mut left = amt;
    for c in core.chunks.iter_mut() {
        debug_assert!(c.file_id() == front.id && !c.in_flight());
        left -= c.advance(left, front.stop());
        if left == 0 {
            break;
        }
    }
    debug_assert_eq!(left, 0, "advanced past the bytes exposed");
}

/// The unread bytes of the current file's front chunk, if it is readable and holds at
/// least `n` of them (and at least one).
pub(super) fn unread(core: &Core<'_>, n: usize) -> Option<usize> {
    let (front, c) = (core.queue.front()?, core.chunks.front()?);
    let unread = c.valid(front.stop()).saturating_sub(c.pos());
    (c.file_id() == front.id && !c.in_flight() && unread >= n.max(1)).then_some(unread)
}

/// How many bytes lie contiguous in the pool from the consumer's position, counting no
/// further than `n` once reached, and over how many chunks.
pub(super) fn run_len(core: &Core<'_>, n: usize) -> (usize, usize) {
    let end = core.queue.front().expect("a current file").stop();
    let mut chunks = core.chunks.iter();
    let first = chunks.next().expect("a readable front chunk");
    let (mut run, mut count, mut prev) = (first.valid(end) - first.pos(), 1, first);
    for c in chunks {
        let (Some(a), Some(b)) = (prev.region(), c.region()) else {
            break;
        };
        let full = prev.valid(end);
        let joins = c.file_id() == prev.file_id()
            && full == a.len()
            && c.offset() == prev.offset() + full as u64
            && core.pool().adjacent(a, b);
        if run >= n || !joins {
            break;
        }
        run += c.valid(end);
        count += 1;
        prev = c;
    }
    (run, count)
}

/// The current file's error, where skipping `n` bytes from the consumer would pass the
/// offset it failed at: a skip never passes a failure for an end (and moves nothing then).
pub(super) fn check_passable(core: &Core<'_>, n: u64) -> io::Result<()> {
    let front = core.queue.front().expect("sized, so current");
    match front.status().state() {
        FileState::Failed { at, .. } if front.progress().consumed().saturating_add(n) > *at => {
            Err(front.error_out().expect("failed"))
        }
        _ => Ok(()),
    }
}

/// Moves the consumer `n` bytes on in the current file (fewer at its end): chunks wholly
/// passed over are freed unread (or their reads dropped), reads not issued yet never are.
pub(super) fn skip(core: &mut Core<'_>, n: u64) -> u64 {
    let front = core.queue.front_mut().expect("sized, so current");
    let (id, from) = (front.id, front.progress().consumed());
    let stop = front.stop();
    let to = from.saturating_add(n).min(stop.max(from));
    // O_DIRECT reads start aligned; the consumer starts inside the first one.
    let align = if front.direct() {
        DIRECT_ALIGN as u64
    } else {
        1
    };
    front.progress_mut().skip_to(to, stop, align);
    while let Some(c) = core.chunks.front_mut() {
        if c.file_id() != id {
            break;
        }
        // A chunk with a byte of the file past `to` is kept; one whose bytes past `to`
        // lie past the file's end has nothing left to give (and its read, if it fails,
        // fails for nothing).
        if (c.offset() + c.want() as u64).min(stop) > to {
            c.skip_to(to);
            break;
        }
        let c = core.chunks.pop_front().expect("checked");
        core.drop_chunk(c);
    }
    to - from
}
