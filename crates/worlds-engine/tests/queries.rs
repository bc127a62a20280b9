//! Querying runs: one run by run id or workflow id with its history, lists of runs by filter,
//! newest first, offset and cursor paging, payload stripping, and worker snapshots.

mod common;

use std::collections::HashSet;

use common::{add_one, test_world, Counter, Mode};
use worlds_engine::ids::timestamp_ms;
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::WorkflowState;
use worlds_engine::{ResolveData, RunStatus, WorkerStatus, WorkflowQueryFilter};

/// A workflow that runs one step and then sleeps for `input` minutes.
fn step_then_nap(step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow(
        "step-then-nap",
        move |ctx: WorkflowContext, minutes: u64| {
            let step = step.clone();
            async move {
                let v = ctx.run(&step, minutes).await?;
                ctx.sleep(minutes * 60_000).await?;
                Ok::<_, WorkflowError>(v)
            }
        },
    )
}

fn ids<T>(runs: &[WorkflowState], extra: T) -> Vec<String>
where
    T: Fn(&WorkflowState) -> bool,
{
    runs.iter()
        .filter(|r| extra(r))
        .map(|r| r.id.clone())
        .collect()
}

fn all(_: &WorkflowState) -> bool {
    true
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

async fn query_by_run_id_and_workflow_id_returns_the_run_with_its_history(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let flow = step_then_nap(&step);
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 5, WorkflowOptions::new().workflow_id("nap-5"))
        .await
        .unwrap();
    let finished = t.run_until_complete(&run.id, "1h").await.unwrap();

    let by_run = t.query(&run.id).await.unwrap();
    let by_workflow = t.query("nap-5").await.unwrap();
    assert_eq!(by_run, by_workflow, "both ids lead to the same record");
    assert_eq!(by_run, finished);
    assert_eq!(by_run.id, run.id);
    assert!(by_run.id.starts_with("wrun_"), "{}", by_run.id);
    assert_eq!(by_run.workflow_id, "nap-5");
    assert_eq!(by_run.name, "step-then-nap");
    assert_eq!(by_run.status, RunStatus::Completed);
    assert_eq!(by_run.output.as_ref().unwrap().decode::<u64>().unwrap(), 6);

    // History: globally unique evnt_ ULIDs carrying their own timestamp, a dense seq from 0,
    // time never going backwards, and the current format version on every event.
    let history = &by_run.history;
    assert!(history.len() >= 8, "{history:?}");
    assert_eq!(by_run.event_count, history.len() as u64);
    let mut seen = HashSet::new();
    for (i, event) in history.iter().enumerate() {
        assert_eq!(event.seq, i as u64, "seq is dense from 0");
        assert_eq!(event.run_id, run.id);
        assert_eq!(event.version, EVENT_FORMAT_VERSION);
        assert_eq!(event.version, 1);
        assert!(event.id.starts_with("evnt_"), "{}", event.id);
        assert_eq!(
            timestamp_ms(&event.id),
            Some(event.timestamp),
            "{}",
            event.id
        );
        assert!(
            seen.insert(event.id.clone()),
            "duplicate event id {}",
            event.id
        );
    }
    assert!(history
        .windows(2)
        .all(|w| w[0].timestamp <= w[1].timestamp && w[0].id < w[1].id));
    assert_eq!(history[0].kind.type_name(), "workflow_queued");
    assert_eq!(
        history.last().unwrap().kind.type_name(),
        "workflow_completed"
    );
    // The five-minute sleep is visible in the timestamps.
    assert_eq!(
        history.last().unwrap().timestamp - history[0].timestamp,
        5 * 60_000
    );

    // Activities carry step_ ids and their payloads.
    assert_eq!(by_run.activities.len(), 1);
    let a = &by_run.activities[0];
    assert!(a.id.starts_with("step_"), "{}", a.id);
    assert_eq!(a.name, "add-one");
    assert_eq!(a.position, 0);
    assert_eq!(a.attempt, 1);
    assert_eq!(a.input.as_ref().unwrap().decode::<u64>().unwrap(), 5);
    assert_eq!(a.output.as_ref().unwrap().decode::<u64>().unwrap(), 6);
}

