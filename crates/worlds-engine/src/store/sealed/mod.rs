//! Encryption at rest: a store that seals user data on its way into another store and opens it
//! on its way out.
//!
//! [`SealedStore`] wraps any [`Store`] (memory, file, hybrid, PostgreSQL, or one of your own),
//! so every backend gets the same encryption and the engine above it sees plain values. What
//! is sealed, and what stays readable for indexes, lists and operators, is listed in
//! [`fields`]; how, in [`cipher`]. A world wraps its store in one when it has
//! [`EncryptionKeys`] (`WorldConfig::encryption_keys`). [`Reveal`] is what people are shown
//! of sealed values.
//!
//! Every method of every duty is forwarded, the provided ones included, so a store's own
//! versions (a hybrid store's `append_nowait`, PostgreSQL's `claim_runs`) keep working
//! through the wrapper.

mod cipher;
mod fields;
mod reveal;

use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::Millis;
use crate::config::EncryptionKeys;
use crate::error::WorldError;
use crate::model::keys::ApiKeyRecord;
use crate::model::schedule::ScheduleConfig;
use crate::model::stream::{StreamChunk, StreamInfo};
use crate::model::{
    ActivityState, Event, EventKind, ListQuery, Page, ResolveData, WorkflowQueryFilter,
    WorkflowState,
};

use super::{
    Appended, CanRun, EventStore, HookRecord, HookRef, HookStore, IdempotencyStore, KeyStore,
    LeaseStore, NewChunk, RunStore, ScheduleChange, ScheduleStore, ScheduleUpdate, StepRecord,
    StepStore, Store, StreamSignal, StreamStore, Timer, TimerStore,
};

pub(crate) use cipher::is_sealed_payload;

/// For a world without keys: refuses a value of `scope` (`run:<id>`, `schedule:<id>`) stored
/// sealed, in any of the sealed forms, with [`WorldError::Encrypted`] naming its key.
pub(crate) fn refuse_sealed(
    scope: impl FnOnce() -> String,
    value: &[u8],
) -> Result<(), WorldError> {
    if cipher::sealed_key_id(value).is_some() {
        return Err(cipher::no_keys(&scope(), value));
    }
    Ok(())
}
pub(crate) use cipher::Cipher;
use fields::{Fields, Way};
pub use reveal::Reveal;

/// A store whose user data is encrypted at rest in the store it wraps.
pub struct SealedStore {
    inner: Arc<dyn Store>,
    cipher: Cipher,
}

impl SealedStore {
    /// Wraps `inner`: what is written is sealed with the active key of `keys`, what is read is
    /// opened with whichever of `keys` sealed it.
    pub fn new(inner: Arc<dyn Store>, keys: EncryptionKeys) -> SealedStore {
        SealedStore {
            inner,
            cipher: Cipher::new(keys),
        }
    }

