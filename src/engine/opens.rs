//! Descriptors: opening queued paths ahead of the reads (through the backend where it can),
//! the cap on descriptors held, running out of them, and closing what is done.

use super::{Core, Limits};
use crate::consts::{DIRECT_ALIGN, MAX_RETRIES, WARM_MAX_OPEN};
use crate::error::Error;
use crate::id_map::IdMap;
use crate::io::{OpenResult, OpenStart, Opened, ThreadOpens};

/// Opens under way, and the cap on descriptors.
#[derive(Debug, Default)]
pub(super) struct Opens {
    /// Opens the backend has started and not yet returned.
    in_flight: usize,
    /// Whether an open was answered on the spot since opens were last taken (see
    /// [`handle_opened`](Self::handle_opened)).
    answered_now: bool,
    cap: Cap,
    retries: Retries,
}

/// What [`Opens::start_open`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Started {
    /// Nothing: the backend cannot start it, and the file is opened with `open_entry`.
    No,
    /// Its open is under way: its answer comes with [`Opens::handle_opened`].
    Later,
    /// It was opened (or failed) on the spot: recorded, or, where the process ran out of
    /// descriptors, queued to be opened again (see `Cap::out_of_descriptors`).
    OnTheSpot,
}

/// Files whose opens failed with a passing error and were started again: how often.
#[derive(Debug, Default)]
struct Retries(IdMap<u32>);

impl Retries {
    /// Whether the open of file `id` (asked only where needed), which came back with
    /// `result`, is to be started again: where it failed with a passing error (`EINTR`,
    /// `EAGAIN`), `MAX_RETRIES` times at most.
    fn again(&mut self, result: &OpenResult<'_>, id: impl FnOnce() -> u64) -> bool {
        let passing = matches!(errno(result), Some(libc::EINTR | libc::EAGAIN));
        if !passing && self.0.is_empty() {
            return false; // Nothing to forget: the common case, an open that went through.
        }
        let id = id();
        let tries = self.0.entry(id).or_default();
        if !passing || *tries >= MAX_RETRIES {
            self.0.remove(&id);
            return false;
        }
        *tries += 1;
        true
    }

    /// File `id` was dropped.
    fn forget(&mut self, id: u64) {
        self.0.remove(&id);
    }
}

/// The cap on descriptors: `Limits::max_open` as configured, lowered where the process runs
/// out of them, and raised back step by step as opens go through again.
#[derive(Debug, Default)]
struct Cap {
    /// The cap once it was lowered (back at `Limits::max_open` once it recovered); `None`:
    /// never lowered, the cap is as configured.
    lowered: Option<usize>,
    /// Files opened since the cap last changed: once as many as the cap went through, the
    /// cap goes up by one (descriptors freed up), until it is back as configured.
    opened_since: usize,
}

impl Cap {
    /// Keeps at most `held` descriptors (at least 1) from now on: what the process let the
    /// reader hold when it ran out.
    fn lower(&mut self, held: usize) {
        self.lowered = Some(held.max(1));
        self.opened_since = 0;
    }

    /// A file was opened: after as many opens as the cap allows went through, the cap,
    /// if lowered, goes up by one, so that it recovers once descriptors free up (a cap
    /// that is still too high costs one open failing with `EMFILE`, which lowers it again).
    fn opened(&mut self, max_open: usize) {
        let Some(cap) = self.lowered else {
            return;
        };
        self.opened_since += 1;
        if self.opened_since >= cap {
            self.lowered = Some((cap + 1).min(max_open));
            self.opened_since = 0;
        }
    }

    /// The process ran out of descriptors opening the file at `idx`, with `held` held or
    /// being opened: the reader keeps fewer open from now on, and opens the file again
    /// later. The current file is to be opened again at once, after closing files opened
    /// ahead that nothing was read from yet (it fails only if the process has no descriptor
    /// left for it): whether it is that one.
    fn out_of_descriptors(&mut self, core: &mut Core<'_>, idx: usize, held: usize) -> bool {
        core.queue.reopen_from(idx);
        // What the process let the reader hold: the cap from now on.
        self.lower(held);
        if idx > 0 {
            return false;
        }
        release_unread_ahead(core);
        true
    }
}

impl Opens {
    /// Whether the cap was ever lowered.
    #[cfg(test)]
    pub(super) fn lowered(&self) -> bool {
        self.cap.lowered.is_some()
    }

