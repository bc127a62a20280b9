//! Conformance checks for [`TimerStore`](crate::store::TimerStore).

use super::*;

fn sleep_timer(run_id: &str, fire_at: Millis, position: u32) -> Timer {
    Timer {
        fire_at,
        run_id: run_id.to_owned(),
        kind: TimerKind::Sleep { position },
    }
}

/// Timers: the earliest is reported, due ones are taken earliest first up to a limit and
/// only once, a duplicate add keeps one, and a run's timers can be removed together.
pub async fn timers_fire_in_order_once_and_are_removable(store: Arc<dyn Store>) {
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    assert!(store
        .take_due_timers(i64::MAX, 10)
        .await
        .unwrap()
        .is_empty());

    let late = sleep_timer("wrun_a", T0 + 3_000, 1);
    let early = sleep_timer("wrun_b", T0 + 1_000, 0);
    let middle = Timer {
        fire_at: T0 + 2_000,
        run_id: "wrun_a".into(),
        kind: TimerKind::ActivityRetry {
            position: 0,
            attempt: 2,
        },
    };
    let timeout = Timer {
        fire_at: T0 + 10_000,
        run_id: "wrun_a".into(),
        kind: TimerKind::RunTimeout,
    };
    for timer in [&late, &early, &middle, &timeout, &early, &late] {
        store.add_timer(timer.clone()).await.unwrap();
    }
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 1_000));

    // Nothing is due before its time.
    assert!(store
        .take_due_timers(T0 + 999, 10)
        .await
        .unwrap()
        .is_empty());
    // Due ones come earliest first, at most `limit` at a time, each once (duplicates merged).
    let due = store.take_due_timers(T0 + 5_000, 2).await.unwrap();
    assert_eq!(due, vec![early.clone(), middle.clone()]);
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 3_000));
    let due = store.take_due_timers(T0 + 5_000, 10).await.unwrap();
    assert_eq!(due, vec![late.clone()], "the duplicate add left one timer");
    assert!(store
        .take_due_timers(T0 + 5_000, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 10_000));

    // Removing a run's timers leaves other runs' timers alone.
    store
        .add_timer(sleep_timer("wrun_b", T0 + 20_000, 3))
        .await
        .unwrap();
    store
        .add_timer(sleep_timer("wrun_a", T0 + 15_000, 4))
        .await
        .unwrap();
    assert!(store.remove_run_timers("wrun_a").await.unwrap());
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 20_000));
    let rest = store.take_due_timers(i64::MAX, 10).await.unwrap();
    assert_eq!(rest, vec![sleep_timer("wrun_b", T0 + 20_000, 3)]);
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    // Removing timers of a run that has none is fine, and says nothing was removed; so does
    // removing those of a run whose timers were all taken.
    assert!(!store.remove_run_timers("wrun_none").await.unwrap());
    assert!(!store.remove_run_timers("wrun_b").await.unwrap());
}