    fn run(&self, run_id: &str, way: Way) -> Fields<'_> {
        Fields {
            cipher: Some(&self.cipher),
            scope: Fields::run_scope(run_id),
            way,
        }
    }

    fn seal_event(&self, mut event: Event) -> Result<Event, WorldError> {
        self.run(&event.run_id, Way::Seal)
            .event_kind(&mut event.kind)?;
        Ok(event)
    }

    fn seal_events(&self, events: Vec<Event>) -> Result<Vec<Event>, WorldError> {
        events.into_iter().map(|e| self.seal_event(e)).collect()
    }

    fn open_event(&self, event: Arc<Event>) -> Result<Arc<Event>, WorldError> {
        if !Fields::has_sealed(&event.kind) {
            return Ok(event);
        }
        Ok(Arc::new(self.run(&event.run_id, Way::Open).event(&event)?))
    }

    fn open_events(&self, events: Vec<Arc<Event>>) -> Result<Vec<Arc<Event>>, WorldError> {
        events.into_iter().map(|e| self.open_event(e)).collect()
    }

    fn open_state(&self, mut state: WorkflowState) -> Result<WorkflowState, WorldError> {
        self.run(&state.id.clone(), Way::Open).state(&mut state)?;
        Ok(state)
    }

    /// Appends `events` sealed with `append`, and hands back what was appended as the caller
    /// wrote it: the stored events carry their numbers, and the plain kinds are the caller's
    /// (no need to decrypt what was just encrypted).
    async fn append_with<'a, F, Fut>(
        &'a self,
        events: Vec<Event>,
        append: F,
    ) -> Result<Appended, WorldError>
    where
        F: FnOnce(Vec<Event>) -> Fut,
        Fut: std::future::Future<Output = Result<Appended, WorldError>> + 'a,
    {
        let plain: Vec<EventKind> = events.iter().map(|e| e.kind.clone()).collect();
        let appended = append(self.seal_events(events)?).await?;
        let events = if appended.events.len() == plain.len() {
            // Not opened again: a plain value that looks sealed (a user's, or one sealed by a
            // store around this one) is the caller's as it is.
            appended
                .events
                .into_iter()
                .zip(plain)
                .map(|(stored, kind)| {
                    if !Fields::has_sealed(&stored.kind) {
                        return stored;
                    }
                    let mut event = Arc::unwrap_or_clone(stored);
                    event.kind = kind;
                    Arc::new(event)
                })
                .collect()
        } else {
            self.open_events(appended.events)?
        };
        self.open_appended(Appended { events, ..appended })
    }

    /// The run's state at its end, opened (the events are the caller's to open).
    fn open_appended(&self, appended: Appended) -> Result<Appended, WorldError> {
        Ok(Appended {
            events: appended.events,
            status: appended.status,
            ended: match appended.ended {
                Some(state) => Some(Arc::new(self.open_state(Arc::unwrap_or_clone(state))?)),
                None => None,
            },
        })
    }

    fn open_activity(
        &self,
        run_id: &str,
        mut activity: ActivityState,
    ) -> Result<ActivityState, WorldError> {
        self.run(run_id, Way::Open).activity(&mut activity)?;
        Ok(activity)
    }

    fn open_hook(&self, mut record: HookRecord) -> Result<HookRecord, WorldError> {
        self.run(&record.run_id, Way::Open).hook(&mut record.hook)?;
        Ok(record)
    }

    fn open_hooks(&self, page: Page<HookRecord>) -> Result<Page<HookRecord>, WorldError> {
        page.try_map(|record| self.open_hook(record))
    }

    fn chunk(&self, run_id: &str, mut chunk: StreamChunk) -> Result<StreamChunk, WorldError> {
        self.run(run_id, Way::Open).bytes(&mut chunk.data)?;
        Ok(chunk)
    }

    fn schedule(
        &self,
        mut config: ScheduleConfig,
        way: Way,
        id: &str,
    ) -> Result<ScheduleConfig, WorldError> {
        Fields {
            cipher: Some(&self.cipher),
            scope: Fields::schedule_scope(id),
            way,
        }
        .schedule(&mut config)?;
        Ok(config)
    }
}

impl std::fmt::Debug for SealedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedStore").finish_non_exhaustive()
    }
}

#[async_trait]
impl RunStore for SealedStore {
    async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        self.inner.create_run(self.seal_event(first)?).await
    }

    async fn create_runs(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        // A run whose first event cannot be sealed is refused alone; the others go through.
        let mut refused: Vec<Option<WorldError>> = Vec::with_capacity(firsts.len());
        let mut sealed = Vec::with_capacity(firsts.len());
        for first in firsts {
            match self.seal_event(first) {
                Ok(event) => {
                    refused.push(None);
                    sealed.push(event);
                }
                Err(e) => refused.push(Some(e)),
            }
        }
        let mut created = self.inner.create_runs(sealed).await.into_iter();
        refused
            .into_iter()
            .map(|refusal| match refusal {
                Some(e) => Err(e),
                None => created.next().unwrap_or_else(|| {
                    Err(WorldError::Internal("a creation went unanswered".into()))
                }),
            })
            .collect()
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.open_state(self.inner.get_run(id, resolve).await?)
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        self.inner
            .list_runs(filter)
            .await?
            .try_map(|state| self.open_state(state))
    }

    async fn count_runs(
        &self,
        filter: &WorkflowQueryFilter,
        cap: usize,
    ) -> Result<usize, WorldError> {
        self.inner.count_runs(filter, cap).await
    }

    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        self.inner.unfinished_runs().await
    }
}

