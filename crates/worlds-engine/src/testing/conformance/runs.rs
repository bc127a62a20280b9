//! Conformance checks for [`RunStore`](crate::store::RunStore): runs created, found by run id and workflow id, listed,
//! and the unfinished ones.

use super::*;

/// A run is found by run id and by workflow id, with the fields of its first event.
pub async fn create_run_then_get_by_run_id_and_workflow_id(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.run_id();
    let first = m.queued(
        &id,
        Queued {
            name: "checkout",
            workflow_id: Some("order-7"),
            ..Queued::default()
        },
    );
    store.create_run(first.clone()).await.unwrap();

    let by_run = store.get_run(&id, ResolveData::All).await.unwrap();
    let by_workflow = store.get_run("order-7", ResolveData::All).await.unwrap();
    assert_eq!(by_run, by_workflow);
    assert_eq!(by_run.id, id);
    assert_eq!(by_run.workflow_id, "order-7");
    assert_eq!(by_run.name, "checkout");
    assert_eq!(by_run.status, RunStatus::Pending);
    assert_eq!(by_run.created_at, first.timestamp);
    assert_eq!(by_run.started_at, None);
    assert_eq!(by_run.completed_at, None);
    assert_eq!(by_run.event_count, 1);
    assert_eq!(by_run.input, Some(p(json!({ "n": 1 }))));

    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].seq, 0);
    assert_eq!(history[0].id, first.id);
    assert_eq!(history[0].kind, first.kind);
}

/// `create_runs` creates each run as `create_run` would and answers for each: a run whose run id
/// or workflow id is taken (by a stored run or an earlier one of the batch, the same run id
/// included) is refused, the others are created.
pub async fn create_runs_creates_each_and_refuses_taken_ids(store: Arc<dyn Store>) {
    let m = Maker::new();
    let taken = m.create(&*store, "batch").await;
    let [a, b, c] = [m.run_id(), m.run_id(), m.run_id()];
    let with_id = |id: &str, workflow_id: &'static str| {
        m.queued(
            id,
            Queued {
                name: "batch",
                workflow_id: Some(workflow_id),
                ..Queued::default()
            },
        )
    };
    let results = store
        .create_runs(vec![
            m.queued(&a, Queued::named("batch")),
            with_id(&b, "shared"),
            with_id(&c, "shared"),
            m.queued(&taken, Queued::named("batch")),
            m.queued(&a, Queued::named("batch")),
        ])
        .await;
    assert_eq!(results.len(), 5);
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    assert!(is_conflict(&results[2]), "{:?}", results[2]);
    assert!(is_conflict(&results[3]), "{:?}", results[3]);
    assert!(is_conflict(&results[4]), "a run id twice: {:?}", results[4]);

    assert_eq!(store.get_run(&a, ResolveData::All).await.unwrap().id, a);
    assert_eq!(
        store.get_run("shared", ResolveData::All).await.unwrap().id,
        b
    );
    assert!(is_not_found(&store.get_run(&c, ResolveData::All).await));
    assert_eq!(store.history(&taken, 0).await.unwrap().len(), 1);
    assert!(store.create_runs(Vec::new()).await.is_empty());
}

/// Run ids and workflow ids are unique; a refused create leaves no trace.
pub async fn duplicate_run_id_or_workflow_id_is_a_conflict(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.run_id();
    let spec = || Queued {
        name: "w",
        workflow_id: Some("shared"),
        ..Queued::default()
    };
    store.create_run(m.queued(&id, spec())).await.unwrap();

    let same_run = store
        .create_run(m.queued(&id, Queued::named("other")))
        .await;
    assert!(is_conflict(&same_run), "{same_run:?}");
    let other_id = m.run_id();
    let same_workflow = store.create_run(m.queued(&other_id, spec())).await;
    assert!(is_conflict(&same_workflow), "{same_workflow:?}");

    assert!(is_not_found(
        &store.get_run(&other_id, ResolveData::All).await
    ));
    let kept = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(kept.name, "w", "the original run is untouched");
    assert_eq!(
        store.get_run("shared", ResolveData::All).await.unwrap().id,
        id
    );
    assert_eq!(store.history(&id, 0).await.unwrap().len(), 1);
}

