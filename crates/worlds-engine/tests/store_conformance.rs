//! The storage conformance suite: what every [`Store`] backend must do, written once as
//! `pub async fn` checks over `Arc<dyn Store>` and run against each backend.
//!
//! To add a backend, add one line at the bottom:
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
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::store::{
    FileStore, HybridStore, MemoryStore, NewChunk, Store, Timer, TimerKind,
};
use worlds_engine::streams::StreamInfo;
use worlds_engine::{
    ActivityStatus, ErrorKind, Event, EventKind, Payload, ResolveData, RunStatus, StructuredError,
    WorkflowQueryFilter, WorldError,
};

const T0: Millis = 1_767_225_600_000;

#[path = "store_conformance/schedules.rs"]
mod schedule_checks;
use schedule_checks::*;

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

fn is_not_found(result: &Result<impl std::fmt::Debug, WorldError>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::NotFound && e.http_status() == 404)
}

fn ids_of(runs: &[worlds_engine::WorkflowState]) -> Vec<String> {
    runs.iter().map(|r| r.id.clone()).collect()
}

/// A run is found by run id and by workflow id, with the fields of its first event.
pub async fn create_run_then_get_by_run_id_and_workflow_id(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.run_id();
    let first = m.queued(
        &id,
        Queued {
            name: "checkout",
            workflow_id: Some("order-7"),
            ..Queued::default()
        },
    );
    store.create_run(first.clone()).await.unwrap();

    let by_run = store.get_run(&id, ResolveData::All).await.unwrap();
    let by_workflow = store.get_run("order-7", ResolveData::All).await.unwrap();
    assert_eq!(by_run, by_workflow);
    assert_eq!(by_run.id, id);
    assert_eq!(by_run.workflow_id, "order-7");
    assert_eq!(by_run.name, "checkout");
    assert_eq!(by_run.status, RunStatus::Pending);
    assert_eq!(by_run.created_at, first.timestamp);
    assert_eq!(by_run.started_at, None);
    assert_eq!(by_run.completed_at, None);
    assert_eq!(by_run.event_count, 1);
    assert_eq!(by_run.input, Some(p(json!({ "n": 1 }))));

    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].seq, 0);
    assert_eq!(history[0].id, first.id);
    assert_eq!(history[0].kind, first.kind);
}

/// Run ids and workflow ids are unique; a refused create leaves no trace.
pub async fn duplicate_run_id_or_workflow_id_is_a_conflict(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.run_id();
    let spec = || Queued {
        name: "w",
        workflow_id: Some("shared"),
        ..Queued::default()
    };
    store.create_run(m.queued(&id, spec())).await.unwrap();

    let same_run = store
        .create_run(m.queued(&id, Queued::named("other")))
        .await;
    assert!(is_conflict(&same_run), "{same_run:?}");
    let other_id = m.run_id();
    let same_workflow = store.create_run(m.queued(&other_id, spec())).await;
    assert!(is_conflict(&same_workflow), "{same_workflow:?}");

    assert!(is_not_found(
        &store.get_run(&other_id, ResolveData::All).await
    ));
    let kept = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(kept.name, "w", "the original run is untouched");
    assert_eq!(
        store.get_run("shared", ResolveData::All).await.unwrap().id,
        id
    );
    assert_eq!(store.history(&id, 0).await.unwrap().len(), 1);
}

/// Every read or write of something that does not exist is a 404.
pub async fn unknown_runs_and_activities_are_not_found(store: Arc<dyn Store>) {
    let m = Maker::new();
    let missing = m.run_id();
    assert!(is_not_found(
        &store.get_run(&missing, ResolveData::All).await
    ));
    assert!(is_not_found(
        &store
            .get_run("no-such-workflow-id", ResolveData::None)
            .await
    ));
    assert!(is_not_found(&store.history(&missing, 0).await));
    assert!(is_not_found(
        &m.append(&*store, &missing, vec![started()]).await
    ));
    assert!(is_not_found(&store.get_activity(&missing, 0).await));

    let id = m.create(&*store, "w").await;
    assert!(is_not_found(&store.get_activity(&id, 0).await));
}