#[tokio::test]
async fn query_of_an_unknown_id_is_not_found_404() {
    let t = test_world(Mode::Cached).await;
    for id in ["wrun_01ARZ3NDEKTSV4RRFFQ69G5FAV", "no-such-workflow-id", ""] {
        let err = t.query(id).await.unwrap_err();
        assert!(matches!(err, WorldError::NotFound { .. }), "{id}: {err:?}");
        assert_eq!(err.http_status(), 404);
        let err = t.handle::<()>(id).await.unwrap_err();
        assert_eq!(err.http_status(), 404);
    }
}

/// Runs in every interesting status, created one virtual minute apart.
struct Fleet {
    t: TestWorld,
    completed: Vec<String>,
    failed: String,
    running: String,
    cancelled: String,
    parent: String,
    /// Creation time of each run, in creation order.
    created: Vec<(String, i64)>,
}

async fn fleet(mode: Mode) -> Fleet {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let quick = workflow("quick", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let boom = workflow("boom", |_ctx: WorkflowContext, _: ()| async move {
        Err::<(), _>(WorkflowError::msg("boom"))
    });
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("24h").await?;
        Ok::<_, WorkflowError>(())
    });
    let q = quick.clone();
    let parent = workflow("parent", move |ctx: WorkflowContext, _: ()| {
        let q = q.clone();
        async move {
            let a = ctx.execute_child(&q, 1, WorkflowOptions::default()).await?;
            let b = ctx.execute_child(&q, 2, WorkflowOptions::default()).await?;
            Ok::<_, WorkflowError>(a + b)
        }
    });
    let t = test_world(mode).await;
    t.register(&step)
        .unwrap()
        .register(&quick)
        .unwrap()
        .register(&boom)
        .unwrap()
        .register(&nap)
        .unwrap()
        .register(&parent)
        .unwrap();

    let mut created = Vec::new();
    let mut completed = Vec::new();
    for n in 0..2 {
        let run = t
            .execute(&quick, n, WorkflowOptions::default())
            .await
            .unwrap();
        created.push((run.id.clone(), t.now()));
        t.run_until_complete(&run.id, "1m").await.unwrap();
        completed.push(run.id);
        t.advance("1m").await;
    }
    let failed = t
        .execute(&boom, (), WorkflowOptions::default())
        .await
        .unwrap();
    created.push((failed.id.clone(), t.now()));
    t.run_until_complete(&failed.id, "1m").await.unwrap();
    t.advance("1m").await;
    let running = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    created.push((running.id.clone(), t.now()));
    t.advance("1m").await;
    let cancelled = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    created.push((cancelled.id.clone(), t.now()));
    t.settle().await;
    cancelled.cancel().await.unwrap();
    t.advance("1m").await;
    let parent_run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    created.push((parent_run.id.clone(), t.now()));
    t.run_until_complete(&parent_run.id, "1m").await.unwrap();
    assert_eq!(parent_run.result().await.unwrap(), 2 + 3);
    t.settle().await;
    Fleet {
        t,
        completed,
        failed: failed.id,
        running: running.id,
        cancelled: cancelled.id,
        parent: parent_run.id,
        created,
    }
}

