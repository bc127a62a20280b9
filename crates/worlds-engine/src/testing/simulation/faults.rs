//! The faults a schedule of the simulation may inject.

use crate::duration::{Dur, IntoDuration};

/// The faults a schedule may inject. [`Faults::default`] turns every kind on, at rates that
/// make most schedules meet several; [`Faults::none`] turns them all off.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Faults {
    /// Most crashes (with a restart) per schedule; each schedule draws 0 to this many, at
    /// random writes, each just before or just after its write lands. Default 3.
    pub crashes: u32,
    /// Chance that a write fails with an I/O error (half of those land anyway: the error came
    /// after the commit). Default 0.02.
    pub write_error_rate: f64,
    /// Most scheduler turns a store call is held back (a slow disk), reordering tasks.
    /// Default 4.
    pub max_delay_turns: u32,
    /// Chance, at each quiet point, that a worker stops heartbeating (its task is handed to
    /// another once the liveness monitor notices). Default 0.05.
    pub freeze_worker_rate: f64,
    /// Chance, at each quiet point, that the clock jumps forward by up to
    /// [`max_clock_jump`](Self::max_clock_jump). Default 0.05.
    pub clock_jump_rate: f64,
    /// The longest clock jump. Default 10 minutes.
    pub max_clock_jump: Dur,
    /// Hook payloads are sent from the start (before their hook exists, retried until it does)
    /// or after a random delay of up to this long. Default 1 hour.
    pub max_delivery_delay: Dur,
    /// Send each hook payload a second time after it was accepted. Turn it off for hooks that
    /// take many payloads, where a second one is meant to count. Default true.
    pub duplicate_deliveries: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            crashes: 3,
            write_error_rate: 0.02,
            max_delay_turns: 4,
            freeze_worker_rate: 0.05,
            clock_jump_rate: 0.05,
            max_clock_jump: Dur::from_millis(10 * 60_000),
            max_delivery_delay: Dur::from_millis(3_600_000),
            duplicate_deliveries: true,
        }
    }
}

impl Faults {
    /// No faults at all: how the reference run is made.
    pub fn none() -> Self {
        Faults {
            crashes: 0,
            write_error_rate: 0.0,
            max_delay_turns: 0,
            freeze_worker_rate: 0.0,
            clock_jump_rate: 0.0,
            max_clock_jump: Dur::ZERO,
            max_delivery_delay: Dur::ZERO,
            duplicate_deliveries: false,
        }
    }

    /// Sets [`crashes`](Self::crashes).
    pub fn crashes(mut self, most: u32) -> Self {
        self.crashes = most;
        self
    }

    /// Sets [`write_error_rate`](Self::write_error_rate).
    pub fn write_error_rate(mut self, rate: f64) -> Self {
        self.write_error_rate = rate;
        self
    }

    /// Sets [`freeze_worker_rate`](Self::freeze_worker_rate).
    pub fn freeze_worker_rate(mut self, rate: f64) -> Self {
        self.freeze_worker_rate = rate;
        self
    }

    /// Sets [`clock_jump_rate`](Self::clock_jump_rate) and [`max_clock_jump`](Self::max_clock_jump).
    pub fn clock_jumps(mut self, rate: f64, most: impl IntoDuration) -> Self {
        self.clock_jump_rate = rate;
        self.max_clock_jump = Dur(most.into_duration().unwrap_or_default());
        self
    }

    /// Sets [`duplicate_deliveries`](Self::duplicate_deliveries).
    pub fn duplicate_deliveries(mut self, on: bool) -> Self {
        self.duplicate_deliveries = on;
        self
    }
}
