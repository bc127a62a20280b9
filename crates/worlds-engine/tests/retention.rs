//! Retention: sweeps remove the finished runs the policy lets go, keep everything else, count
//! each removal once, and run by themselves every interval.

mod common;

use std::time::Duration;

use common::memory_config;
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::{
    ErrorKind, RetentionRule, RunStatus, WorkflowQueryFilter, WorkflowState, PRUNE_WORKFLOW,
};

const DAY: Duration = Duration::from_secs(86_400);

fn dur(d: Duration) -> Dur {
    Dur(d)
}

/// `done`: completes at once. `boom`: fails. `nap`: sleeps `n` days.
fn workflows() -> (Workflow<u64, u64>, Workflow<u64, u64>, Workflow<u64, u64>) {
    let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    let boom = workflow("boom", |_ctx: WorkflowContext, _n: u64| async move {
        Err::<u64, _>(WorkflowError::msg("boom"))
    });
    let nap = workflow("nap", |ctx: WorkflowContext, n: u64| async move {
        ctx.sleep(Duration::from_secs(n * 86_400)).await?;
        Ok::<_, WorkflowError>(n)
    });
    (done, boom, nap)
}

async fn world(policy: impl FnOnce(&mut WorldConfig)) -> (TestWorld, [Workflow<u64, u64>; 3]) {
    let mut config = memory_config();
    policy(&mut config);
    let t = TestWorld::with_config(config).await;
    let (done, boom, nap) = workflows();
    for w in [&done, &boom, &nap] {
        t.register(w).unwrap();
    }
    (t, [done, boom, nap])
}

async fn start(t: &TestWorld, w: &Workflow<u64, u64>, n: u64) -> String {
    t.execute(w, n, WorkflowOptions::default())
        .await
        .unwrap()
        .id
}

fn is_gone(result: &Result<WorkflowState, WorldError>) -> bool {
    matches!(result, Err(e) if e.kind() == ErrorKind::NotFound)
}

#[tokio::test]
async fn a_sweep_removes_what_the_policy_lets_go_and_keeps_the_rest() {
    let (t, [done, boom, nap]) = world(|config| {
        config.retention.completed = dur(7 * DAY);
        config.retention.failed = dur(30 * DAY);
        config.retention.cancelled = dur(DAY);
        config.retention.workflows.insert(
            "nap".into(),
            RetentionRule {
                completed: Some(dur(Duration::ZERO)),
                ..RetentionRule::default()
            },
        );
        // No sweep by itself within the test's time: the test asks for each.
        config.retention.sweep_interval = dur(1000 * DAY);
    })
    .await;
    let mut completed = Vec::new();
    for n in 0..450 {
        completed.push(start(&t, &done, n).await);
    }
    let mut failed = Vec::new();
    for n in 0..5 {
        failed.push(start(&t, &boom, n).await);
    }
    let cancelled = start(&t, &nap, 100).await;
    let kept_nap = start(&t, &nap, 1).await;
    let sleeping = start(&t, &nap, 365).await;
    t.settle().await;
    t.world().cancel(&cancelled).await.unwrap();
    t.settle().await;
    t.advance(Duration::from_secs(2 * 86_400)).await;
    assert_eq!(
        t.query(&kept_nap).await.unwrap().status,
        RunStatus::Completed
    );

    // Day 2: only the cancelled run's day is over (the sweep the world started at once, with
    // nothing to remove, is a completed run too young to go).
    let preview = t.world().prune_preview().await.unwrap();
    assert!(preview.dry_run && preview.done);
    assert_eq!(preview.removed, 1, "{preview:?}");
    let id = t.world().prune().await.unwrap();
    let report = t.world().prune_report_when_done(&id).await.unwrap();
    assert_eq!(report.removed, 1, "{report:?}");
    assert!(is_gone(&t.query(&cancelled).await));
    assert_eq!(report.status, Some(RunStatus::Completed));

    // Day 9: the completed runs go (three pages of them), with the sweeps that completed a
    // week ago; failed runs, the `nap` workflow's completed runs and the sleeping run stay.
    t.advance(Duration::from_secs(7 * 86_400)).await;
    let preview = t.world().prune_preview().await.unwrap();
    let bytes = preview.bytes.unwrap();
    assert!(bytes > 450 * 100, "{preview:?}");
    let id = t.world().prune().await.unwrap();
    let report = t.world().prune_report_when_done(&id).await.unwrap();
    assert_eq!(report.removed, preview.removed, "{report:?} vs {preview:?}");
    assert!(report.removed >= 450, "{report:?}");
    assert_eq!(report.already_gone, 0);
    assert!(report.events >= 450 * 3, "{report:?}");
    assert!(report.kept_by_policy >= 6, "failed and nap: {report:?}");
    for id in &completed {
        assert!(is_gone(&t.query(id).await), "{id} should be gone");
    }
    for id in failed.iter().chain([&kept_nap, &sleeping]) {
        assert!(t.query(id).await.is_ok(), "{id} should stay");
    }
    assert_eq!(
        report.next_due,
        Some(t.query(&failed[0]).await.unwrap().completed_at.unwrap() + 30 * 86_400_000),
        "the earliest failed run is next"
    );
    let steps = t.query(&id).await.unwrap().activities.len();
    assert!(steps >= 3, "pages of 200: {steps}");

    // Day 40: the failed runs go too; the sleeping run is unfinished and stays whatever its age.
    t.advance(Duration::from_secs(31 * 86_400)).await;
    let id = t.world().prune().await.unwrap();
    let report = t.world().prune_report_when_done(&id).await.unwrap();
    assert!(report.removed >= 5, "{report:?}");
    for id in &failed {
        assert!(is_gone(&t.query(id).await));
    }
    assert_eq!(t.query(&sleeping).await.unwrap().status, RunStatus::Running);
    assert!(t.query(&kept_nap).await.is_ok());
    let left = t
        .world()
        .list_runs(WorkflowQueryFilter::new().workflow_name("done"))
        .await
        .unwrap();
    assert!(left.data.is_empty());
}