async fn query_workflows_filters_by_status_name_and_parent(mode: Mode) {
    let f = fleet(mode).await;
    let t = &f.t;
    let everything = t.query_workflows(WorkflowQueryFilter::new()).await.unwrap();
    // 2 quick + boom + 2 nap + parent + its 2 children.
    assert_eq!(everything.len(), 8, "{:?}", ids(&everything, all));

    let children: Vec<String> = ids(&everything, |r| r.parent_id.is_some());
    assert_eq!(children.len(), 2);

    // One status.
    let failed = t
        .query_workflows(WorkflowQueryFilter::new().status(RunStatus::Failed))
        .await
        .unwrap();
    assert_eq!(ids(&failed, all), vec![f.failed.clone()]);
    let running = t
        .query_workflows(WorkflowQueryFilter::new().status(RunStatus::Running))
        .await
        .unwrap();
    assert_eq!(ids(&running, all), vec![f.running.clone()]);
    let completed = t
        .query_workflows(WorkflowQueryFilter::new().status(RunStatus::Completed))
        .await
        .unwrap();
    let mut expected: Vec<String> = f.completed.clone();
    expected.push(f.parent.clone());
    expected.extend(children.iter().cloned());
    assert_eq!(sorted(ids(&completed, all)), sorted(expected));
    assert!(completed.iter().all(|r| r.status == RunStatus::Completed));

    // Several statuses.
    let ended_badly = t
        .query_workflows(
            WorkflowQueryFilter::new().status([RunStatus::Failed, RunStatus::Cancelled]),
        )
        .await
        .unwrap();
    assert_eq!(
        sorted(ids(&ended_badly, all)),
        sorted(vec![f.failed.clone(), f.cancelled.clone()])
    );
    let none = t
        .query_workflows(WorkflowQueryFilter::new().status(vec![
            RunStatus::Pending,
            RunStatus::Compensating,
            RunStatus::Compensated,
        ]))
        .await
        .unwrap();
    assert!(none.is_empty(), "{:?}", ids(&none, all));

    // By name, and name combined with status.
    let naps = t
        .query_workflows(WorkflowQueryFilter::new().workflow_name("nap"))
        .await
        .unwrap();
    assert_eq!(
        sorted(ids(&naps, all)),
        sorted(vec![f.running.clone(), f.cancelled.clone()])
    );
    let cancelled_naps = t
        .query_workflows(
            WorkflowQueryFilter::new()
                .workflow_name("nap")
                .status(RunStatus::Cancelled),
        )
        .await
        .unwrap();
    assert_eq!(ids(&cancelled_naps, all), vec![f.cancelled.clone()]);
    let quick = t
        .query_workflows(WorkflowQueryFilter::new().workflow_name("quick"))
        .await
        .unwrap();
    assert_eq!(quick.len(), 4, "two top-level runs and two children");
    assert!(t
        .query_workflows(WorkflowQueryFilter::new().workflow_name("no-such-name"))
        .await
        .unwrap()
        .is_empty());

    // By parent.
    let kids = t
        .query_workflows(WorkflowQueryFilter::new().parent_id(f.parent.clone()))
        .await
        .unwrap();
    assert_eq!(sorted(ids(&kids, all)), sorted(children.clone()));
    assert!(kids
        .iter()
        .all(|k| k.parent_id.as_deref() == Some(f.parent.as_str()) && k.name == "quick"));
    assert_eq!(
        sorted(t.query(&f.parent).await.unwrap().children),
        sorted(children)
    );
    assert!(t
        .query_workflows(WorkflowQueryFilter::new().parent_id(f.running.clone()))
        .await
        .unwrap()
        .is_empty());
}