/// The store numbers events densely from 0 whatever `seq` they arrive with, and `history`
/// returns the slice from a given `seq`.
pub async fn append_assigns_dense_seq_and_history_slices(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;

    m.tick(5);
    let mut start = m.event(&id, started());
    start.seq = 99; // whatever the caller says, the store decides
    let appended = store.append(&id, vec![start]).await.unwrap();
    assert_eq!(appended.status, RunStatus::Running);
    assert_eq!(appended.events.len(), 1);
    assert_eq!(appended.events[0].seq, 1);

    m.tick(5);
    let appended = m
        .append(
            &*store,
            &id,
            vec![
                scheduled(0, "a"),
                step_started(0),
                step_completed(0, json!(7)),
            ],
        )
        .await
        .unwrap();
    let seqs: Vec<u64> = appended.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![2, 3, 4]);
    assert_eq!(appended.status, RunStatus::Running);

    let all = store.history(&id, 0).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(all[1].timestamp, T0 + 5);
    assert_eq!(all[2].kind.type_name(), "activity_scheduled");
    let tail = store.history(&id, 2).await.unwrap();
    assert_eq!(tail, all[2..].to_vec());
    assert!(store.history(&id, 5).await.unwrap().is_empty());
    assert!(store.history(&id, 1_000).await.unwrap().is_empty());

    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.event_count, 5);
    assert_eq!(state.started_at, Some(T0 + 5));
    assert_eq!(state.updated_at, T0 + 10);
    let step = store.get_activity(&id, 0).await.unwrap();
    assert_eq!(step.name, "a");
    assert_eq!(step.status, ActivityStatus::Completed);
    assert_eq!(step.output, Some(p(json!(7))));
    assert_eq!(state.activities, vec![step]);
}

/// A batch may refer to what an earlier event of the same batch created (a step scheduled
/// and refused at once), and a batch with any bad event is refused whole.
pub async fn append_checks_a_batch_in_order_and_stores_all_or_nothing(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    // Started and scheduled and refused before any attempt, in one batch.
    m.append(
        &*store,
        &id,
        vec![
            started(),
            scheduled(0, "ghost"),
            EventKind::ActivityFailed {
                position: 0,
                attempt: 0,
                error: StructuredError::new("not registered").with_code("NOT_REGISTERED"),
                retrying: false,
            },
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        store.get_activity(&id, 0).await.unwrap().status,
        ActivityStatus::Failed
    );

    // The second event is bad (no step at position 5): nothing of the batch is stored.
    let before = store.history(&id, 0).await.unwrap();
    let refused = m
        .append(
            &*store,
            &id,
            vec![scheduled(1, "b"), step_completed(5, json!(0))],
        )
        .await;
    assert!(is_conflict(&refused), "{refused:?}");
    assert_eq!(store.history(&id, 0).await.unwrap(), before);
    assert!(is_not_found(&store.get_activity(&id, 1).await));
    assert_eq!(
        store
            .get_run(&id, ResolveData::None)
            .await
            .unwrap()
            .event_count,
        before.len() as u64
    );
}

/// Once a run has finished, nothing more is appended to it.
pub async fn append_after_terminal_is_a_conflict(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    m.append(&*store, &id, vec![started(), scheduled(0, "a")])
        .await
        .unwrap();
    m.tick(10);
    let done = m.append(&*store, &id, vec![completed()]).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let length = store.history(&id, 0).await.unwrap().len();

    for late in [
        scheduled(1, "b"),
        step_started(0),
        started(),
        completed(),
        failed(),
        EventKind::WorkflowCancelled { reason: None },
        EventKind::TimerScheduled {
            position: 1,
            fire_at: T0,
        },
    ] {
        let name = late.type_name();
        let result = m.append(&*store, &id, vec![late]).await;
        assert!(is_conflict(&result), "{name}: {result:?}");
    }
    assert_eq!(store.history(&id, 0).await.unwrap().len(), length);
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.completed_at, Some(T0 + 10));
    assert_eq!(state.output, Some(p(json!("done"))));
}

