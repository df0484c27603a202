//! Cached files copied on the consumer's thread: while reads find the page cache warm, a
//! file is not read ahead into the pool. When the consumer gets to it, it is copied at once
//! from the page cache into the spill, which the consumer reads first: a file with at most
//! `COPY_WHOLE_MAX` bytes left in one `preadv2`, a larger one in calls of `INLINE_WINDOW`
//! (1 MiB, what std's `BufReader` of 1 MiB reads in a call), and one not sized yet with
//! that much room first (`first_len`), each into the same buffer, which stays in the CPU's
//! cache, with no region, chunk, submission or completion.
//! A cached read costs no less done ahead of the consumer than when it gets there, and this
//! is the loop std's `BufReader` runs. What the cache does not hold (`Copied::Missed`) turns
//! the policy cold, and the read-ahead takes over again, from where the consumer is. Before
//! any read found out, the first file is asked (`learn_from_front`), so that a reader over
//! cached files copies from its first file on.
//!
//! A record parser's large files are read ahead as before (their records would straddle
//! the ends of the copies and be copied again: in the pool, adjacent reads hold them in
//! place), past the first copy of one not sized yet, and so are those of a reader whose
//! kernel workers copy large reads (`offload(true)`).

use std::io;

use super::policy::Policy;
use super::spill::Spill;
use super::{Core, Limits, ReadAhead};
use crate::consts::{COPY_WHOLE_MAX, INLINE_WINDOW, PAGE};
use crate::io::Copied;
use crate::queue::FileEntry;

/// Whether `entry`, where its consumer is, is to be copied on the consumer's thread when it
/// gets there rather than read ahead: open on a filesystem known not to hang, buffered,
/// nothing of it issued past the consumer, bytes left (at most `most`, unless it is copied
/// in reads: see `in_reads`), while the policy finds the cache warm (and the reader copies
/// at all: see `Policy::copy_whole`). `pool`: the pool's bytes.
pub(super) fn applies(
    policy: &Policy,
    entry: &FileEntry<'_>,
    limits: &Limits,
    pool: usize,
) -> bool {
    let progress = entry.progress();
    let left = match entry.status().is_sized() || entry.error().is_some() {
        true => entry.stop().saturating_sub(progress.consumed()),
        // Open and not sized yet (a whole file: see `Opened::size`): its first copy tells.
        false => 1,
    };
    // How much is left first: the cheapest test, and the one a file at its end fails.
    left > 0
        && (left <= most(limits, pool) as u64 || in_reads(policy, limits))
        && policy.copies_whole(entry.id)
        && entry.fd().is_some_and(|fd| !fd.may_hang())
        && !entry.direct()
        && progress.in_flight() == 0
        && progress.next_read() == progress.consumed()
}

/// Before any read found out whether the page cache serves this reader, asks it (one
/// system call) of the current file's next page, where the file could be copied on the
/// consumer's thread: a cached file is then copied from the first on, and the pool is not
/// touched for it (in a reader of one cached file of 1 MiB, the first touch of the pool's
/// pages cost half its time). A backend that cannot tell leaves the reads to find out.
pub(super) fn learn_from_front(policy: &mut Policy, core: &mut Core<'_>) {
    if !policy.may_learn() {
        return;
    }
    let Some(front) = core.queue.front() else {
        return;
    };
    let Some(fd) = front.fd().filter(|fd| !fd.may_hang()).cloned() else {
        return;
    };
    if front.direct() {
        return;
    }
    policy.first_asked();
    // Its first page: the copy finds out about the rest, and a range past the file's end,
    // which is not known yet, would count pages that do not exist.
    let offset = front.progress().next_read();
    if let Some(cached) = core.io_mut().cached(&fd, offset, PAGE as u64) {
        let consumed = core.stats.bytes_consumed;
        policy.found_cached(cached, consumed, core.pool().capacity());
    }
}

/// The most bytes a file may have left to be copied whole: `COPY_WHOLE_MAX`, but never more
/// than one read (`read_size`) or the pool (`pool`), which a reader built small is held to.
fn most(limits: &Limits, pool: usize) -> usize {
    COPY_WHOLE_MAX.min(limits.read_size).min(pool)
}

/// Whether a sized file with more than `most` bytes left is copied on the consumer's
/// thread too, in calls of `read_len`: not for a record parser, nor where kernel workers
/// copy large reads (see the module's doc).
fn in_reads(policy: &Policy, limits: &Limits) -> bool {
    !policy.records() && !limits.offload
}

/// The bytes of one copy of a sized file: `INLINE_WINDOW` (what std's `BufReader` of 1 MiB
/// reads in a call), whatever `read_size` is, never less than `most` nor more than the pool.
fn read_len(limits: &Limits, pool: usize) -> usize {
    INLINE_WINDOW.max(most(limits, pool)).min(pool)
}

/// The room of the first copy of a file not sized yet: `read_len`, as std's `BufReader`
/// reads, where larger files are copied in reads, so that a file of up to 1 MiB is copied
/// and sized (where it ends short of a page's end) in one call, with no seek and no second
/// copy (BENCHMARKS.md, build "11-30 room"); else `most`, the most copied whole. A
/// record parser's reader learns it is one at its first `fill_buf_at_least`: a file copied
/// before (a scan's, copied so before its closure runs) has the larger room.
fn first_len(policy: &Policy, limits: &Limits, pool: usize) -> usize {
    match in_reads(policy, limits) {
        true => read_len(limits, pool),
        false => most(limits, pool),
    }
}

