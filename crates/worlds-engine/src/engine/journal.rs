//! The journal: the only writer of run history.
//!
//! Every event a run records goes through here, so three things hold for all of them: each is
//! stamped the same way (a fresh id, the world's time), the run counts of
//! [`crate::telemetry::metrics::MetricsRecorder`] follow what was recorded, and
//! whoever waits for "something happened" ([`Progress`]) hears of it.
//!
//! An append says how far it must get before the caller goes on, from the strongest to the
//! weakest: [`append`](Journal::append) (safe from a crash of the machine),
//! [`append_written`](Journal::append_written) (safe from a crash of this process) and
//! [`append_nowait`](Journal::append_nowait) (accepted; a restart repairs its loss).
//! [`wait_durable`](Journal::wait_durable) waits for what was appended without waiting.
//!
//! The journal also owns the payload size limit, so what history accepts is checked in one
//! place, and it notes the runs whose lease a shared store says this process lost
//! ([`WorldError::LeaseLost`]): the engine lets go of them ([`take_lost`](Journal::take_lost)).
//!
//! And it writes only to runs this world can open ([`check_opens`](Journal::check_opens)): a
//! run stored encrypted is written to by a world with the key that opens it, never by one
//! without keys (which would store plain values among sealed ones) or with another key (whose
//! values the run's own world could not open). Every append checks, as do stream writes:
//! whatever asks to write (a hook's payload, a cancellation, a webhook, the DevKit), a run the
//! world cannot open is refused with [`WorldError::Encrypted`] and left as it is.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::clock::{Clock, Millis};
use crate::error::WorldError;
use crate::ids::IdGenerator;
use crate::model::schedule::ScheduleConfig;
use crate::model::stream::StreamChunk;
use crate::model::{Event, EventKind, ListQuery, EVENT_FORMAT_VERSION};
use crate::payload::Payload;
use crate::store::{refuse_sealed, Appended, EventStore, IdempotencyStore};
use crate::telemetry::metrics::MetricsRecorder;

use super::Progress;

/// The records, unless one holds NUL in an identifier or a name (see
/// [`check_text`](crate::model::check_text)): the one place every backend's writes are checked
/// for it, so each answers the same 400.
fn checked(kinds: Vec<EventKind>) -> Result<Vec<EventKind>, WorldError> {
    for kind in &kinds {
        crate::model::check_text(kind)?;
    }
    Ok(kinds)
}

/// How far an append must get before the engine goes on.
#[derive(Debug, Clone, Copy)]
enum Durability {
    /// Accepted by the store, durable soon after.
    Queued,
    /// Safe from a crash of this process.
    Written,
    /// Safe from a crash of the machine.
    Synced,
}

/// The writer of run history.
pub(crate) struct Journal {
    /// Where runs are created.
    runs: Arc<dyn IdempotencyStore>,
    /// Where their histories grow.
    events: Arc<dyn EventStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    /// Run counts for `World::get_metrics()`, kept from the recorded events.
    metrics: MetricsRecorder,
    /// Told of every append.
    progress: Arc<Progress>,
    /// The largest payload (input, output, chunk) history accepts.
    max_payload_bytes: usize,
    /// Runs another process took over, found by a refused append, for the engine to let go of.
    lost: parking_lot::Mutex<Vec<String>>,
    /// The world has encryption keys (its store is a `SealedStore`).
    has_keys: bool,
    /// Runs this world is known to open: made here, or their first event read and opened.
    opens: parking_lot::RwLock<rustc_hash::FxHashSet<Box<str>>>,
}

/// Runs kept in [`Journal::opens`] before it is emptied (a run forgotten is read again once).
const KNOWN_OPEN_RUNS: usize = 65_536;

impl Journal {
    pub(crate) fn new(
        runs: Arc<dyn IdempotencyStore>,
        events: Arc<dyn EventStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<IdGenerator>,
        progress: Arc<Progress>,
        max_payload_bytes: usize,
        has_keys: bool,
    ) -> Self {
        Journal {
            runs,
            events,
            clock,
            ids,
            metrics: MetricsRecorder::default(),
            progress,
            max_payload_bytes,
            lost: parking_lot::Mutex::new(Vec::new()),
            has_keys,
            opens: Default::default(),
        }
    }

