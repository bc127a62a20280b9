//! Hooks and webhooks: created in workflows, resumed from outside, typed, expiring, disposed,
//! conflicting, surviving restarts, and never stored as plain tokens.

mod common;

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use worlds_engine::hooks::token_digest;
use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{ErrorKind, HookSecret, HookStatus, HookTicket, Webhook};

use common::{event_types, test_world, Mode};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

/// Tokens handed out by the workflows, as a notification step would.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<String>>>);

impl Inbox {
    fn notify(&self) -> Activity<String, ()> {
        let inbox = self.clone();
        activity("notify", move |_ctx: ActivityContext, token: String| {
            let inbox = inbox.clone();
            async move {
                inbox.0.lock().push(token);
                Ok::<_, StepError>(())
            }
        })
    }

    /// A notification step given a ticket: it derives the token itself, so history never
    /// holds it.
    fn notify_ticket(&self) -> Activity<HookTicket, ()> {
        let inbox = self.clone();
        activity(
            "notify-ticket",
            move |ctx: ActivityContext, ticket: HookTicket| {
                let inbox = inbox.clone();
                async move {
                    inbox.0.lock().push(ctx.hook_token(&ticket)?);
                    Ok::<_, StepError>(())
                }
            },
        )
    }

    fn last(&self) -> String {
        self.0
            .lock()
            .last()
            .cloned()
            .expect("a token was handed out")
    }

    fn count(&self) -> usize {
        self.0.lock().len()
    }
}

/// Creates a hook, hands its token out, waits; returns the decision and the token it saw after
/// the wait (equal to the first on replay).
fn approval_flow(
    notify: &Activity<String, ()>,
    options: fn() -> HookOptions,
) -> Workflow<(), (Approval, String)> {
    let notify = notify.clone();
    workflow("approval", move |ctx: WorkflowContext, _: ()| {
        let notify = notify.clone();
        async move {
            let hook = ctx.create_hook_with::<Approval>(options());
            let token = hook.token().to_owned();
            ctx.run(&notify, token.clone()).await?;
            let decision = hook.wait().await?;
            Ok::<_, WorkflowError>((decision, token))
        }
    })
}

async fn approval_world(
    mode: Mode,
    options: fn() -> HookOptions,
) -> (TestWorld, Inbox, Workflow<(), (Approval, String)>) {
    let world = test_world(mode).await;
    let inbox = Inbox::default();
    let notify = inbox.notify();
    let flow = approval_flow(&notify, options);
    world.register(&notify).unwrap().register(&flow).unwrap();
    (world, inbox, flow)
}

fn approved() -> Approval {
    Approval {
        approved: true,
        by: "ada".into(),
    }
}

async fn a_hook_resumed_from_outside_delivers_its_payload(mode: Mode) {
    let (world, inbox, flow) = approval_world(mode, HookOptions::new).await;
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.hooks.len(), 1);
    assert_eq!(state.hooks[0].status, HookStatus::Waiting);
    let token = inbox.last();
    assert_eq!(token.len(), 48, "192 bits in hex");
    assert!(state.hooks[0].id.starts_with("hook_"));

    let resumed = world.resume_hook(&token, &approved()).await.unwrap();
    assert_eq!(resumed.run_id, run.id);
    assert_eq!(resumed.hook_id, state.hooks[0].id);
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    let (decision, token_after): (Approval, String) = state.output.unwrap().decode().unwrap();
    assert_eq!(decision, approved());
    assert_eq!(token_after, token, "replay hands out the same token");
    assert_eq!(inbox.count(), 1, "the notify step ran once");
    assert_eq!(
        event_types(&world.query(&run.id).await.unwrap())
            .into_iter()
            .filter(|t| t.starts_with("hook_"))
            .collect::<Vec<_>>(),
        ["hook_created", "hook_received"]
    );
    world.shutdown().await.unwrap();
}

