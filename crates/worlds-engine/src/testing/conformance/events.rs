//! Conformance checks for [`EventStore`](crate::store::EventStore): appends at each durability level are checked, numbered
//! and all-or-nothing; histories are read whole, from a `seq`, or a page at a time.

use super::*;

/// The store numbers events densely from 0 whatever `seq` they arrive with, and `history`
/// returns the slice from a given `seq`.
pub async fn append_assigns_dense_seq_and_history_slices(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;

    m.tick(5);
    let mut start = m.event(&id, started());
    start.seq = 99; // whatever the caller says, the store decides
    let appended = store.append(&id, vec![start]).await.unwrap();
    assert_eq!(appended.status, RunStatus::Running);
    assert_eq!(appended.events.len(), 1);
    assert_eq!(appended.events[0].seq, 1);

    m.tick(5);
    let appended = m
        .append(
            &*store,
            &id,
            vec![
                scheduled(0, "a"),
                step_started(0),
                step_completed(0, json!(7)),
            ],
        )
        .await
        .unwrap();
    let seqs: Vec<u64> = appended.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![2, 3, 4]);
    assert_eq!(appended.status, RunStatus::Running);

    let all = store.history(&id, 0).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(all[1].timestamp, T0 + 5);
    assert_eq!(all[2].kind.type_name(), "activity_scheduled");
    let tail = store.history(&id, 2).await.unwrap();
    assert_eq!(tail, all[2..].to_vec());
    assert!(store.history(&id, 5).await.unwrap().is_empty());
    assert!(store.history(&id, 1_000).await.unwrap().is_empty());

    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.event_count, 5);
    assert_eq!(state.started_at, Some(T0 + 5));
    assert_eq!(state.updated_at, T0 + 10);
    let step = store.get_activity(&id, 0).await.unwrap();
    assert_eq!(step.name, "a");
    assert_eq!(step.status, ActivityStatus::Completed);
    assert_eq!(step.output, Some(p(json!(7))));
    assert_eq!(state.activities, vec![step]);
}

/// A batch may refer to what an earlier event of the same batch created (a step scheduled
/// and refused at once), and a batch with any bad event is refused whole.
pub async fn append_checks_a_batch_in_order_and_stores_all_or_nothing(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    // Started and scheduled and refused before any attempt, in one batch.
    m.append(
        &*store,
        &id,
        vec![
            started(),
            scheduled(0, "ghost"),
            EventKind::ActivityFailed {
                position: 0,
                attempt: 0,
                error: StructuredError::new("not registered").with_code("NOT_REGISTERED"),
                retrying: false,
            },
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        store.get_activity(&id, 0).await.unwrap().status,
        ActivityStatus::Failed
    );

    // The second event is bad (no step at position 5): nothing of the batch is stored.
    let before = store.history(&id, 0).await.unwrap();
    let refused = m
        .append(
            &*store,
            &id,
            vec![scheduled(1, "b"), step_completed(5, json!(0))],
        )
        .await;
    assert!(is_conflict(&refused), "{refused:?}");
    assert_eq!(store.history(&id, 0).await.unwrap(), before);
    assert!(is_not_found(&store.get_activity(&id, 1).await));
    assert_eq!(
        store
            .get_run(&id, ResolveData::None)
            .await
            .unwrap()
            .event_count,
        before.len() as u64
    );
}

/// Once a run has finished, nothing more is appended to it.
pub async fn append_after_terminal_is_a_conflict(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    m.append(&*store, &id, vec![started(), scheduled(0, "a")])
        .await
        .unwrap();
    m.tick(10);
    let done = m.append(&*store, &id, vec![completed()]).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let length = store.history(&id, 0).await.unwrap().len();

    for late in [
        scheduled(1, "b"),
        step_started(0),
        started(),
        completed(),
        failed(),
        EventKind::WorkflowCancelled { reason: None },
        EventKind::TimerScheduled {
            position: 1,
            fire_at: T0,
            timer_id: None,
        },
    ] {
        let name = late.type_name();
        let result = m.append(&*store, &id, vec![late]).await;
        assert!(is_conflict(&result), "{name}: {result:?}");
    }
    assert_eq!(store.history(&id, 0).await.unwrap().len(), length);
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.completed_at, Some(T0 + 10));
    assert_eq!(state.output, Some(p(json!("done"))));
}

