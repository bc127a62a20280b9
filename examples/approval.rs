//! Approval: an expense waits for a person's decision, sent to a webhook over HTTP, and streams
//! its progress while it waits.
//!
//! The workflow (`crates/worlds-demo/src/approval.rs`) writes progress lines to its stream,
//! creates a webhook, has a step announce the webhook's URL, and waits. This program serves the
//! world's webhook endpoint, prints the progress stream live, and sends the approval itself
//! after a moment — or, with `--manual`, prints a `curl` command and waits for you to run it.
//!
//! Run it with `cargo run --example approval` (or `cargo run --example approval -- --manual`).

use std::time::Duration;

use futures::StreamExt;
use worlds_demo::approval::{approval, notify_approver, Expense};
use worlds_engine::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manual = std::env::args().any(|arg| arg == "--manual");
    let listen = if manual {
        "127.0.0.1:3000"
    } else {
        "127.0.0.1:0"
    };

    let world = World::new(WorldConfig::memory())?;
    let server = world.serve_webhooks(listen).await?;
    // Webhook URLs are built from this base: the address the endpoint really listens on.
    let base = format!("http://{}/webhooks", server.local_addr());

    let (url_tx, mut url_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let notify = notify_approver(move |url| {
        let _ = url_tx.send(url.to_owned());
    });
    let flow = approval(&notify, base);
    world.register(&notify)?.register(&flow)?;
    world.start().await?;

    let expense = Expense {
        employee: "grace".into(),
        cents: 12_950,
        reason: "conference ticket".into(),
    };
    // One run per expense report: a restart that starts it again finds the same run.
    let options = WorkflowOptions::new()
        .workflow_id("expense-grace-2026-11")
        .on_conflict(OnConflict::UseExisting);
    let run = world.execute(&flow, expense, options).await?;
    println!("started run {}", run.id);

    // Follow the run's progress stream from its first chunk; it ends when the run closes it.
    let mut progress = world.streams().read(&run.id, "default", 0).await?;
    let follower = tokio::spawn(async move {
        while let Some(chunk) = progress.next().await {
            match chunk {
                Ok(chunk) => println!(
                    "  progress #{}: {}",
                    chunk.index,
                    chunk.text().unwrap_or("?")
                ),
                Err(e) => eprintln!("  progress stream failed: {e}"),
            }
        }
    });

    // The step announces the webhook's URL each time it runs; print every one, so the URL on
    // screen is always the one the run waits on.
    let url = url_rx
        .recv()
        .await
        .ok_or("the approver was never notified")?;
    println!("the run waits on {url}");
    tokio::spawn(async move {
        while let Some(url) = url_rx.recv().await {
            println!("the run now waits on {url}");
        }
    });
    let body = r#"{"approved": true, "by": "ada"}"#;
    if manual {
        println!("approve it with:\n  curl -X POST -H 'content-type: application/json' -d '{body}' {url}");
        println!("(a body that is not a decision, such as {{\"approved\":\"yes\"}}, gets a 400 naming the field, and the run keeps waiting)");
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // reqwest's TLS needs a process-wide rustls crypto provider (this build uses `ring`).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        for body in [r#"{"approved": "yes", "by": "ada"}"#, body] {
            println!("sending {body} to {url}");
            let response = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            println!(
                "webhook answered {}: {}",
                response.status(),
                response.text().await?
            );
        }
    }

    let outcome = run.result().await?;
    follower.await?;
    println!("expense {outcome}");
    server.shutdown().await;
    world.shutdown().await?;
    Ok(())
}