    /// Refuses ([`WorldError::Encrypted`]) if run `run_id` is stored encrypted and this world
    /// cannot open it: it has no keys, or its keys do not open the run's input. A run that
    /// does not exist passes (what writes to it says so). Read once per run: a run that opens
    /// is remembered.
    pub(crate) async fn check_opens(&self, run_id: &str) -> Result<(), WorldError> {
        if self.opens.read().contains(run_id) {
            return Ok(());
        }
        // The first event holds the run's input: through a sealed store, reading it opens it.
        let first = match self
            .events
            .list_events(run_id, &ListQuery::new().limit(1))
            .await
        {
            Ok(page) => page.data.into_iter().next(),
            Err(WorldError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(first) = first else { return Ok(()) };
        if let EventKind::WorkflowQueued(run) = &first.kind {
            if !self.has_keys {
                refuse_sealed(|| format!("run:{run_id}"), run.input.as_json().as_bytes())?;
            }
        }
        self.known_to_open(run_id);
        Ok(())
    }

    /// Refuses ([`WorldError::Encrypted`]) a schedule whose input is stored encrypted when this
    /// world has no keys: it is neither shown, changed nor fired here. (With keys, the store
    /// opened it on the way here, or refused.)
    pub(crate) fn check_schedule_opens(&self, schedule: &ScheduleConfig) -> Result<(), WorldError> {
        match &schedule.input {
            Some(input) if !self.has_keys => refuse_sealed(
                || format!("schedule:{}", schedule.id),
                input.as_json().as_bytes(),
            ),
            _ => Ok(()),
        }
    }

    /// Refuses ([`WorldError::Encrypted`]) chunks stored encrypted when this world has no
    /// keys, rather than hand them out sealed.
    pub(crate) fn check_chunks_open(
        &self,
        run_id: &str,
        chunks: &[StreamChunk],
    ) -> Result<(), WorldError> {
        if self.has_keys {
            return Ok(());
        }
        for chunk in chunks {
            refuse_sealed(|| format!("run:{run_id}"), &chunk.data)?;
        }
        Ok(())
    }

    fn known_to_open(&self, run_id: &str) {
        let mut opens = self.opens.write();
        if opens.len() >= KNOWN_OPEN_RUNS {
            opens.clear();
        }
        opens.insert(run_id.into());
    }

    /// The runs whose lease this process lost since the last call (each once).
    pub(crate) fn take_lost(&self) -> Vec<String> {
        std::mem::take(&mut *self.lost.lock())
    }

    /// The run counts kept from what was recorded.
    pub(crate) fn metrics(&self) -> &MetricsRecorder {
        &self.metrics
    }

    /// Builds an event stamped with a fresh id and the current time; the store sets `seq`.
    pub(crate) fn event(&self, run_id: &str, kind: EventKind) -> Event {
        let now = self.clock.now_ms();
        Event {
            id: self.ids.next_at(crate::ids::EVENT_PREFIX, now),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: now,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// Creates a run from its first event (`workflow_queued`).
    pub(crate) async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        crate::model::check_text(&first.kind)?;
        let run_id = first.run_id.clone();
        self.runs.create_run(first).await?;
        self.known_to_open(&run_id);
        Ok(())
    }

    /// Writes back a run's whole history as it was recorded before (a run read from a
    /// retention archive): created from its first event, the rest appended in one write, each
    /// event with its id and time. The store checks every event as it checks live ones; a
    /// taken run id or workflow id is a conflict.
    pub(crate) async fn import(&self, history: Vec<Event>) -> Result<(), WorldError> {
        let mut events = history.into_iter();
        let first = events
            .next()
            .ok_or_else(|| WorldError::invalid("history", "an imported run needs its history"))?;
        let run_id = first.run_id.clone();
        let rest: Vec<Event> = events.collect();
        for event in std::iter::once(&first).chain(&rest) {
            crate::model::check_text(&event.kind)?;
            if event.run_id != run_id {
                return Err(WorldError::invalid(
                    "history",
                    format!(
                        "an event of run {} is in the history of run {run_id}",
                        event.run_id
                    ),
                ));
            }
        }
        self.runs.create_run(first).await?;
        if !rest.is_empty() {
            self.events.append(&run_id, rest).await?;
        }
        self.known_to_open(&run_id);
        Ok(())
    }

    /// Creates a run unless its idempotency key started one at or after `since`: then returns
    /// that run's id (see [`IdempotencyStore::create_run_once`]).
    pub(crate) async fn create_run_once(
        &self,
        first: Event,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        crate::model::check_text(&first.kind)?;
        let run_id = first.run_id.clone();
        let existing = self.runs.create_run_once(first, since).await?;
        if existing.is_none() {
            self.known_to_open(&run_id);
        }
        Ok(existing)
    }

    /// Creates many runs; result `i` is that of `firsts[i]`.
    pub(crate) async fn create_runs(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        let run_ids: Vec<String> = firsts.iter().map(|first| first.run_id.clone()).collect();
        let created = self.create_checked(firsts).await;
        for (run_id, result) in run_ids.iter().zip(&created) {
            if result.is_ok() {
                self.known_to_open(run_id);
            }
        }
        created
    }

    /// The store's `create_runs`, but a run holding NUL in an identifier or a name is refused
    /// (see [`checked`]) and the others are created as asked; result `i` is that of `firsts[i]`.
    async fn create_checked(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        let checks: Vec<Result<(), WorldError>> = firsts
            .iter()
            .map(|first| crate::model::check_text(&first.kind))
            .collect();
        if checks.iter().all(Result::is_ok) {
            return self.runs.create_runs(firsts).await;
        }
        let fine = firsts
            .into_iter()
            .zip(&checks)
            .filter_map(|(first, check)| check.is_ok().then_some(first))
            .collect();
        let mut created = self.runs.create_runs(fine).await.into_iter();
        checks
            .into_iter()
            .map(|check| {
                check.and_then(|()| {
                    created.next().unwrap_or_else(|| {
                        Err(WorldError::Internal(
                            "the store answered fewer creations than asked".into(),
                        ))
                    })
                })
            })
            .collect()
    }

    /// Appends events to a run durably and tells waiters that something happened.
    pub(crate) async fn append(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<Appended, WorldError> {
        self.append_with(run_id, checked(kinds)?, Durability::Synced)
            .await
    }

    /// Appends events that need to survive a crash of this process but not yet of the machine
    /// (a step's start, before the step runs): see
    /// [`EventStore::append_written`].
    pub(crate) async fn append_written(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<Appended, WorldError> {
        self.append_with(run_id, checked(kinds)?, Durability::Written)
            .await
    }

    /// Appends events whose loss in a crash a restart repairs by itself (a step's result, the
    /// commands workflow code issues again on replay): the store may return before they are
    /// durable (see [`EventStore::append_nowait`]).
    pub(crate) async fn append_nowait(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<Appended, WorldError> {
        self.append_with(run_id, checked(kinds)?, Durability::Queued)
            .await
    }

    /// Waits until every event appended to the run so far is durable and readable.
    pub(crate) async fn wait_durable(&self, run_id: &str) -> Result<(), WorldError> {
        self.events.wait_durable(run_id).await
    }

    async fn append_with(
        &self,
        run_id: &str,
        kinds: Vec<EventKind>,
        durability: Durability,
    ) -> Result<Appended, WorldError> {
        self.check_opens(run_id).await?;
        let events = kinds.into_iter().map(|k| self.event(run_id, k)).collect();
        let appended = match durability {
            Durability::Synced => self.events.append(run_id, events).await,
            Durability::Written => self.events.append_written(run_id, events).await,
            Durability::Queued => self.events.append_nowait(run_id, events).await,
        };
        let appended = match appended {
            Ok(appended) => appended,
            Err(WorldError::LeaseLost { run_id }) => {
                tracing::warn!(
                    run_id,
                    "another process took this run over after this one's lease expired; letting go of it"
                );
                // The share loop lets go of it on its next poll.
                self.lost.lock().push(run_id.clone());
                return Err(WorldError::LeaseLost { run_id });
            }
            Err(e) => return Err(e),
        };
        if appended.status.is_terminal() {
            self.opens.write().remove(run_id);
        }
        self.metrics.record(run_id, &appended.events);
        self.progress.epoch.fetch_add(1, Ordering::Relaxed);
        Ok(appended)
    }

    /// Refuses a payload larger than the world accepts; `what` names it in the error.
    pub(crate) fn check_payload(
        &self,
        what: impl FnOnce() -> String,
        payload: &Payload,
    ) -> Result<(), WorldError> {
        self.check_size(what, payload.size())
    }

    /// Refuses `size` bytes if that is more than the world accepts in one payload.
    pub(crate) fn check_size(
        &self,
        what: impl FnOnce() -> String,
        size: usize,
    ) -> Result<(), WorldError> {
        let limit = self.max_payload_bytes;
        if size > limit {
            return Err(WorldError::PayloadTooLarge {
                what: what(),
                size,
                limit,
            });
        }
        Ok(())
    }
}