    /// Opens the backend has started and not yet returned.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Records the outcome of opening the file at `idx`, counting an open of the reader's
    /// towards raising the cap.
    fn opened<'a>(
        &mut self,
        core: &mut Core<'a>,
        idx: usize,
        opened: Result<Opened<'a>, Error>,
        limits: &Limits,
    ) {
        if set_opened(core, idx, opened) {
            self.cap.opened(limits.max_open);
        }
    }

    /// Descriptors the reader holds or is opening. A file whose orphans are still in flight
    /// counts until they come back, even while it is also counted as open (the cap is a
    /// bound, and this keeps it one).
    pub(super) fn descriptors(&self, core: &Core<'_>) -> usize {
        core.queue.open_here() + self.in_flight + core.chunks.orphan_files() + core.closing()
    }

    /// Descriptors the reader may hold or be opening now: the cap as configured, or lower
    /// where the process ran out of descriptors, and at most `WARM_MAX_OPEN` while reads
    /// find the page cache warm (`warm`), where a file opened further ahead of its copy only
    /// leaves the CPU's cache before it is read; while they go to the device, more files open
    /// ahead overlap more of their directories' and inodes' reads (BENCHMARKS.md, "What chose
    /// each constant"). A lowered cap recovers towards the one configured.
    pub(super) fn max_open(&self, limits: &Limits, warm: bool) -> usize {
        let cap = self.cap.lowered.unwrap_or(limits.max_open);
        match warm {
            true => cap.min(WARM_MAX_OPEN),
            false => cap,
        }
    }

    /// Whether the reader holds or is opening as many descriptors as it may now, or has as
    /// many opens under way as it may have (`Limits::open_depth`, not counting those so slow that
    /// they most likely hung, so that the opens behind them go on, nor the ring's, which the
    /// kernel makes in the submission or on its workers: see `Io::uncounted_opens`).
    pub(super) fn at_cap(&self, core: &mut Core<'_>, limits: &Limits, warm: bool) -> bool {
        self.at_cap_with(core, limits, 0, warm)
    }

    /// `at_cap`, with `more` opens counted as under way besides those that are. The files
    /// done with that wait to be closed together are closed first where they are what holds
    /// the reader at its cap.
    fn at_cap_with(&self, core: &mut Core<'_>, limits: &Limits, more: usize, warm: bool) -> bool {
        let opening = self.in_flight.saturating_sub(core.io().uncounted_opens()) + more;
        if opening >= limits.open_depth {
            return true;
        }
        let max_open = self.max_open(limits, warm);
        self.descriptors(core) >= max_open
            && !(core.close_done() && self.descriptors(core) < max_open)
    }

    /// Takes the opens the backend finished; whether there were any, or any was answered
    /// on the spot since the last call (so that the scheduler issues their reads).
    pub(super) fn handle_opened(&mut self, core: &mut Core<'_>, limits: &Limits) -> bool {
        let answered_now = std::mem::take(&mut self.answered_now);
        // Every open started was taken, so none can be answered; but a helper thread's late
        // answer to one given up on is still collected, to close its file.
        if self.in_flight == 0 && !core.io().thread_opens().is_some_and(ThreadOpens::jobs_out) {
            return answered_now;
        }
        let mut opened = Vec::new();
        core.io_mut().take_opened(&mut opened);
        let any = !opened.is_empty();
        for (id, result) in opened.drain(..) {
            self.in_flight -= 1;
            // A file moved past while it was being opened is closed here (dropped).
            match core.queue.index_of(id) {
                Some(idx) => {
                    self.answered(core, idx, result, limits);
                }
                None => self.retries.forget(id),
            }
        }
        any || answered_now
    }

    /// Takes the answer to the open of the file at `idx`: started again where it failed
    /// with a passing error, else recorded. Where the file stands: opened or failed
    /// ([`Started::OnTheSpot`]), or as its open started again.
    fn answered<'a>(
        &mut self,
        core: &mut Core<'a>,
        idx: usize,
        result: OpenResult<'a>,
        limits: &Limits,
    ) -> Started {
        if let Some(again) = self.retry_open(core, idx, &result, limits) {
            return again;
        }
        self.finish_open(core, idx, result, limits);
        Started::OnTheSpot
    }

    /// Starts opening the path at `idx` through the backend, if it can: see [`Started`].
    pub(super) fn start_open(
        &mut self,
        core: &mut Core<'_>,
        idx: usize,
        limits: &Limits,
    ) -> Started {
        let answer = match core.start_open_queued(idx, limits.direct) {
            OpenStart::Refused => return Started::No,
            OpenStart::Started => None,
            OpenStart::Done(result) => Some(result),
        };
        core.queue
            .get_mut(idx)
            .expect("index from the queue")
            .set_opening();
        let Some(result) = answer else {
            self.in_flight += 1;
            return Started::Later;
        };
        self.answered_now = true;
        self.answered(core, idx, result, limits)
    }

    /// Starts opening the paths queued after the read-ahead, so that their opening overlaps,
    /// while the cap on descriptors allows (those answered on the spot count against the
    /// depth of opens as those under way do, so that a pass opens no further ahead of the
    /// reads than where opens take their time; the ring's, which go in one submission, count
    /// only against the cap); whether it started any.
    pub(super) fn open_ahead(&mut self, core: &mut Core<'_>, limits: &Limits, warm: bool) -> bool {
        let mut i = core.queue.open_from();
        let (mut started, mut answered) = (false, 0);
        while !self.at_cap_with(core, limits, answered, warm) {
            let Some(entry) = core.queue.get_mut(i) else {
                break;
            };
            if entry.wants_open() {
                core.queue.prefetch_after(i);
                match self.start_open(core, i, limits) {
                    Started::No => break,
                    Started::Later => started = true,
                    Started::OnTheSpot => answered += 1,
                }
            }
            i += 1;
        }
        core.queue.looked_at_until(i);
        started
    }

    /// Starts the open of the file at `idx` again where it failed with a passing error
    /// (see `Retries::again`): how it started (`None`: not started again).
    fn retry_open(
        &mut self,
        core: &mut Core<'_>,
        idx: usize,
        result: &OpenResult<'_>,
        limits: &Limits,
    ) -> Option<Started> {
        let id = || core.queue.get_mut(idx).expect("index from the queue").id;
        if !self.retries.again(result, id) {
            return None;
        }
        core.stats.retried();
        core.queue
            .get_mut(idx)
            .expect("index from the queue")
            .set_open_returned();
        let started = self.start_open(core, idx, limits);
        if started == Started::No {
            // The backend cannot open it now: opened when it is needed, on this thread.
            core.queue.reopen_from(idx);
        }
        Some(started)
    }

    /// Takes the result of an open the backend did for the file at `idx`.
    fn finish_open<'a>(
        &mut self,
        core: &mut Core<'a>,
        idx: usize,
        result: OpenResult<'a>,
        limits: &Limits,
    ) {
        let direct = limits.direct;
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        entry.set_open_returned();
        let opened = match errno(&result) {
            Some(libc::EMFILE | libc::ENFILE) => {
                let held = self.descriptors(core);
                if !self.cap.out_of_descriptors(core, idx, held) {
                    return;
                }
                // An engine that never blocks cannot open it again here and wait: the
                // current file fails with the error, naming itself.
                if core.nonblocking {
                    result
                } else {
                    core.open_queued(idx, direct)
                }
            }
            // Refused O_NOATIME (not the owner) or O_DIRECT (the filesystem): opened again,
            // which goes on without them (and without O_NOATIME from then on: the backend
            // remembers). The backends' own opens already did that (`Opener::open`): an
            // engine that never blocks takes their answer.
            Some(libc::EPERM | libc::EINVAL) if !core.nonblocking => core.open_queued(idx, direct),
            _ => result,
        };
        self.opened(core, idx, opened, limits);
    }

    /// Opens the file at `idx` here (sized, or left to be: see `Opened::size`), or records
    /// why it cannot be read.
    ///
    /// Returns `false` where the process is out of descriptors (`EMFILE`/`ENFILE`) while the
    /// reader holds some: the file stays queued, and the reader keeps fewer open from then on.
    pub(super) fn open_entry(&mut self, core: &mut Core<'_>, idx: usize, limits: &Limits) -> bool {
        let held = self.descriptors(core);
        let mut opened = core.open_queued(idx, limits.direct);
        // Files done with that wait to be closed make room for this one first.
        if opened.as_ref().is_err_and(is_out_of_descriptors) && core.close_done() {
            opened = core.open_queued(idx, limits.direct);
        }
        match opened {
            Err(e) if idx > 0 && held > 0 && is_out_of_descriptors(&e) => {
                self.cap.lower(held);
                false
            }
            opened => {
                self.opened(core, idx, opened, limits);
                true
            }
        }
    }
}

