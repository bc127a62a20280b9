//! Pacing of background work: a sweep that takes at most a share of the time.
//!
//! After each piece of work, [`Pace::after`] waits long enough that the work took at most
//! `share` of the time from its start to the end of the wait:
//!
//! ```text
//! pause = spent × (100 − share) / share      (share in percent, 1..=100)
//!       ≤ MAX_PAUSE
//! ```
//!
//! So a batch that took 4 ms at a 25 % share is followed by 12 ms of rest, and the runs the
//! world serves meanwhile find the store (its connections, its disk, the CPU) free three
//! quarters of the time. The work's cost adapts the pause: a slow disk gets longer rests, a
//! fast one shorter.
//!
//! Unlike everything else in the engine, pacing measures and waits in real time, not on the
//! world's [`Clock`](super::Clock): it shares real resources, which a virtual clock does not
//! model, and what it changes is only how fast background work goes, never what a run does
//! or when its timers fire. Its pauses are proportional to real work done, so a test on
//! virtual time waits no longer than the work itself took.

use std::time::{Duration, Instant};

/// The longest pause after one piece of work, whatever it cost: a piece stalled by a lock
/// does not stop the work for minutes after it.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Keeps background work to a share of the time (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// Percent of the time the work may take, 1..=100.
    share: u8,
}

impl Pace {
    /// Work that takes at most `share` percent of the time (clamped to 1..=100; 100 never
    /// waits).
    pub(crate) fn new(share: u8) -> Self {
        Self {
            share: share.clamp(1, 100),
        }
    }

    /// Starts timing a piece of work.
    pub(crate) fn start(&self) -> Instant {
        Instant::now()
    }

    /// Waits after a piece of work started at `started` (see [`pause`]).
    pub(crate) async fn after(&self, started: Instant) {
        let wait = pause(self.share, started.elapsed());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The rest after work that took `spent`, at `share` percent (1..=100).
pub(crate) fn pause(share: u8, spent: Duration) -> Duration {
    let share = u32::from(share.clamp(1, 100));
    (spent * (100 - share) / share).min(MAX_PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_keeps_the_work_to_its_share() {
        let ms = Duration::from_millis;
        for (share, spent, rest) in [
            (100, ms(40), ms(0)),
            (50, ms(40), ms(40)),
            (25, ms(4), ms(12)),
            (20, ms(10), ms(40)),
            (1, ms(10), ms(990)),
            (0, ms(10), ms(990)), // clamped to 1 %
            (25, Duration::ZERO, Duration::ZERO),
            (10, ms(1_000), MAX_PAUSE), // capped
        ] {
            assert_eq!(pause(share, spent), rest, "share {share}, spent {spent:?}");
        }
    }

    #[tokio::test]
    async fn full_share_never_waits_and_a_share_waits_about_its_rest() {
        let full = Pace::new(100);
        let started = full.start();
        full.after(started).await;
        assert!(started.elapsed() < Duration::from_millis(50));

        let half = Pace::new(50);
        let started = half.start() - Duration::from_millis(20);
        let before = Instant::now();
        half.after(started).await;
        assert!(before.elapsed() >= Duration::from_millis(20));
    }
}
