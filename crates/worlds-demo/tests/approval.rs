//! The approval demo: decided through its webhook, with its progress on the run's stream.

use std::sync::Arc;

use parking_lot::Mutex;
use worlds_demo::approval::{approval, notify_approver, Expense};
use worlds_engine::prelude::*;

#[tokio::test]
async fn an_expense_is_decided_through_its_webhook_and_streams_its_progress() {
    let world = World::new(WorldConfig::memory()).unwrap();
    let announced = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = announced.clone();
    let notify = notify_approver(move |url| sink.lock().push(url.to_owned()));
    let flow = approval(&notify, "http://approvals.test/webhooks".into());
    world.register(&notify).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let expense = Expense {
        employee: "grace".into(),
        cents: 500,
        reason: "taxi".into(),
    };
    let run = world
        .execute(&flow, expense, WorkflowOptions::default())
        .await
        .unwrap();
    let url = loop {
        if let Some(url) = announced.lock().first().cloned() {
            break url;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    let token = url.strip_prefix("http://approvals.test/webhooks/").unwrap();
    let request = WebhookRequest::new("POST", r#"{"approved": false, "by": "ada"}"#);
    world.resume_webhook(token, &request).await.unwrap();
    assert_eq!(run.result().await.unwrap(), "rejected by ada");

    let chunks = world
        .streams()
        .chunks(&run.id, "default", None, 10)
        .await
        .unwrap();
    let lines: Vec<&str> = chunks.data.iter().map(|c| c.text().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "grace asks for 5.00 (taxi)",
            "waiting for the approver",
            "rejected by ada"
        ]
    );
    world.shutdown().await.unwrap();
}

/// Regression: a decision of the wrong shape was accepted (202), used up the webhook and failed
/// the run. Now it is refused with a 400 naming the field, and the run keeps waiting.
#[tokio::test]
async fn a_malformed_decision_is_refused_and_the_run_keeps_waiting() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = World::new(WorldConfig::memory()).unwrap();
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/webhooks", server.local_addr());
    let announced = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = announced.clone();
    let notify = notify_approver(move |url| sink.lock().push(url.to_owned()));
    let flow = approval(&notify, base);
    world.register(&notify).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let expense = Expense {
        employee: "grace".into(),
        cents: 500,
        reason: "taxi".into(),
    };
    let run = world
        .execute(&flow, expense, WorkflowOptions::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let url = loop {
        if let Some(url) = announced.lock().first().cloned() {
            break url;
        }
        assert!(tokio::time::Instant::now() < deadline, "never announced");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    let client = reqwest::Client::new();
    let post = |body: &'static str| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let refused = post(r#"{"approved": "yes", "by": "ada"}"#).await.unwrap();
    assert_eq!(refused.status(), 400);
    let error: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("`approved`"), "{message}");
    assert!(message.contains("expected a boolean"), "{message}");
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Running, "{:?}", state.status);
    assert!(state.hooks[0].is_live(), "the webhook still waits");

    let accepted = post(r#"{"approved": true, "by": "ada"}"#).await.unwrap();
    assert_eq!(accepted.status(), 202);
    assert_eq!(run.result().await.unwrap(), "approved by ada");
    assert_eq!(announced.lock().len(), 1, "one webhook, one URL");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