/// A step's result is recorded once; a second completion (a duplicate delivery) is refused
/// and the first result stands.
pub async fn duplicate_activity_completion_is_a_conflict(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    m.append(
        &*store,
        &id,
        vec![
            started(),
            scheduled(0, "a"),
            step_started(0),
            step_completed(0, json!("first")),
        ],
    )
    .await
    .unwrap();
    let again = m
        .append(&*store, &id, vec![step_completed(0, json!("second"))])
        .await;
    assert!(is_conflict(&again), "{again:?}");
    let failing = m
        .append(
            &*store,
            &id,
            vec![EventKind::ActivityFailed {
                position: 0,
                attempt: 1,
                error: StructuredError::new("late"),
                retrying: false,
            }],
        )
        .await;
    assert!(is_conflict(&failing), "{failing:?}");
    let step = store.get_activity(&id, 0).await.unwrap();
    assert_eq!(step.status, ActivityStatus::Completed);
    assert_eq!(step.output, Some(p(json!("first"))));
    assert_eq!(store.history(&id, 0).await.unwrap().len(), 5);
    // Scheduling a second step at a taken position is refused too.
    let twice = m.append(&*store, &id, vec![scheduled(0, "a")]).await;
    assert!(is_conflict(&twice), "{twice:?}");
}

/// Status changes follow the run status machine; a refused one changes nothing.
pub async fn invalid_status_transitions_are_refused(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    // pending → completed skips running.
    let skip = m.append(&*store, &id, vec![completed()]).await;
    assert!(
        matches!(
            skip,
            Err(WorldError::InvalidTransition {
                from: RunStatus::Pending,
                to: RunStatus::Completed,
                ..
            })
        ),
        "{skip:?}"
    );
    assert_eq!(
        store.get_run(&id, ResolveData::None).await.unwrap().status,
        RunStatus::Pending
    );
    // Steps need a running run.
    let early = m.append(&*store, &id, vec![scheduled(0, "a")]).await;
    assert!(is_conflict(&early), "{early:?}");

    m.append(&*store, &id, vec![started()]).await.unwrap();
    // running → running.
    let restart = m.append(&*store, &id, vec![started()]).await;
    assert!(is_conflict(&restart), "{restart:?}");
    m.append(&*store, &id, vec![failed()]).await.unwrap();
    // failed → completed.
    let revive = m.append(&*store, &id, vec![completed()]).await;
    assert!(
        matches!(
            revive,
            Err(WorldError::InvalidTransition {
                from: RunStatus::Failed,
                ..
            })
        ),
        "{revive:?}"
    );
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(
        state.error.as_ref().unwrap().code.as_deref(),
        Some("E_TEST")
    );
}

/// Odd strings survive storage exactly: NUL bytes, emoji, right-to-left text, quotes,
/// backslashes and newlines, in workflow ids, names and payloads.
pub async fn odd_ids_names_and_payloads_round_trip(store: Arc<dyn Store>) {
    let odd = "nul:\u{0}|emoji:😀🧪|rtl:\u{202E}שלום مرحبا|zwj:👩\u{200D}💻|\"q\"\\\n\t|é";
    let m = Maker::new();
    let id = m.run_id();
    let workflow_id = format!("wf-{odd}");
    let name = format!("name-{odd}");
    let input = p(json!({ "text": odd, "list": [odd, null, 1.5], odd: true }));
    let first = m.queued(
        &id,
        Queued {
            name: &name,
            workflow_id: Some(&workflow_id),
            input: Some(input.clone()),
            ..Queued::default()
        },
    );
    store.create_run(first.clone()).await.unwrap();
    let step_name = format!("step-{odd}");
    m.append(
        &*store,
        &id,
        vec![
            started(),
            scheduled(0, &step_name),
            step_started(0),
            step_completed(0, json!([odd])),
        ],
    )
    .await
    .unwrap();

    let state = store.get_run(&workflow_id, ResolveData::All).await.unwrap();
    assert_eq!(state.id, id);
    assert_eq!(state.workflow_id, workflow_id);
    assert_eq!(state.name, name);
    assert_eq!(state.input, Some(input.clone()));
    let decoded: serde_json::Value = state.input.as_ref().unwrap().decode().unwrap();
    assert_eq!(decoded["text"], odd);
    let step = store.get_activity(&id, 0).await.unwrap();
    assert_eq!(step.name, step_name);
    assert_eq!(step.output, Some(p(json!([odd]))));
    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history[0].kind, first.kind);
    let listed = store
        .list_runs(&WorkflowQueryFilter::new().workflow_name(name.clone()))
        .await
        .unwrap();
    assert_eq!(ids_of(&listed.data), vec![id.clone()]);
    // A workflow id that differs only after the NUL byte is a different id.
    assert!(is_not_found(
        &store.get_run("wf-nul:\u{0}", ResolveData::None).await
    ));
}

