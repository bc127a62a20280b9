//! `worlds pause|resume` and `worlds pauses` beside a running hybrid world: the pause is
//! stored where the world reads it, listed with who set it and why, shown by `runs show` on a
//! run it holds, lifted once; mistakes are refused with a reason.

mod common;

use common::{text, worlds};
use worlds_engine::model::PauseTarget;
use worlds_engine::prelude::*;
use worlds_engine::Persistence;

#[tokio::test]
async fn pauses_are_set_listed_shown_and_lifted_beside_a_running_world() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WorldConfig::default();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.path().to_path_buf();
    let world = World::new(config).unwrap();
    let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    world.register(&done).unwrap();
    world.start().await.unwrap();

    let out = worlds(
        &[
            "pause",
            "queue",
            "emails",
            "--reason",
            "provider down",
            "--by",
            "ops",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("task queue `emails` is paused by ops"),
        "{}",
        text(&out.stdout)
    );
    // Written where the world reads it.
    let pauses = world.pauses().await.unwrap();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].target, PauseTarget::TaskQueue("emails".into()));
    assert_eq!(
        (pauses[0].by.as_str(), pauses[0].reason.as_str()),
        ("ops", "provider down")
    );

    let out = worlds(&["pauses"], dir.path());
    let listing = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        listing.contains("task queue")
            && listing.contains("emails")
            && listing.contains("provider down"),
        "{listing}"
    );
    let out = worlds(&["pauses", "--json"], dir.path());
    let line: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(
        line["target"],
        serde_json::json!({"kind": "task_queue", "name": "emails"})
    );

    // A run the world holds says so in `runs show`.
    world
        .pause(PauseTarget::Workflow("done".into()), "on-call", "deploy")
        .await
        .unwrap();
    let held = world
        .execute(&done, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let out = worlds(&["runs", "show", &held.id], dir.path());
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        shown.contains("workflow `done` paused by \"on-call\"") && shown.contains("deploy"),
        "{shown}"
    );

    let out = worlds(&["resume", "workflow", "done"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("resumed (paused by on-call"),
        "{}",
        text(&out.stdout)
    );
    let out = worlds(&["resume", "queue", "emails", "--json"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(world.pauses().await.unwrap().is_empty());

    // Mistakes: not paused, a kind that is not one, a name no store holds.
    let out = worlds(&["resume", "workflow", "done"], dir.path());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is not paused"),
        "{}",
        text(&out.stderr)
    );
    let out = worlds(&["pause", "run", "x"], dir.path());
    assert!(!out.status.success());
    let out = worlds(&["pause", "workflow", "a\nb"], dir.path());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("control characters"),
        "{}",
        text(&out.stderr)
    );
    assert!(world.pauses().await.unwrap().is_empty());
    world.shutdown().await.unwrap();
}
