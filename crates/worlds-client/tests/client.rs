//! The client against a real server over loopback HTTP: typed calls, and remote errors with
//! the engine's kinds.

use std::sync::Arc;
use std::time::Duration;

use worlds_client::{Client, ClientError, RunFilter};
use worlds_engine::model::{ReopenRequest, ResolveData};
use worlds_engine::prelude::*;
use worlds_engine::ErrorKind;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

#[tokio::test]
async fn the_client_starts_reads_waits_cancels_and_maps_errors() {
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    let double = activity("double", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 2)
    });
    let flow = {
        let double = double.clone();
        workflow("double-it", move |ctx: WorkflowContext, n: u64| {
            let double = double.clone();
            async move { Ok::<_, WorkflowError>(ctx.run(&double, n).await?) }
        })
    };
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    world
        .register(&double)
        .unwrap()
        .register(&flow)
        .unwrap()
        .register(&nap)
        .unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("t", Scope::Write, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let client = Client::new(&base, &key).unwrap();

    let run = client
        .start("double-it", &21, WorkflowOptions::default())
        .await
        .unwrap();
    let outcome = client
        .result(&run.run_id, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(outcome.done);
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, Some(serde_json::json!(42)));
    let state = client.get_run(&run.run_id, ResolveData::All).await.unwrap();
    assert_eq!(state.workflow_id, run.workflow_id);
    let page = client
        .list_runs(&RunFilter {
            status: Some("completed".into()),
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(page.data[0].id, run.run_id);
    let first = client.events(&run.run_id, None, 2).await.unwrap();
    assert_eq!(first.data.len(), 2);
    let rest = client
        .events(&run.run_id, first.cursor.as_deref(), 100)
        .await
        .unwrap();
    assert_eq!(rest.data[0].seq, 2);

    let at_once = client
        .start_and_wait(
            "double-it",
            &5,
            WorkflowOptions::default(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(at_once.done);
    assert_eq!(at_once.output, Some(serde_json::json!(10)));
    let not_yet = client
        .start_and_wait(
            "nap",
            &(),
            WorkflowOptions::default(),
            Duration::from_millis(20),
        )
        .await
        .unwrap();
    assert!(!not_yet.done);
    assert_eq!(not_yet.status, RunStatus::Running);
    client.cancel(&not_yet.run_id, None).await.unwrap();

    let napping = client
        .start("nap", &(), WorkflowOptions::default())
        .await
        .unwrap();
    let waiting = client
        .result(&napping.run_id, Duration::from_millis(50))
        .await
        .unwrap();
    assert!(!waiting.done);
    let cancelled = client
        .cancel(&napping.run_id, Some("enough"))
        .await
        .unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);

    // Remote errors carry the engine's kinds and the API's codes.
    let missing = client
        .get_run("wrun_none", ResolveData::None)
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), Some(ErrorKind::NotFound), "{missing}");
    let again = client.cancel(&run.run_id, None).await.unwrap_err();
    assert_eq!(again.kind(), Some(ErrorKind::Conflict), "{again}");
    let unknown = client.resume_hook("f00d", &true).await.unwrap_err();
    assert_eq!(unknown.kind(), Some(ErrorKind::NotFound));
    let stranger = Client::new(&base, "wek_nope").unwrap();
    let refused = stranger.schedules().await.unwrap_err();
    assert_eq!(refused.code(), Some("UNAUTHENTICATED"), "{refused}");
    assert_eq!(refused.kind(), Some(ErrorKind::Unauthenticated));
    let weak = client.pause_schedule("nightly", true).await.unwrap_err();
    assert_eq!(weak.code(), Some("FORBIDDEN"), "{weak}");
    assert!(client.schedules().await.unwrap().is_empty());

    server.shutdown().await;
    let gone = client.schedules().await.unwrap_err();
    assert!(matches!(gone, ClientError::Transport(_)), "{gone}");
    assert_eq!(gone.kind(), Some(ErrorKind::Unavailable));
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_client_retries_resets_and_resumes_with_the_servers_refusals() {
    let mut config = WorldConfig::memory();
    config.failure_strategy = FailureStrategy::Ignore;
    let world = Arc::new(World::new(config).unwrap());
    let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let check = {
        let fixed = fixed.clone();
        activity("check", move |_ctx: ActivityContext, n: u64| {
            let fixed = fixed.clone();
            async move {
                if fixed.load(std::sync::atomic::Ordering::SeqCst) {
                    Ok::<_, StepError>(n)
                } else {
                    Err(StepError::fatal("not yet"))
                }
            }
        })
    };
    let flow = {
        let check = check.clone();
        workflow("checked", move |ctx: WorkflowContext, n: u64| {
            let check = check.clone();
            async move { Ok::<_, WorkflowError>(ctx.run(&check, n).await?) }
        })
    };
    world.register(&check).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("t", Scope::Write, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let client = Client::new(&format!("http://{}", server.local_addr()), &key).unwrap();
    let run = client
        .start("checked", &7, WorkflowOptions::default())
        .await
        .unwrap();
    let failed = client
        .result(&run.run_id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed);

    let refused = client
        .reopen(&run.run_id, &ReopenRequest::resume())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("CONFLICT"), "{refused}");
    let refused = client
        .reopen(&run.run_id, &ReopenRequest::reset(5))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("INVALID_INPUT"), "{refused}");

    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let reopened = client
        .reopen(&run.run_id, &ReopenRequest::reset(0).reason("fixed"))
        .await
        .unwrap();
    assert_eq!((reopened.attempt, reopened.kept_until), (2, 0));
    let done = client
        .result(&run.run_id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.output, Some(serde_json::json!(7)));
    server.shutdown().await;
}