#[async_trait]
impl IdempotencyStore for SealedStore {
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.inner.find_by_idempotency_key(key, since).await
    }

    async fn create_run_once(
        &self,
        first: Event,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        self.inner
            .create_run_once(self.seal_event(first)?, since)
            .await
    }
}

#[async_trait]
impl EventStore for SealedStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.append_with(events, |sealed| self.inner.append(run_id, sealed))
            .await
    }

    async fn append_nowait(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append_with(events, |sealed| self.inner.append_nowait(run_id, sealed))
            .await
    }

    async fn append_written(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append_with(events, |sealed| self.inner.append_written(run_id, sealed))
            .await
    }

    async fn wait_durable(&self, run_id: &str) -> Result<(), WorldError> {
        self.inner.wait_durable(run_id).await
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        self.open_events(self.inner.history(run_id, from_seq).await?)
    }

    async fn history_tip(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<Vec<Arc<Event>>, WorldError> {
        self.open_events(self.inner.history_tip(run_id, from_seq).await?)
    }

    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let page = self.inner.list_events(run_id, query).await?;
        page.try_map(|e| self.open_event(e))
    }

    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let page = self
            .inner
            .list_events_by_correlation_id(correlation_id, query)
            .await?;
        page.try_map(|e| self.open_event(e))
    }
}

#[async_trait]
impl StepStore for SealedStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        let activity = self.inner.get_activity(run_id, position).await?;
        self.open_activity(run_id, activity)
    }

    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        let record = self.inner.get_step(step_id, resolve).await?;
        Ok(StepRecord {
            step: self.open_activity(&record.run_id, record.step)?,
            run_id: record.run_id,
        })
    }

    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        self.inner
            .list_steps(run_id, query)
            .await?
            .try_map(|activity| self.open_activity(run_id, activity))
    }
}

#[async_trait]
impl HookStore for SealedStore {
    async fn find_hook(&self, token_digest: &str) -> Result<Option<HookRef>, WorldError> {
        self.inner.find_hook(token_digest).await
    }

    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        self.open_hook(self.inner.get_hook(hook_id).await?)
    }

    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        self.open_hooks(self.inner.list_run_hooks(run_id, query).await?)
    }

    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError> {
        self.open_hooks(self.inner.list_waiting_hooks(query).await?)
    }
}

#[async_trait]
impl LeaseStore for SealedStore {
    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    fn reports_takeovers(&self) -> bool {
        self.inner.reports_takeovers()
    }

    async fn claim_runs(&self, can_run: &CanRun<'_>) -> Result<Vec<String>, WorldError> {
        self.inner.claim_runs(can_run).await
    }

    async fn external_changes(&self) -> Result<Vec<String>, WorldError> {
        self.inner.external_changes().await
    }

    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.changes()
    }

    async fn owned_runs(&self) -> Result<Vec<String>, WorldError> {
        self.inner.owned_runs().await
    }

    fn lease_confirmed(&self, run_id: &str) -> bool {
        self.inner.lease_confirmed(run_id)
    }

    async fn confirm_lease(&self, run_id: &str) -> Result<(), WorldError> {
        self.inner.confirm_lease(run_id).await
    }

    async fn leave(&self) -> Result<(), WorldError> {
        self.inner.leave().await
    }

    async fn rejoin(&self) -> Result<(), WorldError> {
        self.inner.rejoin().await
    }
}