async fn bad_tokens_payloads_and_second_resumes_are_refused(mode: Mode) {
    let (world, inbox, flow) = approval_world(mode, HookOptions::new).await;
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    let token = inbox.last();

    let unknown = world.resume_hook("f00d", &approved()).await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound, "{unknown}");
    assert_eq!(unknown.http_status(), 404);

    let wrong = world
        .resume_hook(&token, &serde_json::json!({ "approved": "yes" }))
        .await
        .unwrap_err();
    assert_eq!(wrong.http_status(), 400, "{wrong}");
    assert_eq!(run.query().await.unwrap().status, RunStatus::Running);

    world.resume_hook(&token, &approved()).await.unwrap();
    let again = world.resume_hook(&token, &approved()).await.unwrap_err();
    assert_eq!(again.http_status(), 409, "{again}");
    world.run_until_complete(&run.id, "1m").await.unwrap();
    // The run is over: the token is unknown now.
    let after = world.resume_hook(&token, &approved()).await.unwrap_err();
    assert_eq!(after.http_status(), 404, "{after}");
    world.shutdown().await.unwrap();
}

async fn a_run_that_ends_disposes_its_waiting_hooks(mode: Mode) {
    let (world, inbox, flow) = approval_world(mode, || HookOptions::new().token("order-7")).await;
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    assert_eq!(inbox.last(), "order-7");
    run.cancel().await.unwrap();
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert_eq!(state.hooks[0].status, HookStatus::Disposed);
    assert!(event_types(&state).contains(&"hook_disposed"));
    let err = world.resume_hook("order-7", &approved()).await.unwrap_err();
    assert_eq!(err.http_status(), 404, "{err}");

    // The token is free again.
    let second = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    world.resume_hook("order-7", &approved()).await.unwrap();
    let state = world.run_until_complete(&second.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    world.shutdown().await.unwrap();
}

async fn a_second_live_hook_with_the_same_token_conflicts(mode: Mode) {
    let (world, _inbox, flow) = approval_world(mode, || HookOptions::new().token("shared")).await;
    let first = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    let second = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&second.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.unwrap();
    assert_eq!(error.code.as_deref(), Some("HOOK_CONFLICT"), "{error:?}");
    assert!(event_types(&world.query(&second.id).await.unwrap()).contains(&"hook_conflict"));
    assert_eq!(state.hooks[0].status, HookStatus::Conflict);

    // The first hook still owns the token.
    let resumed = world.resume_hook("shared", &approved()).await.unwrap();
    assert_eq!(resumed.run_id, first.id);
    world.run_until_complete(&first.id, "1m").await.unwrap();
    world.shutdown().await.unwrap();
}

async fn an_expired_hook_fails_its_wait_and_refuses_payloads(mode: Mode) {
    let world = test_world(mode).await;
    let flow = workflow("expiring", |ctx: WorkflowContext, _: ()| async move {
        let hook = ctx.create_hook_with::<u32>(HookOptions::new().token("late").expires_in("1h"));
        match hook.wait().await {
            Ok(n) => Ok::<_, WorkflowError>(format!("got {n}")),
            Err(e) => {
                // Still running a while, so a late payload meets an expired hook.
                ctx.sleep("1h").await?;
                Ok(format!(
                    "expired: {}",
                    e.to_structured().code.unwrap_or_default()
                ))
            }
        }
    });
    world.register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    world.advance("61m").await;
    let state = run.query().await.unwrap();
    assert_eq!(state.hooks[0].status, HookStatus::Expired);
    let late = world.resume_hook("late", &5u32).await.unwrap_err();
    assert_eq!(late.kind(), ErrorKind::Gone, "{late}");
    assert_eq!(late.http_status(), 410);
    assert!(late.to_string().contains("expired"), "{late}");
    let state = world.run_until_complete(&run.id, "2h").await.unwrap();
    let output: String = state.output.unwrap().decode().unwrap();
    assert_eq!(output, "expired: HOOK_EXPIRED");
    world.shutdown().await.unwrap();
}

async fn a_typed_hook_definition_checks_payloads(mode: Mode) {
    let world = test_world(mode).await;
    let approval = define_hook::<Approval>("approval");
    let hooks = approval.clone();
    let flow = workflow("typed", move |ctx: WorkflowContext, _: ()| {
        let hooks = hooks.clone();
        async move {
            let hook = hooks.create(&ctx, HookOptions::new().token("typed-1"));
            Ok::<_, WorkflowError>(hook.wait().await?.by)
        }
    });
    world.register(&approval).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    let wrong = world.resume_hook("typed-1", &42).await.unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::InvalidInput, "{wrong}");
    approval
        .resume(&world, "typed-1", &approved())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.output.unwrap().decode::<String>().unwrap(), "ada");
    world.shutdown().await.unwrap();
}