/// `list_runs`: filters, newest-first order, offset/limit, cursor pages and payload stripping.
pub async fn list_runs_filters_pages_and_strips(store: Arc<dyn Store>) {
    let m = Maker::new();
    // Ten runs, one second apart: names alternate, statuses vary, two are children of the first.
    let mut runs: Vec<String> = Vec::new(); // oldest first
    for i in 0..10u32 {
        let id = m.run_id();
        let name = if i % 2 == 0 { "even" } else { "odd" };
        let parent = if i == 4 || i == 7 {
            Some(runs[0].clone())
        } else {
            None
        };
        store
            .create_run(m.queued(
                &id,
                Queued {
                    name,
                    parent: parent.as_deref(),
                    ..Queued::default()
                },
            ))
            .await
            .unwrap();
        match i % 4 {
            0 => {}
            1 => {
                m.append(&*store, &id, vec![started()]).await.unwrap();
            }
            2 => {
                m.append(&*store, &id, vec![started(), completed()])
                    .await
                    .unwrap();
            }
            _ => {
                m.append(&*store, &id, vec![started(), failed()])
                    .await
                    .unwrap();
            }
        }
        runs.push(id);
        m.tick(1_000);
    }
    let newest_first: Vec<String> = runs.iter().rev().cloned().collect();
    let created = |i: usize| T0 + 1_000 * i as i64;
    let list = |filter: WorkflowQueryFilter| {
        let store = store.clone();
        async move { ids_of(&store.list_runs(&filter).await.unwrap().data) }
    };
    let pick = |idx: &[usize]| -> Vec<String> { idx.iter().map(|&i| runs[i].clone()).collect() };

    assert_eq!(list(WorkflowQueryFilter::new()).await, newest_first);
    // Status: one, and several.
    assert_eq!(
        list(WorkflowQueryFilter::new().status(RunStatus::Pending)).await,
        pick(&[8, 4, 0])
    );
    assert_eq!(
        list(WorkflowQueryFilter::new().status([RunStatus::Completed, RunStatus::Failed])).await,
        pick(&[7, 6, 3, 2])
    );
    assert!(
        list(WorkflowQueryFilter::new().status(RunStatus::Cancelled))
            .await
            .is_empty()
    );
    // Name, parent, and combinations.
    assert_eq!(
        list(WorkflowQueryFilter::new().workflow_name("odd")).await,
        pick(&[9, 7, 5, 3, 1])
    );
    assert_eq!(
        list(WorkflowQueryFilter::new().parent_id(runs[0].clone())).await,
        pick(&[7, 4])
    );
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .parent_id(runs[0].clone())
                .workflow_name("even")
        )
        .await,
        pick(&[4])
    );
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .workflow_name("even")
                .status(RunStatus::Pending)
        )
        .await,
        pick(&[8, 4, 0])
    );
    // Creation time: [after, before).
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .started_after(created(3))
                .started_before(created(6))
        )
        .await,
        pick(&[5, 4, 3])
    );
    // Offset and limit.
    assert_eq!(
        list(WorkflowQueryFilter::new().offset(2).limit(3)).await,
        newest_first[2..5].to_vec()
    );
    assert_eq!(
        list(WorkflowQueryFilter::new().workflow_name("odd").offset(4)).await,
        pick(&[1])
    );

    // Cursor pages of 3: 3 + 3 + 3 + 1, no gaps, no duplicates, the last without a cursor.
    let mut filter = WorkflowQueryFilter::new().limit(3);
    let mut seen = Vec::new();
    let mut shapes = Vec::new();
    loop {
        let page = store.list_runs(&filter).await.unwrap();
        shapes.push((page.data.len(), page.has_more, page.cursor.is_some()));
        seen.extend(ids_of(&page.data));
        match page.cursor {
            Some(cursor) if shapes.len() < 10 => filter = filter.cursor(cursor),
            _ => break,
        }
    }
    assert_eq!(
        shapes,
        vec![
            (3, true, true),
            (3, true, true),
            (3, true, true),
            (1, false, false)
        ]
    );
    assert_eq!(seen, newest_first);
    // A cursor combines with filters.
    let first = store
        .list_runs(&WorkflowQueryFilter::new().workflow_name("even").limit(2))
        .await
        .unwrap();
    assert_eq!(ids_of(&first.data), pick(&[8, 6]));
    let rest = store
        .list_runs(
            &WorkflowQueryFilter::new()
                .workflow_name("even")
                .limit(2)
                .cursor(first.cursor.clone().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&rest.data), pick(&[4, 2]));
    assert!(rest.has_more);

    // resolve_data: none strips payloads but keeps metadata; lists never carry history.
    let full = store
        .list_runs(&WorkflowQueryFilter::new().status(RunStatus::Completed))
        .await
        .unwrap();
    assert!(full
        .data
        .iter()
        .all(|r| r.input.is_some() && r.output.is_some()));
    let lean = store
        .list_runs(
            &WorkflowQueryFilter::new()
                .status(RunStatus::Completed)
                .resolve_data(ResolveData::None),
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&lean.data), ids_of(&full.data));
    for r in &lean.data {
        assert_eq!((r.input.as_ref(), r.output.as_ref()), (None, None));
        assert_eq!(r.status, RunStatus::Completed);
        assert!(r.history.is_empty());
    }
    assert!(full.data.iter().all(|r| r.history.is_empty()));
    let one = store.get_run(&runs[2], ResolveData::None).await.unwrap();
    assert_eq!((one.input, one.output), (None, None));
}

