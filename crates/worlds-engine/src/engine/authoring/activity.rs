//! The step's context: [`ActivityContext`], what step code sees of its own attempt, and the
//! function types of step code.
//!
//! The runtime runs the attempt (`engine/activity.rs`) and hands the context what it records
//! through: a [`BeatSink`] for heartbeats and a [`StreamSink`] for stream writes, traits the
//! runtime implements, so this side names nothing of it.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Millis};
use crate::error::WorldError;
use crate::model::stream::StreamChunk;
use crate::payload::Payload;

use super::errors::StepError;

/// What a step's code returns.
pub(crate) type ActivityFuture = BoxFuture<'static, Result<Payload, StepError>>;
/// Step code: a registered activity's handler, or a named step's closure.
pub(crate) type ActivityFn = Arc<dyn Fn(ActivityContext, Payload) -> ActivityFuture + Send + Sync>;

/// Where a step attempt's heartbeats are recorded, in the order they were sent (the runtime's
/// `BeatLog`).
pub(crate) trait BeatSink: Send + Sync {
    /// Queues a beat (with its message, if any) to be recorded.
    fn record(&self, message: Option<String>);

    /// Waits until every beat queued so far is recorded, and stops recording.
    fn flush(&self) -> BoxFuture<'_, ()>;
}

/// Where step code's stream writers write (the runtime's `Streams`).
pub(crate) trait StepStreams: Send + Sync {
    /// Appends a chunk to stream `name` of run `run_id`, and returns it as stored.
    fn write<'a>(
        &'a self,
        run_id: &'a str,
        name: &'a str,
        data: Bytes,
    ) -> BoxFuture<'a, Result<StreamChunk, WorldError>>;

    /// Closes stream `name` of run `run_id`.
    fn close<'a>(&'a self, run_id: &'a str, name: &'a str)
        -> BoxFuture<'a, Result<(), WorldError>>;
}

/// What a step's writers reach the store through: the streams, held weakly, and the run.
#[derive(Clone)]
pub(crate) struct StreamSink {
    pub(crate) streams: Weak<dyn StepStreams>,
    pub(crate) run_id: Arc<str>,
}

/// What the runtime gives the context of one attempt it runs.
pub(crate) struct StepSetup {
    pub(crate) activity_id: String,
    pub(crate) workflow_id: String,
    pub(crate) run_id: String,
    pub(crate) name: String,
    pub(crate) attempt: u32,
    pub(crate) cancel: CancellationToken,
    pub(crate) clock: Arc<dyn Clock>,
    /// Where beats are recorded.
    pub(crate) record: Box<dyn BeatSink>,
    /// The least time between two recorded beats with the same message.
    pub(crate) record_every: Millis,
    pub(crate) hooks: Arc<crate::hooks::HookKit>,
    pub(crate) resources: Arc<crate::resources::Resources>,
    pub(crate) streams: StreamSink,
}

/// What an activity can see and do about its own execution.
///
/// ```
/// use worlds_engine::prelude::*;
/// let export = activity("export", |ctx: ActivityContext, rows: u32| async move {
///     for done in 0..rows {
///         if ctx.is_cancelled() {
///             return Err(StepError::fatal("cancelled"));
///         }
///         ctx.heartbeat(format!("{done}/{rows}"));
///     }
///     Ok::<_, StepError>(rows)
/// });
/// # let _ = export;
/// ```
#[derive(Clone)]
pub struct ActivityContext {
    inner: Arc<ActivityInner>,
}

struct ActivityInner {
    activity_id: String,
    workflow_id: String,
    run_id: String,
    name: String,
    attempt: u32,
    cancel: CancellationToken,
    clock: Arc<dyn Clock>,
    beat: Mutex<Beat>,
    /// Where beats are recorded; `None` outside a world.
    record: Option<Box<dyn BeatSink>>,
    record_every: Millis,
    /// The token key, for [`ActivityContext::hook_token`].
    hooks: Option<Arc<crate::hooks::HookKit>>,
    /// Where the step's stream writers write; `None` outside a world.
    streams: Option<StreamSink>,
    /// The world's shared state, for [`ActivityContext::resource`].
    resources: Option<Arc<crate::resources::Resources>>,
}

struct Beat {
    last: Millis,
    last_recorded: Option<Millis>,
    message: Option<String>,
}

impl std::fmt::Debug for ActivityContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivityContext")
            .field("activity_id", &self.inner.activity_id)
            .field("attempt", &self.inner.attempt)
            .finish()
    }
}

impl ActivityContext {
    /// The step id (`step_…`), the same for every attempt.
    pub fn activity_id(&self) -> &str {
        &self.inner.activity_id
    }