async fn query_workflows_filters_by_creation_time_and_returns_newest_first(mode: Mode) {
    let f = fleet(mode).await;
    let t = &f.t;
    let everything = t.query_workflows(WorkflowQueryFilter::new()).await.unwrap();
    // Newest first: by creation time, and by id (ULIDs sort by time) among equal times.
    assert!(
        everything
            .windows(2)
            .all(|w| w[0].created_at >= w[1].created_at && w[0].id > w[1].id),
        "{:?}",
        everything
            .iter()
            .map(|r| (&r.id, r.created_at))
            .collect::<Vec<_>>()
    );
    // The runs were created a minute apart; the newest is the parent's last child.
    assert_eq!(f.created.len(), 6);
    assert!(f.created.windows(2).all(|w| w[1].1 - w[0].1 >= 60_000));
    for (id, at) in &f.created {
        assert_eq!(t.query(id).await.unwrap().created_at, *at);
    }

    // [after, before): the third to fifth top-level runs.
    let (after, before) = (f.created[2].1, f.created[5].1);
    let window = t
        .query_workflows(
            WorkflowQueryFilter::new()
                .started_after(after)
                .started_before(before),
        )
        .await
        .unwrap();
    assert_eq!(
        ids(&window, all),
        vec![f.cancelled.clone(), f.running.clone(), f.failed.clone()],
        "newest first, start inclusive, end exclusive"
    );
    let since = t
        .query_workflows(WorkflowQueryFilter::new().started_after(before))
        .await
        .unwrap();
    assert!(since.iter().all(|r| r.created_at >= before));
    assert_eq!(since.len(), 3, "the parent and its two children");
    let until = t
        .query_workflows(WorkflowQueryFilter::new().started_before(f.created[1].1))
        .await
        .unwrap();
    assert_eq!(ids(&until, all), vec![f.completed[0].clone()]);
    // Time and status combine.
    let running_in_window = t
        .query_workflows(
            WorkflowQueryFilter::new()
                .started_after(after)
                .started_before(before)
                .status(RunStatus::Running),
        )
        .await
        .unwrap();
    assert_eq!(ids(&running_in_window, all), vec![f.running.clone()]);

    // Offset and limit cut the same newest-first list.
    let all_ids = ids(&everything, all);
    let page = t
        .query_workflows(WorkflowQueryFilter::new().offset(2).limit(3))
        .await
        .unwrap();
    assert_eq!(ids(&page, all), all_ids[2..5].to_vec());
    let tail = t
        .query_workflows(WorkflowQueryFilter::new().offset(6))
        .await
        .unwrap();
    assert_eq!(ids(&tail, all), all_ids[6..].to_vec());
    let past_end = t
        .query_workflows(WorkflowQueryFilter::new().offset(100))
        .await
        .unwrap();
    assert!(past_end.is_empty());
    let newest_failed_or_running = t
        .query_workflows(
            WorkflowQueryFilter::new()
                .status([RunStatus::Failed, RunStatus::Running])
                .limit(1),
        )
        .await
        .unwrap();
    assert_eq!(ids(&newest_failed_or_running, all), vec![f.running]);

    // List queries leave the history out.
    assert!(everything.iter().all(|r| r.history.is_empty()));
}

