//! A clock cheap enough to read for every file: the kernel's coarse monotonic clock.
#![cfg_attr(target_os = "linux", allow(unsafe_code))]

use std::ops::Add;
use std::time::Duration;

/// An instant of a monotonic clock that moves in steps of the kernel's tick (1-10 ms), for
/// limits of tens of milliseconds or more that are checked for every file. On Linux it is
/// `CLOCK_MONOTONIC_COARSE`, a read of what the kernel last stored at a tick: about a fifth
/// of what `Instant::now` costs, which reads the CPU's clock as well. Elsewhere it is
/// `Instant`'s clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct CoarseInstant(Duration);

impl CoarseInstant {
    /// The clock now.
    pub(crate) fn now() -> Self {
        CoarseInstant(since_start())
    }
}

impl Add<Duration> for CoarseInstant {
    type Output = CoarseInstant;

    fn add(self, later: Duration) -> CoarseInstant {
        CoarseInstant(self.0.saturating_add(later))
    }
}

/// The coarse clock as a time since an arbitrary start (the kernel's boot).
#[cfg(target_os = "linux")]
fn since_start() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a `timespec` of ours, valid to write for the call; the clock exists
    // on every Linux since 2.6.32, and the call fails only for an unknown clock or a bad
    // pointer, in which case `now` stays at zero: the clock then stands still, which only
    // keeps a handle or a batch for longer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    let nanos = u32::try_from(now.tv_nsec).unwrap_or(0);
    Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), nanos)
}

/// `Instant`'s clock as a time since the first reading in the process.
#[cfg(not(target_os = "linux"))]
fn since_start() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_back_and_keeps_up_with_a_sleep_within_a_tick() {
        let start = CoarseInstant::now();
        std::thread::sleep(Duration::from_millis(60));
        let later = CoarseInstant::now();
        // The sleep lasted 60 ms at least; the coarse clock lags the true time by at most a
        // tick (10 ms at the slowest, HZ=100), at both readings.
        assert!(
            later >= start + Duration::from_millis(40),
            "{start:?} -> {later:?}"
        );
        assert!(CoarseInstant::now() >= later);
    }
}
