//! The storage conformance suite: what every [`Store`] backend must do, written once as
//! `pub async fn` checks over `Arc<dyn Store>`, so any crate can run them against its backend.
//!
//! The checks are grouped by duty trait (runs, idempotency keys, events, steps, hooks, leases,
//! timers, streams, schedules, API keys), plus runs driven from outside, what their runtime
//! records, and encryption at rest over them all.
//! [`store_conformance!`](crate::store_conformance) turns them into one
//! test per check:
//!
//! ```ignore
//! use std::sync::Arc;
//! use worlds_engine::store::{MemoryStore, Store};
//!
//! worlds_engine::store_conformance!(memory, || async {
//!     Arc::new(MemoryStore::new()) as Arc<dyn Store>
//! });
//! ```
//!
//! The factory is called once per check and may be async. It returns anything that converts
//! into a [`Fixture`]: an `Arc<dyn Store>`, or a [`Fixture`] carrying a cleanup step (a backend
//! that makes a database schema per check drops it there) or saying the check is skipped.

// The checks assert: a failed one panics, as a test does.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

mod api_keys;
mod events;
mod external;
mod hooks;
mod keys;
mod leases;
mod nul;
mod pauses;
mod retention;
mod runs;
mod runtime;
mod schedules;
mod sealed;
mod steps;
mod streams;
mod timers;

pub use api_keys::*;
pub use events::*;
pub use external::*;
pub use hooks::*;
pub use keys::*;
pub use leases::*;
pub use nul::*;
pub use pauses::*;
pub use retention::*;
pub use runs::*;
pub use runtime::*;
pub use schedules::*;
pub use sealed::*;
pub use steps::*;
pub use streams::*;
pub use timers::*;

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use serde_json::json;

use crate::clock::{Clock, Millis, VirtualClock};
use crate::ids::IdGenerator;
use crate::ids::CHUNK_PREFIX;
use crate::model::{HookStatus, ListQuery, SortOrder, EVENT_FORMAT_VERSION};
use crate::store::{HookRef, NewChunk, Store, Timer, TimerKind};
use crate::streams::StreamInfo;
use crate::{
    ActivityStatus, ErrorKind, Event, EventKind, Payload, ResolveData, RunStatus, StructuredError,
    WorkflowQueryFilter, WorldError,
};

/// What a check runs against: a fresh, empty store, and what to do once the check is over.
pub struct Fixture {
    store: Option<Arc<dyn Store>>,
    cleanup: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Fixture {
    /// A fixture for `store`, with nothing to clean up.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store: Some(store),
            cleanup: None,
        }
    }

    /// Runs `cleanup` after the check (passed or failed), once the check has dropped its store.
    pub fn with_cleanup(mut self, cleanup: impl Future<Output = ()> + Send + 'static) -> Self {
        self.cleanup = Some(Box::pin(cleanup));
        self
    }

    /// No store: the check passes without running. For a backend whose server is not there
    /// (the factory says why, loudly, before returning this).
    pub fn skip() -> Self {
        Self {
            store: None,
            cleanup: None,
        }
    }
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture")
            .field("skipped", &self.store.is_none())
            .field("cleanup", &self.cleanup.is_some())
            .finish()
    }
}

impl From<Arc<dyn Store>> for Fixture {
    fn from(store: Arc<dyn Store>) -> Self {
        Self::new(store)
    }
}