/// Nothing sealed is read or written: end times and ids are in the clear.
#[async_trait]
impl crate::store::RetentionStore for SealedStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&crate::store::EndedCursor>,
        limit: usize,
    ) -> Result<Vec<crate::store::EndedRun>, WorldError> {
        self.inner.ended_runs(before, after, limit).await
    }

    async fn remove_runs(
        &self,
        runs: &[crate::store::RemoveRun],
    ) -> Result<Vec<crate::store::Removal>, WorldError> {
        self.inner.remove_runs(runs).await
    }
}

#[async_trait]
impl TimerStore for SealedStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        self.inner.add_timer(timer).await
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        self.inner.take_due_timers(now, limit).await
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        self.inner.next_timer_at().await
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        self.inner.remove_run_timers(run_id).await
    }
}

#[async_trait]
impl StreamStore for SealedStore {
    async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        mut chunk: NewChunk,
    ) -> Result<StreamChunk, WorldError> {
        self.run(run_id, Way::Seal).bytes(&mut chunk.data)?;
        let stored = self.inner.write_chunk(run_id, name, chunk).await?;
        self.chunk(run_id, stored)
    }

    async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        self.inner.close_stream(run_id, name).await
    }

    async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError> {
        self.inner.close_run_streams(run_id).await
    }

    async fn stream_chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        let (chunks, info) = self.inner.stream_chunks(run_id, name, from, limit).await?;
        let chunks = chunks
            .into_iter()
            .map(|chunk| self.chunk(run_id, chunk))
            .collect::<Result<_, _>>()?;
        Ok((chunks, info))
    }

    async fn stream_info(&self, run_id: &str, name: &str) -> Result<StreamInfo, WorldError> {
        self.inner.stream_info(run_id, name).await
    }

    async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        self.inner.list_streams(run_id).await
    }

    fn watch_streams(&self, run_id: &str) -> StreamSignal {
        self.inner.watch_streams(run_id)
    }
}

#[async_trait]
impl ScheduleStore for SealedStore {
    async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        self.inner
            .list_schedules()
            .await?
            .into_iter()
            .map(|config| {
                let id = config.id.clone();
                self.schedule(config, Way::Open, &id)
            })
            .collect()
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
        match self.inner.get_schedule(id).await? {
            Some(config) => self.schedule(config, Way::Open, id).map(Some),
            None => Ok(None),
        }
    }

    async fn update_schedule(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        // The caller's change sees the record opened, and what it stores is sealed.
        let mut sealed_change = |stored: Option<ScheduleConfig>| {
            let stored = match stored {
                Some(config) => Some(self.schedule(config, Way::Open, id)?),
                None => None,
            };
            Ok(match change(stored)? {
                ScheduleChange::Put(config) => {
                    ScheduleChange::Put(self.schedule(config, Way::Seal, id)?)
                }
                other => other,
            })
        };
        match self.inner.update_schedule(id, &mut sealed_change).await? {
            Some(config) => self.schedule(config, Way::Open, id).map(Some),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl KeyStore for SealedStore {
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        self.inner.list_keys().await
    }

    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        self.inner.save_key(record).await
    }
}

/// Pauses name workflows and queues, never payloads: stored as they are.
#[async_trait]
impl crate::store::PauseStore for SealedStore {
    async fn list_pauses(&self) -> Result<Vec<crate::model::Pause>, WorldError> {
        self.inner.list_pauses().await
    }

    async fn save_pause(&self, pause: &crate::model::Pause) -> Result<(), WorldError> {
        self.inner.save_pause(pause).await
    }

    async fn remove_pause(
        &self,
        target: &crate::model::PauseTarget,
    ) -> Result<Option<crate::model::Pause>, WorldError> {
        self.inner.remove_pause(target).await
    }
}
