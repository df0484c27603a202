//! Which read goes next: the earliest file with work is opened or read, while depth, the pool
//! and the window allow, each read sent as the policy (`policy.rs`) says.

use std::io;

use super::opens::{Opens, Started};
use super::policy::{How, Next, Policy, PoolWindow};
use super::{backend_error, uncached, whole, Core, Limits};
use crate::consts::{DIRECT_ALIGN, OFFLOAD_MIN};
use crate::io::{FromCache, ReadReq};
use crate::pool::Region;
use crate::queue::FileEntry;
use crate::source::FdRef;

/// Rounds of issuing reads and taking opens answered at once, in one scheduling: a bound,
/// as helper threads may answer opens meanwhile too.
const MAX_OPEN_ROUNDS: usize = 64;

/// What decides and starts the reads: the limits, the policy, and the opens.
#[derive(Debug)]
pub(super) struct Scheduler {
    limits: Limits,
    policy: Policy,
    opens: Opens,
    /// Whether the consumer is copying a read itself instead of waiting (see `help`).
    helping: bool,
}

/// What one step of scheduling did for the earliest file with work.
enum Step {
    /// A read was issued.
    Issued,
    /// The file was opened here: look at it again.
    Opened,
    /// The backend started opening it: reads wait for that.
    StartedOpen,
    /// Nothing more can go now (depth, pool, window, cap, an open in flight).
    Blocked,
}

/// The next read of a file, as `issue_read` works it out.
struct NextRead<'a> {
    fd: FdRef<'a>,
    /// Bytes of the file it brings.
    len: usize,
    /// Bytes it asks for (rounded up for `O_DIRECT`).
    read_len: usize,
    /// Bytes the file has left from where it starts.
    left: u64,
    next: Next,
    /// Whether the reader leaves the page cache as it found it (see `uncached.rs`).
    uncached: bool,
}

impl Scheduler {
    pub(super) fn new(limits: Limits) -> Self {
        Scheduler {
            limits,
            policy: Policy::default(),
            opens: Opens::default(),
            helping: false,
        }
    }

    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(super) fn policy(&self) -> &Policy {
        &self.policy
    }

    pub(super) fn policy_mut(&mut self) -> &mut Policy {
        &mut self.policy
    }

    /// Opens the backend has started and not yet returned.
    pub(super) fn opens_in_flight(&self) -> usize {
        self.opens.in_flight()
    }

    #[cfg(test)]
    pub(super) fn opens(&self) -> &Opens {
        &self.opens
    }

    /// Takes the opens the backend finished.
    pub(super) fn handle_opened(&mut self, core: &mut Core<'_>) {
        self.opens.handle_opened(core, &self.limits);
    }

    /// Whether the file queued last is within reach of a scheduling pass: no more files
    /// before it wait to be opened than the cap on descriptors lets the open-ahead open.
    /// Past that, a pass opens and reads only files before it, as the last pass did: a
    /// caller queuing thousands of paths at once schedules once a cap's worth, not once a
    /// file.
    pub(super) fn within_reach(&self, core: &Core<'_>) -> bool {
        let waiting = core.queue.len().saturating_sub(core.queue.open_from());
        waiting <= self.opens.max_open(&self.limits, self.policy.warm())
    }

    /// Issues what the pipeline has room for, unless enough is read ahead already, for a
    /// file just queued: opened at once, even where the current file is copied on the
    /// consumer's thread and nothing is under way (where `schedule_unless_ahead` makes no
    /// pass), so that its open is under way while the consumer reads the current one.
    pub(super) fn schedule_queued(&mut self, core: &mut Core<'_>) -> io::Result<()> {
        if self.ahead_enough(core) {
            return Ok(());
        }
        self.schedule(core)
    }

    /// Whether enough is read ahead already (see `Policy::ahead_enough`).
    fn ahead_enough(&self, core: &Core<'_>) -> bool {
        let ready = core.pool().ready_bytes();
        self.policy
            .ahead_enough(&self.limits, ready, core.chunks.len())
    }

