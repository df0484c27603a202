//! Completions: bytes for the consumer, continuations of short reads, retries of passing
//! errors, the end of a file found early, and a file's error.

use std::io;

use std::time::{Duration, Instant};

use super::policy::Policy;
use super::{backend_error, uncached, Core};
use crate::consts::{DIRECT_ALIGN, MAX_RETRIES};
use crate::error::Error;
use crate::io::ReadDone;
use crate::pool::Region;

/// Completions reaped and not yet handled (kept to reuse the allocation).
#[derive(Default)]
pub(super) struct Completions<'a> {
    done: Vec<ReadDone<'a>>,
}

impl<'a> Completions<'a> {
    /// Reaps what has completed, without waiting.
    pub(super) fn reap(&mut self, core: &mut Core<'a>) -> io::Result<()> {
        core.io_mut()
            .reap(false, &mut self.done)
            .map_err(backend_error("reap"))
    }

    /// Blocks until a read or open completes, for at most `timeout` from `start`; whether
    /// one did.
    pub(super) fn reap_until(
        &mut self,
        core: &mut Core<'a>,
        start: Instant,
        timeout: Duration,
    ) -> io::Result<bool> {
        let deadline = start.checked_add(timeout);
        core.io_mut()
            .reap_until(deadline, &mut self.done)
            .map_err(backend_error("wait"))
    }

    /// Whether no completion waits to be handled.
    pub(super) fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Handles every completion reaped.
    pub(super) fn handle(&mut self, core: &mut Core<'a>, policy: &mut Policy) {
        for d in self.done.drain(..) {
            complete(core, policy, d);
        }
    }
}

/// Takes one completion: bytes for the consumer, a continuation, a retry or an error.
fn complete<'a>(core: &mut Core<'a>, policy: &mut Policy, done: ReadDone<'a>) {
    let ReadDone {
        id,
        result,
        direct,
        offload,
        uncached,
        loan,
        _fd,
    } = done;
    if offload {
        policy.offload_done();
    }
    let region = core.pool_mut().reclaim(loan);
    if core.chunks.take_orphan(id) {
        core.pool_mut().free(region);
        core.stats.read_discarded(result.max(0) as u64);
        return;
    }
    let i = core
        .chunks
        .index_of(id)
        .expect("a completion is either an orphan's or a live chunk's");
    debug_assert!(
        core.chunks[i].in_flight(),
        "completion for a chunk not in flight"
    );
    let file = core.chunks[i].file_id();
    if result > 0 {
        complete_bytes(core, i, result as usize, region);
    } else if uncached && matches!(-result, libc::EOPNOTSUPP | libc::EINVAL) {
        // The filesystem refuses `RWF_DONTCACHE` (EINVAL: kernels that know no such flag).
        uncached::refused(core, i, region);
    } else {
        complete_end(core, i, result, region, direct);
    }
    uncached::file_done(core, file);
    core.release_if_finished(file);
}

/// `n` bytes came back for chunk `i`: continue a short read, or hand the bytes over (and
/// end the file there if it came back short at its end).
fn complete_bytes(core: &mut Core<'_>, i: usize, n: usize, region: Region) {
    core.stats.read_in(n as u64);
    let chunk = &mut core.chunks[i];
    let entry = core
        .queue
        .by_id_mut(chunk.file_id())
        .expect("a live chunk's file is queued");
    let filled = chunk.fill(n);
    entry
        .progress_mut()
        .read_up_to(chunk.offset() + filled as u64);
    let to_end = entry.stop().saturating_sub(chunk.offset());
    let short = filled < chunk.want() && (filled as u64) < to_end;
    if short {
        // A short read before the end as sized: read the rest into the same region.
        core.stats.read_short();
        chunk.continue_from_filled();
        // O_DIRECT refuses a read from an unaligned offset: the rest is read buffered.
        if entry.direct() && !filled.is_multiple_of(DIRECT_ALIGN) {
            if let Err((region, err)) = read_on_buffered(core, i, region) {
                end_chunk(core, i, region, Some(err));
            }
            return;
        }
        let fd = entry.fd().cloned().expect("open while reads are in flight");
        core.resubmit(i, region, fd);
        return;
    }
    chunk.set_region(region);
    entry.progress_mut().read_done();
    uncached::came_back(core, i, filled);
}

/// Turns `O_DIRECT` off on chunk `i`'s descriptor (the same descriptor: its path may
/// name another file by now) and reads the rest of the chunk buffered; gives the region
/// back, with why, where it cannot be turned off.
fn read_on_buffered(
    core: &mut Core<'_>,
    i: usize,
    region: Region,
) -> Result<(), (Region, io::Error)> {
    let file = core.chunks[i].file_id();
    let entry = core.queue.by_id_mut(file).expect("a live chunk's file");
    let fd = entry.fd().cloned().expect("open while reads are in flight");
    match core.io_mut().clear_direct(&fd) {
        Ok(()) => {
            let entry = core.queue.by_id_mut(file).expect("a live chunk's file");
            entry.clear_direct();
            // Its pages, and those of its other reads, are dropped once all are back.
            uncached::left_direct(core, file);
            core.resubmit(i, region, fd);
            Ok(())
        }
        Err(e) => Err((region, e)),
    }
}

