//! Append throughput: many runs appending one event at a time, concurrently.
//!
//! `cargo run --release -p worlds-postgres --example append_bench -- [runs] [events]`
//! (defaults 200 runs, 20 000 events in all). The database comes from
//! `WORLDS_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`); the
//! benchmark uses a schema of its own and drops it afterwards.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use worlds_engine::clock::VirtualClock;
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::{QueuedRun, EVENT_FORMAT_VERSION};
use worlds_engine::store::{EventStore, RunStore};
use worlds_engine::{Event, EventKind, Payload, WorldError};
use worlds_postgres::{PostgresOptions, PostgresStore};

const T0: i64 = 1_767_225_600_000;

fn event(ids: &IdGenerator, run_id: &str, kind: EventKind) -> Event {
    Event {
        id: ids.event_id(),
        run_id: run_id.to_owned(),
        seq: 0,
        timestamp: T0,
        version: EVENT_FORMAT_VERSION,
        kind,
    }
}

#[tokio::main]
async fn main() -> Result<(), WorldError> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let per_run = (total / runs.max(1)).max(1);
    let url = std::env::var("WORLDS_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!(
        "bench_{}",
        ulid::Ulid::generate().to_string().to_lowercase()
    );
    let store = PostgresStore::connect(
        &url,
        PostgresOptions {
            schema: schema.clone(),
            ..PostgresOptions::default()
        },
    )
    .await?;
    let ids = Arc::new(IdGenerator::new(Arc::new(VirtualClock::new(T0))));

    let mut run_ids = Vec::with_capacity(runs);
    for _ in 0..runs {
        let id = ids.run_id();
        let queued = EventKind::WorkflowQueued(Box::new(QueuedRun::new(
            "bench".to_owned(),
            id.clone(),
            Payload::from(json!(null)),
        )));
        store.create_run(event(&ids, &id, queued)).await?;
        let started = EventKind::WorkflowStarted {
            attempt: 1,
            first_position: 0,
        };
        store.append(&id, vec![event(&ids, &id, started)]).await?;
        run_ids.push(id);
    }

    let begin = Instant::now();
    let tasks: Vec<_> = run_ids
        .into_iter()
        .map(|run_id| {
            let store = store.clone();
            let ids = ids.clone();
            tokio::spawn(async move {
                for position in 0..per_run as u32 {
                    let kind = EventKind::ActivityScheduled {
                        position,
                        activity_id: ids.step_id(),
                        name: "s".into(),
                        input: Payload::from(json!(position)),
                        options: None,
                        inline: false,
                    };
                    store
                        .append(&run_id, vec![event(&ids, &run_id, kind)])
                        .await?;
                }
                Ok::<(), WorldError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await
            .map_err(|e| WorldError::Internal(format!("a benchmark task failed: {e}")))??;
    }
    let elapsed = begin.elapsed();
    let events = runs * per_run;
    println!(
        "{events} events over {runs} runs in {:.2} s: {:.0} events/s",
        elapsed.as_secs_f64(),
        events as f64 / elapsed.as_secs_f64()
    );

    store.close().await?;
    if let Ok(mut conn) = PgConnection::connect(&url).await {
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&mut conn)
        .await;
    }
    Ok(())
}