fn sleep_timer(run_id: &str, fire_at: Millis, position: u32) -> Timer {
    Timer {
        fire_at,
        run_id: run_id.to_owned(),
        kind: TimerKind::Sleep { position },
    }
}

/// Timers: the earliest is reported, due ones are taken earliest first up to a limit and
/// only once, a duplicate add keeps one, and a run's timers can be removed together.
pub async fn timers_fire_in_order_once_and_are_removable(store: Arc<dyn Store>) {
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    assert!(store
        .take_due_timers(i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());

    let late = sleep_timer("wrun_a", T0 + 3_000, 1);
    let early = sleep_timer("wrun_b", T0 + 1_000, 0);
    let middle = Timer {
        fire_at: T0 + 2_000,
        run_id: "wrun_a".into(),
        kind: TimerKind::ActivityRetry {
            position: 0,
            attempt: 2,
        },
    };
    let timeout = Timer {
        fire_at: T0 + 10_000,
        run_id: "wrun_a".into(),
        kind: TimerKind::RunTimeout,
    };
    for timer in [&late, &early, &middle, &timeout, &early, &late] {
        store.add_timer(timer.clone()).await.unwrap();
    }
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 1_000));

    // Nothing is due before its time.
    assert!(store
        .take_due_timers(T0 + 999, 10)
        .await
        .unwrap()
        .is_empty());
    // Due ones come earliest first, at most `limit` at a time, each once (duplicates merged).
    let due = store.take_due_timers(T0 + 5_000, 2).await.unwrap();
    assert_eq!(due, vec![early.clone(), middle.clone()]);
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 3_000));
    let due = store.take_due_timers(T0 + 5_000, 10).await.unwrap();
    assert_eq!(due, vec![late.clone()], "the duplicate add left one timer");
    assert!(store
        .take_due_timers(T0 + 5_000, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 10_000));

    // Removing a run's timers leaves other runs' timers alone.
    store
        .add_timer(sleep_timer("wrun_b", T0 + 20_000, 3))
        .await
        .unwrap();
    store
        .add_timer(sleep_timer("wrun_a", T0 + 15_000, 4))
        .await
        .unwrap();
    store.remove_run_timers("wrun_a").await.unwrap();
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 20_000));
    let rest = store.take_due_timers(i64::MAX, 10).await.unwrap();
    assert_eq!(rest, vec![sleep_timer("wrun_b", T0 + 20_000, 3)]);
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    // Removing timers of a run that has none is fine.
    store.remove_run_timers("wrun_none").await.unwrap();
}

