//! Whether large reads of cached files are copied by kernel workers or on the consumer's
//! thread, found by timing both ways on the consumer at hand.
//!
//! Handing a copy out of the page cache to a kernel worker overlaps it with the consumer's
//! work, but it costs wake-ups on both sides and leaves the bytes in another CPU's cache.
//! Whether that pays depends on the consumer, and not simply on how much work it does per
//! byte. Measured on 1 GiB of 4 KiB-4 MiB files in the page cache, one reader on 2 CPUs,
//! against std's `BufReader` of 1 MiB (7-11 rounds each): blake3 ran at 1.43-1.52x with
//! workers and 0.99x without; a sum of words at 1.10-1.41x and 0.99-1.00x, for 1.16-1.46x
//! the CPU time; but a checksum of multiply chains at 0.75-0.9x with workers (the build
//! before, which always used them where a CPU was left over) and 0.99x without.
//!
//! So the engine measures, on the consumer's thread first. While it copies, the time inside
//! the submissions is the copy's, the rest the consumer's own. The workers can at best take
//! the copy off this thread, leaving the longer of the two; where even that would not be
//! faster by the margin, they are not tried (a sum of words: the copy was 87% of its time,
//! so at best 1.15x, for the workers' CPU time on top). Else the workers are timed too, and
//! the faster way kept, the other tried again now and then (less and less often while the
//! answer stays the same). At the start of each trial the workers are asked to keep off the
//! CPU the consumer runs on: the kernel would start them on it, and a trial that waited for
//! the scheduler to move them cost a consumer they are slower for 128 MiB at their pace.

use std::time::{Duration, Instant};

/// Bytes consumed, in one way, before a phase is timed: the bytes the other way read
/// ahead (the window of cached reads) are consumed first, so they do not count.
const LEAD: u64 = 4 << 20;
/// The same before the workers' phase, where they are kept off the consumer's CPU (see
/// `Offload::workers_apart`): they reach their pace at once. Measured on 1 GiB of cached
/// files, one reader on 2 CPUs: blake3 chose the workers in 12 of 12 runs, as with the
/// 96 MiB lead below; a checksum, which they are slower for, took 1.08x std's time on
/// 256 MiB instead of 1.21x.
const WORKERS_APART_LEAD: u64 = 8 << 20;
/// The same where the workers go where the kernel puts them: they take longer to reach
/// their pace.
const WORKERS_LEAD: u64 = 32 << 20;
/// The same before their first phase: the kernel starts them on the consumer's CPU, and
/// the scheduler may take tens of milliseconds to move them off it. Measured with blake3:
/// after 32 MiB they copied at 2.0 GB/s in 2 of 4 runs and 3.5-3.7 in the others; after
/// 96 MiB at 3.3-3.9 in 5 of 5 (and after 8 MiB, the trial chose them in 10 of 12).
const WORKERS_FIRST_LEAD: u64 = 96 << 20;
/// Bytes consumed in a timed phase: 8-16 ms here, several scheduler ticks (16 MiB phases,
/// one or two ticks, gave rates that varied by half from one run to the next).
const PHASE: u64 = 32 << 20;
/// Bytes consumed before the first trial, which times the consumer's own copies first: the
/// first reads of a reader run slower (its pool's pages touched the first time).
const FIRST_TRIAL: u64 = 32 << 20;
/// Bytes consumed between the first trial and the next; it doubles while the answer stays.
/// Where the workers lose, a trial costs their 64-128 MiB at their slower pace: with 512 MiB,
/// a checksum ran at 0.92x std over 1 GiB (two trials), with 1 GiB at 0.95x (one).
const FIRST_SETTLE: u64 = 1 << 30;
/// The longest stretch between two trials.
const MAX_SETTLE: u64 = 8 << 30;
/// How much faster, in percent, the workers must be to be kept: they cost more CPU time,
/// and a trial's phases are short. Measured first trials: blake3 and a sum of words ran
/// 45-60% faster with the workers; a checksum of multiply chains anywhere from 15% slower
/// to 35% faster, where whole runs found it no faster.
const MARGIN_PERCENT: u64 = 25;

/// Whether a reader offloads large cached reads, where a CPU is left over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offloading {
    /// Never: the consumer's thread copies every read.
    Never,
    /// Where the trial finds it faster (the reader's default).
    Tried,
    /// Always (the engine's tests, which have no clock to go by).
    #[cfg_attr(not(test), allow(dead_code))]
    Always,
}

/// Who copies the large cached reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Copier {
    /// The consumer's thread, inside the submission: the bytes land in its own cache.
    Consumer,
    /// Kernel workers (`IOSQE_ASYNC`), while the consumer works on earlier bytes.
    Workers,
}

