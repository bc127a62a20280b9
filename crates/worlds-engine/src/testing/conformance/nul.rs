//! Conformance check for NUL (U+0000) in the strings a caller can choose: a lookup, filter or
//! cursor holding it finds nothing, the same way on every backend (PostgreSQL's text cannot hold
//! it, so a store there must not pass it on as text), and payloads holding it round-trip byte
//! for byte. Writes of identifiers holding it are refused by the engine before any store sees
//! them (`model::check_text`), which the HTTP API's tests walk on every backend.

use super::*;
use crate::store::ScheduleChange;

/// Every lookup by an id holding NUL finds nothing (404 where a lookup by an unknown id does,
/// empty where a filter matching nothing is); a run list's cursor holding NUL compares as the
/// bytes it is; payloads holding NUL (input, step output, hook payload and metadata, the run's
/// output, a schedule's input, a stream chunk) come back as written.
pub async fn nul_in_lookups_finds_nothing_and_payloads_keep_it(store: Arc<dyn Store>) {
    let m = Maker::new();
    let nul = "a\u{0}b";
    let odd = r#"{"nul":"a\u0000b","list":["\u0000",1]}"#;
    let payload = Payload::from_json(odd).unwrap();

    // A run whose every payload holds NUL.
    let run = m.run_id();
    store
        .create_run(m.queued(
            &run,
            Queued {
                name: "nul",
                input: Some(payload.clone()),
                ..Queued::default()
            },
        ))
        .await
        .unwrap();
    let (step, scheduled) = m.step(0, "s");
    let hook = m.ids.hook_id();
    let mut created = super::hooks::created(1, &hook, "digest-nul");
    if let EventKind::HookCreated { metadata, .. } = &mut created {
        *metadata = Some(payload.clone());
    }
    m.append(
        &*store,
        &run,
        vec![
            started(),
            scheduled,
            step_started(0),
            EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output: payload.clone(),
            },
            created,
            EventKind::HookReceived {
                position: 1,
                hook_id: hook.clone(),
                payload: payload.clone(),
            },
            EventKind::WorkflowCompleted {
                output: payload.clone(),
            },
        ],
    )
    .await
    .unwrap();
    let state = store.get_run(&run, ResolveData::All).await.unwrap();
    assert_eq!(state.input.as_ref().map(Payload::as_json), Some(odd));
    assert_eq!(state.output.as_ref().map(Payload::as_json), Some(odd));
    assert_eq!(
        state
            .activity(0)
            .unwrap()
            .output
            .as_ref()
            .map(Payload::as_json),
        Some(odd)
    );
    let found = store.get_hook(&hook).await.unwrap().hook;
    assert_eq!(found.metadata.as_ref().map(Payload::as_json), Some(odd));
    for event in store.history(&run, 0).await.unwrap() {
        if let EventKind::HookReceived { payload: read, .. }
        | EventKind::WorkflowCompleted { output: read } = &event.kind
        {
            assert_eq!(read.as_json(), odd, "{}", event.kind.type_name());
        }
    }
    let chunk = NewChunk {
        id: m.ids.next(CHUNK_PREFIX),
        created_at: m.now(),
        key: None,
        data: Bytes::from_static(b"a\0b"),
    };
    store.write_chunk(&run, "out", chunk).await.unwrap();
    let (chunks, _) = store.stream_chunks(&run, "out", 0, 10).await.unwrap();
    assert_eq!(chunks[0].data, Bytes::from_static(b"a\0b"));
    let mut schedule: crate::schedule::ScheduleConfig = serde_json::from_value(json!({
        "id": "nul-input",
        "workflow_name": "nul",
        "input": {"nul": "a\u{0}b"},
        "input_fn": false,
        "cron_expression": "0 9 * * *",
        "paused": false,
        "total_executions": 0,
        "catch_up": { "policy": "latest" },
        "created_at": T0,
    }))
    .unwrap();
    schedule.input = Some(payload.clone());
    store
        .update_schedule("nul-input", &mut |_| {
            Ok(ScheduleChange::Put(schedule.clone()))
        })
        .await
        .unwrap();
    let kept = store.get_schedule("nul-input").await.unwrap().unwrap();
    assert_eq!(kept.input.as_ref().map(Payload::as_json), Some(odd));

    // Lookups by ids holding NUL.
    for id in [nul, "\u{0}", &format!("{run}\u{0}")] {
        assert!(
            is_not_found(&store.get_run(id, ResolveData::None).await),
            "{id:?}"
        );
        assert!(is_not_found(&store.history(id, 0).await), "{id:?}");
        assert!(is_not_found(
            &store.list_events(id, &ListQuery::new()).await
        ));
        assert!(is_not_found(&store.get_activity(id, 0).await));
        assert!(is_not_found(&store.list_steps(id, &ListQuery::new()).await));
        assert!(is_not_found(
            &store.list_run_hooks(id, &ListQuery::new()).await
        ));
        assert!(is_not_found(&store.get_step(id, ResolveData::None).await));
        assert!(is_not_found(&store.get_hook(id).await));
        let page = store
            .list_events_by_correlation_id(id, &ListQuery::new())
            .await
            .unwrap();
        assert!(page.data.is_empty() && !page.has_more, "{id:?}");
        assert_eq!(store.find_by_idempotency_key(id, 0).await.unwrap(), None);
        assert_eq!(store.get_schedule(id).await.ok().flatten(), None);
        assert!(store.list_streams(id).await.unwrap_or_default().is_empty());
    }
    assert!(is_not_found(
        &store
            .get_step(&format!("{step}\u{0}"), ResolveData::None)
            .await
    ));
    assert!(is_not_found(&store.get_hook(&format!("{hook}\u{0}")).await));

    // Filters holding NUL match nothing; a cursor holding NUL is compared as its bytes.
    let other = m.create(&*store, "other").await;
    for filter in [
        WorkflowQueryFilter::new().parent_id(nul),
        WorkflowQueryFilter::new().workflow_name(nul),
        WorkflowQueryFilter::new().code_version(nul),
        WorkflowQueryFilter::new().workflow_id_prefix(nul),
    ] {
        let page = store.list_runs(&filter).await.unwrap();
        assert!(page.data.is_empty(), "{filter:?}");
        assert_eq!(
            store.count_runs(&filter, 10).await.unwrap(),
            0,
            "{filter:?}"
        );
    }
    let newest_first = store
        .list_runs(&WorkflowQueryFilter::new().cursor("\u{0}"))
        .await
        .unwrap();
    assert!(newest_first.data.is_empty());
    let oldest_first = store
        .list_runs(&WorkflowQueryFilter::new().cursor("\u{0}").oldest_first())
        .await
        .unwrap();
    assert_eq!(ids_of(&oldest_first.data), vec![run.clone(), other.clone()]);
    // Past the first run's id with a NUL after it: the second run, either way round.
    let past_first = format!("{run}\u{0}");
    let after = store
        .list_runs(
            &WorkflowQueryFilter::new()
                .cursor(&past_first)
                .oldest_first(),
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&after.data), vec![other.clone()]);
    let before = store
        .list_runs(&WorkflowQueryFilter::new().cursor(&past_first))
        .await
        .unwrap();
    assert_eq!(ids_of(&before.data), vec![run.clone()]);
}
