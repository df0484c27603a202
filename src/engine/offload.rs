//! Whether large reads of cached files are copied by kernel workers or on the consumer's
//! thread, found by timing both ways on the consumer at hand.
//!
//! Handing a copy out of the page cache to a kernel worker overlaps it with the consumer's
//! work, but it costs wake-ups on both sides and leaves the bytes in another CPU's cache.
//! Whether that pays depends on the consumer, and not simply on how much work it does per
//! byte. Measured on 1 GiB of 4 KiB-4 MiB files in the page cache, one reader on 2 CPUs,
//! against std's `BufReader` of 1 MiB (7-11 rounds each): blake3 ran at 1.43-1.52x with
//! workers and 0.99x without; a sum of words at 1.10-1.41x and 0.99-1.00x; but a checksum of
//! multiply chains at 0.75-0.9x with workers (the build before, which always used them where
//! a CPU was left over) and 0.99x without. So the engine measures: the bytes consumed per
//! second over a stretch copied each way, keeping the faster way and trying the other again
//! now and then (less and less often while the answer stays the same).

use std::time::{Duration, Instant};

/// Bytes consumed, in one way, before a phase is timed: the bytes the other way read
/// ahead (the window of cached reads) are consumed first, so they do not count.
const LEAD: u64 = 4 << 20;
/// The same before the workers' phase: they take longer to reach their pace (the kernel
/// starts them, and the scheduler moves them off the consumer's CPU).
const WORKERS_LEAD: u64 = 16 << 20;
/// Bytes consumed in a timed phase.
const PHASE: u64 = 16 << 20;
/// Bytes consumed before the first trial: the first milliseconds of a reader run slower
/// either way (its pool's pages touched the first time, the kernel's workers started).
/// Until then the workers copy: they are timed first, after running that long.
const FIRST_TRIAL: u64 = 48 << 20;
/// Bytes consumed between the first trial and the next; it doubles while the answer stays.
const FIRST_SETTLE: u64 = 512 << 20;
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
    /// then the other; `first` holds the first phase's rate in the second.
    Timing {
        copier: Copier,
        lead_until: u64,
        start: Option<(u64, Instant)>,
        first: Option<f64>,
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
}