    /// Issues what the pipeline has room for, unless enough is read ahead already.
    /// The current file, copied whole when the consumer gets to it (see `whole.rs`), holds
    /// back the reads of the files behind it: with nothing else under way, there is nothing
    /// to issue.
    pub(super) fn schedule_unless_ahead(&mut self, core: &mut Core<'_>) -> io::Result<()> {
        if self.ahead_enough(core) {
            return Ok(());
        }
        let idle = core.io().in_flight() == 0 && self.opens.in_flight() == 0;
        let pool = core.pool().capacity();
        if idle
            && core
                .queue
                .front()
                .is_some_and(|f| self.copies_whole(f, pool))
        {
            return Ok(());
        }
        self.schedule(core)
    }

    /// Whether `entry` is to be copied on the consumer's thread when it gets there
    /// (`pool`: the pool's bytes), not read ahead (see `whole.rs`).
    pub(super) fn copies_whole(&self, entry: &FileEntry<'_>, pool: usize) -> bool {
        whole::applies(&self.policy, entry, &self.limits, pool)
    }

    /// Rather than block while kernel workers copy, copies one more cached read itself (at
    /// once, on this thread: `Io::read_if_cached`, as the policy sends a read it does not
    /// hand to the workers); whether it did.
    /// Where the consumer is quicker than the workers this shares the copying out; where
    /// it is slower, it never waits, so never helps.
    pub(super) fn help(&mut self, core: &mut Core<'_>) -> bool {
        if self.policy.offloaded() == 0 {
            return false;
        }
        let reads = core.stats.reads;
        self.helping = true;
        let in_flight = core.io().in_flight() + 1;
        let issued = self.schedule_up_to(core, in_flight).is_ok() && core.stats.reads > reads;
        self.helping = false;
        issued
    }

    /// Issues reads, earliest file first, while depth and pool allow; then submits them.
    pub(super) fn schedule(&mut self, core: &mut Core<'_>) -> io::Result<()> {
        self.schedule_up_to(core, self.limits.depth)
    }

    /// `schedule`, with at most `in_flight` reads and opens in flight (at most the depth).
    fn schedule_up_to(&mut self, core: &mut Core<'_>, in_flight: usize) -> io::Result<()> {
        let in_flight = in_flight.min(self.limits.depth);
        let (mut issued, mut started) = (false, false);
        // Files opened as their opens start (without a ring, the kernel had them cached:
        // opened on this thread) and opens answered meanwhile (the ring's, in the last
        // submission) get their reads in another round, so that those go out in this
        // submission: else each submission would carry the reads of as many files as opens
        // may be under way (a few).
        for _ in 0..MAX_OPEN_ROUNDS {
            let (i, s) = self.issue_up_to(core, in_flight);
            (issued, started) = (issued | i, started | s);
            if core.io().in_flight() >= in_flight || !self.opens.handle_opened(core, &self.limits) {
                break;
            }
        }
        if issued {
            core.note_peaks();
        }
        if issued || started {
            core.io_mut().submit().map_err(backend_error("submit"))?;
        }
        Ok(())
    }

    /// Issues reads, earliest file first, while `in_flight` allows, and starts opens of the
    /// files ahead; whether it issued any read, and started any open.
    fn issue_up_to(&mut self, core: &mut Core<'_>, in_flight: usize) -> (bool, bool) {
        let (mut issued, mut started) = (false, false);
        while core.io().in_flight() < in_flight {
            let Some(idx) = core.queue.next_with_work() else {
                break;
            };
            match self.step(core, idx) {
                Step::Issued => issued = true,
                Step::Opened => {}
                Step::StartedOpen => {
                    started = true;
                    break;
                }
                Step::Blocked => break,
            }
        }
        started |= self
            .opens
            .open_ahead(core, &self.limits, self.policy.warm());
        (issued, started)
    }

