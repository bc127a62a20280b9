//! Conformance checks for [`ScheduleStore`](crate::store::ScheduleStore): records round-trip, updates are read-modify-write,
//! a failed update changes nothing.

use std::sync::Arc;

use serde_json::json;

use crate::schedule::ScheduleConfig;
use crate::store::{ScheduleChange, Store};
use crate::{ErrorKind, Payload, WorldError};

use super::T0;

fn record(id: &str) -> ScheduleConfig {
    serde_json::from_value(json!({
        "id": id,
        "workflow_name": "report",
        "input": { "to": ["ops@example.com"], "note": "é ✓" },
        "input_fn": false,
        "cron_expression": "0 9 * * 1-5",
        "time_zone": "Europe/Paris",
        "paused": false,
        "total_executions": 7,
        "last_execution": T0 - 1,
        "next_execution": T0 + 1,
        "catch_up": { "policy": "all", "max": 3 },
        "created_at": T0 - 10,
        "last_run_id": "wrun_1",
        "last_error": null,
        "pending_firings": [T0 - 1],
    }))
    .unwrap()
}

async fn put(store: &dyn Store, record: ScheduleConfig) -> Option<ScheduleConfig> {
    let id = record.id.clone();
    store
        .update_schedule(&id, &mut |_| Ok(ScheduleChange::Put(record.clone())))
        .await
        .unwrap()
}

/// A stored record reads back equal, by id and in the list (ordered by id).
pub async fn schedules_round_trip_and_list_by_id(store: Arc<dyn Store>) {
    assert!(store.list_schedules().await.unwrap().is_empty());
    assert_eq!(store.get_schedule("b").await.unwrap(), None);
    assert_eq!(put(&*store, record("b")).await, Some(record("b")));
    put(&*store, record("a")).await;
    assert_eq!(store.get_schedule("b").await.unwrap(), Some(record("b")));
    let listed = store.list_schedules().await.unwrap();
    assert_eq!(listed, vec![record("a"), record("b")]);
    let input = listed[0].input.clone().map(|p: Payload| p.to_value());
    assert_eq!(input.unwrap()["note"], "é ✓");
}

/// An update sees the record as stored (or none), and can keep, replace or delete it.
pub async fn schedule_updates_read_the_current_record_and_keep_or_delete(store: Arc<dyn Store>) {
    let mut seen = Vec::new();
    let kept = store
        .update_schedule("s", &mut |current| {
            seen.push(current);
            Ok(ScheduleChange::Keep)
        })
        .await
        .unwrap();
    assert_eq!(kept, None, "nothing to keep");
    put(&*store, record("s")).await;
    let kept = store
        .update_schedule("s", &mut |current| {
            seen.push(current);
            Ok(ScheduleChange::Keep)
        })
        .await
        .unwrap();
    assert_eq!(kept, Some(record("s")));
    assert_eq!(seen, vec![None, Some(record("s"))]);

    let mut paused = record("s");
    paused.paused = true;
    let after = store
        .update_schedule("s", &mut |current| {
            let mut s = current.unwrap();
            s.paused = true;
            Ok(ScheduleChange::Put(s))
        })
        .await
        .unwrap();
    assert_eq!(after, Some(paused.clone()));
    assert_eq!(store.get_schedule("s").await.unwrap(), Some(paused));

    let deleted = store
        .update_schedule("s", &mut |_| Ok(ScheduleChange::Delete))
        .await
        .unwrap();
    assert_eq!(deleted, None);
    assert_eq!(store.get_schedule("s").await.unwrap(), None);
    assert!(store.list_schedules().await.unwrap().is_empty());
}

/// An update whose function fails, or that stores a record under another id, changes nothing.
pub async fn a_failed_schedule_update_changes_nothing(store: Arc<dyn Store>) {
    put(&*store, record("s")).await;
    let err = store
        .update_schedule("s", &mut |_| {
            Err(WorldError::Conflict {
                message: "no".into(),
            })
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .update_schedule("s", &mut |_| Ok(ScheduleChange::Put(record("other"))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(store.list_schedules().await.unwrap(), vec![record("s")]);
}