    /// The workflow id of the run this step belongs to.
    pub fn workflow_id(&self) -> &str {
        &self.inner.workflow_id
    }

    /// The run id this step belongs to.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The activity name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The value of type `T` the world was given with
    /// [`World::provide`](crate::World::provide): a database pool, an HTTP client.
    pub fn resource<T: Send + Sync + 'static>(&self) -> Result<Arc<T>, crate::WorldError> {
        match &self.inner.resources {
            Some(resources) => resources.get::<T>(),
            None => Err(crate::WorldError::Unavailable(
                "resources are only available to steps run by a world".into(),
            )),
        }
    }

    /// The token of a hook, from its [`HookTicket`](crate::hooks::HookTicket). Pass a step the
    /// ticket rather than the token, and the token never enters history: the step derives it
    /// here, sends it on (an email, a chat message), and only the ticket is recorded.
    ///
    /// Fails for a ticket of a hook with a caller-chosen token (its ticket carries the token)
    /// when called outside a world.
    pub fn hook_token(
        &self,
        ticket: &crate::hooks::HookTicket,
    ) -> Result<String, crate::WorldError> {
        if let Some(token) = &ticket.token {
            return Ok(token.clone());
        }
        let kit = self.inner.hooks.as_ref().ok_or_else(|| {
            crate::WorldError::Unavailable(
                "hook tokens can only be derived in a step run by a world".into(),
            )
        })?;
        Ok(kit.key.token(&ticket.run_id, ticket.position))
    }

    /// True once the run was cancelled (or the world is stopping this attempt). The result of
    /// the attempt will be ignored; stop as soon as it is safe.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the attempt is cancelled.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// Reports that the attempt is alive and making progress, with a message.
    ///
    /// With a heartbeat timeout set, an attempt that goes longer than it without calling this
    /// fails as timed out and is retried. Beats are recorded in history at most once per the
    /// world's heartbeat interval (or when the message changes).
    pub fn heartbeat(&self, message: impl Into<String>) {
        self.beat(Some(message.into()));
    }

    /// Reports that the attempt is alive, without a message.
    pub fn heartbeat_alive(&self) {
        self.beat(None);
    }

    fn beat(&self, message: Option<String>) {
        let now = self.inner.clock.now_ms();
        let record = {
            let mut beat = self.inner.beat.lock();
            beat.last = now;
            let changed = message.is_some() && message != beat.message;
            let due = beat
                .last_recorded
                .is_none_or(|at| now - at >= self.inner.record_every);
            if message.is_some() {
                beat.message = message.clone();
            }
            if changed || due {
                beat.last_recorded = Some(now);
                true
            } else {
                false
            }
        };
        if record {
            if let Some(log) = &self.inner.record {
                log.record(message);
            }
        }
    }

    /// Waits until every beat sent so far is recorded, and stops recording.
    pub(crate) async fn flush_beats(&self) {
        if let Some(log) = &self.inner.record {
            log.flush().await;
        }
    }

    /// When the attempt last beat (or started).
    pub(crate) fn last_beat(&self) -> Millis {
        self.inner.beat.lock().last
    }

    /// The context of an attempt the runtime runs.
    pub(crate) fn new(setup: StepSetup) -> Self {
        let now = setup.clock.now_ms();
        Self {
            inner: Arc::new(ActivityInner {
                activity_id: setup.activity_id,
                workflow_id: setup.workflow_id,
                run_id: setup.run_id,
                name: setup.name,
                attempt: setup.attempt,
                cancel: setup.cancel,
                clock: setup.clock,
                beat: Mutex::new(Beat {
                    last: now,
                    last_recorded: None,
                    message: None,
                }),
                record: Some(setup.record),
                record_every: setup.record_every,
                hooks: Some(setup.hooks),
                resources: Some(setup.resources),
                streams: Some(setup.streams),
            }),
        }
    }

    /// The sink the step's stream writers write through; `None` outside a world.
    pub(crate) fn stream_sink(&self) -> Option<StreamSink> {
        self.inner.streams.clone()
    }

    /// A context for calling an activity function directly, outside any world (unit tests of
    /// activities).
    pub fn detached(name: impl Into<String>, attempt: u32) -> Self {
        Self {
            inner: Arc::new(ActivityInner {
                activity_id: String::from("step_detached"),
                workflow_id: String::from("detached"),
                run_id: String::from("detached"),
                name: name.into(),
                attempt,
                cancel: CancellationToken::new(),
                clock: Arc::new(crate::clock::SystemClock),
                beat: Mutex::new(Beat {
                    last: 0,
                    last_recorded: None,
                    message: None,
                }),
                record: None,
                record_every: i64::MAX,
                hooks: None,
                resources: None,
                streams: None,
            }),
        }
    }
}
