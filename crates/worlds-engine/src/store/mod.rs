//! Storage: the [`Store`] contract and its implementations (memory, file, hybrid).
//!
//! A store keeps each run's history (append-only), the run state materialized from it, the
//! timers, the runs' streams and the schedules. The contract is one small trait per duty, and
//! [`Store`] is their sum (implemented for every type that implements them all, so
//! `Arc<dyn Store>` is what the engine holds):
//!
//! | duty | trait |
//! |---|---|
//! | run records: create, get, list | [`RunStore`] |
//! | idempotency keys | [`IdempotencyStore`] |
//! | each run's history: append, read, list | [`EventStore`] |
//! | steps: by position, by id, listed | [`StepStore`] |
//! | hooks: by token, by id, listed | [`HookStore`] |
//! | sharing runs between processes | [`LeaseStore`] |
//! | timers | [`TimerStore`] |
//! | streams | [`StreamStore`] |
//! | schedules | [`ScheduleStore`] |
//! | finished runs by end time, removing them | [`RetentionStore`] |
//! | pauses of workflows and task queues | [`PauseStore`] |
//!
//! Every backend materializes state with the same rules ([`WorkflowState::check`] and
//! [`WorkflowState::apply`]), so they agree on what a history means; one conformance suite
//! (`tests/store_conformance.rs`) runs against each. The file and hybrid stores answer every
//! read from a [`MemoryStore`] they keep in front of the disk, so the reads are written once.

pub mod archive;
mod file;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use file::fuzz as file_fuzz;
mod hook_index;
mod hybrid;
mod keys;
mod memory;
mod pauses;
mod record_file;
mod retention;
mod schedules;
mod sealed;
mod streams;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{
    ActivityState, Event, HookState, ListQuery, Page, ResolveData, RunStatus, WorkflowQueryFilter,
    WorkflowState,
};

pub use file::{FileStore, WalSummary};
pub use hook_index::HookRef;
pub use hybrid::{CollectedSegment, HybridStore};
pub use keys::{KeyFiles, KeyStore};
pub use memory::MemoryStore;
pub use pauses::{PauseFiles, PauseStore};
pub use retention::{EndedCursor, EndedRun, Kept, Removal, RemoveRun, RetentionStore};
pub use schedules::{ScheduleChange, ScheduleStore, ScheduleUpdate};
pub(crate) use sealed::{is_sealed_payload, refuse_sealed};
pub use sealed::{Reveal, SealedStore};
pub use streams::{NewChunk, StreamSignal, StreamStore};

/// A step found by its id, with its run.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// The run that scheduled it.
    pub run_id: String,
    /// The step.
    pub step: ActivityState,
}

/// A hook with its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRecord {
    /// The run that created it.
    pub run_id: String,
    /// The hook.
    pub hook: HookState,
}

/// The result of an append.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The events as stored, with their `seq` numbers.
    pub events: Vec<Arc<Event>>,
    /// The run's status after the append.
    pub status: RunStatus,
    /// The run's whole state after the append when that status is terminal (what
    /// [`RunStore::get_run`] with [`ResolveData::All`] would answer), so whoever ended a run
    /// needs no read to report it. `None` while the run is unfinished, and from a store that
    /// does not have the state at hand.
    ///
    /// [`ResolveData::All`]: crate::model::ResolveData::All
    pub ended: Option<Arc<WorkflowState>>,
}

