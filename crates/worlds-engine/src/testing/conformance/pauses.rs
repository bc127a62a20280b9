//! Conformance checks for [`PauseStore`](crate::store::PauseStore): pauses round-trip, are
//! listed by target, a second pause of a target replaces the first, and a resume lifts one
//! and hands it back.

use super::*;
use crate::model::{Pause, PauseTarget};

fn pause(target: PauseTarget, by: &str) -> Pause {
    Pause {
        target,
        by: by.into(),
        reason: "payment provider incident — \"quoted\", ünïcode".into(),
        since: T0,
    }
}

/// Pauses come back as saved, workflows first then task queues, each by name; pausing a
/// target again replaces its record; a resume returns the pause it lifted (`None` for one not
/// paused, whatever its name); a target no store can hold (empty, control characters) is
/// refused with nothing saved.
pub async fn pauses_round_trip_list_by_target_and_lift(store: Arc<dyn Store>) {
    assert!(store.list_pauses().await.unwrap().is_empty());
    let checkout = pause(PauseTarget::Workflow("checkout".into()), "ops");
    let emails = pause(
        PauseTarget::TaskQueue("emails".into()),
        "key Ab3dEf9h (deploy)",
    );
    // The same name as a workflow and as a queue: two targets.
    let queue_checkout = pause(PauseTarget::TaskQueue("checkout".into()), "cli");
    let long = pause(PauseTarget::Workflow("w/".repeat(512)), "ops");
    for p in [&emails, &queue_checkout, &long, &checkout] {
        store.save_pause(p).await.unwrap();
    }
    assert_eq!(
        store.list_pauses().await.unwrap(),
        vec![
            checkout.clone(),
            long.clone(),
            queue_checkout.clone(),
            emails.clone()
        ]
    );

    let mut again = checkout.clone();
    again.by = "on-call".into();
    again.reason = String::new();
    again.since = T0 + 60_000;
    store.save_pause(&again).await.unwrap();
    let listed = store.list_pauses().await.unwrap();
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[0], again);

    assert_eq!(
        store.remove_pause(&emails.target).await.unwrap(),
        Some(emails.clone())
    );
    assert_eq!(store.remove_pause(&emails.target).await.unwrap(), None);
    assert_eq!(
        store
            .remove_pause(&PauseTarget::Workflow("a\0b".into()))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.list_pauses().await.unwrap(),
        vec![again, long, queue_checkout]
    );

    for bad in [
        pause(PauseTarget::Workflow(String::new()), "ops"),
        pause(PauseTarget::TaskQueue("a\0b".into()), "ops"),
        pause(PauseTarget::Workflow("x".into()), "o\0ps"),
    ] {
        assert!(store.save_pause(&bad).await.is_err(), "{bad:?}");
    }
    assert_eq!(store.list_pauses().await.unwrap().len(), 3);
}
