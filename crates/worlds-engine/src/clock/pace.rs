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
//! So a batch that took 4 ms at a 5 % share is followed by 76 ms of rest, and the runs the
//! world serves meanwhile find the store (its connections, its disk, the CPU) free nineteen
//! twentieths of the time. The work's cost adapts the pause: a slow disk gets longer rests, a
//! fast one shorter.
//!
//! A sweep that has fallen behind takes a larger share ([`catch_up`]): the share is multiplied
//! by the whole sweep intervals by which the oldest run it removes is overdue,
//!
//! ```text
//! share' = min(100, share × max(1, ⌊overdue / interval⌋))
//! ```
//!
//! so a world that ends runs faster than its share removes them gets a sweep that works
//! harder the further it falls behind, instead of a backlog that grows for ever, while a sweep
//! that keeps up (nothing overdue by a whole interval more than its predecessor left) stays at
//! its share.
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

/// The share of a sweep at `share` percent whose oldest run to remove is `overdue` ms past
/// the time the policy let it go, sweeping once every `interval` ms (see the module docs).
pub(crate) fn catch_up(share: u8, overdue: i64, interval: i64) -> u8 {
    let behind = (overdue.max(0) / interval.max(1)).max(1);
    let share = i64::from(share.clamp(1, 100));
    u8::try_from(share.saturating_mul(behind).min(100)).unwrap_or(100)
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

    #[test]
    fn a_sweep_behind_by_whole_intervals_takes_that_many_shares() {
        const HOUR: i64 = 3_600_000;
        for (share, overdue, interval, taken) in [
            (5, 0, HOUR, 5),             // nothing overdue
            (5, HOUR - 1, HOUR, 5),      // within its interval: keeping up
            (5, HOUR, HOUR, 5),          // one interval: what each sweep finds
            (5, 2 * HOUR, HOUR, 10),     // a sweep behind by two
            (5, 7 * HOUR + 5, HOUR, 35), // seven
            (5, 24 * HOUR, HOUR, 100),   // a day behind: at most everything
            (25, 5 * HOUR, HOUR, 100),   // capped
            (5, -HOUR, HOUR, 5),         // a clock step back: as if on time
            (5, i64::MAX, 1, 100),       // no overflow
            (0, 3 * HOUR, HOUR, 3),      // a share clamped to 1 %
            (5, 3 * HOUR, 0, 100),       // an interval of zero counts as 1 ms
        ] {
            assert_eq!(
                catch_up(share, overdue, interval),
                taken,
                "share {share}, overdue {overdue}, interval {interval}"
            );
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