/// Run records: creating runs and reading their materialized state.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Creates a run from its first event (`workflow_queued`). Fails with a conflict (409) if the
    /// run id or its workflow id is taken.
    async fn create_run(&self, first: Event) -> Result<(), WorldError>;

    /// Creates many runs, each from its first event as [`create_run`](Self::create_run) would;
    /// result `i` is that of `firsts[i]`, so some may be refused while the rest are created. Of
    /// two that share a workflow id, one is refused.
    ///
    /// The default starts every creation at once and waits for all, which lets a store that
    /// groups concurrent writes into one commit (the hybrid store) do so; the memory store
    /// takes its index lock once, the file store syncs its directory once.
    async fn create_runs(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        futures::future::join_all(firsts.into_iter().map(|first| self.create_run(first))).await
    }

    /// The run with this run id or workflow id (404 if none), without its history (read that
    /// with [`history`](EventStore::history)).
    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError>;

    /// Runs matching the filter, newest first, one page at a time (history left out).
    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError>;

    /// How many runs match the filter (its cursor, offset, limit and order ignored), counting
    /// no further than `cap`: `min(matching, cap)`. The default lists them; a store that can
    /// count without reading the runs (PostgreSQL) does.
    async fn count_runs(
        &self,
        filter: &WorkflowQueryFilter,
        cap: usize,
    ) -> Result<usize, WorldError> {
        let mut filter = filter.clone();
        filter.cursor = None;
        filter.offset = None;
        filter.limit = Some(cap);
        filter.resolve_data = ResolveData::None;
        Ok(self.list_runs(&filter).await?.data.len())
    }

    /// Ids of runs that have not finished (pending, running or compensating).
    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError>;
}

/// Idempotency keys: which run a start key already started.
#[async_trait]
pub trait IdempotencyStore: RunStore {
    /// The id of the newest run whose `workflow_queued` carries this idempotency key and was
    /// created at or after `since` (ms since the Unix epoch), if any. The default knows none:
    /// a store without this index leaves de-duplication to the engine's memory.
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        let _ = (key, since);
        Ok(None)
    }

    /// Creates a run like [`create_run`](RunStore::create_run), unless its `workflow_queued`
    /// carries an idempotency key that a run created at or after `since` already has: then it
    /// creates nothing and returns `Some` of that run's id.
    ///
    /// The default looks up, then creates; the engine runs one start per key at a time within
    /// a process, so only a store shared between processes (the file store) must make the two
    /// one atomic step.
    async fn create_run_once(
        &self,
        first: Event,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        if let Some(key) = first.kind.idempotency_key() {
            if let Some(existing) = self.find_by_idempotency_key(key, since).await? {
                return Ok(Some(existing));
            }
        }
        self.create_run(first).await.map(|()| None)
    }
}

/// Each run's history: appends at three durability levels, and reads.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Appends events to a run's history atomically: all are stored or none. The store assigns
    /// `seq` and refuses events the run's state does not accept (see [`WorkflowState::check`]):
    /// a second completion of a step, anything after the run finished.
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError>;

    /// Appends like [`append`](Self::append) — checked, given their `seq`, ordered before any
    /// later write — but may return before the events are durable. Until they are, readers do
    /// not see them; a crash before then loses them, together with every write after them.
    ///
    /// For records whose loss a restart repairs by itself (a step's start, a command the
    /// workflow code issues again on replay). A store without a cheaper path appends durably.
    async fn append_nowait(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append(run_id, events).await
    }

    /// Appends like [`append_nowait`](Self::append_nowait), but returns once the events are
    /// written to the operating system: a crash of this process (`kill -9`, an abort) no longer
    /// loses them, a crash of the machine still may until the next sync makes them durable.
    ///
    /// For a step's start, recorded before the step runs so that an attempt that crashes the
    /// process counts against its retry policy. A store without a cheaper path appends durably.
    async fn append_written(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append(run_id, events).await
    }

    /// Resolves once every event appended to the run so far is durable and visible to readers.
    async fn wait_durable(&self, run_id: &str) -> Result<(), WorldError> {
        let _ = run_id;
        Ok(())
    }

    /// The run's events with `seq >= from_seq`, in order.
    ///
    /// Events are shared (`Arc`): a store that keeps them in memory hands out references to
    /// the same immutable records instead of copies.
    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError>;

    /// Like [`history`](Self::history), but including events this process appended without
    /// waiting ([`append_nowait`](Self::append_nowait)) that are not durable yet.
    ///
    /// For the engine acting on its own records: whatever it does in consequence is itself a
    /// write ordered after them (so durable only if they are) or a waited write that makes
    /// them durable first. Nothing seen here may be shown outside the process before then.
    /// Stores whose appends are durable when they return read [`history`](Self::history).
    async fn history_tip(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<Vec<Arc<Event>>, WorldError> {
        self.history(run_id, from_seq).await
    }

    /// One page of the run's events (run id, not workflow id), ordered by `seq`; the cursor is
    /// the `seq` of the page's last event. With [`ResolveData::None`] their payloads read
    /// `null` (see [`EventKind::strip_data`](crate::model::EventKind::strip_data)). 404 if the
    /// run does not exist.
    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError>;

    /// One page of the events that concern a step, hook or child run, by its id (`step_…`,
    /// `hook_…`, `wrun_…`), ordered like [`list_events`](Self::list_events): the events of the
    /// run that scheduled the step, created the hook or started the child, whose
    /// [correlation id](WorkflowState::correlation_id) is that id. (A child's own history is
    /// its run's [`list_events`](Self::list_events).) An id no run recorded gives an empty page.
    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError>;
}