impl Copier {
    fn other(self) -> Copier {
        match self {
            Copier::Consumer => Copier::Workers,
            Copier::Workers => Copier::Consumer,
        }
    }
}

/// A trial's state: the phase being timed, or the stretch until the next trial.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A phase of a trial, copying with `copier`; timing starts once `lead_until` bytes
    /// are consumed, and the phase ends `PHASE` bytes after. A trial times the way in use,
    /// then the other; `first` holds the first phase's rate in the second. `copying` sums
    /// the time the consumer's thread spent copying in the phase (see `copied`).
    Timing {
        copier: Copier,
        lead_until: u64,
        start: Option<(u64, Instant)>,
        first: Option<f64>,
        copying: Duration,
    },
    /// Copying with `copier` until `until` bytes are consumed.
    Settled { copier: Copier, until: u64 },
}

/// The chooser between the two copiers (see the module's docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offload {
    step: Step,
    /// The next stretch between trials.
    settle: u64,
    /// Whether the workers copied before (see `WORKERS_FIRST_LEAD`).
    workers_ran: bool,
    /// Whether a trial started and the workers were not yet asked to keep off the
    /// consumer's CPU for it (see `trial_started`).
    placing: bool,
    /// Whether the workers keep off the consumer's CPU (see `WORKERS_APART_LEAD`).
    workers_apart: bool,
}

impl Default for Offload {
    fn default() -> Self {
        Offload {
            step: Step::Settled {
                copier: Copier::Consumer,
                until: FIRST_TRIAL,
            },
            settle: FIRST_SETTLE,
            workers_ran: false,
            placing: false,
            workers_apart: false,
        }
    }
}

impl Offload {
    /// Who copies now, without moving the trial on.
    pub(super) fn copier(&self) -> Copier {
        match self.step {
            Step::Timing { copier, .. } | Step::Settled { copier, .. } => copier,
        }
    }

    /// Who copies the next large cached read, `consumed` bytes into the stream; `now` is
    /// read only where a phase starts or ends.
    pub(super) fn next(&mut self, consumed: u64, now: impl FnOnce() -> Instant) -> Copier {
        match self.step {
            Step::Settled { copier, until } if consumed >= until => {
                // The trial times the way in use first: its bytes ahead are its own.
                self.placing = true;
                self.step = Step::Timing {
                    copier,
                    lead_until: consumed,
                    start: Some((consumed, now())),
                    first: None,
                    copying: Duration::ZERO,
                };
            }
            Step::Timing {
                lead_until,
                start: None,
                ..
            } if consumed >= lead_until => self.start_timing(consumed, now()),
            Step::Timing {
                start: Some((bytes, _)),
                ..
            } if consumed >= bytes + PHASE => self.end_phase(consumed, now()),
            _ => {}
        }
        self.copier()
    }

    /// Whether a trial just started: then the workers are to be kept off the CPU the
    /// consumer runs on now, before they are timed, and `workers_apart` told whether they
    /// are. Asked once a trial (the consumer may have moved since the last).
    pub(super) fn trial_started(&mut self) -> bool {
        std::mem::take(&mut self.placing)
    }

    /// The workers keep off the consumer's CPU, or not: where they do, the trial times
    /// them after a short lead.
    pub(super) fn workers_apart(&mut self, apart: bool) {
        self.workers_apart = apart;
    }

    /// Whether the consumer's thread is copying in a timed phase: then the time its
    /// submissions take is asked for (`copied`).
    pub(super) fn times_copies(&self) -> bool {
        matches!(
            self.step,
            Step::Timing {
                copier: Copier::Consumer,
                start: Some(_),
                ..
            }
        )
    }

    /// The consumer's thread spent `time` in a submission, copying what it read.
    pub(super) fn copied(&mut self, time: Duration) {
        if let Step::Timing {
            ref mut copying, ..
        } = self.step
        {
            *copying += time;
        }
    }

    /// A large read found the file not cached: a phase timed across it would time the
    /// disk, so it starts again.
    pub(super) fn uncached(&mut self, consumed: u64) {
        let lead = self.lead(self.copier());
        if let Step::Timing {
            ref mut lead_until,
            ref mut start,
            ref mut copying,
            ..
        } = self.step
        {
            *lead_until = consumed + lead;
            *start = None;
            *copying = Duration::ZERO;
        }
    }

    fn start_timing(&mut self, consumed: u64, now: Instant) {
        if let Step::Timing { ref mut start, .. } = self.step {
            *start = Some((consumed, now));
        }
    }