async fn a_webhook_has_a_url_and_waits_for_a_request(mode: Mode) {
    let mut config = common::memory_config();
    config.webhook_base_url = "https://example.test/hooks/".into();
    let world = common::test_world_with(mode, config).await;
    let inbox = Inbox::default();
    let notify = inbox.notify();
    let step = notify.clone();
    let flow = workflow("webhooked", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            let hook: Webhook = ctx.create_webhook();
            ctx.run(&step, hook.url().to_owned()).await?;
            let request = hook.wait().await?;
            Ok::<_, WorkflowError>(format!("{} {}", request.method, request.body))
        }
    });
    world.register(&notify).unwrap().register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    world.settle().await;
    let url = inbox.last();
    let token = url.strip_prefix("https://example.test/hooks/").expect(&url);
    assert_eq!(token.len(), 48);
    let request =
        WebhookRequest::new("POST", r#"{"paid":true}"#).header("Content-Type", "application/json");
    world.resume_webhook(token, &request).await.unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(
        state.output.unwrap().decode::<String>().unwrap(),
        r#"POST {"paid":true}"#
    );
    assert!(state.hooks[0].webhook);
    world.shutdown().await.unwrap();
}

in_both_modes!(
    a_hook_resumed_from_outside_delivers_its_payload,
    bad_tokens_payloads_and_second_resumes_are_refused,
    a_run_that_ends_disposes_its_waiting_hooks,
    a_second_live_hook_with_the_same_token_conflicts,
    an_expired_hook_fails_its_wait_and_refuses_payloads,
    a_typed_hook_definition_checks_payloads,
    a_webhook_has_a_url_and_waits_for_a_request,
);

#[tokio::test]
async fn an_invalid_token_or_expiry_fails_the_wait_not_the_process() {
    let world = test_world(Mode::Cached).await;
    let flow = workflow(
        "bad-hook",
        |ctx: WorkflowContext, bad_token: bool| async move {
            let options = if bad_token {
                HookOptions::new().token("has space")
            } else {
                HookOptions::new().expires_in("soon")
            };
            ctx.create_hook_with::<u32>(options).wait().await?;
            Ok::<_, WorkflowError>(())
        },
    );
    world.register(&flow).unwrap();
    for bad_token in [true, false] {
        let run = world
            .execute(&flow, bad_token, WorkflowOptions::default())
            .await
            .unwrap();
        let state = world.run_until_complete(&run.id, "1m").await.unwrap();
        assert_eq!(state.status, RunStatus::Failed);
        assert!(state.error.unwrap().message.contains("create_hook"));
    }
    world.shutdown().await.unwrap();
}

async fn file_world(dir: &Path, start: i64) -> TestWorld {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    let mut config = common::memory_config();
    // A world on a store of its own derives tokens from the configured secret.
    config.hook_secret = Some(HookSecret("test secret".into()));
    TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        config,
        initial_time: start,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await
}

#[tokio::test]
async fn a_waiting_hook_survives_a_restart_and_its_token_is_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::default();
    let notify = inbox.notify_ticket();
    let step = notify.clone();
    let flow = workflow("ticketed", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            let hook = ctx.create_hook::<Approval>();
            ctx.run(&step, hook.ticket()).await?;
            let token = hook.token().to_owned();
            let decision = hook.wait().await?;
            // Returned only to compare; a real workflow would not put it in its output.
            Ok::<_, WorkflowError>((decision, token.len(), token_digest(&token)))
        }
    });

    let first = file_world(dir.path(), 1_000_000).await;
    first.register(&notify).unwrap().register(&flow).unwrap();
    first.world().start().await.unwrap();
    let run_id = first
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap()
        .id
        .clone();
    first.settle().await;
    let token = inbox.last();
    first.shutdown().await.unwrap();
    drop(first);

    // No file of the directory holds the token.
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&token),
            "{} holds the token",
            entry.display()
        );
    }

    let second = file_world(dir.path(), 2_000_000).await;
    second.register(&notify).unwrap().register(&flow).unwrap();
    second.world().start().await.unwrap();
    second.resume_hook(&token, &approved()).await.unwrap();
    let state = second.run_until_complete(&run_id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    let (_, len, digest): (Approval, usize, String) = state.output.unwrap().decode().unwrap();
    assert_eq!(
        (len, digest),
        (48, token_digest(&token)),
        "the restarted world derives the same token"
    );
    assert_eq!(inbox.count(), 1);
    second.shutdown().await.unwrap();
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