/// Every read or write of something that does not exist is a 404.
pub async fn unknown_runs_and_activities_are_not_found(store: Arc<dyn Store>) {
    let m = Maker::new();
    let missing = m.run_id();
    assert!(is_not_found(
        &store.get_run(&missing, ResolveData::All).await
    ));
    assert!(is_not_found(
        &store
            .get_run("no-such-workflow-id", ResolveData::None)
            .await
    ));
    assert!(is_not_found(&store.history(&missing, 0).await));
    assert!(is_not_found(
        &m.append(&*store, &missing, vec![started()]).await
    ));
    assert!(is_not_found(&store.get_activity(&missing, 0).await));

    let id = m.create(&*store, "w").await;
    assert!(is_not_found(&store.get_activity(&id, 0).await));
}

/// Odd strings survive storage exactly: NUL bytes, emoji, right-to-left text, quotes,
/// backslashes and newlines, in workflow ids, names and payloads.
pub async fn odd_ids_names_and_payloads_round_trip(store: Arc<dyn Store>) {
    let odd = "nul:\u{0}|emoji:😀🧪|rtl:\u{202E}שלום مرحبا|zwj:👩\u{200D}💻|\"q\"\\\n\t|é";
    let m = Maker::new();
    let id = m.run_id();
    let workflow_id = format!("wf-{odd}");
    let name = format!("name-{odd}");
    let input = p(json!({ "text": odd, "list": [odd, null, 1.5], odd: true }));
    let first = m.queued(
        &id,
        Queued {
            name: &name,
            workflow_id: Some(&workflow_id),
            input: Some(input.clone()),
            ..Queued::default()
        },
    );
    store.create_run(first.clone()).await.unwrap();
    let step_name = format!("step-{odd}");
    m.append(
        &*store,
        &id,
        vec![
            started(),
            scheduled(0, &step_name),
            step_started(0),
            step_completed(0, json!([odd])),
        ],
    )
    .await
    .unwrap();

    let state = store.get_run(&workflow_id, ResolveData::All).await.unwrap();
    assert_eq!(state.id, id);
    assert_eq!(state.workflow_id, workflow_id);
    assert_eq!(state.name, name);
    assert_eq!(state.input, Some(input.clone()));
    let decoded: serde_json::Value = state.input.as_ref().unwrap().decode().unwrap();
    assert_eq!(decoded["text"], odd);
    let step = store.get_activity(&id, 0).await.unwrap();
    assert_eq!(step.name, step_name);
    assert_eq!(step.output, Some(p(json!([odd]))));
    let history = store.history(&id, 0).await.unwrap();
    assert_eq!(history[0].kind, first.kind);
    let listed = store
        .list_runs(&WorkflowQueryFilter::new().workflow_name(name.clone()))
        .await
        .unwrap();
    assert_eq!(ids_of(&listed.data), vec![id.clone()]);
    // A workflow id that differs only after the NUL byte is a different id.
    assert!(is_not_found(
        &store.get_run("wf-nul:\u{0}", ResolveData::None).await
    ));
}