    fn end_phase(&mut self, consumed: u64, now: Instant) {
        let Step::Timing {
            copier,
            start: Some((bytes, then)),
            first,
            copying,
            ..
        } = self.step
        else {
            return;
        };
        self.workers_ran |= copier == Copier::Workers;
        let elapsed = now.saturating_duration_since(then);
        let rate = rate(consumed - bytes, elapsed);
        let before = if first.is_some() {
            copier.other()
        } else {
            copier
        };
        self.step = match first {
            _ if copier == Copier::Consumer && !workers_may_win(elapsed, copying) => {
                self.settle(before, Copier::Consumer, consumed)
            }
            None => Step::Timing {
                copier: copier.other(),
                lead_until: consumed + self.lead(copier.other()),
                start: None,
                first: Some(rate),
                copying: Duration::ZERO,
            },
            Some(first) => {
                let (consumer, workers) = match copier {
                    Copier::Consumer => (rate, first),
                    Copier::Workers => (first, rate),
                };
                self.settle(before, faster(consumer, workers), consumed)
            }
        };
    }

    /// The bytes consumed before a phase of `copier` is timed.
    fn lead(&self, copier: Copier) -> u64 {
        match copier {
            Copier::Consumer => LEAD,
            Copier::Workers if self.workers_apart => WORKERS_APART_LEAD,
            Copier::Workers if self.workers_ran => WORKERS_LEAD,
            Copier::Workers => WORKERS_FIRST_LEAD,
        }
    }

    /// The stretch after a trial that started with `before` and found `chosen` faster.
    fn settle(&mut self, before: Copier, chosen: Copier, consumed: u64) -> Step {
        let settle = self.settle;
        self.settle = if chosen == before {
            (settle * 2).min(MAX_SETTLE)
        } else {
            FIRST_SETTLE
        };
        Step::Settled {
            copier: chosen,
            until: consumed + settle,
        }
    }
}

/// Bytes a second (infinite for no time at all: a phase too quick to time is fast).
fn rate(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64()
}

/// Whether the workers could be faster by the margin than the consumer's thread, which
/// took `elapsed` for a phase, `copying` of it in its copies: at best they would take all
/// of the copying off it, and the phase would take the longer of the copying and the rest.
fn workers_may_win(elapsed: Duration, copying: Duration) -> bool {
    let rest = elapsed.saturating_sub(copying);
    let best = rest.max(copying.min(elapsed));
    elapsed.as_secs_f64() > best.as_secs_f64() * (1.0 + MARGIN_PERCENT as f64 / 100.0)
}