/// Runs one check on a fresh current-thread runtime (as `#[tokio::test]` does): makes the
/// fixture with `factory`, runs `check` on its store, then the fixture's cleanup — also when
/// the check fails, whose panic is passed on afterwards. Called by
/// [`store_conformance!`](crate::store_conformance).
pub fn run_check<F, Fut, O, C, CFut>(factory: F, check: C)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = O>,
    O: Into<Fixture>,
    C: FnOnce(Arc<dyn Store>) -> CFut,
    CFut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for the check");
    runtime.block_on(async move {
        let fixture: Fixture = factory().await.into();
        let Some(store) = fixture.store else {
            return;
        };
        let outcome = AssertUnwindSafe(check(store)).catch_unwind().await;
        if let Some(cleanup) = fixture.cleanup {
            cleanup.await;
        }
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Generates one test per conformance check for a backend: `store_conformance!(name, factory)`
/// makes a module `name` whose tests each call `factory()` (a closure returning a future of an
/// `Arc<dyn Store>` or a [`Fixture`]) for a fresh store
/// and run one check of [`testing::conformance`](crate::testing::conformance) on it.
#[macro_export]
macro_rules! store_conformance {
    ($backend:ident, $factory:expr $(,)?) => {
        $crate::store_conformance!(
            @checks $backend, $factory,
            // runs.rs
            create_run_then_get_by_run_id_and_workflow_id,
            create_runs_creates_each_and_refuses_taken_ids,
            duplicate_run_id_or_workflow_id_is_a_conflict,
            unknown_runs_and_activities_are_not_found,
            odd_ids_names_and_payloads_round_trip,
            list_runs_filters_pages_and_strips,
            runs_are_listed_by_code_version,
            unfinished_runs_lists_pending_and_running_only,
            // keys.rs
            idempotency_keys_find_the_newest_run_and_create_once,
            // events.rs
            append_assigns_dense_seq_and_history_slices,
            append_checks_a_batch_in_order_and_stores_all_or_nothing,
            append_after_terminal_is_a_conflict,
            an_ending_append_hands_back_the_final_state,
            duplicate_activity_completion_is_a_conflict,
            invalid_status_transitions_are_refused,
            append_nowait_is_checked_ordered_and_readable_once_durable,
            append_written_is_checked_numbered_and_readable,
            history_tip_shows_every_accepted_event_at_once,
            list_events_pages_both_ways_and_strips_payloads,
            events_by_correlation_id_follow_a_step_a_hook_and_a_child,
            payloads_with_nul_and_lone_surrogate_escapes_round_trip,
            // external.rs
            external_runs_keep_their_records_and_iterate_their_hooks,
            // runtime.rs
            runtime_info_round_trips_exactly,
            attribute_changes_apply_in_order_and_bad_ones_write_nothing,
            binary_payloads_round_trip_byte_for_byte,
            error_data_round_trips_on_failed_steps_and_runs,
            runtime_data_is_sealed_at_rest,
            caller_chosen_run_ids_are_kept_exactly_or_refused,
            // steps.rs
            steps_are_found_by_id_and_listed_in_pages,
            // hooks.rs
            hooks_are_found_by_token_and_id_and_listed_in_pages,
            // leases.rs
            claims_hand_out_unfinished_runs_once_and_nothing_changes_externally,
            a_reopened_run_is_claimed_again_and_takes_its_new_attempt,
            a_process_lists_confirms_and_hands_over_what_is_leased_to_it,
            // timers.rs
            timers_fire_in_order_once_and_are_removable,
            // streams.rs
            streams_get_dense_indexes_pages_and_names,
            stream_keys_dedupe_and_closed_streams_refuse_new_chunks,
            stream_data_and_names_round_trip,
            stream_signal_fires_after_each_change,
            // schedules.rs
            schedules_round_trip_and_list_by_id,
            schedule_updates_read_the_current_record_and_keep_or_delete,
            a_failed_schedule_update_changes_nothing,
            // api_keys.rs
            api_keys_round_trip_list_by_id_and_are_replaced,
            // pauses.rs
            pauses_round_trip_list_by_target_and_lift,
            // nul.rs
            nul_in_lookups_finds_nothing_and_payloads_keep_it,
            // sealed.rs
            a_world_that_cannot_open_a_run_does_not_write_to_it,
            // retention.rs
            ended_runs_are_listed_by_end_time_in_pages,
            removing_a_run_takes_everything_of_it_and_frees_its_ids,
            unfinished_and_related_runs_are_kept,
            a_batch_removal_answers_each_run_in_order,
        );
    };
    (@checks $backend:ident, $factory:expr, $($check:ident),+ $(,)?) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $check() {
                    $crate::testing::conformance::run_check(
                        $factory,
                        $crate::testing::conformance::$check,
                    );
                }
            )+
        }
    };
}

const T0: Millis = 1_767_225_600_000;

/// Makes ids and timestamps the way the engine does: ULIDs from a virtual clock.
struct Maker {
    clock: VirtualClock,
    ids: IdGenerator,
}