/// Records the outcome of opening the file at `idx`; whether the reader opened a
/// descriptor of its own.
fn set_opened<'a>(core: &mut Core<'a>, idx: usize, opened: Result<Opened<'a>, Error>) -> bool {
    let opened = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let entry = core.queue.get_mut(idx).expect("index from the queue");
            let at = entry.progress().consumed();
            if entry.fail(e, at) {
                core.stats.file_failed();
            }
            return false;
        }
    };
    let opened_here = opened.opened_here;
    let align = if opened.direct { DIRECT_ALIGN } else { 1 };
    core.queue
        .set_descriptor(idx, opened.fd, opened.direct, opened_here);
    let entry = core.queue.get_mut(idx).expect("index from the queue");
    match opened.size {
        Some(size) => core.set_size(idx, Ok(size), align as u64),
        // Sized by its first copy from the page cache where it is copied whole (see
        // `whole.rs`), else when its reads are issued; but a range now, and a file sized
        // before and opened again (its descriptor was closed meanwhile), which reads on.
        None if !entry.is_whole_file() || entry.status().is_sized() => core.size_open(idx),
        None => {}
    }
    if opened_here {
        core.stats.file_opened();
    }
    opened_here
}

/// Closes the files opened ahead of the current one that nothing was read from yet (they
/// are opened again when their turn comes), and those done with that wait to be closed.
fn release_unread_ahead(core: &mut Core<'_>) {
    for i in 1..core.queue.len() {
        let e = core.queue.get_mut(i).expect("in range");
        if e.opened_here()
            && e.progress().next_read() <= e.status().start()
            && e.progress().in_flight() == 0
        {
            core.release_fd(i);
        }
    }
    core.close_done(); // Those just released wait to be closed too.
    core.queue.reopen_from(1);
}

/// The `errno` an open failed with, if it failed with one.
fn errno(result: &OpenResult<'_>) -> Option<i32> {
    match result {
        Err(Error::Open { source, .. }) => source.raw_os_error(),
        _ => None,
    }
}

fn is_out_of_descriptors(e: &Error) -> bool {
    matches!(e, Error::Open { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)))
}
