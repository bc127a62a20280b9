//! [`RetentionStore`](crate::store::RetentionStore): finished runs listed by end time, and a
//! removal that takes everything of a run and nothing of a run that must stay.

use super::*;
use crate::store::{EndedCursor, Kept, Removal, RemoveRun};

fn cancelled() -> EventKind {
    EventKind::WorkflowCancelled {
        reason: Some("no longer wanted".into()),
    }
}

fn hook_created(position: u32, hook_id: &str, digest: &str) -> EventKind {
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

fn child_started(position: u32, child_id: &str) -> EventKind {
    EventKind::ChildWorkflowStarted {
        position,
        child_id: child_id.to_owned(),
        name: "child".into(),
        input: Some(p(json!("in"))),
        options: None,
    }
}

fn new_chunk(m: &Maker, data: &str) -> NewChunk {
    NewChunk {
        id: m.ids.next(CHUNK_PREFIX),
        created_at: m.now(),
        key: None,
        data: Bytes::from(data.to_owned()),
    }
}

/// Finished runs come in `(ended_at, run_id)` order, bounded by `before`, in pages that go on
/// from a cursor; unfinished runs never, and a reopened run no longer.
pub async fn ended_runs_are_listed_by_end_time_in_pages(store: Arc<dyn Store>) {
    let m = Maker::new();
    let running = m.create(&*store, "kept").await;
    m.append(&*store, &running, vec![started()]).await.unwrap();
    // Created in one order, ended in another.
    let a = m.create(&*store, "a").await;
    let b = m.create(&*store, "b").await;
    let c = m.create(&*store, "c").await;
    let keyed = m.run_id();
    store
        .create_run(m.queued(
            &keyed,
            Queued {
                key: Some("order-7"),
                ..Queued::named("keyed")
            },
        ))
        .await
        .unwrap();
    m.tick(10);
    m.append(&*store, &c, vec![started(), completed()])
        .await
        .unwrap();
    let c_end = m.now();
    m.tick(10);
    m.append(&*store, &a, vec![started(), failed()])
        .await
        .unwrap();
    m.append(
        &*store,
        &a,
        vec![EventKind::WorkflowQuarantined {
            reason: "diverged".into(),
        }],
    )
    .await
    .unwrap();
    let a_end = m.now();
    m.tick(10);
    m.append(&*store, &b, vec![cancelled()]).await.unwrap();
    m.append(&*store, &keyed, vec![started(), completed()])
        .await
        .unwrap();
    let b_end = m.now();
    m.tick(10);

    let all = store.ended_runs(m.now(), None, 100).await.unwrap();
    let mut ends: Vec<(Millis, String)> = vec![
        (c_end, c.clone()),
        (a_end, a.clone()),
        (b_end, b.clone()),
        (b_end, keyed.clone()),
    ];
    ends.sort();
    let listed: Vec<(Millis, String)> =
        all.iter().map(|r| (r.ended_at, r.run_id.clone())).collect();
    assert_eq!(listed, ends, "ordered by end time, then run id");
    let by_id = |id: &str| all.iter().find(|r| r.run_id == id).unwrap();
    assert_eq!(by_id(&c).status, RunStatus::Completed);
    assert_eq!(by_id(&c).name, "c");
    assert!(!by_id(&c).quarantined && !by_id(&c).has_idempotency_key);
    assert_eq!(by_id(&a).status, RunStatus::Failed);
    assert!(by_id(&a).quarantined);
    assert_eq!(by_id(&b).status, RunStatus::Cancelled);
    assert!(by_id(&keyed).has_idempotency_key);
    assert!(by_id(&keyed).created_at < by_id(&keyed).ended_at);
    assert!(!all.iter().any(|r| r.run_id == running));

    // `before` is exclusive.
    let early = store.ended_runs(a_end, None, 100).await.unwrap();
    assert_eq!(ids(&early), std::slice::from_ref(&c));
    let none = store.ended_runs(c_end, None, 100).await.unwrap();
    assert!(none.is_empty());

    // Pages of one.
    let mut cursor: Option<EndedCursor> = None;
    let mut paged = Vec::new();
    loop {
        let page = store.ended_runs(m.now(), cursor.as_ref(), 1).await.unwrap();
        let Some(last) = page.last() else { break };
        assert_eq!(page.len(), 1);
        cursor = Some(last.cursor());
        paged.push((last.ended_at, last.run_id.clone()));
    }
    assert_eq!(paged, ends);

    // A reopened run is unfinished again: no longer listed.
    m.append(
        &*store,
        &a,
        vec![EventKind::RunReopened {
            action: crate::model::ReopenAction::Resume,
            attempt: 2,
            kept_from: 0,
            kept_until: 0,
            next_position: 0,
            by: None,
            reason: None,
            operation: None,
        }],
    )
    .await
    .unwrap();
    let after = store.ended_runs(m.now(), None, 100).await.unwrap();
    assert!(!after.iter().any(|r| r.run_id == a), "{after:?}");
    assert_eq!(after.len(), 3);
}

/// A removed run is gone everywhere: by run id and workflow id, its history, steps, hooks,
/// streams, timers and idempotency key; its workflow id and hook token are free again; a
/// second removal finds nothing.
pub async fn removing_a_run_takes_everything_of_it_and_frees_its_ids(store: Arc<dyn Store>) {
    let m = Maker::new();
    let neighbour = m.create(&*store, "neighbour").await;
    let run = m.run_id();
    store
        .create_run(m.queued(
            &run,
            Queued {
                workflow_id: Some("order-42"),
                key: Some("start-42"),
                ..Queued::named("checkout")
            },
        ))
        .await
        .unwrap();
    let (step, schedule) = m.step(0, "charge");
    let hook = m.ids.hook_id();
    m.append(
        &*store,
        &run,
        vec![
            started(),
            schedule,
            step_started(0),
            step_completed(0, json!("charged")),
            hook_created(1, &hook, "digest-42"),
        ],
    )
    .await
    .unwrap();
    store
        .write_chunk(&run, "progress", new_chunk(&m, "half"))
        .await
        .unwrap();
    store
        .add_timer(Timer {
            fire_at: m.now() + 60_000,
            run_id: run.clone(),
            kind: TimerKind::RunTimeout,
        })
        .await
        .unwrap();
    m.append(&*store, &run, vec![completed()]).await.unwrap();
    m.append(&*store, &neighbour, vec![started(), completed()])
        .await
        .unwrap();
    let events = store.history(&run, 0).await.unwrap().len() as u64;
    m.tick(1);

    let removed = store.remove_run(&run, m.now()).await.unwrap();
    assert_eq!(removed, Removal::Removed { events });

    assert!(is_not_found(&store.get_run(&run, ResolveData::None).await));
    assert!(is_not_found(
        &store.get_run("order-42", ResolveData::None).await
    ));
    assert!(store.history(&run, 0).await.is_err());
    assert!(is_not_found(
        &store.list_events(&run, &ListQuery::new()).await
    ));
    assert!(is_not_found(&store.get_step(&step, ResolveData::All).await));
    assert!(is_not_found(&store.get_hook(&hook).await));
    let correlated = store
        .list_events_by_correlation_id(&step, &ListQuery::new())
        .await
        .unwrap();
    assert!(correlated.data.is_empty());
    let (chunks, _) = store.stream_chunks(&run, "progress", 0, 10).await.unwrap();
    assert!(chunks.is_empty());
    assert!(store.list_streams(&run).await.unwrap().is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    assert_eq!(
        store.find_by_idempotency_key("start-42", 0).await.unwrap(),
        None
    );
    let listed = store.list_runs(&WorkflowQueryFilter::new()).await.unwrap();
    assert_eq!(ids_of(&listed.data), std::slice::from_ref(&neighbour));
    let ended = store.ended_runs(m.now(), None, 100).await.unwrap();
    assert_eq!(ids(&ended), std::slice::from_ref(&neighbour));

    // The workflow id and the hook token are free for a new run.
    let again = m.run_id();
    store
        .create_run(m.queued(
            &again,
            Queued {
                workflow_id: Some("order-42"),
                ..Queued::named("checkout")
            },
        ))
        .await
        .unwrap();
    m.append(
        &*store,
        &again,
        vec![started(), hook_created(0, &m.ids.hook_id(), "digest-42")],
    )
    .await
    .unwrap();
    let found = store.find_hook("digest-42").await.unwrap().unwrap();
    assert_eq!(found.run_id, again);

    // Removed once: the second time finds nothing, and nothing of the new run goes.
    assert_eq!(
        store.remove_run(&run, m.now() + 1).await.unwrap(),
        Removal::Gone
    );
    let state = store.get_run("order-42", ResolveData::None).await.unwrap();
    assert_eq!(state.id, again);
    // The neighbour is untouched.
    assert_eq!(
        store.history(&neighbour, 0).await.unwrap().len(),
        3,
        "the neighbour's history"
    );
}

/// What must stay, stays: an unfinished run, one that ended after the bound, a finished
/// parent whose child still runs, a finished child whose parent still runs. Once the
/// relative ends, the run may go.
pub async fn unfinished_and_related_runs_are_kept(store: Arc<dyn Store>) {
    let m = Maker::new();
    let running = m.create(&*store, "running").await;
    m.append(&*store, &running, vec![started()]).await.unwrap();
    m.tick(1);
    assert_eq!(
        store.remove_run(&running, m.now()).await.unwrap(),
        Removal::Kept(Kept::Unfinished)
    );
    let pending = m.create(&*store, "pending").await;
    m.tick(1);
    assert_eq!(
        store.remove_run(&pending, m.now()).await.unwrap(),
        Removal::Kept(Kept::Unfinished)
    );

    // Ended at or after the bound.
    let late = m.create(&*store, "late").await;
    m.append(&*store, &late, vec![started(), completed()])
        .await
        .unwrap();
    let ended_at = m.now();
    assert_eq!(
        store.remove_run(&late, ended_at).await.unwrap(),
        Removal::Kept(Kept::EndedLater { ended_at })
    );

    // A parent that ended (cancelled) while its child still runs.
    let (parent, child) = parent_and_child(&m, &*store, "parent").await;
    m.append(&*store, &child, vec![started()]).await.unwrap();
    // The child cannot go while its parent runs, whatever its own state.
    m.append(&*store, &parent, vec![cancelled()]).await.unwrap();
    m.tick(1);
    assert_eq!(
        store.remove_run(&parent, m.now()).await.unwrap(),
        Removal::Kept(Kept::ChildRunning {
            child_id: child.clone()
        })
    );
    assert!(store.get_run(&parent, ResolveData::None).await.is_ok());
    m.append(&*store, &child, vec![completed()]).await.unwrap();
    m.tick(1);

    // A child that ended while its parent still runs.
    let (parent2, child2) = parent_and_child(&m, &*store, "parent2").await;
    m.append(&*store, &child2, vec![started(), completed()])
        .await
        .unwrap();
    m.tick(1);
    assert_eq!(
        store.remove_run(&child2, m.now()).await.unwrap(),
        Removal::Kept(Kept::ParentRunning {
            parent_id: parent2.clone()
        })
    );

    // Once the relatives have ended, both go; a parent removed before its child leaves the
    // child removable.
    assert!(matches!(
        store.remove_run(&parent, m.now()).await.unwrap(),
        Removal::Removed { .. }
    ));
    assert!(matches!(
        store.remove_run(&child, m.now()).await.unwrap(),
        Removal::Removed { .. }
    ));
    m.append(&*store, &parent2, vec![completed()])
        .await
        .unwrap();
    m.tick(1);
    assert!(matches!(
        store.remove_run(&child2, m.now()).await.unwrap(),
        Removal::Removed { .. }
    ));
    // Children of a parent still listed by parent: none left.
    let children = store
        .list_runs(&WorkflowQueryFilter::new().parent_id(&parent2))
        .await
        .unwrap();
    assert!(children.data.is_empty());

    // Nothing unfinished went.
    let unfinished = store.unfinished_runs().await.unwrap();
    assert!(unfinished.contains(&running) && unfinished.contains(&pending));
    assert!(store.get_run(&late, ResolveData::None).await.is_ok());
    // A write to a removed run is refused, not stored out of sight.
    let refused = m.append(&*store, &child, vec![completed()]).await;
    assert!(refused.is_err());
}

/// A batch gets one answer per request, in order: each run removed, kept or gone as it would
/// be alone; a run asked for twice goes once; a parent and its child in one batch both go;
/// an id no store can hold is gone. Asked again, every removed run is gone.
pub async fn a_batch_removal_answers_each_run_in_order(store: Arc<dyn Store>) {
    let m = Maker::new();
    let done = m.create(&*store, "done").await;
    m.append(&*store, &done, vec![started(), completed()])
        .await
        .unwrap();
    let events = store.history(&done, 0).await.unwrap().len() as u64;
    let running = m.create(&*store, "running").await;
    m.append(&*store, &running, vec![started()]).await.unwrap();
    let (parent, child) = parent_and_child(&m, &*store, "parent").await;
    m.append(&*store, &child, vec![started(), completed()])
        .await
        .unwrap();
    m.append(&*store, &parent, vec![completed()]).await.unwrap();
    m.tick(1);
    let bound = m.now();
    let late = m.create(&*store, "late").await;
    m.append(&*store, &late, vec![started(), completed()])
        .await
        .unwrap();
    let late_end = m.now();
    m.tick(1);

    let batch = [
        RemoveRun::new(&done, bound),
        RemoveRun::new(&running, bound),
        RemoveRun::new(m.run_id(), bound),
        RemoveRun::new(&done, bound),
        RemoveRun::new(&child, bound),
        RemoveRun::new(&parent, bound),
        RemoveRun::new("wrun_\0nul", bound),
        RemoveRun::new(&late, bound),
    ];
    let answers = store.remove_runs(&batch).await.unwrap();
    assert_eq!(answers.len(), batch.len());
    assert_eq!(answers[0], Removal::Removed { events });
    assert_eq!(answers[1], Removal::Kept(Kept::Unfinished));
    assert_eq!(answers[2], Removal::Gone);
    assert_eq!(answers[3], Removal::Gone, "a run asked for twice goes once");
    assert!(matches!(answers[4], Removal::Removed { .. }), "{answers:?}");
    assert!(matches!(answers[5], Removal::Removed { .. }), "{answers:?}");
    assert_eq!(answers[6], Removal::Gone);
    assert_eq!(
        answers[7],
        Removal::Kept(Kept::EndedLater { ended_at: late_end })
    );
    for gone in [&done, &child, &parent] {
        assert!(is_not_found(&store.get_run(gone, ResolveData::None).await));
    }
    for kept in [&running, &late] {
        assert!(store.get_run(kept, ResolveData::None).await.is_ok());
    }
    assert!(store.remove_runs(&[]).await.unwrap().is_empty());
    let again = store.remove_runs(&batch[..1]).await.unwrap();
    assert_eq!(again, vec![Removal::Gone]);
}

/// A running parent `name` that started a child (created, not started): their run ids.
async fn parent_and_child(m: &Maker, store: &dyn Store, name: &str) -> (String, String) {
    let parent = m.create(store, name).await;
    let child = m.run_id();
    m.append(store, &parent, vec![started(), child_started(0, &child)])
        .await
        .unwrap();
    store
        .create_run(m.queued(
            &child,
            Queued {
                parent: Some(&parent),
                ..Queued::named("child")
            },
        ))
        .await
        .unwrap();
    (parent, child)
}

fn ids(runs: &[crate::store::EndedRun]) -> Vec<String> {
    runs.iter().map(|r| r.run_id.clone()).collect()
}