impl Maker {
    fn new() -> Self {
        let clock = VirtualClock::new(T0);
        let ids = IdGenerator::new(Arc::new(clock.clone()));
        Self { clock, ids }
    }

    fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    fn tick(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }

    fn run_id(&self) -> String {
        self.ids.run_id()
    }

    /// A step scheduled at `position` under a fresh step id: (the id, the event kind).
    fn step(&self, position: u32, name: &str) -> (String, EventKind) {
        let id = self.ids.step_id();
        let kind = EventKind::ActivityScheduled {
            position,
            activity_id: id.clone(),
            name: name.to_owned(),
            input: p(json!(position)),
            options: None,
            inline: false,
        };
        (id, kind)
    }

    /// An event as the engine hands it to a store: `seq` is the store's to assign.
    fn event(&self, run_id: &str, kind: EventKind) -> Event {
        Event {
            id: self.ids.event_id(),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: self.now(),
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    fn queued(&self, run_id: &str, spec: Queued<'_>) -> Event {
        self.event(
            run_id,
            EventKind::WorkflowQueued(Box::new(crate::model::QueuedRun {
                parent_id: spec.parent.map(str::to_owned),
                parent_position: spec.parent.map(|_| 0),
                idempotency_key: spec.key.map(str::to_owned),
                code_version: spec.code_version.map(str::to_owned),
                ..crate::model::QueuedRun::new(
                    spec.name.to_owned(),
                    spec.workflow_id.unwrap_or(run_id).to_owned(),
                    spec.input.unwrap_or_else(|| p(json!({ "n": 1 }))),
                )
            })),
        )
    }

    /// Creates a run named `name` and returns its id.
    async fn create(&self, store: &dyn Store, name: &str) -> String {
        let id = self.run_id();
        store
            .create_run(self.queued(&id, Queued::named(name)))
            .await
            .unwrap();
        id
    }

    async fn append(
        &self,
        store: &dyn Store,
        run_id: &str,
        kinds: Vec<EventKind>,
    ) -> Result<crate::store::Appended, WorldError> {
        let events = kinds.into_iter().map(|k| self.event(run_id, k)).collect();
        store.append(run_id, events).await
    }
}

#[derive(Default)]
struct Queued<'a> {
    name: &'a str,
    workflow_id: Option<&'a str>,
    parent: Option<&'a str>,
    input: Option<Payload>,
    key: Option<&'a str>,
    code_version: Option<&'a str>,
}

impl<'a> Queued<'a> {
    fn named(name: &'a str) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }
}

fn p(value: serde_json::Value) -> Payload {
    Payload::from(value)
}

fn started() -> EventKind {
    EventKind::WorkflowStarted {
        attempt: 1,
        first_position: 0,
    }
}

fn scheduled(position: u32, name: &str) -> EventKind {
    EventKind::ActivityScheduled {
        position,
        activity_id: format!("step_{position:026}"),
        name: name.to_owned(),
        input: p(json!(position)),
        options: None,
        inline: false,
    }
}

fn step_started(position: u32) -> EventKind {
    EventKind::ActivityStarted {
        position,
        attempt: 1,
    }
}

fn step_completed(position: u32, output: serde_json::Value) -> EventKind {
    EventKind::ActivityCompleted {
        position,
        attempt: 1,
        output: p(output),
    }
}

fn completed() -> EventKind {
    EventKind::WorkflowCompleted {
        output: p(json!("done")),
    }
}

fn failed() -> EventKind {
    EventKind::WorkflowFailed {
        error: StructuredError::new("boom").with_code("E_TEST"),
    }
}

fn is_conflict(result: &Result<impl std::fmt::Debug, WorldError>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::Conflict && e.http_status() == 409)
}

fn is_invalid(result: &Result<impl std::fmt::Debug, WorldError>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::InvalidInput && e.http_status() == 400)
}

fn is_not_found(result: &Result<impl std::fmt::Debug, WorldError>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::NotFound && e.http_status() == 404)
}

fn ids_of(runs: &[crate::WorkflowState]) -> Vec<String> {
    runs.iter().map(|r| r.id.clone()).collect()
}
