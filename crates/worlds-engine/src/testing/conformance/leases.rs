//! Conformance checks for [`LeaseStore`](crate::store::LeaseStore) in one process: claims hand out unfinished runs only,
//! and no other process changes anything.

use super::*;

/// A store of one process (`is_shared` false) hands out every unfinished run at each claim; a
/// shared store hands out each unfinished run at most once (when its lease is taken; the runs
/// this process created are leased to it already). Nobody else writes, so there are no
/// external changes. A store of one process has no change signal (nobody else changes
/// anything) and reports no takeovers; a shared store may have both.
pub async fn claims_hand_out_unfinished_runs_once_and_nothing_changes_externally(
    store: Arc<dyn Store>,
) {
    let m = Maker::new();
    let pending = m.create(&*store, "lease").await;
    let running = m.create(&*store, "lease").await;
    m.append(&*store, &running, vec![started()]).await.unwrap();
    let done = m.create(&*store, "lease").await;
    m.append(&*store, &done, vec![started(), completed()])
        .await
        .unwrap();
    let unfinished: BTreeSet<String> = [pending, running].into_iter().collect();

    let any = |_: &str| true;
    let first: BTreeSet<String> = store.claim_runs(&any).await.unwrap().into_iter().collect();
    let second: BTreeSet<String> = store.claim_runs(&any).await.unwrap().into_iter().collect();
    assert!(!first.contains(&done) && !second.contains(&done));
    if store.is_shared() {
        assert!(first.is_subset(&unfinished), "{first:?}");
        assert!(first.is_disjoint(&second), "{first:?} then {second:?}");
    } else {
        assert_eq!(first, unfinished);
        assert_eq!(second, unfinished);
    }
    assert_eq!(
        store.external_changes().await.unwrap(),
        Vec::<String>::new()
    );
    if !store.is_shared() {
        assert!(store.changes().is_none());
        // Nobody can take a run over from a store of one process.
        assert!(!store.reports_takeovers());
    }
}