/// `unfinished_runs` lists exactly the runs that still need work.
pub async fn unfinished_runs_lists_pending_and_running_only(store: Arc<dyn Store>) {
    let m = Maker::new();
    assert!(store.unfinished_runs().await.unwrap().is_empty());
    let pending = m.create(&*store, "w").await;
    let running = m.create(&*store, "w").await;
    m.append(&*store, &running, vec![started()]).await.unwrap();
    let done = m.create(&*store, "w").await;
    m.append(&*store, &done, vec![started(), completed()])
        .await
        .unwrap();
    let broken = m.create(&*store, "w").await;
    m.append(&*store, &broken, vec![started(), failed()])
        .await
        .unwrap();
    let cancelled = m.create(&*store, "w").await;
    m.append(
        &*store,
        &cancelled,
        vec![EventKind::WorkflowCancelled {
            reason: Some("stop".into()),
        }],
    )
    .await
    .unwrap();

    let unfinished: BTreeSet<String> = store.unfinished_runs().await.unwrap().into_iter().collect();
    assert_eq!(
        unfinished,
        BTreeSet::from([pending.clone(), running.clone()])
    );
    // Finishing a run takes it off the list.
    m.append(&*store, &running, vec![completed()])
        .await
        .unwrap();
    assert_eq!(store.unfinished_runs().await.unwrap(), vec![pending]);
}

/// `append_nowait` is checked and numbered like `append` (and before any later write), and
/// once `wait_durable` returns, its events are readable like any others.
pub async fn append_nowait_is_checked_ordered_and_readable_once_durable(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(store.as_ref(), "nowait").await;
    let events = vec![m.event(&id, started()), m.event(&id, scheduled(0, "a"))];
    let appended = store.append_nowait(&id, events).await.unwrap();
    let seqs: Vec<u64> = appended.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(appended.status, RunStatus::Running);
    // Checked against the unwaited events: a second schedule of position 0 is refused.
    let again = vec![m.event(&id, scheduled(0, "a"))];
    assert!(store.append_nowait(&id, again).await.is_err());
    // A waited append after it is numbered after it, and makes it durable too.
    let done = m
        .append(store.as_ref(), &id, vec![step_started(0)])
        .await
        .unwrap();
    assert_eq!(done.events[0].seq, 3);
    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history.len(), 4);
    assert_eq!(
        store.get_activity(&id, 0).await.unwrap().status,
        ActivityStatus::Running
    );

    let more = vec![m.event(&id, step_completed(0, json!(1)))];
    store.append_nowait(&id, more).await.unwrap();
    store.wait_durable(&id).await.unwrap();
    let history = store.history(&id, 0).await.unwrap();
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.activities[0].status, ActivityStatus::Completed);
    // Waiting on a run with nothing pending, or on an unknown one, returns at once.
    store.wait_durable(&id).await.unwrap();
    store.wait_durable("wrun_unknown").await.unwrap();
}