/// The append that ends a run hands back the run's final state, as a read would return it;
/// an append that leaves the run unfinished hands back none.
pub async fn an_ending_append_hands_back_the_final_state(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    let going = m
        .append(&*store, &id, vec![started(), scheduled(0, "a")])
        .await
        .unwrap();
    assert_eq!(going.ended, None);
    m.tick(10);
    let done = m.append(&*store, &id, vec![completed()]).await.unwrap();
    let ended = done
        .ended
        .expect("the ending append hands back the final state");
    let read = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(*ended, read);
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(ended.output, Some(p(json!("done"))));
}

/// A step's result is recorded once; a second completion (a duplicate delivery) is refused
/// and the first result stands.
pub async fn duplicate_activity_completion_is_a_conflict(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    m.append(
        &*store,
        &id,
        vec![
            started(),
            scheduled(0, "a"),
            step_started(0),
            step_completed(0, json!("first")),
        ],
    )
    .await
    .unwrap();
    let again = m
        .append(&*store, &id, vec![step_completed(0, json!("second"))])
        .await;
    assert!(is_conflict(&again), "{again:?}");
    let failing = m
        .append(
            &*store,
            &id,
            vec![EventKind::ActivityFailed {
                position: 0,
                attempt: 1,
                error: StructuredError::new("late"),
                retrying: false,
            }],
        )
        .await;
    assert!(is_conflict(&failing), "{failing:?}");
    let step = store.get_activity(&id, 0).await.unwrap();
    assert_eq!(step.status, ActivityStatus::Completed);
    assert_eq!(step.output, Some(p(json!("first"))));
    assert_eq!(store.history(&id, 0).await.unwrap().len(), 5);
    // Scheduling a second step at a taken position is refused too.
    let twice = m.append(&*store, &id, vec![scheduled(0, "a")]).await;
    assert!(is_conflict(&twice), "{twice:?}");
}

/// Status changes follow the run status machine; a refused one changes nothing.
pub async fn invalid_status_transitions_are_refused(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "w").await;
    // pending → completed skips running.
    let skip = m.append(&*store, &id, vec![completed()]).await;
    assert!(
        matches!(
            skip,
            Err(WorldError::InvalidTransition {
                from: RunStatus::Pending,
                to: RunStatus::Completed,
                ..
            })
        ),
        "{skip:?}"
    );
    assert_eq!(
        store.get_run(&id, ResolveData::None).await.unwrap().status,
        RunStatus::Pending
    );
    // Steps need a running run.
    let early = m.append(&*store, &id, vec![scheduled(0, "a")]).await;
    assert!(is_conflict(&early), "{early:?}");

    m.append(&*store, &id, vec![started()]).await.unwrap();
    // running → running.
    let restart = m.append(&*store, &id, vec![started()]).await;
    assert!(is_conflict(&restart), "{restart:?}");
    m.append(&*store, &id, vec![failed()]).await.unwrap();
    // failed → completed.
    let revive = m.append(&*store, &id, vec![completed()]).await;
    assert!(
        matches!(
            revive,
            Err(WorldError::InvalidTransition {
                from: RunStatus::Failed,
                ..
            })
        ),
        "{revive:?}"
    );
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(
        state.error.as_ref().unwrap().code.as_deref(),
        Some("E_TEST")
    );
}

