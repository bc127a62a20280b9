//! A run's stored state is written every few events and on status changes; reads apply the
//! events since. Whatever the position, a read equals the state rebuilt from the history.

mod common;

use std::time::Duration;

use serde_json::json;
use worlds_engine::store::{EventStore, RunStore};
use worlds_engine::{EventKind, Payload, ResolveData, WorkflowQueryFilter, WorkflowState};

#[tokio::test]
async fn reads_between_snapshots_equal_the_state_rebuilt_from_history() {
    let Some(pair) = common::pair::Pair::new(Duration::from_secs(30)).await else {
        return;
    };
    let run = pair.create(&pair.a).await;
    // 3 events per step, 70 steps: past more than one snapshot, and between them.
    for position in 0..70u32 {
        let events = vec![
            pair.schedule(&run, position),
            pair.event(
                &run,
                EventKind::ActivityStarted {
                    position,
                    attempt: 1,
                },
            ),
            pair.event(
                &run,
                EventKind::ActivityCompleted {
                    position,
                    attempt: 1,
                    output: Payload::from(json!(position)),
                },
            ),
        ];
        for event in events {
            pair.a.append(&run, vec![event]).await.unwrap();
            if position % 7 == 0 || position > 60 {
                let history = pair.a.history(&run, 0).await.unwrap();
                let rebuilt = WorkflowState::from_history(&history).unwrap();
                // Read through the other store: nothing cached there.
                let read = pair.b.get_run(&run, ResolveData::All).await.unwrap();
                assert_eq!(read.event_count, rebuilt.event_count);
                assert_eq!(read.activities, rebuilt.activities);
                assert_eq!(read.status, rebuilt.status);
                let listed = pair
                    .b
                    .list_runs(&WorkflowQueryFilter::default())
                    .await
                    .unwrap();
                assert_eq!(listed.data[0].activities, rebuilt.activities);
            }
        }
    }
    pair.finish().await;
}