/// `list_runs`: filters, newest-first order, offset/limit, cursor pages and payload stripping.
pub async fn list_runs_filters_pages_and_strips(store: Arc<dyn Store>) {
    let m = Maker::new();
    // Ten runs, one second apart: names alternate, statuses vary, two are children of the first.
    let mut runs: Vec<String> = Vec::new(); // oldest first
    for i in 0..10u32 {
        let id = m.run_id();
        let name = if i % 2 == 0 { "even" } else { "odd" };
        let parent = if i == 4 || i == 7 {
            Some(runs[0].clone())
        } else {
            None
        };
        store
            .create_run(m.queued(
                &id,
                Queued {
                    name,
                    parent: parent.as_deref(),
                    ..Queued::default()
                },
            ))
            .await
            .unwrap();
        match i % 4 {
            0 => {}
            1 => {
                m.append(&*store, &id, vec![started()]).await.unwrap();
            }
            2 => {
                m.append(&*store, &id, vec![started(), completed()])
                    .await
                    .unwrap();
            }
            _ => {
                m.append(&*store, &id, vec![started(), failed()])
                    .await
                    .unwrap();
            }
        }
        runs.push(id);
        m.tick(1_000);
    }
    let newest_first: Vec<String> = runs.iter().rev().cloned().collect();
    let created = |i: usize| T0 + 1_000 * i as i64;
    let list = |filter: WorkflowQueryFilter| {
        let store = store.clone();
        async move { ids_of(&store.list_runs(&filter).await.unwrap().data) }
    };
    let pick = |idx: &[usize]| -> Vec<String> { idx.iter().map(|&i| runs[i].clone()).collect() };

    assert_eq!(list(WorkflowQueryFilter::new()).await, newest_first);
    // Status: one, and several.
    assert_eq!(
        list(WorkflowQueryFilter::new().status(RunStatus::Pending)).await,
        pick(&[8, 4, 0])
    );
    assert_eq!(
        list(WorkflowQueryFilter::new().status([RunStatus::Completed, RunStatus::Failed])).await,
        pick(&[7, 6, 3, 2])
    );
    assert!(
        list(WorkflowQueryFilter::new().status(RunStatus::Cancelled))
            .await
            .is_empty()
    );
    // Name, parent, and combinations.
    assert_eq!(
        list(WorkflowQueryFilter::new().workflow_name("odd")).await,
        pick(&[9, 7, 5, 3, 1])
    );
    assert_eq!(
        list(WorkflowQueryFilter::new().parent_id(runs[0].clone())).await,
        pick(&[7, 4])
    );
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .parent_id(runs[0].clone())
                .workflow_name("even")
        )
        .await,
        pick(&[4])
    );
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .workflow_name("even")
                .status(RunStatus::Pending)
        )
        .await,
        pick(&[8, 4, 0])
    );
    // Workflow id prefix (every run's workflow id is its run id here).
    let prefix: String = runs[3].chars().take(runs[3].len() - 1).collect();
    let expected: Vec<String> = newest_first
        .iter()
        .filter(|id| id.starts_with(&prefix))
        .cloned()
        .collect();
    assert!(expected.contains(&runs[3]));
    assert_eq!(
        list(WorkflowQueryFilter::new().workflow_id_prefix(prefix)).await,
        expected
    );
    assert!(
        list(WorkflowQueryFilter::new().workflow_id_prefix("nobody-"))
            .await
            .is_empty()
    );
    // Counts, capped.
    let count = |filter: WorkflowQueryFilter, cap: usize| {
        let store = store.clone();
        async move { store.count_runs(&filter, cap).await.unwrap() }
    };
    assert_eq!(count(WorkflowQueryFilter::new(), 100).await, 10);
    assert_eq!(count(WorkflowQueryFilter::new(), 4).await, 4, "capped");
    assert_eq!(
        count(WorkflowQueryFilter::new().status(RunStatus::Pending), 100).await,
        3
    );
    assert_eq!(
        count(
            WorkflowQueryFilter::new()
                .workflow_name("odd")
                .status([RunStatus::Completed, RunStatus::Failed])
                .limit(1)
                .cursor(runs[9].clone()),
            100
        )
        .await,
        2,
        "cursor and limit do not narrow a count"
    );
    // Creation time: [after, before).
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .started_after(created(3))
                .started_before(created(6))
        )
        .await,
        pick(&[5, 4, 3])
    );
    // Offset and limit.
    assert_eq!(
        list(WorkflowQueryFilter::new().offset(2).limit(3)).await,
        newest_first[2..5].to_vec()
    );
    assert_eq!(
        list(WorkflowQueryFilter::new().workflow_name("odd").offset(4)).await,
        pick(&[1])
    );

    // Cursor pages of 3: 3 + 3 + 3 + 1, no gaps, no duplicates, the last without a cursor.
    let mut filter = WorkflowQueryFilter::new().limit(3);
    let mut seen = Vec::new();
    let mut shapes = Vec::new();
    loop {
        let page = store.list_runs(&filter).await.unwrap();
        shapes.push((page.data.len(), page.has_more, page.cursor.is_some()));
        seen.extend(ids_of(&page.data));
        match page.cursor {
            Some(cursor) if shapes.len() < 10 => filter = filter.cursor(cursor),
            _ => break,
        }
    }
    assert_eq!(
        shapes,
        vec![
            (3, true, true),
            (3, true, true),
            (3, true, true),
            (1, false, false)
        ]
    );
    assert_eq!(seen, newest_first);
    // The same, oldest first.
    let mut filter = WorkflowQueryFilter::new().oldest_first().limit(4);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let page = store.list_runs(&filter).await.unwrap();
        seen.extend(ids_of(&page.data));
        match page.cursor {
            Some(cursor) => filter = filter.cursor(cursor),
            None => break,
        }
    }
    assert_eq!(seen, runs);
    assert_eq!(
        list(
            WorkflowQueryFilter::new()
                .oldest_first()
                .status([RunStatus::Completed, RunStatus::Failed])
        )
        .await,
        pick(&[2, 3, 6, 7]),
        "several sets merged, oldest first"
    );
    // A cursor combines with filters.
    let first = store
        .list_runs(&WorkflowQueryFilter::new().workflow_name("even").limit(2))
        .await
        .unwrap();
    assert_eq!(ids_of(&first.data), pick(&[8, 6]));
    let rest = store
        .list_runs(
            &WorkflowQueryFilter::new()
                .workflow_name("even")
                .limit(2)
                .cursor(first.cursor.clone().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&rest.data), pick(&[4, 2]));
    assert!(rest.has_more);

    // resolve_data: none strips payloads but keeps metadata; lists never carry history.
    let full = store
        .list_runs(&WorkflowQueryFilter::new().status(RunStatus::Completed))
        .await
        .unwrap();
    assert!(full
        .data
        .iter()
        .all(|r| r.input.is_some() && r.output.is_some()));
    let lean = store
        .list_runs(
            &WorkflowQueryFilter::new()
                .status(RunStatus::Completed)
                .resolve_data(ResolveData::None),
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&lean.data), ids_of(&full.data));
    for r in &lean.data {
        assert_eq!((r.input.as_ref(), r.output.as_ref()), (None, None));
        assert_eq!(r.status, RunStatus::Completed);
        assert!(r.history.is_empty());
    }
    assert!(full.data.iter().all(|r| r.history.is_empty()));
    let one = store.get_run(&runs[2], ResolveData::None).await.unwrap();
    assert_eq!((one.input, one.output), (None, None));
}