/// `history_tip` shows a run's events the moment they are accepted, waited for or not; once
/// they are durable, `history` shows the same events.
pub async fn history_tip_shows_every_accepted_event_at_once(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(store.as_ref(), "tip").await;
    let queued = vec![m.event(&id, started()), m.event(&id, scheduled(0, "a"))];
    store.append_nowait(&id, queued).await.unwrap();
    let tip = store.history_tip(&id, 0).await.unwrap();
    let seqs: Vec<u64> = tip.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2]);
    let written = vec![m.event(&id, step_started(0))];
    store.append_written(&id, written).await.unwrap();
    let tip = store.history_tip(&id, 2).await.unwrap();
    let seqs: Vec<u64> = tip.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    assert!(matches!(
        tip[1].kind,
        EventKind::ActivityStarted { attempt: 1, .. }
    ));
    store.wait_durable(&id).await.unwrap();
    let durable = store.history(&id, 0).await.unwrap();
    let tip = store.history_tip(&id, 0).await.unwrap();
    assert_eq!(durable, tip);
    assert!(store.history_tip("wrun_unknown", 0).await.is_err());
}

fn chunk(m: &Maker, key: Option<&str>, data: impl Into<Bytes>) -> NewChunk {
    NewChunk {
        id: m.ids.next(CHUNK_PREFIX),
        created_at: m.now(),
        key: key.map(str::to_owned),
        data: data.into(),
    }
}

/// Chunks get indexes 0, 1, 2… per stream; pages slice them; unknown streams read as empty.
pub async fn streams_get_dense_indexes_pages_and_names(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.run_id();
    for i in 0..5 {
        let stored = store
            .write_chunk(&run, "default", chunk(&m, None, format!("c{i}")))
            .await
            .unwrap();
        assert_eq!(stored.index, i);
        assert!(stored.id.starts_with(CHUNK_PREFIX));
        assert_eq!(stored.created_at, m.now());
        m.tick(1);
    }
    store
        .write_chunk(&run, "b-side", chunk(&m, None, "x"))
        .await
        .unwrap();
    let (page, info) = store.stream_chunks(&run, "default", 1, 3).await.unwrap();
    let indexes: Vec<u64> = page.iter().map(|c| c.index).collect();
    assert_eq!(indexes, [1, 2, 3]);
    assert_eq!(page[0].data, Bytes::from("c1"));
    assert_eq!(
        info,
        StreamInfo {
            tail_index: 4,
            done: false
        }
    );
    let (rest, _) = store.stream_chunks(&run, "default", 4, 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    let (past, _) = store.stream_chunks(&run, "default", 9, 10).await.unwrap();
    assert!(past.is_empty());
    assert_eq!(
        store.list_streams(&run).await.unwrap(),
        vec!["b-side".to_owned(), "default".to_owned()]
    );
    // Unknown streams and runs read as empty and open.
    let empty = StreamInfo {
        tail_index: -1,
        done: false,
    };
    assert_eq!(store.stream_info(&run, "nope").await.unwrap(), empty);
    assert_eq!(
        store.stream_info(&m.run_id(), "default").await.unwrap(),
        empty
    );
    assert!(store.list_streams(&m.run_id()).await.unwrap().is_empty());
}

/// A write key is stored once; a closed stream refuses new chunks (409) but still finds keyed ones.
pub async fn stream_keys_dedupe_and_closed_streams_refuse_new_chunks(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.run_id();
    let first = store
        .write_chunk(&run, "s", chunk(&m, Some("w1.0"), "a"))
        .await
        .unwrap();
    let again = store
        .write_chunk(&run, "s", chunk(&m, Some("w1.0"), "a"))
        .await
        .unwrap();
    assert_eq!(again, first, "a key already stored adds nothing");
    store
        .write_chunk(&run, "s", chunk(&m, Some("w1.1"), "b"))
        .await
        .unwrap();
    store.close_stream(&run, "s").await.unwrap();
    store.close_stream(&run, "s").await.unwrap();
    assert_eq!(
        store.stream_info(&run, "s").await.unwrap(),
        StreamInfo {
            tail_index: 1,
            done: true
        }
    );
    let refused = store.write_chunk(&run, "s", chunk(&m, None, "c")).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);
    // A replayed write of a stored key still finds its chunk once the stream is closed.
    let replayed = store
        .write_chunk(&run, "s", chunk(&m, Some("w1.0"), "a"))
        .await
        .unwrap();
    assert_eq!(replayed, first);

    // Closing the run closes every open stream; closing an unknown stream creates it closed.
    store
        .write_chunk(&run, "t", chunk(&m, None, "x"))
        .await
        .unwrap();
    store.close_stream(&run, "never-written").await.unwrap();
    store.close_run_streams(&run).await.unwrap();
    assert!(store.stream_info(&run, "t").await.unwrap().done);
    assert_eq!(
        store.stream_info(&run, "never-written").await.unwrap(),
        StreamInfo {
            tail_index: -1,
            done: true
        }
    );
    assert_eq!(
        store.list_streams(&run).await.unwrap(),
        ["never-written", "s", "t"]
    );
    store.close_run_streams(&m.run_id()).await.unwrap();
}