/// `append_nowait` is checked and numbered like `append` (and before any later write), and
/// once `wait_durable` returns, its events are readable like any others.
pub async fn append_nowait_is_checked_ordered_and_readable_once_durable(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(store.as_ref(), "nowait").await;
    let events = vec![m.event(&id, started()), m.event(&id, scheduled(0, "a"))];
    let appended = store.append_nowait(&id, events).await.unwrap();
    let seqs: Vec<u64> = appended.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(appended.status, RunStatus::Running);
    // Checked against the unwaited events: a second schedule of position 0 is refused.
    let again = vec![m.event(&id, scheduled(0, "a"))];
    assert!(store.append_nowait(&id, again).await.is_err());
    // A waited append after it is numbered after it, and makes it durable too.
    let done = m
        .append(store.as_ref(), &id, vec![step_started(0)])
        .await
        .unwrap();
    assert_eq!(done.events[0].seq, 3);
    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history.len(), 4);
    assert_eq!(
        store.get_activity(&id, 0).await.unwrap().status,
        ActivityStatus::Running
    );

    let more = vec![m.event(&id, step_completed(0, json!(1)))];
    store.append_nowait(&id, more).await.unwrap();
    store.wait_durable(&id).await.unwrap();
    let history = store.history(&id, 0).await.unwrap();
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.activities[0].status, ActivityStatus::Completed);
    // Waiting on a run with nothing pending, or on an unknown one, returns at once.
    store.wait_durable(&id).await.unwrap();
    store.wait_durable("wrun_unknown").await.unwrap();
}

/// `history_tip` shows a run's events the moment they are accepted, waited for or not; once
/// they are durable, `history` shows the same events.
pub async fn history_tip_shows_every_accepted_event_at_once(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(store.as_ref(), "tip").await;
    let queued = vec![m.event(&id, started()), m.event(&id, scheduled(0, "a"))];
    store.append_nowait(&id, queued).await.unwrap();
    let tip = store.history_tip(&id, 0).await.unwrap();
    let seqs: Vec<u64> = tip.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2]);
    let written = vec![m.event(&id, step_started(0))];
    store.append_written(&id, written).await.unwrap();
    let tip = store.history_tip(&id, 2).await.unwrap();
    let seqs: Vec<u64> = tip.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    assert!(matches!(
        tip[1].kind,
        EventKind::ActivityStarted { attempt: 1, .. }
    ));
    store.wait_durable(&id).await.unwrap();
    let durable = store.history(&id, 0).await.unwrap();
    let tip = store.history_tip(&id, 0).await.unwrap();
    assert_eq!(durable, tip);
    assert!(store.history_tip("wrun_unknown", 0).await.is_err());
}

/// `append_written` is checked and numbered like `append`; what it stored is readable once the
/// run is durable, and a refused batch stores nothing.
pub async fn append_written_is_checked_numbered_and_readable(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(store.as_ref(), "written").await;
    let events = vec![m.event(&id, started()), m.event(&id, scheduled(0, "a"))];
    let appended = store.append_written(&id, events).await.unwrap();
    let seqs: Vec<u64> = appended.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(appended.status, RunStatus::Running);
    let refused = vec![
        m.event(&id, step_started(0)),
        m.event(&id, scheduled(0, "a")),
    ];
    assert!(is_conflict(&store.append_written(&id, refused).await));
    let later = vec![m.event(&id, step_started(0))];
    assert_eq!(
        store.append_written(&id, later).await.unwrap().events[0].seq,
        3
    );
    store.wait_durable(&id).await.unwrap();
    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history.len(), 4);
    assert_eq!(history[3].kind, step_started(0));
    let unknown = vec![m.event("wrun_unknown", started())];
    assert!(is_not_found(
        &store.append_written("wrun_unknown", unknown).await
    ));
}

/// The `seq`s of every page of a run's events, following the cursors.
async fn event_pages(store: &dyn Store, run: &str, query: ListQuery) -> Vec<Vec<u64>> {
    let mut pages = Vec::new();
    let mut query = query;
    loop {
        let page = store.list_events(run, &query).await.unwrap();
        pages.push(page.data.iter().map(|e| e.seq).collect());
        assert_eq!(page.has_more, page.cursor.is_some());
        match page.cursor {
            Some(cursor) => query = query.cursor(cursor),
            None => return pages,
        }
    }
}