/// Steps (activities) of runs, as the run state materializes them.
#[async_trait]
pub trait StepStore: Send + Sync {
    /// One activity of a run, by command position (404 if none).
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError>;

    /// A step by its id (`step_…`), with the run it belongs to (404 if no run has it). Its
    /// input and output are left out with [`ResolveData::None`].
    async fn get_step(&self, step_id: &str, resolve: ResolveData)
        -> Result<StepRecord, WorldError>;

    /// One page of a run's steps (run id), in command order; the cursor is the position of the
    /// page's last step. Inputs and outputs are left out with [`ResolveData::None`]. 404 if the
    /// run does not exist.
    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError>;
}

/// Hooks of runs: by token (to resume one), by id, and listed.
#[async_trait]
pub trait HookStore: Send + Sync {
    /// The hook holding a token, by the token's SHA-256 digest: a waiting hook, or one that
    /// took its payload or expired in a run that has not finished. `None` once the run is over.
    async fn find_hook(&self, token_digest: &str) -> Result<Option<HookRef>, WorldError>;

    /// A hook by its id (`hook_…`), with the run it belongs to (404 if no run has it).
    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError>;

    /// One page of a run's hooks (run id), whatever their status, in command order; the cursor
    /// is the position of the page's last hook. 404 if the run does not exist. A hook holds no
    /// payload, so [`ListQuery::resolve_data`] changes nothing.
    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError>;

    /// One page of the hooks still waiting for their payload, in every run, ordered by run id
    /// (creation order) then position; the cursor is `{run id}#{position}` of the page's last
    /// hook.
    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError>;
}

/// Which runs a process can drive, given a run's workflow name and code version (the
/// [`WorldConfig::code_version`](crate::WorldConfig::code_version) that accepted it): its
/// workflow is registered there, and, for a world pinned to its code version, the versions
/// match.
pub type CanRun<'a> = dyn for<'n> Fn(&'n str, Option<&'n str>) -> bool + Send + Sync + 'a;

/// Sharing runs between processes: which runs this process drives, and what others changed.
#[async_trait]
pub trait LeaseStore: RunStore {
    /// True if other processes may use the same storage at the same time (the file store):
    /// the engine then polls [`claim_runs`](Self::claim_runs) and
    /// [`external_changes`](Self::external_changes).
    fn is_shared(&self) -> bool {
        false
    }

    /// True if [`external_changes`](Self::external_changes) also reports the runs another
    /// process took over from this one. A wait for the result of a run this process drives
    /// then needs no polling: if the run moves to another process, this one lets go of it,
    /// which ends the wait. False by default: the engine polls such waits on a shared store.
    fn reports_takeovers(&self) -> bool {
        false
    }

    /// The unfinished runs this process should start driving, now leased to it: on a shared
    /// store, those no live process drives and that `can_run` (given the run's workflow name
    /// and code version) says this process can run; each is returned once, when its lease is taken. A store of one
    /// process returns every unfinished run.
    async fn claim_runs(&self, can_run: &CanRun<'_>) -> Result<Vec<String>, WorldError> {
        let _ = can_run;
        self.unfinished_runs().await
    }

    /// Runs leased to this process that another process wrote to since the last call (a
    /// cancellation, a child's result), already read back from disk, and runs another process
    /// took over (this process's lease expired): the engine reads each, and lets go of one it
    /// no longer holds. Always empty for a store of one process.
    async fn external_changes(&self) -> Result<Vec<String>, WorldError> {
        Ok(Vec::new())
    }

