//! Building store contents directly, event by event, for the store tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, Millis, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::EVENT_FORMAT_VERSION;
use worlds_engine::store::Store;
use worlds_engine::testing::DEFAULT_START;
use worlds_engine::{Event, EventKind, Payload, ResolveData, WorkflowState};

/// Makes events and runs with ids and times from a virtual clock.
pub struct Maker {
    pub clock: VirtualClock,
    pub ids: IdGenerator,
}

impl Maker {
    pub fn new() -> Self {
        let clock = VirtualClock::new(DEFAULT_START);
        let ids = IdGenerator::new(Arc::new(clock.clone()));
        Self { clock, ids }
    }

    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    pub fn event(&self, run_id: &str, kind: EventKind) -> Event {
        Event {
            id: self.ids.event_id(),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: self.now(),
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// The `workflow_queued` event of a new run.
    pub fn queued(&self, run_id: &str, name: &str, workflow_id: &str) -> Event {
        self.event(
            run_id,
            EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun::new(
                name.to_owned(),
                workflow_id.to_owned(),
                Payload::from(json!({ "n": 1 })),
            ))),
        )
    }

    /// Creates a pending run and returns its id.
    pub async fn create(&self, store: &dyn Store, name: &str, workflow_id: &str) -> String {
        let id = self.ids.run_id();
        store
            .create_run(self.queued(&id, name, workflow_id))
            .await
            .unwrap();
        id
    }

    pub async fn append(&self, store: &dyn Store, run_id: &str, kinds: Vec<EventKind>) {
        let events = kinds.into_iter().map(|k| self.event(run_id, k)).collect();
        store.append(run_id, events).await.unwrap();
    }
}

pub fn started() -> EventKind {
    EventKind::WorkflowStarted {
        attempt: 1,
        first_position: 0,
    }
}

pub fn step(position: u32) -> Vec<EventKind> {
    vec![
        EventKind::ActivityScheduled {
            position,
            activity_id: format!("step_{position:026}"),
            name: "s".to_owned(),
            input: Payload::from(json!(position)),
            options: None,
            inline: false,
        },
        EventKind::ActivityStarted {
            position,
            attempt: 1,
        },
        EventKind::ActivityCompleted {
            position,
            attempt: 1,
            output: Payload::from(json!({ "out": position })),
        },
    ]
}

pub fn completed() -> EventKind {
    EventKind::WorkflowCompleted {
        output: Payload::from(json!("done")),
    }
}

pub fn log_of(dir: &Path, run_id: &str) -> PathBuf {
    dir.join("workflows")
        .join(format!("{run_id}.events.ndjson"))
}

/// Three runs: one pending, one running with a step, one completed.
pub async fn populate(store: &dyn Store, m: &Maker) -> (String, String, String) {
    let pending = m.create(store, "w", "wf-pending").await;
    let running = m.create(store, "w", "wf-running").await;
    m.append(store, &running, vec![started()]).await;
    m.append(store, &running, step(0)).await;
    let done = m.create(store, "other", "wf-done").await;
    let mut kinds = vec![started()];
    kinds.extend(step(0));
    kinds.push(completed());
    m.append(store, &done, kinds).await;
    (pending, running, done)
}

pub async fn snapshot(store: &dyn Store, ids: &[&String]) -> Vec<(WorkflowState, Vec<Arc<Event>>)> {
    let mut out = Vec::new();
    for id in ids {
        let state = store.get_run(id, ResolveData::All).await.unwrap();
        let history = store.history(id, 0).await.unwrap();
        out.push((state, history));
    }
    out
}
