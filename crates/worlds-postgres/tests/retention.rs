//! Retention on PostgreSQL: finished runs listed by end time from the `runs_ended` index, and a
//! run removed with its rows in every table, checked table by table; the checks that keep a
//! run (unfinished, ended later, a child or parent still running) made on locked rows, so a
//! reopen racing a removal either wins (the run is kept) or finds the run gone. A sweep on a
//! world stops a schedule naming a run it removed, and keeps a newer run stored meanwhile.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use worlds_engine::clock::{Millis, VirtualClock};
use worlds_engine::duration::Dur;
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::{QueuedRun, ReopenAction, EVENT_FORMAT_VERSION};
use worlds_engine::store::{
    EndedCursor, EndedRun, EventStore, HookStore, IdempotencyStore, Kept, NewChunk, Removal,
    RetentionStore, RunStore, StepStore, StreamStore, Timer, TimerKind, TimerStore,
};
use worlds_engine::{
    ErrorKind, Event, EventKind, Payload, ResolveData, RunStatus, StructuredError,
};
use worlds_postgres::PostgresStore;

const T0: Millis = 1_767_225_600_000;

/// Ids as the engine makes them, and events with the times a test gives them.
struct Maker {
    ids: IdGenerator,
}

#[derive(Default)]
struct Spec<'a> {
    name: &'a str,
    workflow_id: Option<&'a str>,
    parent: Option<&'a str>,
    key: Option<&'a str>,
}

impl Maker {
    fn new() -> Self {
        Self {
            ids: IdGenerator::new(Arc::new(VirtualClock::new(T0))),
        }
    }

    fn event(&self, run_id: &str, at: Millis, kind: EventKind) -> Event {
        Event {
            id: self.ids.event_id(),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: at,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// Creates a run at `T0` and returns its id.
    async fn create(&self, store: &PostgresStore, spec: Spec<'_>) -> String {
        let id = self.ids.run_id();
        let queued = QueuedRun {
            parent_id: spec.parent.map(str::to_owned),
            parent_position: spec.parent.map(|_| 0),
            idempotency_key: spec.key.map(str::to_owned),
            ..QueuedRun::new(
                if spec.name.is_empty() {
                    "flow"
                } else {
                    spec.name
                }
                .to_owned(),
                spec.workflow_id.unwrap_or(&id).to_owned(),
                Payload::from(json!({ "n": 1 })),
            )
        };
        let first = self.event(&id, T0, EventKind::WorkflowQueued(Box::new(queued)));
        store.create_run(first).await.unwrap();
        id
    }

    async fn append(&self, store: &PostgresStore, run_id: &str, at: Millis, kinds: Vec<EventKind>) {
        let events = kinds
            .into_iter()
            .map(|k| self.event(run_id, at, k))
            .collect();
        store.append(run_id, events).await.unwrap();
    }

    /// Creates a running run.
    async fn running(&self, store: &PostgresStore, spec: Spec<'_>) -> String {
        let id = self.create(store, spec).await;
        self.append(store, &id, T0 + 1, vec![started()]).await;
        id
    }

    /// Creates a run that completed at `at`.
    async fn completed(&self, store: &PostgresStore, spec: Spec<'_>, at: Millis) -> String {
        let id = self.running(store, spec).await;
        self.append(store, &id, at, vec![completed()]).await;
        id
    }

    /// Creates a run that failed at `at`.
    async fn failed(&self, store: &PostgresStore, spec: Spec<'_>, at: Millis) -> String {
        let id = self.running(store, spec).await;
        self.append(store, &id, at, vec![failed()]).await;
        id
    }
}

fn started() -> EventKind {
    EventKind::WorkflowStarted {
        attempt: 1,
        first_position: 0,
    }
}

fn completed() -> EventKind {
    EventKind::WorkflowCompleted {
        output: Payload::from(json!("done")),
    }
}

fn failed() -> EventKind {
    EventKind::WorkflowFailed {
        error: StructuredError::new("boom"),
    }
}

fn reopen(attempt: u32) -> EventKind {
    EventKind::RunReopened {
        action: ReopenAction::Retry,
        attempt,
        kept_from: 0,
        kept_until: 0,
        next_position: 0,
        by: Some("ops".into()),
        reason: Some("fixed".into()),
        operation: None,
    }
}

fn hook_created(position: u32, hook_id: &str, digest: &str) -> EventKind {
    EventKind::HookCreated {
        position,
        hook_id: hook_id.to_owned(),
        token_digest: digest.to_owned(),
        expires_at: None,
        webhook: false,
        methods: Vec::new(),
        hook_type: None,
        signature: None,
        metadata: None,
    }
}

/// A store on a fresh schema, or `None` when no test database answers.
async fn world() -> Option<(String, PostgresStore)> {
    if !common::database_up().await {
        return None;
    }
    let schema = common::fresh_schema();
    let store = common::store(&schema, common::options(&schema)).await;
    Some((schema, store))
}

async fn done(schema: &str, store: PostgresStore) {
    let _ = store.close().await;
    common::drop_schema(schema).await;
}

/// Every table that holds rows of a run, with the column naming it.
const RUN_TABLES: &[&str] = &[
    "runs", "events", "steps", "hooks", "timers", "streams", "chunks",
];

/// How many rows of `run_id` each table holds.
async fn rows_of(schema: &str, run_id: &str) -> Vec<(&'static str, i64)> {
    let pool = common::sql(schema);
    let mut counts = Vec::new();
    for table in RUN_TABLES {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE run_id = $1"
        )))
        .bind(run_id)
        .fetch_one(&pool)
        .await
        .unwrap();
        counts.push((*table, n));
    }
    counts
}

