//! The holder's shortcuts: its own recent records read from memory (`history_tip`) and its
//! appends written with one statement that assumes nobody else wrote. Both must give way to
//! the database the moment another process wrote to the run.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use worlds_engine::store::{EventStore, LeaseStore};
use worlds_engine::{Event, EventKind, Payload};

use common::pair::Pair;

/// Sequence numbers and ids, to compare two reads.
fn keys(events: &[Arc<Event>]) -> Vec<(u64, String)> {
    events.iter().map(|e| (e.seq, e.id.clone())).collect()
}

#[tokio::test]
async fn the_holders_own_records_read_as_the_database_holds_them() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    // More events than the store keeps in memory per run, in appends of several events.
    for batch in 0..40u32 {
        let events = (0..10)
            .map(|i| pair.schedule(&run, batch * 10 + i))
            .collect();
        pair.a.append(&run, events).await.unwrap();
    }
    let all = pair.a.history(&run, 0).await.unwrap();
    assert_eq!(all.len(), 402);
    for from in [0, 1, 100, 145, 146, 147, 300, 401, 402, 500] {
        let tip = pair.a.history_tip(&run, from).await.unwrap();
        let stored = pair.a.history(&run, from).await.unwrap();
        assert_eq!(keys(&tip), keys(&stored), "from {from}");
    }
    pair.finish().await;
}

#[tokio::test]
async fn a_write_by_another_process_is_read_once_reported_and_the_holder_appends_after_it() {
    let Some(pair) = Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    pair.a
        .append(&run, vec![pair.schedule(&run, 0)])
        .await
        .unwrap();
    // Another process delivers what reaches the run from outside (a child's result).
    let child = pair.event(
        &run,
        EventKind::ChildWorkflowCompleted {
            position: 7,
            child_id: "wrun_child".into(),
            output: Payload::from(json!(1)),
        },
    );
    let delivered = pair.b.append(&run, vec![child]).await.unwrap();
    assert_eq!(delivered.events[0].seq, 3);

    // The holder hears of it, and its next read of its run includes it.
    assert_eq!(pair.a.external_changes().await.unwrap(), vec![run.clone()]);
    let tip = pair.a.history_tip(&run, 3).await.unwrap();
    assert_eq!(keys(&tip), keys(&delivered.events));

    // Its next append assumed the run as it last wrote it; it lands after the delivery.
    let next = pair
        .a
        .append(&run, vec![pair.schedule(&run, 1)])
        .await
        .unwrap();
    assert_eq!(next.events[0].seq, 4);
    let more = pair
        .a
        .append(&run, vec![pair.schedule(&run, 2)])
        .await
        .unwrap();
    assert_eq!(more.events[0].seq, 5);
    let all = pair.a.history(&run, 0).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
    assert_eq!(
        keys(&pair.a.history_tip(&run, 0).await.unwrap()),
        keys(&all)
    );
    pair.finish().await;
}