/// `unfinished_runs` lists exactly the runs that still need work.
pub async fn unfinished_runs_lists_pending_and_running_only(store: Arc<dyn Store>) {
    let m = Maker::new();
    assert!(store.unfinished_runs().await.unwrap().is_empty());
    let pending = m.create(&*store, "w").await;
    let running = m.create(&*store, "w").await;
    m.append(&*store, &running, vec![started()]).await.unwrap();
    let done = m.create(&*store, "w").await;
    m.append(&*store, &done, vec![started(), completed()])
        .await
        .unwrap();
    let broken = m.create(&*store, "w").await;
    m.append(&*store, &broken, vec![started(), failed()])
        .await
        .unwrap();
    let cancelled = m.create(&*store, "w").await;
    m.append(
        &*store,
        &cancelled,
        vec![EventKind::WorkflowCancelled {
            reason: Some("stop".into()),
        }],
    )
    .await
    .unwrap();

    let unfinished: BTreeSet<String> = store.unfinished_runs().await.unwrap().into_iter().collect();
    assert_eq!(
        unfinished,
        BTreeSet::from([pending.clone(), running.clone()])
    );
    // Finishing a run takes it off the list.
    m.append(&*store, &running, vec![completed()])
        .await
        .unwrap();
    assert_eq!(store.unfinished_runs().await.unwrap(), vec![pending]);
}

/// Runs carry the code version of the world that accepted them, and are listed and counted
/// by it.
pub async fn runs_are_listed_by_code_version(store: Arc<dyn Store>) {
    let m = Maker::new();
    let mut by_version: Vec<(Option<&str>, String)> = Vec::new();
    for version in [Some("v1"), Some("v2"), None, Some("v1"), Some("v1.0")] {
        let id = m.run_id();
        store
            .create_run(m.queued(
                &id,
                Queued {
                    name: "versioned",
                    code_version: version,
                    ..Queued::default()
                },
            ))
            .await
            .unwrap();
        by_version.push((version, id));
    }
    let ids_of = |version: &str| -> Vec<String> {
        let mut ids: Vec<String> = by_version
            .iter()
            .filter(|(v, _)| *v == Some(version))
            .map(|(_, id)| id.clone())
            .collect();
        ids.reverse(); // newest first
        ids
    };
    for version in ["v1", "v2", "v1.0", "v3"] {
        let filter = WorkflowQueryFilter::new().code_version(version);
        let listed: Vec<String> = store
            .list_runs(&filter)
            .await
            .unwrap()
            .data
            .into_iter()
            .map(|run| {
                assert_eq!(run.code_version.as_deref(), Some(version), "{run:?}");
                run.id
            })
            .collect();
        assert_eq!(listed, ids_of(version), "version {version}");
        assert_eq!(
            store.count_runs(&filter, 100).await.unwrap(),
            ids_of(version).len()
        );
    }
    let unversioned = &by_version[2].1;
    assert_eq!(
        store
            .get_run(unversioned, ResolveData::None)
            .await
            .unwrap()
            .code_version,
        None
    );
}