async fn list_runs_pages_by_cursor_without_gaps_or_duplicates(mode: Mode) {
    let flow = workflow("tick", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    let other = workflow("other", |_ctx: WorkflowContext, _: ()| async move {
        Ok::<_, WorkflowError>(())
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap().register(&other).unwrap();
    let mut created = Vec::new();
    for n in 0..10 {
        let run = t
            .execute(&flow, n, WorkflowOptions::default())
            .await
            .unwrap();
        created.push(run.id.clone());
        // Another workflow's runs in between must not show up in (or shift) the pages.
        t.execute(&other, (), WorkflowOptions::default())
            .await
            .unwrap();
        if n % 3 == 0 {
            t.advance("1s").await;
        }
    }
    t.settle().await;
    created.reverse(); // newest first

    let mut pages = Vec::new();
    let mut filter = WorkflowQueryFilter::new().workflow_name("tick").limit(3);
    loop {
        let page = t.list_runs(filter.clone()).await.unwrap();
        pages.push(page.clone());
        assert!(pages.len() <= 4, "paging does not end: {pages:?}");
        match page.cursor {
            Some(cursor) => {
                assert!(page.has_more);
                assert_eq!(Some(&cursor), page.data.last().map(|r| &r.id));
                filter = filter.cursor(cursor);
            }
            None => {
                assert!(!page.has_more, "no cursor, so no more");
                break;
            }
        }
    }
    let sizes: Vec<usize> = pages.iter().map(|p| p.data.len()).collect();
    assert_eq!(sizes, vec![3, 3, 3, 1]);
    assert_eq!(
        pages.iter().map(|p| p.has_more).collect::<Vec<_>>(),
        vec![true, true, true, false]
    );
    let paged: Vec<String> = pages
        .iter()
        .flat_map(|p| p.data.iter().map(|r| r.id.clone()))
        .collect();
    assert_eq!(paged, created, "every run once, newest first");

    // Exactly one page's worth: no cursor, no "more".
    let exact = t
        .list_runs(WorkflowQueryFilter::new().workflow_name("tick").limit(10))
        .await
        .unwrap();
    assert_eq!(exact.data.len(), 10);
    assert!(!exact.has_more);
    assert_eq!(exact.cursor, None);
}

async fn resolve_data_none_strips_payloads(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("payloads", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, n).await?) }
    });
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();

    let full = t
        .list_runs(WorkflowQueryFilter::new().resolve_data(ResolveData::All))
        .await
        .unwrap();
    let r = &full.data[0];
    assert!(r.input.is_some() && r.output.is_some());
    assert!(r.activities[0].input.is_some() && r.activities[0].output.is_some());

    let lean = t
        .list_runs(WorkflowQueryFilter::new().resolve_data(ResolveData::None))
        .await
        .unwrap();
    let r = &lean.data[0];
    assert_eq!(r.id, run.id);
    assert_eq!(r.status, RunStatus::Completed, "metadata stays");
    assert_eq!(r.activities.len(), 1);
    assert_eq!(r.activities[0].name, "add-one");
    assert_eq!(r.input, None);
    assert_eq!(r.output, None);
    assert_eq!(r.activities[0].input, None);
    assert_eq!(r.activities[0].output, None);
    assert!(r.history.is_empty());
    // Stripping a listing does not touch the stored run.
    let stored = t.query(&run.id).await.unwrap();
    assert!(stored.input.is_some() && stored.output.is_some());
}

async fn get_workers_reports_idle_workers_and_counts_their_tasks(mode: Mode) {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let s = step.clone();
    let flow = workflow("three-steps", move |ctx: WorkflowContext, n: u64| {
        let s = s.clone();
        async move {
            let mut v = n;
            for _ in 0..3 {
                v = ctx.run(&s, v).await?;
            }
            Ok::<_, WorkflowError>(v)
        }
    });
    let t = test_world(mode).await;
    t.register(&step).unwrap().register(&flow).unwrap();
    t.settle().await;

    let before = t.workers().list();
    assert_eq!(before.len(), 2, "min_workers defaults to 2");
    let worker_ids: HashSet<&str> = before.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(worker_ids.len(), 2, "worker ids are unique");
    for w in &before {
        assert_eq!(w.status, WorkerStatus::Idle);
        assert_eq!(w.current_task, None);
        assert_eq!(w.tasks_completed, 0);
        assert_eq!(w.task_queue, None);
    }

    let run = t
        .execute(&flow, 0, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 3);
    t.settle().await;

    let after = t.workers().list();
    assert_eq!(after.len(), 2);
    let done: u64 = after.iter().map(|w| w.tasks_completed).sum();
    // Three activity tasks, and at least one workflow task per step result (the first
    // workflow task ran in the start call: `eager_start`).
    assert!(done >= 3 + 3, "{after:?}");
    for w in &after {
        assert_eq!(w.status, WorkerStatus::Idle, "{w:?}");
        assert_eq!(w.current_task, None);
        let was = before.iter().find(|b| b.id == w.id).unwrap();
        assert!(w.tasks_completed >= was.tasks_completed);
    }
}

in_both_modes!(
    query_by_run_id_and_workflow_id_returns_the_run_with_its_history,
    query_workflows_filters_by_status_name_and_parent,
    query_workflows_filters_by_creation_time_and_returns_newest_first,
    list_runs_pages_by_cursor_without_gaps_or_duplicates,
    resolve_data_none_strips_payloads,
    get_workers_reports_idle_workers_and_counts_their_tasks,
);
