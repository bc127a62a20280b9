//! The shape of one log entry, its level and its category, and what a query asks for.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
pub use crate::config::{LogLevel, UnknownName};

/// Which part of the system an entry is about.
///
/// An event's category is its `category` field when it has one naming a category; otherwise
/// it follows from where the event comes from (see [`LogCategory::of_target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogCategory {
    /// The world as a whole: start, stop, configuration.
    World,
    /// Workers: scaling, liveness.
    Worker,
    /// Runs and their workflow code.
    Workflow,
    /// Steps and their activity code.
    Activity,
    /// Everything else: storage, timers, the process.
    System,
}

impl LogCategory {
    /// All categories.
    pub const ALL: [LogCategory; 5] = [
        LogCategory::World,
        LogCategory::Worker,
        LogCategory::Workflow,
        LogCategory::Activity,
        LogCategory::System,
    ];

    /// The lowercase name written in entries (`worker`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogCategory::World => "world",
            LogCategory::Worker => "worker",
            LogCategory::Workflow => "workflow",
            LogCategory::Activity => "activity",
            LogCategory::System => "system",
        }
    }

    /// The category of an engine event from its tracing target (its module path), or `None`
    /// for a target outside the engine.
    ///
    /// ```
    /// use worlds_engine::telemetry::logs::LogCategory;
    /// let of = LogCategory::of_target;
    /// assert_eq!(of("worlds_engine::worker::autoscale"), Some(LogCategory::Worker));
    /// assert_eq!(of("worlds_engine::engine::executor"), Some(LogCategory::Workflow));
    /// assert_eq!(of("worlds_engine::store::hybrid"), Some(LogCategory::System));
    /// assert_eq!(of("my_app"), None);
    /// ```
    pub fn of_target(target: &str) -> Option<LogCategory> {
        let path = target
            .strip_prefix("worlds_engine")
            .filter(|rest| rest.is_empty() || rest.starts_with("::"))?;
        let mut parts = path.split("::").skip(1);
        let category = match (parts.next(), parts.next()) {
            (Some("world" | "runtime" | "testing"), _) => LogCategory::World,
            (Some("worker"), _) => LogCategory::Worker,
            (Some("engine"), Some("activity" | "steps")) => LogCategory::Activity,
            (Some("engine"), Some("timers" | "sharing")) => LogCategory::System,
            (Some("engine" | "hooks" | "streams" | "fetch" | "current"), _) => {
                LogCategory::Workflow
            }
            _ => LogCategory::System,
        };
        Some(category)
    }
}

impl fmt::Display for LogCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogCategory {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        LogCategory::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(text))
            .ok_or_else(|| UnknownName {
                what: "log category",
                given: text.to_owned(),
                expected: "world, worker, workflow, activity, system",
            })
    }
}

/// One log entry: one line of a log file.
///
/// ```
/// use worlds_engine::telemetry::logs::{LogCategory, LogEntry, LogLevel};
/// let line = r#"{"timestamp":1767225600000,"level":"warn","category":"worker","message":"slow"}"#;
/// let entry: LogEntry = serde_json::from_str(line).unwrap();
/// assert_eq!((entry.level, entry.category), (LogLevel::Warn, LogCategory::Worker));
/// assert!(entry.metadata.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// When, in ms since the Unix epoch, on the world's clock.
    pub timestamp: Millis,
    /// How severe.
    pub level: LogLevel,
    /// What part of the system it is about.
    pub category: LogCategory,
    /// The event's message.
    pub message: String,
    /// The event's other fields (`run_id`, `error`…), numbers and booleans kept as such.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// What [`read_logs`](super::read_logs) and `WorldLogs::query` return. Every filter is
/// optional; an empty query returns every entry.
///
/// ```
/// use worlds_engine::telemetry::logs::{LogCategory, LogLevel, LogQuery};
/// let recent_worker_problems = LogQuery::new()
///     .category(LogCategory::Worker)
///     .level(LogLevel::Warn)
///     .since(1_767_225_600_000)
///     .limit(50);
/// assert_eq!(recent_worker_problems.limit, Some(50));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogQuery {
    /// Only entries of this category.
    pub category: Option<LogCategory>,
    /// Only entries at this level or more severe (`warn` gives warnings and errors).
    pub level: Option<LogLevel>,
    /// Only entries at or after this time (ms since the Unix epoch).
    pub since: Option<Millis>,
    /// At most this many entries: the most recent ones.
    pub limit: Option<usize>,
}

impl LogQuery {
    /// A query for every entry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only entries of this category.
    pub fn category(mut self, category: LogCategory) -> Self {
        self.category = Some(category);
        self
    }

    /// Only entries at this level or more severe.
    pub fn level(mut self, level: LogLevel) -> Self {
        self.level = Some(level);
        self
    }

    /// Only entries at or after `since` (ms since the Unix epoch).
    pub fn since(mut self, since: Millis) -> Self {
        self.since = Some(since);
        self
    }

    /// At most `limit` entries, the most recent ones.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// True if `entry` passes every filter but the limit.
    pub fn matches(&self, entry: &LogEntry) -> bool {
        self.category.is_none_or(|c| entry.category == c)
            && self.level.is_none_or(|l| entry.level >= l)
            && self.since.is_none_or(|s| entry.timestamp >= s)
    }
}
