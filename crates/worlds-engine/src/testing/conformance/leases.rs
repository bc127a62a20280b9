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

    let any = |_: &str, _: Option<&str>| true;
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

/// A failed run reopened by hand (`run_reopened`) is unfinished again: it is listed as such,
/// its status is `running`, its quarantine is lifted, and it is handed out by the next claim
/// — on a shared store too, whoever drove it before (the reopening releases its lease). The
/// process that claims it can then write its new attempt. A completed run refuses the
/// reopening.
pub async fn a_reopened_run_is_claimed_again_and_takes_its_new_attempt(store: Arc<dyn Store>) {
    let m = Maker::new();
    let any = |_: &str, _: Option<&str>| true;
    let run = m.create(&*store, "reopen").await;
    m.append(&*store, &run, vec![started(), failed()])
        .await
        .unwrap();
    m.append(
        &*store,
        &run,
        vec![EventKind::WorkflowQuarantined {
            reason: "diverged".into(),
        }],
    )
    .await
    .unwrap();
    // Whatever the first claim handed out is now finished.
    let _ = store.claim_runs(&any).await.unwrap();
    let reopen = EventKind::RunReopened {
        action: crate::model::ReopenAction::Retry,
        attempt: 2,
        kept_from: 0,
        kept_until: 0,
        next_position: 0,
        by: Some("alice".into()),
        reason: Some("fixed".into()),
        operation: None,
    };
    m.append(&*store, &run, vec![reopen.clone()]).await.unwrap();
    let state = store.get_run(&run, ResolveData::None).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert!(state.quarantine.is_none() && state.error.is_none());
    assert!(store.unfinished_runs().await.unwrap().contains(&run));
    let claimed = store.claim_runs(&any).await.unwrap();
    assert!(claimed.contains(&run), "{claimed:?}");
    m.append(
        &*store,
        &run,
        vec![EventKind::WorkflowStarted {
            attempt: 2,
            first_position: 0,
        }],
    )
    .await
    .unwrap();
    m.append(&*store, &run, vec![completed()]).await.unwrap();
    let state = store.get_run(&run, ResolveData::None).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert!(!store.unfinished_runs().await.unwrap().contains(&run));
    let refused = m.append(&*store, &run, vec![reopen]).await;
    assert!(
        matches!(refused, Err(WorldError::InvalidTransition { .. })),
        "{refused:?}"
    );
}

/// What a process holds: `owned_runs` lists only unfinished runs leased to this process, never
/// a finished one; a store of one process lists none and vouches for every lease itself. A
/// shared store that lists its leases (PostgreSQL) confirms the lease of a run it holds, hands
/// them all over when the process leaves (listing none, confirming none, while away), and
/// after `rejoin` the next claim takes the run back, its lease confirmed again. `leave` and
/// `rejoin` change nothing a claim of a store of one process sees.
pub async fn a_process_lists_confirms_and_hands_over_what_is_leased_to_it(store: Arc<dyn Store>) {
    let m = Maker::new();
    let any = |_: &str, _: Option<&str>| true;
    let run = m.create(&*store, "own").await;
    m.append(&*store, &run, vec![started()]).await.unwrap();
    let done = m.create(&*store, "own").await;
    m.append(&*store, &done, vec![started(), completed()])
        .await
        .unwrap();

    let owned = store.owned_runs().await.unwrap();
    assert!(owned.iter().all(|id| *id == run), "{owned:?}");
    let lists_leases = owned.contains(&run);
    if !store.is_shared() {
        assert!(owned.is_empty(), "{owned:?}");
        assert!(store.lease_confirmed(&run));
    }
    store.confirm_lease(&run).await.unwrap();
    assert!(store.lease_confirmed(&run));

    store.leave().await.unwrap();
    if lists_leases {
        assert_eq!(store.owned_runs().await.unwrap(), Vec::<String>::new());
        let away = store.confirm_lease(&run).await;
        assert!(
            away.is_err(),
            "a process that left confirmed a lease: {away:?}"
        );
    }
    store.rejoin().await.unwrap();
    let claimed = store.claim_runs(&any).await.unwrap();
    if lists_leases || !store.is_shared() {
        assert!(claimed.contains(&run), "{claimed:?}");
    }
    assert!(!claimed.contains(&done), "{claimed:?}");
    store.confirm_lease(&run).await.unwrap();
    assert!(store.lease_confirmed(&run));
    if lists_leases {
        assert!(store.owned_runs().await.unwrap().contains(&run));
    }
}