/// The copier to keep: the workers only where they are faster by the margin.
fn faster(consumer: f64, workers: f64) -> Copier {
    if workers > consumer * (1.0 + MARGIN_PERCENT as f64 / 100.0) {
        Copier::Workers
    } else {
        Copier::Consumer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes a scripted read takes.
    const STEP: u64 = 512 << 10;

    /// How a scripted consumer runs with each copier: bytes a second, and the share of its
    /// time the consumer's thread spends copying.
    type Script = fn(Copier) -> (f64, f64);

    /// Feeds `offload` a stream consumed as `script` says, `STEP` bytes a read, up to
    /// `total` bytes, with the workers kept off the consumer's CPU at each trial where
    /// `apart`; returns the copier of every read.
    fn drive(
        offload: &mut Offload,
        clock: &mut (u64, Instant),
        total: u64,
        (script, apart): (Script, bool),
    ) -> Vec<Copier> {
        let mut copiers = Vec::new();
        while clock.0 < total {
            let now = clock.1;
            let copier = offload.next(clock.0, || now);
            if offload.trial_started() {
                offload.workers_apart(apart);
            }
            copiers.push(copier);
            let (rate, copying) = script(copier);
            let time = Duration::from_secs_f64(STEP as f64 / rate);
            if offload.times_copies() {
                offload.copied(time.mul_f64(copying));
            }
            clock.0 += STEP;
            clock.1 += time;
        }
        copiers
    }

    /// A fresh chooser fed `total` bytes as `script` says, where the backend cannot keep
    /// the workers apart; it and the copier of every read.
    fn run(total: u64, script: Script) -> (Offload, Vec<Copier>) {
        let mut offload = Offload::default();
        let copiers = drive(
            &mut offload,
            &mut (0, Instant::now()),
            total,
            (script, false),
        );
        (offload, copiers)
    }

    /// How many of `copiers` are `copier`.
    fn count(copiers: &[Copier], copier: Copier) -> usize {
        copiers.iter().filter(|&&c| c == copier).count()
    }

    fn share(copiers: &[Copier], copier: Copier) -> f64 {
        count(copiers, copier) as f64 / copiers.len() as f64
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_consumer_that_mostly_copies_never_tries_the_workers() {
        // Timed, the workers would be faster; but with 87% of the time in the copies they
        // could be 1.15x at best.
        let (_, copiers) = run(4 * GIB, |c| match c {
            Copier::Consumer => (3e9, 0.87),
            Copier::Workers => (5e9, 0.0),
        });
        assert_eq!(share(&copiers, Copier::Workers), 0.0);
    }

    #[test]
    fn a_consumer_the_workers_are_slower_for_copies_its_own_bytes() {
        let (offload, copiers) = run(4 * GIB, |c| match c {
            Copier::Consumer => (3e9, 0.6),
            Copier::Workers => (2.5e9, 0.0),
        });
        assert_eq!(offload.copier(), Copier::Consumer);
        // The trials' leads and phases only: 128 MiB in the first, 64 MiB in each of the
        // next two (1 GiB, then 2 GiB later).
        assert!(share(&copiers, Copier::Workers) < 0.08, "trials only");
    }

    #[test]
    fn a_heavy_consumer_hands_the_copies_to_the_workers() {
        let (offload, copiers) = run(4 * GIB, |c| match c {
            Copier::Consumer => (2e9, 0.4),
            Copier::Workers => (2.8e9, 0.0),
        });
        assert_eq!(offload.copier(), Copier::Workers);
        assert!(share(&copiers, Copier::Consumer) < 0.05, "trials only");
    }

    #[test]
    fn workers_kept_apart_are_timed_after_a_short_lead() {
        // Slower for this consumer: a trial costs the bytes they copy before it ends.
        let slower: Script = |c| match c {
            Copier::Consumer => (3e9, 0.5),
            Copier::Workers => (2e9, 0.0),
        };
        let workers = |apart| {
            let mut offload = Offload::default();
            let copiers = drive(&mut offload, &mut (0, Instant::now()), GIB, (slower, apart));
            assert_eq!(offload.copier(), Copier::Consumer, "apart: {apart}");
            count(&copiers, Copier::Workers) as u64 * STEP
        };
        assert_eq!(workers(true), WORKERS_APART_LEAD + PHASE);
        assert_eq!(workers(false), WORKERS_FIRST_LEAD + PHASE);
    }

    #[test]
    fn workers_barely_faster_are_not_worth_their_cpu() {
        let (offload, _) = run(GIB, |c| match c {
            Copier::Consumer => (2e9, 0.5),
            Copier::Workers => (2.1e9, 0.0),
        });
        assert_eq!(offload.copier(), Copier::Consumer);
    }

    #[test]
    fn a_consumer_that_changes_is_found_out_at_a_later_trial() {
        let mut offload = Offload::default();
        let mut clock = (0, Instant::now());
        let slower: Script = |c| match c {
            Copier::Consumer => (3e9, 0.9),
            Copier::Workers => (2e9, 0.0),
        };
        drive(&mut offload, &mut clock, GIB, (slower, false));
        assert_eq!(offload.copier(), Copier::Consumer);
        // The trials back off, but never beyond `MAX_SETTLE`.
        let faster: Script = |c| match c {
            Copier::Consumer => (2e9, 0.4),
            Copier::Workers => (3e9, 0.0),
        };
        let copiers = drive(
            &mut offload,
            &mut clock,
            GIB + 2 * MAX_SETTLE,
            (faster, false),
        );
        assert_eq!(offload.copier(), Copier::Workers);
        assert!(copiers.contains(&Copier::Workers));
    }

    #[test]
    fn time_spent_on_an_uncached_file_is_not_counted() {
        let mut offload = Offload::default();
        let start = Instant::now();
        assert_eq!(offload.next(0, || start), Copier::Consumer);
        // The trial starts, timing the consumer's thread ...
        offload.next(FIRST_TRIAL, || start);
        // ... half a phase in, a read finds the disk and the consumer waits a minute for it.
        offload.uncached(FIRST_TRIAL + PHASE / 2);
        let later = start + Duration::from_secs(60);
        let restart = FIRST_TRIAL + PHASE / 2 + LEAD;
        offload.next(restart, || later);
        // Timed from there, the consumer takes a phase in 8 ms, 3 ms of it copying ...
        offload.copied(Duration::from_millis(3));
        let end = later + Duration::from_millis(8);
        assert_eq!(offload.next(restart + PHASE, || end), Copier::Workers);
        // ... and the workers a phase in 6 ms: they are kept.
        let lead_end = restart + PHASE + WORKERS_FIRST_LEAD;
        offload.next(lead_end, || end);
        let copier = offload.next(lead_end + PHASE, || end + Duration::from_millis(6));
        assert_eq!(copier, Copier::Workers);
    }
}
