//! Two stores on one fresh schema, with a short lease.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use worlds_engine::clock::VirtualClock;
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::{QueuedRun, EVENT_FORMAT_VERSION};
use worlds_engine::store::{EventStore, RunStore};
use worlds_engine::{Event, EventKind, Payload};
use worlds_postgres::{PostgresOptions, PostgresStore};

/// Two stores on a fresh schema (dropped at the end), with a short lease.
pub struct Pair {
    pub schema: String,
    pub a: PostgresStore,
    pub b: PostgresStore,
    pub ids: IdGenerator,
}

impl Pair {
    pub async fn new(lease: Duration) -> Option<Self> {
        if !super::database_up().await {
            return None;
        }
        let schema = super::fresh_schema();
        let options = PostgresOptions {
            lease_duration: lease,
            heartbeat_interval: Some(lease / 4),
            ..super::options(&schema)
        };
        let a = super::store(&schema, options.clone()).await;
        let b = super::store(&schema, options).await;
        let ids = IdGenerator::new(Arc::new(VirtualClock::new(1_767_225_600_000)));
        Some(Self { schema, a, b, ids })
    }

    pub fn event(&self, run_id: &str, kind: EventKind) -> Event {
        Event {
            id: self.ids.event_id(),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: 1_767_225_600_000,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// Creates a run through `store` (so leased to it) and starts it.
    pub async fn create(&self, store: &PostgresStore) -> String {
        let id = self.ids.run_id();
        let queued = EventKind::WorkflowQueued(Box::new(QueuedRun::new(
            "lease".to_owned(),
            id.clone(),
            Payload::from(json!(null)),
        )));
        store.create_run(self.event(&id, queued)).await.unwrap();
        store
            .append(
                &id,
                vec![self.event(
                    &id,
                    EventKind::WorkflowStarted {
                        attempt: 1,
                        first_position: 0,
                    },
                )],
            )
            .await
            .unwrap();
        id
    }

    pub fn schedule(&self, run_id: &str, position: u32) -> Event {
        self.event(
            run_id,
            EventKind::ActivityScheduled {
                position,
                activity_id: self.ids.step_id(),
                name: "s".into(),
                input: Payload::from(json!(position)),
                options: None,
                inline: false,
            },
        )
    }

    /// A cancellation, as a process that does not hold the run delivers it.
    pub fn cancellation(&self, run_id: &str) -> Event {
        self.event(
            run_id,
            EventKind::WorkflowCancelled {
                reason: Some("from another process".into()),
            },
        )
    }

    pub async fn finish(self) {
        self.a.stop_heartbeat();
        self.b.stop_heartbeat();
        let _ = self.a.close().await;
        let _ = self.b.close().await;
        super::drop_schema(&self.schema).await;
    }
}