    /// Opens the file at `idx` (the earliest with work) or issues its next read; the first
    /// file open, before any read found out, is asked about the page cache first (see
    /// `whole::learn_from_front`).
    fn step(&mut self, core: &mut Core<'_>, idx: usize) -> Step {
        if idx == 0 && self.policy.may_learn() {
            whole::learn_from_front(&mut self.policy, core);
        }
        let pool = core.pool().capacity();
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        if entry.fd().is_some() {
            if entry.status().is_sized() {
                return self.issue_read(core, idx);
            }
            // Open, not sized yet: the current file's first copy sizes it where it is to be
            // copied on the consumer's thread. A file further on is sized now, so that a
            // large one can be read ahead (where the cache is cold) while the consumer is
            // still before it.
            if idx == 0 && self.copies_whole(entry, pool) {
                return Step::Blocked;
            }
            core.size_open(idx);
            return Step::Opened;
        }
        // Reads go in queue order: the next ones wait for this file's open.
        let warm = self.policy.warm();
        if entry.status().is_opening() || (idx > 0 && self.opens.at_cap(core, &self.limits, warm)) {
            return Step::Blocked;
        }
        match self.opens.start_open(core, idx, &self.limits) {
            Started::Later => return Step::StartedOpen,
            // Opened or failed; or queued to be opened again, where the process ran out of
            // descriptors: not looked at again in this pass.
            Started::OnTheSpot => {
                let entry = core.queue.get_mut(idx).expect("index from the queue");
                let done = entry.fd().is_some() || entry.error().is_some();
                return if done { Step::Opened } else { Step::Blocked };
            }
            Started::No => {}
        }
        if self.opens.open_entry(core, idx, &self.limits) {
            Step::Opened
        } else {
            Step::Blocked
        }
    }

    /// Issues the next read of the open file at `idx`, if the pool, the window and the
    /// offload depth allow.
    fn issue_read<'a>(&mut self, core: &mut Core<'a>, idx: usize) -> Step {
        let pool = core.pool().capacity();
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        if self.copies_whole(entry, pool) {
            return Step::Blocked;
        }
        let (limits, policy) = (&self.limits, &mut self.policy);
        let mut read = NextRead::next(core, idx, limits, policy);
        let window = policy.window(limits, read.next, core.stats.bytes_consumed);
        if window == PoolWindow::OneRead {
            // One copy of a whole window costs less per byte than several of `read_size`
            // (`cached` is true only once a read was found cached). Not a record parser's
            // (`PoolWindow::Records`): its records would straddle that one read's wrap.
            read.widen(limits.inline_window);
        }
        let limit = window.bytes(&self.limits, core.pool().capacity());
        let held = core.pool().live_bytes();
        if held > 0 && held + read.read_len > limit {
            return Step::Blocked;
        }
        let Some(how) = self.policy.how(&self.limits, read.next, self.helping) else {
            return Step::Blocked;
        };
        let Some(region) = core.pool_mut().alloc_below(read.read_len, limit) else {
            return Step::Blocked;
        };
        read.send(core, idx, region, how, &mut self.policy);
        Step::Issued
    }
}

impl<'a> NextRead<'a> {
    /// The next read of the open file at `idx`, of at most `read_size` bytes.
    fn next(core: &mut Core<'a>, idx: usize, limits: &Limits, policy: &mut Policy) -> Self {
        if limits.uncached {
            uncached::decide(core, idx, limits.uncached_fallback, policy.warm());
        }
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        let offset = entry.progress().next_read();
        let left = entry.stop() - offset;
        let direct = entry.direct();
        // A direct read goes on from where the last one ended: a whole number of blocks (the
        // builder rounds `read_size` up for `direct_io`, but a file read uncached may turn
        // direct under any).
        let read_size = if direct {
            limits.read_size.next_multiple_of(DIRECT_ALIGN)
        } else {
            limits.read_size
        };
        let len = left.min(read_size as u64) as usize;
        let read_len = if direct {
            len.next_multiple_of(DIRECT_ALIGN)
        } else {
            len
        };
        let (file, fd) = (entry.id, entry.fd().cloned().expect("checked open"));
        let small = read_len < OFFLOAD_MIN;
        let cached = !direct && cached(core, policy, (limits, &fd), (file, offset), len);
        let current = idx == 0;
        let next = Next {
            cached,
            small,
            direct,
            no_kernel_readahead: limits.uncached && uncached::drops_behind(core, idx),
            current,
        };
        NextRead {
            fd,
            len,
            read_len,
            left,
            next,
            uncached: limits.uncached,
        }
    }

