//! Console time stamps on the world's clock, for the ready-made subscriber of
//! [`World::logs`](crate::WorldLogs::init).

use std::fmt;
use std::sync::Arc;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use super::date;
use crate::clock::Clock;

/// A [`FormatTime`] for tracing-subscriber's `fmt` layer that prints a clock's time (RFC 3339,
/// UTC, milliseconds), so console lines agree with the log files, virtual time included.
#[derive(Clone)]
pub struct ClockTime {
    clock: Arc<dyn Clock>,
}

impl ClockTime {
    /// Time from `clock` (a world's: [`World::clock`](crate::World::clock)).
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }
}

impl fmt::Debug for ClockTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClockTime")
            .field("now_ms", &self.clock.now_ms())
            .finish()
    }
}

impl FormatTime for ClockTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        w.write_str(&date::rfc3339(self.clock.now_ms()))
    }
}