/// Copies the current file's bytes from the consumer on into `spill` where `applies` says
/// so (the file opened first, if it is not yet): all it has left, or `read_len` of them;
/// whether it copied any. Nothing copied
/// leaves the file to the read-ahead. A file not sized yet is sized by the copy where it
/// tells the end (see `end_told`), else by a seek after it.
pub(super) fn copy(ahead: &mut ReadAhead<'_>, spill: &mut Spill) -> io::Result<bool> {
    debug_assert_eq!(spill.pending(), 0, "the spill's bytes come first");
    let Some(front) = ahead.core.queue.front() else {
        return Ok(false);
    };
    if front.fd().is_none() && !front.status().is_sized() && front.error().is_none() {
        // Before any read found out, its open asks the cache (see `learn_from_front`).
        let policy = ahead.sched.policy();
        if !policy.copies_whole(front.id) && !policy.may_learn() {
            return Ok(false);
        }
        ahead.open_front()?;
        // Where its open was answered without a scheduling step for it.
        learn_from_front(ahead.sched.policy_mut(), &mut ahead.core);
    }
    let core = &mut ahead.core;
    let Some(front) = core.queue.front() else {
        return Ok(false);
    };
    let (limits, pool) = (ahead.sched.limits(), core.pool().capacity());
    if !ahead.sched.copies_whole(front, pool) {
        return Ok(false);
    }
    let (id, offset, sized) = (
        front.id,
        front.progress().consumed(),
        front.status().is_sized(),
    );
    let len = match sized {
        true => ((front.stop() - offset) as usize).min(read_len(limits, pool)),
        false => first_len(ahead.sched.policy(), limits, pool),
    };
    let fd = front.fd().expect("checked open").clone();
    let io = core.io_mut();
    spill.start_at(offset);
    let copied = spill.extend_with(len, |buf| match io.copy_cached(&fd, offset, buf) {
        Copied::Bytes(n) => (n, Copied::Bytes(n)),
        other => (0, other),
    });
    if !sized && !size_by_copy(core, spill, (offset, len), &copied) {
        return Ok(false);
    }
    Ok(took(core, ahead.sched.policy_mut(), (id, sized), copied))
}

/// Records the copy of the current file (`id`, sized before it or not): whether it copied
/// any, else what the policy learns of it.
fn took(
    core: &mut Core<'_>,
    policy: &mut Policy,
    (id, sized): (u64, bool),
    copied: Copied,
) -> bool {
    match copied {
        // It ends before its size (or is empty): the usual way.
        Copied::Bytes(0) => policy.not_whole(id),
        Copied::Bytes(n) => {
            let front = core.queue.front_mut().expect("the file copied");
            front.progress_mut().copied(n as u64);
            core.stats.read_sent(false, false);
            core.stats.read_cached();
            core.stats.read_in(n as u64);
            return true;
        }
        Copied::Missed => {
            let consumed = core.stats.bytes_consumed;
            policy.found_cached(false, consumed, core.pool().capacity());
        }
        // Refused for a file not sized before, which the seek after it sized 0: the size
        // would have said not to try it (a file of `/proc`), so this file alone goes the
        // usual way. A file with bytes refused as sized files are: the filesystem does not
        // take the copy, and the reader's later files are not tried.
        Copied::Refused if !sized && has_no_bytes(core) => policy.not_whole(id),
        Copied::Refused => policy.copy_whole(false),
    }
    false
}

/// Whether the current file was sized with no bytes (or failed).
fn has_no_bytes(core: &Core<'_>) -> bool {
    let front = core.queue.front().expect("the file copied");
    front.status().sized_len().is_none_or(|len| len == 0)
}

/// Sizes the current file, not sized before, after `copied`, a copy of up to `len` bytes
/// at `offset` into `spill`: where the copy ended there, at the end it told (see
/// `end_told`), else by a seek. Whether to go on with the copy: not where the file failed
/// (it cannot be read ahead: a device of characters reads as it likes) or ends before the
/// bytes copied (it shrank since), whose bytes are dropped.
fn size_by_copy(
    core: &mut Core<'_>,
    spill: &mut Spill,
    (offset, len): (u64, usize),
    copied: &Copied,
) -> bool {
    match (end_told(offset, len, copied), copied) {
        (Some(end), _) => core.set_size(0, Ok(end), 1),
        // Nothing at its start: empty, or not a file; `fstat` tells which (a seek to the
        // end of an empty file says neither).
        (None, Copied::Bytes(0)) if offset == 0 => core.size_by_fstat(0),
        (None, _) => core.size_open(0),
    }
    let front = core.queue.front().expect("the file copied");
    let shrank = matches!(copied, Copied::Bytes(n) if offset + *n as u64 > front.stop());
    if front.error().is_some() || shrank {
        spill.clear();
        return false;
    }
    true
}

/// Where a copy of up to `len` bytes at `offset` from the page cache, which copied
/// `copied`, says the file ends: where it came back short of an end of page. A copy that
/// takes only what is cached stops short at a page the cache lacks, and the cache holds
/// whole pages (folios, each a whole number of them): so it stops short anywhere else
/// only at the end of the file. A copy that fills `len`, or stops at an end of page, or
/// copies nothing, says nothing.
fn end_told(offset: u64, len: usize, copied: &Copied) -> Option<u64> {
    let Copied::Bytes(n) = *copied else {
        return None;
    };
    let end = offset + n as u64;
    (n > 0 && n < len && !end.is_multiple_of(PAGE as u64)).then_some(end)
}
