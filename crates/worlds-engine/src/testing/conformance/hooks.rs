//! Conformance checks for [`HookStore`](crate::store::HookStore): a hook by its token's digest, by its id, a run's hooks
//! and every waiting hook, a page at a time.

use super::*;

/// A hook created at `position` under a fresh hook id: (the id, the event kind).
fn hook(m: &Maker, position: u32, digest: &str) -> (String, EventKind) {
    let id = m.ids.hook_id();
    let kind = created(position, &id, digest);
    (id, kind)
}

/// A `hook_created` with this id and token digest.
pub(super) fn created(position: u32, hook_id: &str, digest: &str) -> EventKind {
    EventKind::HookCreated {
        position,
        hook_id: hook_id.to_owned(),
        token_digest: digest.to_owned(),
        expires_at: None,
        webhook: false,
        methods: Vec::new(),
        hook_type: None,
        signature: None,
        metadata: None,
    }
}

fn received(position: u32, hook_id: &str) -> EventKind {
    EventKind::HookReceived {
        position,
        hook_id: hook_id.to_owned(),
        payload: p(json!({ "ok": true })),
    }
}

/// (run, position) of each listed hook.
fn places(page: &crate::model::Page<crate::store::HookRecord>) -> Vec<(String, u32)> {
    page.data
        .iter()
        .map(|h| (h.run_id.clone(), h.hook.position))
        .collect()
}

/// Every page of the waiting hooks, following the cursors.
async fn waiting_pages(store: &dyn Store, query: ListQuery) -> Vec<Vec<(String, u32)>> {
    let mut pages = Vec::new();
    let mut query = query;
    loop {
        let page = store.list_waiting_hooks(&query).await.unwrap();
        pages.push(places(&page));
        assert_eq!(page.has_more, page.cursor.is_some());
        match page.cursor {
            Some(cursor) => query = query.cursor(cursor),
            None => return pages,
        }
    }
}

/// Hooks are found by token digest while their run lasts, by id always; a run's hooks are listed
/// whatever their status, the waiting hooks of every run in run then position order; pages follow
/// cursors either way, and unknown ids, runs and cursors are refused.
pub async fn hooks_are_found_by_token_and_id_and_listed_in_pages(store: Arc<dyn Store>) {
    let m = Maker::new();
    let first = m.create(&*store, "hooks").await;
    let second = m.create(&*store, "hooks").await;
    let over = m.create(&*store, "hooks").await;
    let (waiting, create_waiting) = hook(&m, 0, "digest-a0");
    let (answered, create_answered) = hook(&m, 1, "digest-a1");
    let (other, create_other) = hook(&m, 0, "digest-b0");
    let (gone, create_gone) = hook(&m, 0, "digest-c0");
    m.append(
        &*store,
        &first,
        vec![started(), create_waiting, create_answered],
    )
    .await
    .unwrap();
    m.append(&*store, &first, vec![received(1, &answered)])
        .await
        .unwrap();
    m.append(&*store, &second, vec![started(), create_other])
        .await
        .unwrap();
    m.append(&*store, &over, vec![started(), create_gone])
        .await
        .unwrap();
    let disposed = EventKind::HookDisposed {
        position: 0,
        hook_id: gone.clone(),
    };
    m.append(&*store, &over, vec![disposed, completed()])
        .await
        .unwrap();

    // By token digest: while the run lasts, answered or not; unknown once it is over.
    let at = |run: &str, position| {
        Some(HookRef {
            run_id: run.to_owned(),
            position,
        })
    };
    assert_eq!(store.find_hook("digest-a0").await.unwrap(), at(&first, 0));
    assert_eq!(store.find_hook("digest-a1").await.unwrap(), at(&first, 1));
    assert_eq!(store.find_hook("digest-b0").await.unwrap(), at(&second, 0));
    assert_eq!(store.find_hook("digest-c0").await.unwrap(), None);
    assert_eq!(store.find_hook("unknown").await.unwrap(), None);

    // By id, with the run, in any status.
    let found = store.get_hook(&answered).await.unwrap();
    assert_eq!(
        (found.run_id.as_str(), found.hook.position),
        (first.as_str(), 1)
    );
    assert_eq!(found.hook.status, HookStatus::Received);
    assert_eq!(found.hook.token_digest, "digest-a1");
    assert_eq!(
        store.get_hook(&waiting).await.unwrap().hook.status,
        HookStatus::Waiting
    );
    assert_eq!(store.get_hook(&other).await.unwrap().run_id, second);
    assert_eq!(
        store.get_hook(&gone).await.unwrap().hook.status,
        HookStatus::Disposed
    );
    assert!(is_not_found(&store.get_hook(&m.ids.hook_id()).await));

    // A run's hooks, any status, in command order.
    let all = store
        .list_run_hooks(&first, &ListQuery::new())
        .await
        .unwrap();
    assert_eq!(places(&all), [(first.clone(), 0), (first.clone(), 1)]);
    assert_eq!(all.data[0].hook.id, waiting);
    assert!(!all.has_more && all.cursor.is_none());
    let one = ListQuery::new().limit(1).order(SortOrder::Descending);
    let page = store.list_run_hooks(&first, &one).await.unwrap();
    assert_eq!(places(&page), [(first.clone(), 1)]);
    let cursor = page.cursor.expect("a second page");
    let page = store
        .list_run_hooks(&first, &one.clone().cursor(cursor))
        .await
        .unwrap();
    assert_eq!(places(&page), [(first.clone(), 0)]);
    assert!(!page.has_more);
    let bare = ListQuery::new().resolve_data(ResolveData::None);
    assert_eq!(
        store.list_run_hooks(&first, &bare).await.unwrap().data,
        all.data
    );
    let over_hooks = store
        .list_run_hooks(&over, &ListQuery::new())
        .await
        .unwrap();
    assert_eq!(over_hooks.data[0].hook.status, HookStatus::Disposed);
    assert!(is_not_found(
        &store.list_run_hooks(&m.run_id(), &ListQuery::new()).await
    ));
    let nonsense = ListQuery::new().cursor("x");
    assert!(is_invalid(&store.list_run_hooks(&first, &nonsense).await));

    // The waiting hooks of every run: run (creation) order, then position.
    let expected = [(first.clone(), 0), (second.clone(), 0)];
    let page = store.list_waiting_hooks(&ListQuery::new()).await.unwrap();
    assert_eq!(places(&page), expected);
    assert!(page
        .data
        .iter()
        .all(|h| h.hook.status == HookStatus::Waiting));
    let one = ListQuery::new().limit(1);
    let pages = waiting_pages(&*store, one.clone()).await;
    assert_eq!(
        pages,
        [vec![expected[0].clone()], vec![expected[1].clone()]]
    );
    let pages = waiting_pages(&*store, one.order(SortOrder::Descending)).await;
    assert_eq!(
        pages,
        [vec![expected[1].clone()], vec![expected[0].clone()]]
    );
    let nonsense = ListQuery::new().cursor("no position");
    assert!(is_invalid(&store.list_waiting_hooks(&nonsense).await));

    // Answering the last waiting hook of a run takes it off the list.
    m.append(&*store, &second, vec![received(0, &other)])
        .await
        .unwrap();
    let page = store.list_waiting_hooks(&ListQuery::new()).await.unwrap();
    assert_eq!(places(&page), [expected[0].clone()]);
}