/// End of file (`result == 0`) or an error for chunk `i`: retried where the error is
/// passing; else the file ends where the read began, failing if it was an error.
fn complete_end(core: &mut Core<'_>, i: usize, result: i32, region: Region, direct: bool) {
    let region = if result < 0 {
        match retry(core, i, result, region, direct) {
            Some(region) => region,
            None => return,
        }
    } else {
        region
    };
    let error = (result < 0).then(|| io::Error::from_raw_os_error(-result));
    end_chunk(core, i, region, error);
}

/// Ends chunk `i`'s file where the chunk's read began (`from`), failing it with `error`
/// there if there is one.
fn end_chunk(core: &mut Core<'_>, i: usize, region: Region, error: Option<io::Error>) {
    let chunk = &mut core.chunks[i];
    let entry = core
        .queue
        .by_id_mut(chunk.file_id())
        .expect("a live chunk's file");
    chunk.end_at_from(region);
    let at = chunk.resume_at();
    let file = chunk.file_id();
    entry.progress_mut().read_done();
    match error {
        Some(source) => {
            let error = Error::read(entry.name(), at, source);
            if entry.fail(error, at) {
                core.stats.file_failed();
            }
        }
        None => end_early(core, file, at),
    }
    core.drop_chunks_after(i);
}

/// A read of `file` found its end at `at`, before the size it had when opened: it was
/// cut, maybe further than `at` (a read there finds the end wherever it now is). It ends
/// at its size now, but never before the bytes reads brought in (they were the file's
/// when read); a skip that passed that end is then an error (`skipped_past_end`). An
/// exact range fails there instead.
fn end_early(core: &mut Core<'_>, file: u64, at: u64) {
    let fd = core.queue.by_id_mut(file).and_then(|e| e.fd().cloned());
    let size = fd.and_then(|fd| core.io_mut().size_now(&fd));
    let entry = core.queue.by_id_mut(file).expect("a live chunk's file");
    let len = size
        .map_or(at, |size| size.min(at))
        .max(entry.progress().read_end().min(at));
    if entry.end_at(len) {
        core.stats.file_failed();
    }
}

/// Retries a failed read where the error is passing (`None`: resubmitted); gives the
/// region back where the file must fail. `direct`: whether the read was issued with
/// `O_DIRECT`.
fn retry(
    core: &mut Core<'_>,
    i: usize,
    result: i32,
    region: Region,
    direct: bool,
) -> Option<Region> {
    let file = core.chunks[i].file_id();
    if -result == libc::EAGAIN && made_blocking(core, file) {
        let fd = core.queue.by_id_mut(file).and_then(|e| e.fd().cloned());
        core.resubmit(i, region, fd.expect("open while reads are in flight"));
        return None;
    }
    let chunk = &mut core.chunks[i];
    // EFAULT too: the pool is always mapped, so it comes from the kernel finishing a read
    // for a thread that has exited since it submitted it (the reader moved threads);
    // submitted again from this thread, the read goes through.
    let passing = matches!(
        -result,
        libc::EINTR | libc::EAGAIN | libc::ECANCELED | libc::EFAULT
    );
    if passing && chunk.retry(MAX_RETRIES) {
        core.stats.retried();
        let fd = core
            .queue
            .by_id_mut(file)
            .and_then(|e| e.fd().cloned())
            .expect("open while reads are in flight");
        core.resubmit(i, region, fd);
        return None;
    }
    let entry = core
        .queue
        .by_id_mut(file)
        .expect("a live chunk's file is queued");
    if -result == libc::EINVAL && direct && !entry.direct() {
        // Issued with O_DIRECT, which the descriptor has dropped since (it was refused).
        let fd = entry.fd().cloned().expect("open while reads are in flight");
        core.resubmit(i, region, fd);
        return None;
    }
    if -result == libc::EINVAL && entry.direct() {
        // The filesystem refused O_DIRECT for this read: go on buffered.
        return read_on_buffered(core, i, region)
            .err()
            .map(|(region, _)| region);
    }
    Some(region)
}

/// Clears `O_NONBLOCK` on `file`'s descriptor, where it has it; whether it did. A file
/// opened from a local directory keeps it (see `io::finish_open`), and an owned file handed
/// in may have it: every uncached read may then be answered `EAGAIN` by the ring, which
/// retrying never mends. Never on a borrowed file, whose open file description (a
/// duplicate shares it) is the caller's: that one is reopened without it where it can be.
#[cfg(unix)]
fn made_blocking(core: &mut Core<'_>, file: u64) -> bool {
    let Some(entry) = core.queue.by_id_mut(file) else {
        return false;
    };
    if matches!(entry.source, crate::source::Source::Borrowed(_)) {
        return false;
    }
    let Some(fd) = entry.fd() else {
        return false;
    };
    let flags = crate::sys::status_flags(fd.file()).unwrap_or(0);
    flags & libc::O_NONBLOCK != 0 && crate::sys::clear_nonblock(fd.file(), flags).is_ok()
}

/// No `O_NONBLOCK` on files here.
#[cfg(not(unix))]
fn made_blocking(_core: &mut Core<'_>, _file: u64) -> bool {
    false
}