/// `list_events`: a run's events in `seq` order either way, a page at a time, the stored events
/// themselves or, with `ResolveData::None`, the same events with `null` payloads.
pub async fn list_events_pages_both_ways_and_strips_payloads(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "listed").await;
    let kinds = vec![
        started(),
        scheduled(0, "a"),
        step_started(0),
        step_completed(0, json!({ "secret": 1 })),
        completed(),
    ];
    m.append(&*store, &id, kinds).await.unwrap();
    let history = store.history(&id, 0).await.unwrap();

    let all = store.list_events(&id, &ListQuery::new()).await.unwrap();
    assert_eq!(all.data, history);
    assert!(!all.has_more && all.cursor.is_none());

    let two = ListQuery::new().limit(2);
    let pages = event_pages(&*store, &id, two.clone()).await;
    assert_eq!(pages, [vec![0, 1], vec![2, 3], vec![4, 5]]);
    let pages = event_pages(&*store, &id, two.order(SortOrder::Descending)).await;
    assert_eq!(pages, [vec![5, 4], vec![3, 2], vec![1, 0]]);
    let pages = event_pages(&*store, &id, ListQuery::new().limit(6)).await;
    assert_eq!(pages, [vec![0, 1, 2, 3, 4, 5]]);

    let bare = ListQuery::new().resolve_data(ResolveData::None);
    let bare = store.list_events(&id, &bare).await.unwrap().data;
    assert_eq!(bare.len(), history.len());
    for (stripped, stored) in bare.iter().zip(&history) {
        assert_eq!(
            (stripped.id.as_str(), stripped.seq),
            (stored.id.as_str(), stored.seq)
        );
        assert_eq!(stripped.kind.type_name(), stored.kind.type_name());
    }
    let EventKind::WorkflowQueued(run) = &bare[0].kind else {
        panic!("{:?}", bare[0].kind);
    };
    assert_eq!(run.input, Payload::null());
    assert_eq!(run.name, "listed");
    assert!(
        matches!(&bare[2].kind, EventKind::ActivityScheduled { input, name, .. }
        if *input == Payload::null() && name == "a")
    );
    assert!(
        matches!(&bare[4].kind, EventKind::ActivityCompleted { output, .. }
        if *output == Payload::null())
    );
    assert!(
        matches!(&bare[5].kind, EventKind::WorkflowCompleted { output }
        if *output == Payload::null())
    );
    // The stored events keep their payloads.
    assert_eq!(store.history(&id, 0).await.unwrap(), history);

    assert!(is_not_found(
        &store.list_events(&m.run_id(), &ListQuery::new()).await
    ));
    let nonsense = ListQuery::new().cursor("seven");
    assert!(is_invalid(&store.list_events(&id, &nonsense).await));
}

