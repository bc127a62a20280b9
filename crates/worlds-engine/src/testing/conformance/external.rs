//! Conformance checks for runs driven from outside the engine (a Workflow DevKit app): what
//! the store keeps of them and the rules it applies to their records.

use super::*;

/// A run driven from outside keeps its flag, its step ids are unique, its waits keep their
/// ids, and its hooks take payload after payload while holding their tokens until they are
/// disposed — on every backend, read back from the store itself.
pub async fn external_runs_keep_their_records_and_iterate_their_hooks(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.run_id();
    let mut first = m.queued(&id, Queued::named("workflow//w.ts//flow"));
    if let EventKind::WorkflowQueued(run) = &mut first.kind {
        run.external = true;
        run.code_version = Some("dpl_1".into());
    }
    store.create_run(first).await.unwrap();
    let step = EventKind::ActivityScheduled {
        position: 1,
        activity_id: "step_devkit_1".into(),
        name: "add".into(),
        input: p(json!([1, 2])),
        options: None,
        inline: false,
    };
    let wait = EventKind::TimerScheduled {
        position: 3,
        fire_at: T0 + 1_000,
        timer_id: Some("wait_devkit_1".into()),
    };
    let mut hook = super::hooks::created(4, "hook_devkit_1", "digest-devkit");
    if let EventKind::HookCreated { metadata, .. } = &mut hook {
        *metadata = Some(p(json!({ "customData": "x" })));
    }
    m.append(&*store, &id, vec![started(), step, wait, hook])
        .await
        .unwrap();

    // A second step under the same id is refused, at any position.
    let again = EventKind::ActivityScheduled {
        position: 2,
        activity_id: "step_devkit_1".into(),
        name: "add".into(),
        input: p(json!([])),
        options: None,
        inline: false,
    };
    assert!(
        matches!(
            m.append(&*store, &id, vec![again]).await,
            Err(WorldError::Conflict { .. })
        ),
        "a step id is unique in its run"
    );

    // Payload after payload: the hook keeps waiting and keeps its token.
    for n in 0..3 {
        let received = EventKind::HookReceived {
            position: 4,
            hook_id: "hook_devkit_1".into(),
            payload: p(json!({ "n": n })),
        };
        m.append(&*store, &id, vec![received]).await.unwrap();
    }
    let found = store.find_hook("digest-devkit").await.unwrap();
    assert_eq!(
        found.map(|h| (h.run_id, h.position)),
        Some((id.clone(), 4)),
        "the hook still holds its token"
    );
    let other = m.create(&*store, "other").await;
    m.append(&*store, &other, vec![started()]).await.unwrap();
    let taken = super::hooks::created(0, "hook_other", "digest-devkit");
    assert!(
        m.append(&*store, &other, vec![taken]).await.is_err(),
        "another run cannot take the token of a hook that still waits"
    );

    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert!(state.external);
    assert_eq!(state.code_version.as_deref(), Some("dpl_1"));
    let hook = &state.hooks[0];
    assert_eq!(hook.status, HookStatus::Waiting);
    assert_eq!(
        hook.metadata.as_ref().map(Payload::to_value),
        Some(json!({ "customData": "x" }))
    );
    let history = store.history(&id, 0).await.unwrap();
    assert!(history.iter().any(|e| matches!(
        &e.kind,
        EventKind::TimerScheduled { timer_id: Some(t), .. } if t == "wait_devkit_1"
    )));
    assert_eq!(
        history
            .iter()
            .filter(|e| matches!(e.kind, EventKind::HookReceived { .. }))
            .count(),
        3
    );

    // Disposed, the hook lets its token go.
    m.append(
        &*store,
        &id,
        vec![EventKind::HookDisposed {
            position: 4,
            hook_id: "hook_devkit_1".into(),
        }],
    )
    .await
    .unwrap();
    let taken = super::hooks::created(0, "hook_other", "digest-devkit");
    m.append(&*store, &other, vec![taken]).await.unwrap();
}