    /// A signal raised when another process may have changed something this one cares about
    /// (a run to claim, a write to a run it holds, a due timer it holds): the engine then
    /// polls [`claim_runs`](Self::claim_runs) and [`external_changes`](Self::external_changes)
    /// at once instead of waiting for the next interval. Notifications are hints: polling stays
    /// on, so a missed one only delays the work. `None` (the default): polling only.
    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// The unfinished runs leased to this process, as the store records them (empty for a
    /// store of one process). The engine resumes from its history every one of them it does
    /// not drive, so that a lease taken by a claim whose answer was lost, or whose run could not
    /// be read back, does not leave the run held and idle while this process lives. A run the
    /// store finds leased to it without its knowing (a claim whose answer was lost) it takes
    /// up again under a new fencing epoch.
    async fn owned_runs(&self) -> Result<Vec<String>, WorldError> {
        Ok(Vec::new())
    }

    /// True if this process may start step code of `run_id` without asking the store: always,
    /// unless leases expire and this process's own clock cannot vouch that its lease on the run
    /// still holds (its heartbeat stalled or lapsed, the process was paused). The engine then
    /// asks [`confirm_lease`](Self::confirm_lease) before it starts the step.
    fn lease_confirmed(&self, run_id: &str) -> bool {
        let _ = run_id;
        true
    }

    /// Asks the store whether this process still holds the lease of `run_id`, renewing this
    /// process's heartbeat in the same statement: `Ok` if it does, `LeaseLost` if another
    /// process took the run over (or it finished), `Unavailable` if the store cannot tell.
    async fn confirm_lease(&self, run_id: &str) -> Result<(), WorldError> {
        let _ = run_id;
        Ok(())
    }

    /// The world shut down: a store shared with other processes hands this process's runs
    /// over at once (releasing their leases) and stops counting it as a live member, until
    /// [`rejoin`](Self::rejoin). Nothing for a store of one process.
    async fn leave(&self) -> Result<(), WorldError> {
        Ok(())
    }

    /// The world starts (again): undoes [`leave`](Self::leave).
    async fn rejoin(&self) -> Result<(), WorldError> {
        Ok(())
    }
}

/// What a durable timer does when it fires.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TimerKind {
    /// A workflow's `ctx.sleep` ends.
    Sleep {
        /// Command position of the sleep.
        position: u32,
    },
    /// The next attempt of a failed activity is due.
    ActivityRetry {
        /// Command position of the activity.
        position: u32,
        /// The attempt to run.
        attempt: u32,
    },
    /// The run's timeout expires.
    RunTimeout,
    /// A failed workflow's next attempt is due (the `retry` strategy).
    WorkflowRetry {
        /// The attempt to start.
        attempt: u32,
    },
    /// A hook's expiry passes.
    HookExpiry {
        /// Command position of the hook.
        position: u32,
    },
}

/// A durable timer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timer {
    /// When it fires (ms since the Unix epoch).
    pub fire_at: Millis,
    /// The run it belongs to.
    pub run_id: String,
    /// What it does.
    pub kind: TimerKind,
}

/// Durable timers.
#[async_trait]
pub trait TimerStore: Send + Sync {
    /// Adds a timer. Adding the same timer twice keeps one.
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError>;

    /// Removes and returns up to `limit` timers due at `now`, earliest first.
    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError>;

    /// The earliest fire time of any timer.
    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError>;

    /// Removes every timer of a run. Returns whether it removed any (`true` when it cannot
    /// tell): the engine wakes its timer loop only then.
    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError>;
}

/// A complete storage backend: the sum of the duties. Implement each duty trait and this follows.
pub trait Store:
    RunStore
    + IdempotencyStore
    + EventStore
    + StepStore
    + HookStore
    + LeaseStore
    + TimerStore
    + StreamStore
    + ScheduleStore
    + KeyStore
    + RetentionStore
    + PauseStore
{
}

impl<T> Store for T where
    T: RunStore
        + IdempotencyStore
        + EventStore
        + StepStore
        + HookStore
        + LeaseStore
        + TimerStore
        + StreamStore
        + ScheduleStore
        + KeyStore
        + RetentionStore
        + PauseStore
{
}