#[tokio::test]
async fn two_sweeps_at_once_remove_each_run_once() {
    let (t, [done, _, _]) = world(|config| {
        config.retention.completed = dur(DAY);
        config.retention.sweep_interval = dur(1000 * DAY);
    })
    .await;
    for n in 0..300 {
        start(&t, &done, n).await;
    }
    t.settle().await;
    t.advance(Duration::from_secs(2 * 86_400)).await;
    let (a, b) = tokio::join!(t.world().prune(), t.world().prune());
    let (a, b) = (a.unwrap(), b.unwrap());
    let (ra, rb) = tokio::join!(
        t.world().prune_report_when_done(&a),
        t.world().prune_report_when_done(&b)
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    // 300 runs and the sweep the world started at once.
    assert_eq!(ra.removed + rb.removed, 301, "{ra:?} {rb:?}");
    assert_eq!(
        ra.removed
            + rb.removed
            + ra.already_gone
            + rb.already_gone
            + ra.kept_in_use
            + rb.kept_in_use,
        ra.looked_at.max(rb.looked_at) + ra.looked_at.min(rb.looked_at)
            - (ra.kept_by_policy + rb.kept_by_policy),
        "{ra:?} {rb:?}"
    );
}

#[tokio::test]
async fn the_world_sweeps_by_itself_every_interval() {
    let (t, [done, _, _]) = world(|config| {
        config.retention.completed = dur(Duration::from_secs(3600));
        config.retention.sweep_interval = dur(Duration::from_secs(3600));
    })
    .await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(start(&t, &done, n).await);
    }
    t.settle().await;
    t.advance(Duration::from_secs(3 * 3600)).await;
    t.settle().await;
    for id in &ids {
        assert!(is_gone(&t.query(id).await), "{id} should be gone");
    }
    let sweeps = t
        .world()
        .list_runs(WorkflowQueryFilter::new().workflow_name(PRUNE_WORKFLOW))
        .await
        .unwrap();
    assert!(!sweeps.data.is_empty());
    assert!(sweeps
        .data
        .iter()
        .all(|run| run.workflow_id.starts_with("worlds.prune.")));
    // The user's workflows do not list the built-in one.
    let names = t.world().workflow_names();
    assert!(!names.iter().any(|n| n == PRUNE_WORKFLOW), "{names:?}");
}

#[tokio::test]
async fn without_a_policy_nothing_is_removed() {
    let (t, [done, boom, _]) = world(|_| {}).await;
    let a = start(&t, &done, 1).await;
    let b = start(&t, &boom, 1).await;
    t.settle().await;
    t.advance(Duration::from_secs(3650 * 86_400)).await;
    let id = t.world().prune().await.unwrap();
    let report = t.world().prune_report_when_done(&id).await.unwrap();
    assert_eq!((report.removed, report.looked_at), (0, 0), "{report:?}");
    assert!(t.query(&a).await.is_ok() && t.query(&b).await.is_ok());
    let err = t.world().prune_report(&a).await.unwrap_err();
    assert!(err.to_string().contains("not a retention sweep"), "{err}");
}
