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
        .get_stream_chunks(&run.id, "default", None, 10)
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