impl Default for Offload {
    fn default() -> Self {
        Offload {
            step: Step::Settled {
                copier: Copier::Workers,
                until: FIRST_TRIAL,
            },
            settle: FIRST_SETTLE,
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
                self.step = Step::Timing {
                    copier,
                    lead_until: consumed,
                    start: Some((consumed, now())),
                    first: None,
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

    /// A large read found the file not cached: a phase timed across it would time the
    /// disk, so it starts again.
    pub(super) fn uncached(&mut self, consumed: u64) {
        if let Step::Timing {
            copier,
            ref mut lead_until,
            ref mut start,
            ..
        } = self.step
        {
            *lead_until = consumed + lead(copier);
            *start = None;
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
            ..
        } = self.step
        else {
            return;
        };
        let rate = rate(consumed - bytes, now.saturating_duration_since(then));
        self.step = match first {
            None => Step::Timing {
                copier: copier.other(),
                lead_until: consumed + lead(copier.other()),
                start: None,
                first: Some(rate),
            },
            Some(first) => {
                let (consumer, workers) = match copier {
                    Copier::Consumer => (rate, first),
                    Copier::Workers => (first, rate),
                };
                self.settle(copier.other(), faster(consumer, workers), consumed)
            }
        };
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

/// The bytes consumed before a phase of `copier` is timed.
fn lead(copier: Copier) -> u64 {
    match copier {
        Copier::Consumer => LEAD,
        Copier::Workers => WORKERS_LEAD,
    }
}

/// Bytes a second (infinite for no time at all: a phase too quick to time is fast).
fn rate(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64()
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

    /// Feeds `offload` a stream consumed at `rate(copier)` bytes a second, `step` bytes a
    /// read, up to `total` bytes; returns the copier of every read.
    fn drive(
        offload: &mut Offload,
        clock: &mut (u64, Instant),
        total: u64,
        rate: impl Fn(Copier) -> f64,
    ) -> Vec<Copier> {
        const STEP: u64 = 512 << 10;
        let mut copiers = Vec::new();
        while clock.0 < total {
            let now = clock.1;
            let copier = offload.next(clock.0, || now);
            copiers.push(copier);
            clock.0 += STEP;
            clock.1 += Duration::from_secs_f64(STEP as f64 / rate(copier));
        }
        copiers
    }

    fn share(copiers: &[Copier], copier: Copier) -> f64 {
        copiers.iter().filter(|&&c| c == copier).count() as f64 / copiers.len() as f64
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_light_consumer_copies_its_own_bytes() {
        let mut offload = Offload::default();
        let mut clock = (0, Instant::now());
        let copiers = drive(&mut offload, &mut clock, 4 * GIB, |c| match c {
            Copier::Consumer => 3e9,
            Copier::Workers => 2.5e9,
        });
        assert_eq!(offload.copier(), Copier::Consumer);
        assert!(
            share(&copiers, Copier::Workers) < 0.05,
            "the start and trials only"
        );
    }

    #[test]
    fn a_heavy_consumer_hands_the_copies_to_the_workers() {
        let mut offload = Offload::default();
        let mut clock = (0, Instant::now());
        let copiers = drive(&mut offload, &mut clock, 4 * GIB, |c| match c {
            Copier::Consumer => 2e9,
            Copier::Workers => 2.8e9,
        });
        assert_eq!(offload.copier(), Copier::Workers);
        assert!(share(&copiers, Copier::Consumer) < 0.05, "trials only");
    }

    #[test]
    fn workers_barely_faster_are_not_worth_their_cpu() {
        let mut offload = Offload::default();
        let mut clock = (0, Instant::now());
        drive(&mut offload, &mut clock, GIB, |c| match c {
            Copier::Consumer => 2e9,
            Copier::Workers => 2.1e9,
        });
        assert_eq!(offload.copier(), Copier::Consumer);
    }

    #[test]
    fn a_consumer_that_changes_is_found_out_at_a_later_trial() {
        let mut offload = Offload::default();
        let mut clock = (0, Instant::now());
        drive(&mut offload, &mut clock, GIB, |c| match c {
            Copier::Consumer => 3e9,
            Copier::Workers => 2e9,
        });
        assert_eq!(offload.copier(), Copier::Consumer);
        // The trials back off, but never beyond `MAX_SETTLE`.
        let copiers = drive(
            &mut offload,
            &mut clock,
            GIB + 2 * MAX_SETTLE,
            |c| match c {
                Copier::Consumer => 2e9,
                Copier::Workers => 3e9,
            },
        );
        assert_eq!(offload.copier(), Copier::Workers);
        assert!(copiers.contains(&Copier::Workers));
    }

    #[test]
    fn time_spent_on_an_uncached_file_is_not_counted() {
        let mut offload = Offload::default();
        let start = Instant::now();
        assert_eq!(offload.next(0, || start), Copier::Workers);
        // The trial starts, timing the workers ...
        offload.next(FIRST_TRIAL, || start);
        // ... half a phase in, a read finds the disk and the consumer waits a minute for it.
        offload.uncached(FIRST_TRIAL + PHASE / 2);
        let later = start + Duration::from_secs(60);
        let restart = FIRST_TRIAL + PHASE / 2 + WORKERS_LEAD;
        offload.next(restart, || later);
        // Timed from there, the workers run at 16 MiB in 6 ms ...
        let end = later + Duration::from_millis(6);
        assert_eq!(offload.next(restart + PHASE, || end), Copier::Consumer);
        // ... and the consumer's own copies at 16 MiB in 8 ms: the workers are kept.
        let lead_end = restart + PHASE + LEAD;
        offload.next(lead_end, || end);
        let copier = offload.next(lead_end + PHASE, || end + Duration::from_millis(8));
        assert_eq!(copier, Copier::Workers);
    }
}
