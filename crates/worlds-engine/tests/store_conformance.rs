//! The storage conformance suite: what every [`Store`] backend must do, written once as
//! `pub async fn` checks over `Arc<dyn Store>` and run against each backend.
//!
//! The checks live in `store_conformance/`, one file per duty trait (runs, keys, events, steps,
//! hooks, leases, timers, streams, schedules); `coverage.rs` fails if a method of a duty trait
//! is called by no check. To add a backend, add one line at the bottom:
//! `conformance!(file, || -> Arc<dyn Store> { Arc::new(FileStore::open(dir).unwrap()) });`

// The checks are `pub` so they can move into a shared module other crates' tests reuse.
#![allow(unreachable_pub)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use worlds_engine::clock::{Clock, Millis, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::ids::CHUNK_PREFIX;
use worlds_engine::model::{HookStatus, ListQuery, SortOrder, EVENT_FORMAT_VERSION};
use worlds_engine::store::{
    FileStore, HookRef, HybridStore, MemoryStore, NewChunk, Store, Timer, TimerKind,
};
use worlds_engine::streams::StreamInfo;
use worlds_engine::{
    ActivityStatus, ErrorKind, Event, EventKind, Payload, ResolveData, RunStatus, StructuredError,
    WorkflowQueryFilter, WorldError,
};

const T0: Millis = 1_767_225_600_000;

#[path = "store_conformance/coverage.rs"]
mod coverage;
#[path = "store_conformance/events.rs"]
mod event_checks;
#[path = "store_conformance/hooks.rs"]
mod hook_checks;
#[path = "store_conformance/keys.rs"]
mod key_checks;
#[path = "store_conformance/leases.rs"]
mod lease_checks;
#[path = "store_conformance/runs.rs"]
mod run_checks;
#[path = "store_conformance/schedules.rs"]
mod schedule_checks;
#[path = "store_conformance/steps.rs"]
mod step_checks;
#[path = "store_conformance/streams.rs"]
mod stream_checks;
#[path = "store_conformance/timers.rs"]
mod timer_checks;
use event_checks::*;
use hook_checks::*;
use key_checks::*;
use lease_checks::*;
use run_checks::*;
use schedule_checks::*;
use step_checks::*;
use stream_checks::*;
use timer_checks::*;

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
            EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun {
                parent_id: spec.parent.map(str::to_owned),
                parent_position: spec.parent.map(|_| 0),
                idempotency_key: spec.key.map(str::to_owned),
                ..worlds_engine::model::QueuedRun::new(
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
    ) -> Result<worlds_engine::store::Appended, WorldError> {
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

fn ids_of(runs: &[worlds_engine::WorkflowState]) -> Vec<String> {
    runs.iter().map(|r| r.id.clone()).collect()
}

/// Generates one `#[tokio::test]` per check for a backend: `conformance!(name, make_store)`,
/// where `make_store` is a closure returning a fresh, empty `Arc<dyn Store>`.
macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        conformance!(
            @checks $backend, $make,
            // runs.rs
            create_run_then_get_by_run_id_and_workflow_id,
            create_runs_creates_each_and_refuses_taken_ids,
            duplicate_run_id_or_workflow_id_is_a_conflict,
            unknown_runs_and_activities_are_not_found,
            odd_ids_names_and_payloads_round_trip,
            list_runs_filters_pages_and_strips,
            unfinished_runs_lists_pending_and_running_only,
            // keys.rs
            idempotency_keys_find_the_newest_run_and_create_once,
            // events.rs
            append_assigns_dense_seq_and_history_slices,
            append_checks_a_batch_in_order_and_stores_all_or_nothing,
            append_after_terminal_is_a_conflict,
            duplicate_activity_completion_is_a_conflict,
            invalid_status_transitions_are_refused,
            append_nowait_is_checked_ordered_and_readable_once_durable,
            append_written_is_checked_numbered_and_readable,
            history_tip_shows_every_accepted_event_at_once,
            list_events_pages_both_ways_and_strips_payloads,
            events_by_correlation_id_follow_a_step_a_hook_and_a_child,
            // steps.rs
            steps_are_found_by_id_and_listed_in_pages,
            // hooks.rs
            hooks_are_found_by_token_and_id_and_listed_in_pages,
            // leases.rs
            claims_hand_out_unfinished_runs_once_and_nothing_changes_externally,
            // timers.rs
            timers_fire_in_order_once_and_are_removable,
            // streams.rs
            streams_get_dense_indexes_pages_and_names,
            stream_keys_dedupe_and_closed_streams_refuse_new_chunks,
            stream_data_and_names_round_trip,
            stream_signal_fires_after_each_change,
            schedules_round_trip_and_list_by_id,
            schedule_updates_read_the_current_record_and_keep_or_delete,
            a_failed_schedule_update_changes_nothing,
        );
    };
    (@checks $backend:ident, $make:expr, $($check:ident),+ $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let make = $make;
                    super::$check(make()).await;
                }
            )+
        }
    };
}

conformance!(memory, || -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
});

conformance!(file, || -> Arc<dyn Store> {
    // The directory must outlive the store: keep it for the test process's life.
    let dir = tempfile::tempdir().unwrap().keep();
    Arc::new(FileStore::open(dir).unwrap())
});

conformance!(hybrid, || -> Arc<dyn Store> {
    // The directory must outlive the store: keep it for the test process's life.
    let dir = tempfile::tempdir().unwrap().keep();
    Arc::new(HybridStore::open(dir).unwrap())
});