/// Any bytes (empty, binary, text with newlines) and any names come back as written.
pub async fn stream_data_and_names_round_trip(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.run_id();
    let payloads: Vec<Bytes> = vec![
        Bytes::new(),
        Bytes::from_static(&[0, 159, 146, 150, 255, b'\n']),
        Bytes::from("line one\nline \"two\" ünï ✓"),
        Bytes::from(serde_json::to_vec(&json!({ "progress": 50 })).unwrap()),
    ];
    let names = ["a/b", ".hidden", "ünï côdé", "50% done", "default"];
    for name in names {
        for data in &payloads {
            store
                .write_chunk(&run, name, chunk(&m, None, data.clone()))
                .await
                .unwrap();
        }
        let (stored, _) = store.stream_chunks(&run, name, 0, 100).await.unwrap();
        let data: Vec<Bytes> = stored.into_iter().map(|c| c.data).collect();
        assert_eq!(data, payloads, "stream {name:?}");
    }
    let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    sorted.sort();
    assert_eq!(store.list_streams(&run).await.unwrap(), sorted);
}

/// The change signal fires once per change to the run's streams, and not for other runs.
pub async fn stream_signal_fires_after_each_change(store: Arc<dyn Store>) {
    use futures::FutureExt;
    let m = Maker::new();
    let run = m.run_id();
    let mut signal = store.watch_streams(&run);
    assert!(
        signal.changed().now_or_never().is_none(),
        "nothing changed yet"
    );
    store
        .write_chunk(&run, "s", chunk(&m, None, "a"))
        .await
        .unwrap();
    assert!(signal.changed().now_or_never().is_some());
    assert!(signal.changed().now_or_never().is_none());
    store.close_run_streams(&run).await.unwrap();
    assert!(signal.changed().now_or_never().is_some());
    // Another run's changes do not fire it.
    store
        .write_chunk(&m.run_id(), "s", chunk(&m, None, "b"))
        .await
        .unwrap();
    assert!(signal.changed().now_or_never().is_none());
}

/// Generates one `#[tokio::test]` per check for a backend: `conformance!(name, make_store)`,
/// where `make_store` is a closure returning a fresh, empty `Arc<dyn Store>`.
macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        conformance!(
            @checks $backend, $make,
            create_run_then_get_by_run_id_and_workflow_id,
            duplicate_run_id_or_workflow_id_is_a_conflict,
            unknown_runs_and_activities_are_not_found,
            append_assigns_dense_seq_and_history_slices,
            append_checks_a_batch_in_order_and_stores_all_or_nothing,
            append_after_terminal_is_a_conflict,
            duplicate_activity_completion_is_a_conflict,
            invalid_status_transitions_are_refused,
            odd_ids_names_and_payloads_round_trip,
            list_runs_filters_pages_and_strips,
            timers_fire_in_order_once_and_are_removable,
            unfinished_runs_lists_pending_and_running_only,
            append_nowait_is_checked_ordered_and_readable_once_durable,
            history_tip_shows_every_accepted_event_at_once,
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