    /// Makes it a read of up to `window` bytes (a buffered read's).
    fn widen(&mut self, window: usize) {
        self.len = self.left.min(window as u64) as usize;
        self.read_len = self.len;
    }

    /// Records it as the next read of the file at `idx`, a chunk, and lends it `region`:
    /// the request to hand the backend.
    fn lend(self, core: &mut Core<'a>, idx: usize, region: Region) -> ReadReq<'a> {
        let (fd, direct, len, read_len) = (self.fd, self.next.direct, self.len, self.read_len);
        let entry = core.queue.get_mut(idx).expect("index from the queue");
        let (file, offset) = (entry.id, entry.progress().next_read());
        // Past the start of the region only where `skip` jumped into an aligned O_DIRECT read.
        let pos = entry.progress().consumed().saturating_sub(offset) as usize;
        entry.progress_mut().issued(len);
        let id = core.chunks.push(file, offset, read_len, pos);
        let (uncached, drop_behind) = if self.uncached {
            uncached::for_read(core, idx, (offset, read_len), !self.next.cached)
        } else {
            (false, false)
        };
        if drop_behind {
            let i = core.chunks.index_of(id).expect("just pushed");
            core.chunks[i].set_drop_behind();
        }
        let loan = core.pool_mut().lend(region);
        core.stats.read_sent(direct, uncached);
        ReadReq::new(id, (fd, direct), offset, loan, 0, read_len).with_uncached(uncached)
    }

    /// Hands it to the backend, as the read of the file at `idx`, into `region`, sent `how`.
    fn send(self, core: &mut Core<'a>, idx: usize, region: Region, how: How, policy: &mut Policy) {
        let req = self.lend(core, idx, region);
        match how {
            How::Ring => core.io_mut().read(req),
            How::Offload => {
                core.io_mut().read(req.with_offload(true));
                policy.offload_sent();
                core.stats.read_offloaded();
            }
            How::CachedFirst => match core.io_mut().read_if_cached(req) {
                FromCache::Taken { all } => {
                    core.stats.read_cached();
                    found_cached(core, policy, all);
                }
                FromCache::Missed(req) => {
                    found_cached(core, policy, false);
                    // An uncached read goes on asking: reads sent straight to the backend
                    // after a miss may find pages the miss's own read-ahead brought in, and
                    // leave them cached.
                    if !req.uncached() {
                        policy.missed();
                    }
                    core.io_mut().read(req);
                }
                // Says nothing of the cache: later reads ask it (`cached`).
                FromCache::Refused(req) => {
                    policy.nowait_refused();
                    core.io_mut().read(req);
                }
            },
        }
    }
}

/// Tells the policy whether a read was served by the page cache: the next reads go by it.
fn found_cached(core: &Core<'_>, policy: &mut Policy, cached: bool) {
    policy.found_cached(cached, core.stats.bytes_consumed, core.pool().capacity());
}

/// Whether a read of `len` bytes of `fd` (file `file`) at `offset` is expected to find them
/// in the page cache: as the last read that found out said, unless the policy has it ask
/// the backend (see `Policy::should_ask`). A backend that cannot tell changes nothing.
fn cached<'a>(
    core: &mut Core<'a>,
    policy: &mut Policy,
    (limits, fd): (&Limits, &FdRef<'a>),
    (file, offset): (u64, u64),
    len: usize,
) -> bool {
    if policy.should_ask(limits, (file, offset), len) {
        if let Some(cached) = core.io_mut().cached(fd, offset, len as u64) {
            found_cached(core, policy, cached);
        }
    }
    policy.warm()
}