fn ids(runs: &[EndedRun]) -> Vec<&str> {
    runs.iter().map(|r| r.run_id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_come_in_end_time_order_in_pages_before_the_bound() {
    let Some((schema, store)) = world().await else {
        return;
    };
    let m = Maker::new();
    // Ended at 100, 100, 200, 300 (after T0), one at the bound, one running, one reopened.
    let a = m.completed(&store, Spec::default(), T0 + 100).await;
    let b = m
        .failed(
            &store,
            Spec {
                name: "billing",
                key: Some("key-1"),
                ..Spec::default()
            },
            T0 + 100,
        )
        .await;
    m.append(
        &store,
        &b,
        T0 + 150,
        vec![EventKind::WorkflowQuarantined {
            reason: "look".into(),
        }],
    )
    .await;
    let c = m.completed(&store, Spec::default(), T0 + 300).await;
    let d = m.completed(&store, Spec::default(), T0 + 200).await;
    let at_bound = m.completed(&store, Spec::default(), T0 + 400).await;
    let _running = m.running(&store, Spec::default()).await;
    let reopened = m.failed(&store, Spec::default(), T0 + 50).await;
    m.append(&store, &reopened, T0 + 60, vec![reopen(2)]).await;

    let mut first_two = vec![a.clone(), b.clone()];
    first_two.sort();
    let all = store.ended_runs(T0 + 400, None, 100).await.unwrap();
    let mut expected = first_two.clone();
    expected.extend([d.clone(), c.clone()]);
    assert_eq!(
        ids(&all),
        expected,
        "end time, then run id; strictly before the bound"
    );

    let billing = all.iter().find(|r| r.run_id == b).unwrap();
    assert_eq!(
        billing,
        &EndedRun {
            run_id: b.clone(),
            name: "billing".into(),
            status: RunStatus::Failed,
            quarantined: true,
            created_at: T0,
            ended_at: T0 + 100,
            has_idempotency_key: true,
        }
    );
    let plain = all.iter().find(|r| r.run_id == a).unwrap();
    assert_eq!(plain.status, RunStatus::Completed);
    assert!(!plain.quarantined && !plain.has_idempotency_key);
    assert_eq!(plain.name, "flow");

    // Pages of two, each going on after the last one listed.
    let page = store.ended_runs(T0 + 400, None, 2).await.unwrap();
    assert_eq!(ids(&page), first_two);
    let page = store
        .ended_runs(T0 + 400, Some(&page[1].cursor()), 2)
        .await
        .unwrap();
    assert_eq!(ids(&page), [d.as_str(), c.as_str()]);
    let page = store
        .ended_runs(T0 + 400, Some(&page[1].cursor()), 2)
        .await
        .unwrap();
    assert!(page.is_empty());
    // A cursor between two runs of the same end time goes on with the second.
    let cursor = EndedCursor {
        ended_at: T0 + 100,
        run_id: first_two[0].clone(),
    };
    let page = store.ended_runs(T0 + 400, Some(&cursor), 1).await.unwrap();
    assert_eq!(ids(&page), [first_two[1].as_str()]);
    assert!(store
        .ended_runs(T0 + 400, None, 0)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .ended_runs(T0 + 100, None, 10)
        .await
        .unwrap()
        .is_empty());
    let with_bound = store.ended_runs(T0 + 401, None, 10).await.unwrap();
    assert_eq!(with_bound.last().unwrap().run_id, at_bound);

    // A reopened run has no end time until it ends again, and is then listed by its new end.
    let ended_at: Option<i64> = sqlx::query_scalar("SELECT ended_at FROM runs WHERE run_id = $1")
        .bind(&reopened)
        .fetch_one(&common::sql(&schema))
        .await
        .unwrap();
    assert_eq!(ended_at, None);
    let refailed = m.failed(&store, Spec::default(), T0 + 40).await;
    m.append(
        &store,
        &refailed,
        T0 + 500,
        vec![reopen(2), started_again(), failed()],
    )
    .await;
    let later = store.ended_runs(T0 + 1_000, None, 10).await.unwrap();
    assert_eq!(later.last().unwrap().run_id, refailed);
    assert_eq!(later.last().unwrap().ended_at, T0 + 500);
    assert!(later.iter().all(|r| r.run_id != reopened));

    // The listing can read the partial index (a table this small may be read whole unless
    // told otherwise).
    let mut conn = common::sql(&schema).acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT run_id FROM runs WHERE finished AND ended_at < 5
         ORDER BY ended_at, run_id LIMIT 10",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    sqlx::query("RESET enable_seqscan")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let plan = plan.join("\n");
    assert!(plan.contains("runs_ended"), "{plan}");
    done(&schema, store).await;
}

fn started_again() -> EventKind {
    EventKind::WorkflowStarted {
        attempt: 2,
        first_position: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_run_leaves_no_row_and_frees_its_workflow_id_key_and_token() {
    let Some((schema, store)) = world().await else {
        return;
    };
    let m = Maker::new();
    let run = m
        .running(
            &store,
            Spec {
                workflow_id: Some("order-7"),
                key: Some("pay-7"),
                ..Spec::default()
            },
        )
        .await;
    let step_id = m.ids.step_id();
    let hook_id = m.ids.hook_id();
    m.append(
        &store,
        &run,
        T0 + 2,
        vec![EventKind::ActivityScheduled {
            position: 0,
            activity_id: step_id.clone(),
            name: "charge".into(),
            input: Payload::from(json!(1)),
            options: None,
            inline: false,
        }],
    )
    .await;
    m.append(
        &store,
        &run,
        T0 + 3,
        vec![EventKind::ActivityStarted {
            position: 0,
            attempt: 1,
        }],
    )
    .await;
    m.append(
        &store,
        &run,
        T0 + 4,
        vec![EventKind::ActivityCompleted {
            position: 0,
            attempt: 1,
            output: Payload::from(json!(2)),
        }],
    )
    .await;
    m.append(
        &store,
        &run,
        T0 + 5,
        vec![hook_created(1, &hook_id, "digest-7")],
    )
    .await;
    store
        .write_chunk(
            &run,
            "out",
            NewChunk {
                id: "chnk_01".into(),
                created_at: T0 + 6,
                key: Some("w1".into()),
                data: Bytes::from_static(b"hello"),
            },
        )
        .await
        .unwrap();
    m.append(&store, &run, T0 + 10, vec![completed()]).await;
    // A late timer (finishing deleted the run's timers): removed all the same.
    store
        .add_timer(Timer {
            fire_at: T0 + 1_000_000,
            run_id: run.clone(),
            kind: TimerKind::Sleep { position: 3 },
        })
        .await
        .unwrap();
    // A run beside it keeps everything.
    let bystander = m.completed(&store, Spec::default(), T0 + 10).await;
    let bystander_rows = rows_of(&schema, &bystander).await;

    let before = rows_of(&schema, &run).await;
    assert!(before.iter().all(|(_, n)| *n > 0), "{before:?}");
    let history = store.history(&run, 0).await.unwrap().len() as u64;
    assert_eq!(history, 7);

    let removed = store.remove_run(&run, T0 + 11).await.unwrap();
    assert_eq!(removed, Removal::Removed { events: history });
    let after = rows_of(&schema, &run).await;
    assert!(after.iter().all(|(_, n)| *n == 0), "{after:?}");
    let steps: i64 = sqlx::query_scalar("SELECT count(*) FROM steps WHERE step_id = $1")
        .bind(&step_id)
        .fetch_one(&common::sql(&schema))
        .await
        .unwrap();
    assert_eq!(steps, 0);
    assert_eq!(rows_of(&schema, &bystander).await, bystander_rows);

    // Gone for every read; the second removal finds nothing.
    for id in [run.as_str(), "order-7"] {
        let err = store.get_run(id, ResolveData::None).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{id}");
    }
    assert_eq!(
        store
            .get_step(&step_id, ResolveData::None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        store.get_hook(&hook_id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(store.find_hook("digest-7").await.unwrap().is_none());
    assert!(store
        .find_by_idempotency_key("pay-7", 0)
        .await
        .unwrap()
        .is_none());
    assert!(store.list_streams(&run).await.unwrap().is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    assert_eq!(
        store.remove_run(&run, T0 + 11).await.unwrap(),
        Removal::Gone
    );
    assert_eq!(
        store.remove_run("wrun_never", T0 + 11).await.unwrap(),
        Removal::Gone
    );
    assert!(store
        .ended_runs(T0 + 11, None, 10)
        .await
        .unwrap()
        .iter()
        .all(|r| r.run_id != run));

    // The workflow id and the key are free again, and the token goes to a new run's hook.
    let again = m
        .running(
            &store,
            Spec {
                workflow_id: Some("order-7"),
                key: Some("pay-7"),
                ..Spec::default()
            },
        )
        .await;
    assert_eq!(
        store
            .get_run("order-7", ResolveData::None)
            .await
            .unwrap()
            .id,
        again
    );
    assert_eq!(
        store.find_by_idempotency_key("pay-7", 0).await.unwrap(),
        Some(again.clone())
    );
    let new_hook = m.ids.hook_id();
    m.append(
        &store,
        &again,
        T0 + 20,
        vec![hook_created(0, &new_hook, "digest-7")],
    )
    .await;
    let found = store.find_hook("digest-7").await.unwrap().unwrap();
    assert_eq!((found.run_id.as_str(), found.position), (again.as_str(), 0));
    done(&schema, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_runs_and_runs_that_ended_later_are_kept() {
    let Some((schema, store)) = world().await else {
        return;
    };
    let m = Maker::new();
    let pending = m.create(&store, Spec::default()).await;
    let running = m.running(&store, Spec::default()).await;
    let ended = m.completed(&store, Spec::default(), T0 + 100).await;
    for run in [&pending, &running] {
        assert_eq!(
            store.remove_run(run, Millis::MAX).await.unwrap(),
            Removal::Kept(Kept::Unfinished)
        );
    }
    assert_eq!(
        store.remove_run(&ended, T0 + 100).await.unwrap(),
        Removal::Kept(Kept::EndedLater { ended_at: T0 + 100 })
    );
    let kept_rows = |n: i64| n > 0;
    for run in [&pending, &running, &ended] {
        let rows = rows_of(&schema, run).await;
        assert!(kept_rows(rows[0].1) && kept_rows(rows[1].1), "{rows:?}");
    }
    assert_eq!(
        store.remove_run(&ended, T0 + 101).await.unwrap(),
        Removal::Removed { events: 3 }
    );
    done(&schema, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_child_keeps_its_parent_and_a_running_parent_its_child() {
    let Some((schema, store)) = world().await else {
        return;
    };
    let m = Maker::new();
    let bound = T0 + 1_000;

    // A finished parent with a finished child and a running one.
    let parent = m.completed(&store, Spec::default(), T0 + 100).await;
    let done_child = m
        .completed(
            &store,
            Spec {
                parent: Some(&parent),
                ..Spec::default()
            },
            T0 + 50,
        )
        .await;
    let child = m
        .running(
            &store,
            Spec {
                parent: Some(&parent),
                ..Spec::default()
            },
        )
        .await;
    assert_eq!(
        store.remove_run(&parent, bound).await.unwrap(),
        Removal::Kept(Kept::ChildRunning {
            child_id: child.clone()
        })
    );
    assert_eq!(
        store.remove_run(&child, bound).await.unwrap(),
        Removal::Kept(Kept::Unfinished)
    );
    // A finished child of a finished parent goes.
    assert!(matches!(
        store.remove_run(&done_child, bound).await.unwrap(),
        Removal::Removed { .. }
    ));
    m.append(&store, &child, T0 + 200, vec![completed()]).await;
    assert!(matches!(
        store.remove_run(&parent, bound).await.unwrap(),
        Removal::Removed { .. }
    ));
    // Its parent gone, the child goes too.
    assert!(matches!(
        store.remove_run(&child, bound).await.unwrap(),
        Removal::Removed { .. }
    ));

    // A running parent keeps its finished child.
    let parent = m.running(&store, Spec::default()).await;
    let child = m
        .completed(
            &store,
            Spec {
                parent: Some(&parent),
                ..Spec::default()
            },
            T0 + 100,
        )
        .await;
    assert_eq!(
        store.remove_run(&child, bound).await.unwrap(),
        Removal::Kept(Kept::ParentRunning {
            parent_id: parent.clone()
        })
    );
    let rows = rows_of(&schema, &child).await;
    assert!(rows[0].1 == 1 && rows[1].1 == 3, "{rows:?}");
    m.append(&store, &parent, T0 + 300, vec![completed()]).await;
    assert!(matches!(
        store.remove_run(&child, bound).await.unwrap(),
        Removal::Removed { .. }
    ));
    assert!(matches!(
        store.remove_run(&parent, bound).await.unwrap(),
        Removal::Removed { .. }
    ));
    done(&schema, store).await;
}

/// A run finished before migration 9 (or by a member of an older build since) has no
/// `ended_at`: the migration fills it in from the stored state, and a removal reads it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_finished_without_an_end_time_get_it_from_their_state() {
    let Some((schema, store)) = world().await else {
        return;
    };
    let m = Maker::new();
    let old = m.completed(&store, Spec::default(), T0 + 100).await;
    let pool = common::sql(&schema);
    sqlx::query("UPDATE runs SET ended_at = NULL WHERE run_id = $1")
        .bind(&old)
        .execute(&pool)
        .await
        .unwrap();
    assert!(store
        .ended_runs(Millis::MAX, None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.remove_run(&old, T0 + 100).await.unwrap(),
        Removal::Kept(Kept::EndedLater { ended_at: T0 + 100 })
    );
    // The migration's own fill-in statement.
    let migration = include_str!("../migrations/0009_retention.sql");
    let fill = migration
        .split(';')
        .map(|statement| {
            statement
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .find(|statement| statement.trim_start().starts_with("UPDATE runs"))
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(fill))
        .execute(&pool)
        .await
        .unwrap();
    let listed = store.ended_runs(Millis::MAX, None, 10).await.unwrap();
    assert_eq!(ids(&listed), [old.as_str()]);
    assert_eq!(listed[0].ended_at, T0 + 100);
    assert_eq!(
        store.remove_run(&old, T0 + 101).await.unwrap(),
        Removal::Removed { events: 3 }
    );
    done(&schema, store).await;
}

/// A removal and a reopen of the same failed run, from two members at once, many times: the
/// reopen either lands first (the run is kept, running) or finds the run gone; a reopened run
/// is never removed, and a removed one leaves no row behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_racing_a_removal_never_loses_an_unfinished_run() {
    let Some((schema, sweeper)) = world().await else {
        return;
    };
    let operator = common::store(&schema, common::options(&schema)).await;
    let m = Arc::new(Maker::new());
    let mut runs = Vec::new();
    for _ in 0..40 {
        runs.push(m.failed(&sweeper, Spec::default(), T0 + 100).await);
    }
    let (mut removed, mut kept) = (0, 0);
    for run in &runs {
        let reopen_event = m.event(run, T0 + 200, reopen(2));
        let (removal, reopened) = tokio::join!(
            sweeper.remove_run(run, T0 + 1_000),
            operator.append(run, vec![reopen_event]),
        );
        let removal = removal.unwrap();
        match (&removal, &reopened) {
            (Removal::Removed { events }, Err(e)) => {
                assert_eq!(*events, 3);
                assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
                assert!(rows_of(&schema, run).await.iter().all(|(_, n)| *n == 0));
                removed += 1;
            }
            (Removal::Kept(Kept::Unfinished), Ok(_)) => {
                let state = sweeper.get_run(run, ResolveData::None).await.unwrap();
                assert_eq!(state.status, RunStatus::Running);
                assert_eq!(sweeper.history(run, 0).await.unwrap().len(), 4);
                kept += 1;
            }
            other => panic!("run {run}: removal and reopen disagree: {other:?}"),
        }
    }
    eprintln!("removed first: {removed}, reopened first: {kept}");
    assert_eq!(removed + kept, runs.len());
    // Whatever was kept is still running and is never listed as ended.
    let listed = sweeper.ended_runs(Millis::MAX, None, 100).await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    let _ = operator.close().await;
    done(&schema, sweeper).await;
}

/// A world on `schema` whose virtual clock the test moves, keeping completed runs a day and
/// sweeping when asked, with the workflow `report`.
async fn retention_world(schema: &str, clock: &VirtualClock) -> worlds_engine::World {
    use worlds_engine::prelude::*;
    let mut config = common::world_config(schema);
    config.retention.completed = Dur(Duration::from_secs(86_400));
    config.retention.sweep_interval = Dur(Duration::from_secs(1000 * 86_400));
    let world = worlds_postgres::open_with_clock(config, Arc::new(clock.clone()))
        .await
        .unwrap();
    let report = workflow("report", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    world.register(&report).unwrap();
    world.start().await.unwrap();
    world
}

/// Waits (in real time, bounded) until schedule `id` names a completed last run: its id.
async fn fired(world: &worlds_engine::World, id: &str) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let schedule = world.schedules().get(id).await.unwrap();
            if let Some(run) = schedule.last_run_id {
                let state = world.get_run(&run, ResolveData::None).await.unwrap();
                if state.status == RunStatus::Completed {
                    return run;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("schedule {id} did not fire"))
}

/// A sweep on a PostgreSQL world: a schedule whose last run it removed no longer names it as
/// its last run, and a newer last run another member stores while the sweep waits for the
/// schedule's lock is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_unlinks_a_schedules_removed_last_run_and_keeps_a_newer_one() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let clock = VirtualClock::new(T0);
    let world = retention_world(&schema, &clock).await;
    for id in ["early", "hourly"] {
        world
            .schedules()
            .cron(id, "report", 1, "0 * * * *")
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(3600));
    let (early_run, hourly_run) = (fired(&world, "early").await, fired(&world, "hourly").await);
    let early = world.schedules().pause("early").await.unwrap();
    let hourly = world.schedules().pause("hourly").await.unwrap();
    clock.advance(Duration::from_secs(2 * 86_400));
    let newer_run = world
        .execute_by_name::<u64, u64>("report", 2, worlds_engine::WorkflowOptions::default())
        .await
        .unwrap()
        .id;
    let mut newer = hourly.clone();
    newer.last_run_id = Some(newer_run);
    newer.total_executions += 1;

    // Another member holds `hourly`'s lock, as while it settles a firing.
    let sql = common::sql(&schema);
    let mut member = sql.acquire().await.unwrap();
    let lock = format!("worlds-engine schedule {schema} hourly");
    sqlx::query("SELECT pg_advisory_lock(hashtextextended($1, 0))")
        .bind(&lock)
        .execute(&mut *member)
        .await
        .unwrap();
    let sweep = world.prune().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while world.get_run(&hourly_run, ResolveData::None).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the run's removal");
    // Time for the sweep to read the schedules and wait for the lock; then the member stores
    // its firing and lets go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("UPDATE schedules SET record = $1 WHERE id = $2")
        .bind(serde_json::to_string(&newer).unwrap())
        .bind("hourly".as_bytes())
        .execute(&mut *member)
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))")
        .bind(&lock)
        .execute(&mut *member)
        .await
        .unwrap();
    drop(member);

    let report = world.prune_report_when_done(&sweep).await.unwrap();
    assert!(report.removed >= 2, "{report:?}");
    let gone = world
        .get_run(&early_run, ResolveData::None)
        .await
        .unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound);
    let mut expected = early.clone();
    expected.last_run_id = None;
    expected.removed_last_run_id = Some(early_run);
    assert_eq!(world.schedules().get("early").await.unwrap(), expected);
    assert_eq!(world.schedules().get("hourly").await.unwrap(), newer);

    world.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}
