//! Conformance checks for [`IdempotencyStore`](crate::store::IdempotencyStore): the newest run started with a key is found when
//! it is recent enough, and `create_run_once` creates a run only when no such run exists.

use super::*;

fn keyed<'a>(key: &'a str) -> Queued<'a> {
    Queued {
        name: "charge",
        key: Some(key),
        ..Queued::default()
    }
}

/// A key finds the newest run created with it at or after `since`; `create_run_once` returns
/// that run instead of creating one, and creates when there is none (or no key).
pub async fn idempotency_keys_find_the_newest_run_and_create_once(store: Arc<dyn Store>) {
    let m = Maker::new();
    assert_eq!(store.find_by_idempotency_key("k", T0).await.unwrap(), None);

    // Created the way the engine creates keyed runs.
    let first = m.run_id();
    let created = store
        .create_run_once(m.queued(&first, keyed("k")), T0)
        .await
        .unwrap();
    assert_eq!(created, None);
    let found = store.find_by_idempotency_key("k", T0).await.unwrap();
    assert_eq!(found.as_deref(), Some(first.as_str()));
    assert_eq!(
        store.find_by_idempotency_key("k", T0 + 1).await.unwrap(),
        None
    );
    assert_eq!(
        store.find_by_idempotency_key("other", T0).await.unwrap(),
        None
    );

    // A second start with the key within the window gets the first run; nothing is created.
    m.tick(10);
    let again = m.run_id();
    let existing = store
        .create_run_once(m.queued(&again, keyed("k")), T0)
        .await
        .unwrap();
    assert_eq!(existing.as_deref(), Some(first.as_str()));
    assert!(is_not_found(&store.get_run(&again, ResolveData::All).await));

    // Outside the window a new run is created, and is the newest with the key from then on.
    let newer = m.run_id();
    let created = store
        .create_run_once(m.queued(&newer, keyed("k")), T0 + 5)
        .await
        .unwrap();
    assert_eq!(created, None);
    assert_eq!(
        store.get_run(&newer, ResolveData::None).await.unwrap().id,
        newer
    );
    let found = store.find_by_idempotency_key("k", T0).await.unwrap();
    assert_eq!(found.as_deref(), Some(newer.as_str()));

    // A keyed run created the plain way is found by `create_run_once` too, on every backend.
    let direct = m.run_id();
    store
        .create_run(m.queued(&direct, keyed("direct")))
        .await
        .unwrap();
    let once = m.run_id();
    let existing = store
        .create_run_once(m.queued(&once, keyed("direct")), T0)
        .await
        .unwrap();
    assert_eq!(existing.as_deref(), Some(direct.as_str()));
    assert!(is_not_found(&store.get_run(&once, ResolveData::All).await));

    // Without a key it simply creates.
    let plain = m.run_id();
    let created = store
        .create_run_once(m.queued(&plain, Queued::named("charge")), T0)
        .await
        .unwrap();
    assert_eq!(created, None);
    assert!(store.get_run(&plain, ResolveData::None).await.is_ok());
}
