//! Bulk operations: cancel, retry and resume over the runs a filter matches, as one durable
//! run with progress; each run acted on once, runs created later left out.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{add_one, memory_config, Counter};
use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::{BulkAction, BulkRequest, EventKind, RunStatus, WorkflowQueryFilter};

struct Setup {
    t: TestWorld,
    flow: Workflow<u64, u64>,
    nap: Workflow<(), ()>,
    broken: Arc<AtomicBool>,
    a: Counter,
    b: Counter,
}

/// `order`: a; b (fails while `broken`). `nap`: sleeps a day.
async fn setup() -> Setup {
    let (a, b) = (Counter::default(), Counter::default());
    let broken = Arc::new(AtomicBool::new(true));
    let step_a = add_one("a", &a);
    let step_b = {
        let (calls, broken) = (b.clone(), broken.clone());
        activity("b", move |_ctx: ActivityContext, n: u64| {
            let (calls, broken) = (calls.clone(), broken.clone());
            async move {
                calls.bump();
                if broken.load(Ordering::SeqCst) {
                    return Err(StepError::fatal("down"));
                }
                Ok::<_, StepError>(n + 1)
            }
        })
    };
    let (sa, sb) = (step_a.clone(), step_b.clone());
    let flow = workflow("order", move |ctx: WorkflowContext, n: u64| {
        let (a, b) = (sa.clone(), sb.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            Ok::<_, WorkflowError>(ctx.run(&b, x).await?)
        }
    });
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1d").await?;
        Ok::<_, WorkflowError>(())
    });
    let t = TestWorld::with_config(memory_config()).await;
    t.register(&step_a).unwrap();
    t.register(&step_b).unwrap();
    t.register(&flow).unwrap();
    t.register(&nap).unwrap();
    Setup {
        t,
        flow,
        nap,
        broken,
        a,
        b,
    }
}

impl Setup {
    async fn failed_runs(&self, count: u64) -> Vec<String> {
        let mut ids = Vec::new();
        for n in 0..count {
            ids.push(
                self.t
                    .execute(&self.flow, n, WorkflowOptions::default())
                    .await
                    .unwrap()
                    .id,
            );
        }
        self.t.settle().await;
        ids
    }
}

#[tokio::test]
async fn a_bulk_retry_reopens_every_failed_run_once_across_pages() {
    let s = setup().await;
    let ids = s.failed_runs(250).await;
    assert_eq!((s.a.get(), s.b.get()), (250, 250));
    s.broken.store(false, Ordering::SeqCst);

    let failed = WorkflowQueryFilter::new()
        .status(RunStatus::Failed)
        .workflow_name("order");
    let request = BulkRequest::new(BulkAction::Retry, failed.clone())
        .by("ops")
        .reason("provider back")
        .name("retry-order-1");
    let op = s.t.bulk(request.clone()).await.unwrap();
    s.t.settle().await;
    let progress = s.t.bulk_progress(&op).await.unwrap();
    assert!(progress.done, "{progress:?}");
    assert_eq!(
        (
            progress.matched,
            progress.applied,
            progress.skipped,
            progress.refused
        ),
        (250, 250, 0, 0)
    );
    assert_eq!(progress.status, Some(RunStatus::Completed));
    for id in &ids {
        let state = s.t.query(id).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        let reopenings: Vec<_> = state
            .history
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::RunReopened { operation, by, .. } => {
                    Some((operation.clone(), by.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(reopenings, vec![(Some(op.clone()), Some("ops".to_owned()))]);
    }
    assert_eq!(
        (s.a.get(), s.b.get()),
        (250, 500),
        "a kept, b once more each"
    );
    let steps = s.t.query(&op).await.unwrap().activities.len();
    assert_eq!(steps, 3, "100 runs per page");

    // The same name answers the same operation; nothing runs again.
    assert_eq!(s.t.bulk(request).await.unwrap(), op);
    s.t.settle().await;
    assert_eq!(s.b.get(), 500);
    // The operation is not among the user's workflows.
    assert!(!s.t.workflow_names().contains(&"worlds.bulk".to_owned()));
}

#[tokio::test]
async fn a_bulk_cancel_leaves_runs_created_after_it_and_finished_ones() {
    let s = setup().await;
    let mut naps = Vec::new();
    for _ in 0..5 {
        naps.push(
            s.t.execute(&s.nap, (), WorkflowOptions::default())
                .await
                .unwrap()
                .id,
        );
    }
    let failed = s.failed_runs(2).await;
    s.t.settle().await;
    // Every run, whatever its status: the finished ones are skipped.
    let op =
        s.t.bulk(
            BulkRequest::new(BulkAction::Cancel, WorkflowQueryFilter::new()).reason("maintenance"),
        )
        .await
        .unwrap();
    let late =
        s.t.execute(&s.nap, (), WorkflowOptions::default())
            .await
            .unwrap()
            .id;
    s.t.settle().await;
    let progress = s.t.bulk_progress(&op).await.unwrap();
    assert_eq!(
        (progress.matched, progress.applied, progress.skipped),
        (7, 5, 2),
        "{progress:?}"
    );
    for id in &naps {
        assert_eq!(s.t.query(id).await.unwrap().status, RunStatus::Cancelled);
    }
    for id in &failed {
        assert_eq!(s.t.query(id).await.unwrap().status, RunStatus::Failed);
    }
    assert_eq!(
        s.t.query(&late).await.unwrap().status,
        RunStatus::Running,
        "created after the operation: not in it"
    );
    assert_eq!(
        s.t.query(&op).await.unwrap().status,
        RunStatus::Completed,
        "it did not cancel itself"
    );
}

#[tokio::test]
async fn a_bulk_resume_reports_the_runs_it_could_not_resume() {
    let s = setup().await;
    let ids = s.failed_runs(3).await;
    // Failed, not quarantined: resume refuses each, and says why.
    let op =
        s.t.bulk(BulkRequest::new(
            BulkAction::Resume,
            WorkflowQueryFilter::new().status(RunStatus::Failed),
        ))
        .await
        .unwrap();
    s.t.settle().await;
    let progress = s.t.bulk_progress(&op).await.unwrap();
    assert_eq!((progress.matched, progress.refused), (3, 3), "{progress:?}");
    assert!(progress.refusals[0].error.contains("is not quarantined"));
    assert!(ids.contains(&progress.refusals[0].run_id));
    let not_bulk = s.t.bulk_progress(&ids[0]).await.unwrap_err();
    assert!(
        not_bulk.to_string().contains("not a bulk operation"),
        "{not_bulk}"
    );
}
