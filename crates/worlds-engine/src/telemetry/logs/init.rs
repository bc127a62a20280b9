//! A ready-made subscriber for programs that set up no tracing of their own.

use std::fmt;
use std::sync::Arc;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use super::date;
use crate::clock::Clock;
use crate::world::World;

/// Installs a process-wide subscriber that writes `world`'s events to its log files and, if
/// [`LogsConfig::console`](super::LogsConfig::console), every event at or above the world's
/// minimum level to standard error, time-stamped by the world's clock.
///
/// Returns false, and installs nothing, if the process already has a global subscriber: add
/// [`World::log_layer`] to that one instead. Call it before [`World::start`], so that the
/// world's workers run inside its span from the beginning.
///
/// ```no_run
/// use worlds_engine::prelude::*;
/// # fn demo() -> Result<(), WorldError> {
/// let world = World::new(WorldConfig::default())?;
/// worlds_engine::telemetry::init_logging(&world);
/// # Ok(()) }
/// ```
pub fn init_logging(world: &World) -> bool {
    let logs = world.logs();
    let console = logs.config().console.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_timer(ClockTime::new(logs.clock().clone()))
            .with_filter(logs.config().level.to_filter())
    });
    let subscriber = tracing_subscriber::registry()
        .with(console)
        .with(world.log_layer());
    tracing::subscriber::set_global_default(subscriber).is_ok()
}

/// A [`FormatTime`] for tracing-subscriber's `fmt` layer that prints a clock's time (RFC 3339,
/// UTC, milliseconds), so console lines agree with the log files, virtual time included.
#[derive(Clone)]
pub struct ClockTime {
    clock: Arc<dyn Clock>,
}

impl ClockTime {
    /// Time from `clock` (a world's: [`World::clock`]).
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
