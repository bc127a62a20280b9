//! Records a world writes to its own log files whatever subscriber the application installed.
//!
//! The world's lifecycle (a run created, failed, quarantined, resumed after a restart; the
//! world started, with its directory) must be findable in `logs/` of a durable world even when
//! the application never installed [`World::logs`](crate::WorldLogs::layer): that is what
//! someone reads when a restarted program seems to do nothing. So these records are queued on
//! the world's files directly, and then also emitted as ordinary tracing events for the
//! application's subscriber (its console, say). The world layers skip those events, since the
//! entry is already written: installing the layer does not double them.

use std::cell::Cell;

use serde::Serialize;
use serde_json::Value;

thread_local! {
    /// Set while a directly written record is emitted as a tracing event.
    static WRITTEN: Cell<bool> = const { Cell::new(false) };
}

/// Runs `emit` (which emits one tracing event) marked as already written, so that world
/// layers leave it out.
pub(crate) fn already_written(emit: impl FnOnce()) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            WRITTEN.with(|w| w.set(false));
        }
    }
    WRITTEN.with(|w| w.set(true));
    let _reset = Reset;
    emit();
}

/// True while the event being dispatched is one whose entry was written directly.
pub(crate) fn is_already_written() -> bool {
    WRITTEN.with(Cell::get)
}

/// A field's value as written in an entry's metadata.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Writes one record to a world's log files (see the module documentation) and emits it as a
/// tracing event: `world_log!(logs, INFO, Workflow, "run created", run_id = id, ...)`. The
/// level is a [`tracing::Level`] constant name, the category a
/// [`LogCategory`](super::LogCategory) variant; each value must be `Serialize` (for the entry)
/// and `Display` (for the event).
macro_rules! world_log {
    ($logs:expr, $level:ident, $category:ident, $message:expr $(, $key:ident = $value:expr)* $(,)?) => {{
        let logs: &$crate::telemetry::logs::Logs = &$logs;
        let message: &str = &$message;
        $( let $key = &$value; )*
        let level = $crate::telemetry::logs::LogLevel::from_tracing(::tracing::Level::$level);
        let category = $crate::telemetry::logs::LogCategory::$category;
        if logs.takes(level) {
            #[allow(unused_mut)]
            let mut metadata = ::serde_json::Map::new();
            $( metadata.insert(
                stringify!($key).to_owned(),
                $crate::telemetry::logs::direct::to_json($key),
            ); )*
            logs.record(level, category, message.to_owned(), metadata);
        }
        $crate::telemetry::logs::direct::already_written(|| {
            ::tracing::event!(
                ::tracing::Level::$level,
                category = category.as_str(),
                $( $key = %$key, )*
                "{}",
                message
            );
        });
    }};
}
pub(crate) use world_log;
