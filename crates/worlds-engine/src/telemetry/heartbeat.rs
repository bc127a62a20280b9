//! Heartbeat entries: the last sign of life of workers and running activity attempts.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

/// What a [`HeartbeatEntry`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeartbeatKind {
    /// A worker. Workers beat every `heartbeat_interval`, idle or busy, and when they take or
    /// finish a task.
    Worker,
    /// A running activity attempt. Its beats are the calls to
    /// [`ActivityContext::heartbeat`](crate::ActivityContext::heartbeat), as recorded in the
    /// run's history (at most once per `heartbeat_interval` unless the message changes); the
    /// attempt's start counts as its first beat.
    Activity,
}

/// The last sign of life of one worker or one running activity attempt.
///
/// ```
/// use worlds_engine::telemetry::{HeartbeatEntry, HeartbeatKind};
/// let entry = HeartbeatEntry {
///     id: "worker-1".into(),
///     kind: HeartbeatKind::Worker,
///     last_beat: 1_000,
///     message: None,
///     dead: false,
/// };
/// assert!(!entry.dead);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatEntry {
    /// The worker id (`worker-3`) or the activity's step id (`step_…`).
    pub id: String,
    /// Worker or activity.
    pub kind: HeartbeatKind,
    /// When it last beat, in ms since the Unix epoch.
    pub last_beat: Millis,
    /// For a worker, the task it is executing; for an activity, its last heartbeat message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// True when its silence has exceeded its timeout: for a worker, the world's
    /// `heartbeat_timeout` (workers the liveness monitor has declared dead and replaced are
    /// always listed as dead); for an activity, its own `heartbeat_timeout` option (an attempt
    /// without one is never reported dead here).
    pub dead: bool,
}