/// Events by correlation id: those of the run that concern a step (by its id, though only its
/// first event names it), a hook or a child run, in `seq` order either way, a page at a time.
pub async fn events_by_correlation_id_follow_a_step_a_hook_and_a_child(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.create(&*store, "correlated").await;
    let (step, schedule) = m.step(0, "a");
    let hook = m.ids.hook_id();
    let child = m.run_id();
    m.append(&*store, &id, vec![started(), schedule, step_started(0)])
        .await
        .unwrap();
    let more = vec![
        EventKind::HookCreated {
            position: 1,
            hook_id: hook.clone(),
            token_digest: "digest".into(),
            expires_at: None,
            webhook: false,
            methods: Vec::new(),
            hook_type: None,
            signature: None,
            metadata: None,
        },
        EventKind::ChildWorkflowStarted {
            position: 2,
            child_id: child.clone(),
            name: "child".into(),
            input: Some(p(json!("in"))),
            options: None,
        },
        step_completed(0, json!("out")),
        EventKind::HookReceived {
            position: 1,
            hook_id: hook.clone(),
            payload: p(json!("payload")),
        },
        EventKind::ChildWorkflowCompleted {
            position: 2,
            child_id: child.clone(),
            output: p(json!("child out")),
        },
    ];
    m.append(&*store, &id, more).await.unwrap();

    let types = |page: &crate::model::Page<Arc<Event>>| -> Vec<&'static str> {
        page.data.iter().map(|e| e.kind.type_name()).collect()
    };
    let all = ListQuery::new();
    let page = store
        .list_events_by_correlation_id(&step, &all)
        .await
        .unwrap();
    assert_eq!(
        types(&page),
        [
            "activity_scheduled",
            "activity_started",
            "activity_completed"
        ]
    );
    assert!(page.data.iter().all(|e| e.run_id == id));
    assert!(!page.has_more);
    let page = store
        .list_events_by_correlation_id(&hook, &all)
        .await
        .unwrap();
    assert_eq!(types(&page), ["hook_created", "hook_received"]);
    let page = store
        .list_events_by_correlation_id(&child, &all)
        .await
        .unwrap();
    assert_eq!(
        types(&page),
        ["child_workflow_started", "child_workflow_completed"]
    );
    let unknown = store
        .list_events_by_correlation_id(&m.ids.step_id(), &all)
        .await
        .unwrap();
    assert!(unknown.data.is_empty() && !unknown.has_more);

    // Pages, newest first, payloads left out.
    let query = ListQuery::new()
        .limit(2)
        .order(SortOrder::Descending)
        .resolve_data(ResolveData::None);
    let first = store
        .list_events_by_correlation_id(&step, &query)
        .await
        .unwrap();
    assert_eq!(types(&first), ["activity_completed", "activity_started"]);
    assert!(
        matches!(&first.data[0].kind, EventKind::ActivityCompleted { output, .. }
        if *output == Payload::null())
    );
    let next = query.clone().cursor(first.cursor.expect("a second page"));
    let second = store
        .list_events_by_correlation_id(&step, &next)
        .await
        .unwrap();
    assert_eq!(types(&second), ["activity_scheduled"]);
    assert!(!second.has_more && second.cursor.is_none());
    let nonsense = ListQuery::new().cursor("?");
    assert!(is_invalid(
        &store.list_events_by_correlation_id(&step, &nonsense).await
    ));
}

/// Payloads holding a NUL escape, a lone surrogate escape and other control escapes are stored
/// and read back byte for byte (history and state), whatever the backend keeps text in.
pub async fn payloads_with_nul_and_lone_surrogate_escapes_round_trip(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.create(&*store, "odd-text").await;
    let odd = r#"{"nul":"a\u0000b","lone":"\ud800","tab":"\t","bell":"\u0007"}"#;
    let output = Payload::from_json(odd).unwrap();
    m.append(
        &*store,
        &run,
        vec![
            started(),
            scheduled(0, "odd"),
            step_started(0),
            EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output: output.clone(),
            },
        ],
    )
    .await
    .unwrap();
    let history = store.history(&run, 0).await.unwrap();
    match &history.last().unwrap().kind {
        EventKind::ActivityCompleted { output: read, .. } => {
            assert_eq!(
                read.as_json(),
                output.as_json(),
                "history keeps the text as written"
            );
        }
        other => panic!("{other:?}"),
    }
    let state = store.get_run(&run, ResolveData::All).await.unwrap();
    let step = state.activity(0).unwrap();
    assert_eq!(
        step.output.as_ref().map(Payload::as_json),
        Some(output.as_json())
    );
    // Decoded, the NUL is a character; the lone surrogate cannot be text and says so.
    let nul: serde_json::Value = serde_json::from_str(r#""a\u0000b""#).unwrap();
    assert_eq!(nul, serde_json::json!("a\u{0}b"));
    assert!(output.decode::<serde_json::Value>().is_err());
}
