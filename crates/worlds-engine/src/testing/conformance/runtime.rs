//! Conformance checks for what an outside runtime (a Workflow DevKit app, spec version 5)
//! records through the store: its runtime info and attribute changes, binary payloads, the
//! serialized bytes of its errors, and the run ids it chooses — each read back from the store
//! itself, and sealed at rest through encryption.

use std::collections::BTreeMap;

use super::*;

use crate::config::EncryptionKeys;
use crate::model::{
    apply_attribute_changes, AttributeChange, RuntimeInfo, MAX_ATTRIBUTES, MAX_ATTRIBUTE_KEY,
    MAX_ATTRIBUTE_VALUE,
};
use crate::store::SealedStore;

/// The first event of a run driven from outside under `run_id` (its workflow id too, as the
/// engine makes them), with `runtime` recorded.
fn external_queued(m: &Maker, run_id: &str, input: Payload, runtime: Option<RuntimeInfo>) -> Event {
    let mut first = m.queued(
        run_id,
        Queued {
            input: Some(input),
            ..Queued::named("workflow//app.ts//flow")
        },
    );
    if let EventKind::WorkflowQueued(run) = &mut first.kind {
        run.external = true;
        run.code_version = Some("dpl_runtime".into());
        run.runtime = runtime.map(Box::new);
    }
    first
}

/// Runtime info as a spec-version-5 runtime records it: an execution context holding NUL,
/// a lone-surrogate escape and binary data, and attributes, one of them reserved.
fn runtime_info() -> RuntimeInfo {
    RuntimeInfo {
        spec_version: Some(5),
        execution_context: Some(
            Payload::from_json(
                r#"{"traceCarrier":{"traceparent":"00-4bf92f3577b34da6-00f067aa0ba902b7-01"},"nul":"a\u0000b","lone":"\ud800","bytes":{"$bytes":"AP8A"},"n":1.50}"#,
            )
            .unwrap(),
        ),
        attributes: attributes(&[
            ("$lineage", "wrun_parent"),
            ("team", "payments"),
            ("emoji", "😀 שלום"),
        ]),
    }
}

fn attributes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn set(key: &str, value: &str) -> AttributeChange {
    AttributeChange {
        key: key.to_owned(),
        value: Some(value.to_owned()),
    }
}

fn remove(key: &str) -> AttributeChange {
    AttributeChange {
        key: key.to_owned(),
        value: None,
    }
}

fn attributes_set(changes: Vec<AttributeChange>) -> EventKind {
    EventKind::AttributesSet {
        changes,
        correlation_id: None,
        writer: None,
    }
}

/// The run's attributes as the store gives them back.
async fn attributes_of(store: &dyn Store, run_id: &str) -> BTreeMap<String, String> {
    let state = store.get_run(run_id, ResolveData::All).await.unwrap();
    state.runtime.map(|r| r.attributes).unwrap_or_default()
}

/// Every event the store gives back for the run, by `history` and by `list_events`, which must
/// agree.
async fn stored_events(store: &dyn Store, run_id: &str) -> Vec<Event> {
    let history: Vec<Event> = store
        .history(run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| (**e).clone())
        .collect();
    let listed: Vec<Event> = store
        .list_events(run_id, &ListQuery::new().limit(1000))
        .await
        .unwrap()
        .data
        .iter()
        .map(|e| (**e).clone())
        .collect();
    assert_eq!(history, listed, "history and list_events disagree");
    history
}

/// A run driven from outside keeps the runtime info of its first event exactly (spec version,
/// execution context byte for byte, attributes), in its state by run id and workflow id, in
/// its first event, and in the state after later events; a partial or absent runtime info
/// reads back as written.
pub async fn runtime_info_round_trips_exactly(store: Arc<dyn Store>) {
    let m = Maker::new();
    let info = runtime_info();
    let id = m.run_id();
    let first = external_queued(&m, &id, p(json!({ "n": 1 })), Some(info.clone()));
    store.create_run(first.clone()).await.unwrap();

    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert!(state.external);
    assert_eq!(state.runtime.as_deref(), Some(&info));
    let context = state.runtime.as_ref().unwrap().execution_context.as_ref();
    assert_eq!(
        context.map(Payload::as_json),
        info.execution_context.as_ref().map(Payload::as_json),
        "the execution context is kept byte for byte"
    );
    let by_workflow = store.get_run(&state.workflow_id, ResolveData::All).await;
    assert_eq!(by_workflow.unwrap().runtime.as_deref(), Some(&info));
    let events = stored_events(&*store, &id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, first.kind);

    // Later events leave it as it was.
    m.append(&*store, &id, vec![started()]).await.unwrap();
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.runtime.as_deref(), Some(&info));
    assert_eq!(stored_events(&*store, &id).await[0].kind, first.kind);

    // Only a spec version; and none at all.
    let bare = RuntimeInfo {
        spec_version: Some(5),
        ..RuntimeInfo::default()
    };
    let partial = m.run_id();
    store
        .create_run(external_queued(
            &m,
            &partial,
            p(json!(1)),
            Some(bare.clone()),
        ))
        .await
        .unwrap();
    let state = store.get_run(&partial, ResolveData::All).await.unwrap();
    assert_eq!(state.runtime.as_deref(), Some(&bare));
    let none = m.run_id();
    store
        .create_run(external_queued(&m, &none, p(json!(1)), None))
        .await
        .unwrap();
    let state = store.get_run(&none, ResolveData::All).await.unwrap();
    assert_eq!(state.runtime, None);
}

/// `attributes_set` events change a run's attributes as
/// [`apply_attribute_changes`] says (set, overwrite, remove, in order; the reserved `$` keys
/// too, which only the caller restricts) and read back exactly; a change breaking the shape or
/// the limits (empty, NUL, too long, too many) or one after the run ended is refused, with a
/// batch holding it, and nothing is written.
pub async fn attribute_changes_apply_in_order_and_bad_ones_write_nothing(store: Arc<dyn Store>) {
    let m = Maker::new();
    let info = runtime_info();
    let id = m.run_id();
    store
        .create_run(external_queued(&m, &id, p(json!(1)), Some(info.clone())))
        .await
        .unwrap();
    m.append(&*store, &id, vec![started()]).await.unwrap();

    let changes = vec![
        set("region", "eu"),
        set("team", "billing"),
        remove("emoji"),
        set("tmp", "x"),
        remove("tmp"),
        set("$lineage", "wrun_other"),
        set("empty", ""),
    ];
    let change = EventKind::AttributesSet {
        changes: changes.clone(),
        correlation_id: Some("attr_01".into()),
        writer: Some(p(
            json!({ "type": "step", "stepId": "step_1", "attempt": 2, "nul": "\u{0}" }),
        )),
    };
    m.append(&*store, &id, vec![change.clone()]).await.unwrap();
    let expected = apply_attribute_changes(info.attributes.clone(), &changes);
    assert_eq!(
        expected,
        attributes(&[
            ("$lineage", "wrun_other"),
            ("empty", ""),
            ("region", "eu"),
            ("team", "billing"),
        ])
    );
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    let runtime = state.runtime.as_deref().unwrap();
    assert_eq!(runtime.attributes, expected);
    assert_eq!(runtime.spec_version, Some(5), "the rest is kept");
    assert_eq!(runtime.execution_context, info.execution_context);
    let events = stored_events(&*store, &id).await;
    assert_eq!(
        events.last().unwrap().kind,
        change,
        "the event reads back exactly"
    );

    // At the limits of a key's and a value's length.
    let long_key = "k".repeat(MAX_ATTRIBUTE_KEY);
    let long_value = "é".repeat(MAX_ATTRIBUTE_VALUE / 2);
    m.append(
        &*store,
        &id,
        vec![attributes_set(vec![set(&long_key, &long_value)])],
    )
    .await
    .unwrap();
    let now = attributes_of(&*store, &id).await;
    assert_eq!(now.get(&long_key), Some(&long_value));

    // Refused, each alone and in a batch after a good change: nothing is written.
    let full: Vec<AttributeChange> = (now.len()..=MAX_ATTRIBUTES)
        .map(|i| set(&format!("fill{i:03}"), "v"))
        .collect();
    let bad = [
        ("an empty key", vec![set("", "v")]),
        (
            "a key too long",
            vec![set(&"k".repeat(MAX_ATTRIBUTE_KEY + 1), "v")],
        ),
        (
            "a value too long",
            vec![set("k", &"v".repeat(MAX_ATTRIBUTE_VALUE + 1))],
        ),
        ("NUL in a key", vec![set("a\u{0}b", "v")]),
        ("NUL in a value", vec![set("k", "a\u{0}b")]),
        ("too many attributes", full.clone()),
    ];
    let before = store.history(&id, 0).await.unwrap().len();
    for (what, changes) in bad {
        let alone = m
            .append(&*store, &id, vec![attributes_set(changes.clone())])
            .await;
        assert!(is_invalid(&alone), "{what}: {alone:?}");
        let batch = m
            .append(
                &*store,
                &id,
                vec![
                    attributes_set(vec![set("good", "1")]),
                    attributes_set(changes),
                ],
            )
            .await;
        assert!(is_invalid(&batch), "{what} in a batch: {batch:?}");
        assert_eq!(store.history(&id, 0).await.unwrap().len(), before, "{what}");
        assert_eq!(attributes_of(&*store, &id).await, now, "{what}");
    }

    // Exactly full is accepted; a removal makes room in the same change.
    let filled = apply_attribute_changes(now.clone(), &full[..full.len() - 1]);
    assert_eq!(filled.len(), MAX_ATTRIBUTES);
    m.append(
        &*store,
        &id,
        vec![attributes_set(full[..full.len() - 1].to_vec())],
    )
    .await
    .unwrap();
    assert_eq!(attributes_of(&*store, &id).await, filled);
    let swap = vec![remove("region"), set("zone", "a")];
    m.append(&*store, &id, vec![attributes_set(swap.clone())])
        .await
        .unwrap();
    let swapped = apply_attribute_changes(filled, &swap);
    assert_eq!(attributes_of(&*store, &id).await, swapped);

    // A run the engine drives takes attributes too.
    let plain = m.create(&*store, "plain").await;
    m.append(&*store, &plain, vec![attributes_set(vec![set("a", "1")])])
        .await
        .unwrap();
    let state = store.get_run(&plain, ResolveData::All).await.unwrap();
    assert_eq!(
        state.runtime.as_deref(),
        Some(&RuntimeInfo {
            attributes: attributes(&[("a", "1")]),
            ..RuntimeInfo::default()
        })
    );

    // Once the run has ended, attributes no longer change.
    m.append(&*store, &id, vec![completed()]).await.unwrap();
    let before = store.history(&id, 0).await.unwrap().len();
    let late = m
        .append(&*store, &id, vec![attributes_set(vec![set("late", "1")])])
        .await;
    assert!(is_conflict(&late), "{late:?}");
    assert_eq!(store.history(&id, 0).await.unwrap().len(), before);
    assert_eq!(attributes_of(&*store, &id).await, swapped);
}

/// Byte strings an outside runtime's serialized values may be: every byte value, a NUL byte,
/// invalid UTF-8, nothing, and a large one (1 MiB, within the default payload limit once in
/// base64).
fn byte_cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut seed: u32 = 0x9E37_79B9;
    let large = (0..1 << 20)
        .map(|_| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 24) as u8
        })
        .collect();
    vec![
        ("every byte value", (0..=255u8).collect()),
        ("a NUL byte", vec![0]),
        (
            "invalid UTF-8",
            vec![0xC3, 0x28, 0xFF, 0xFE, 0x80, 0xED, 0xA0, 0x80],
        ),
        ("nothing", Vec::new()),
        ("1 MiB", large),
    ]
}

/// The bytes other than `case` recorded as the output of a step whose input is `case`: a store
/// that mixed the two up would show.
fn output_of(case: &[u8], n: u8) -> Vec<u8> {
    let mut out = case.to_vec();
    out.extend_from_slice(&[0xFE, n, 0x00]);
    out
}

/// The bytes of a binary payload, failing on any other.
fn bytes_of(payload: Option<&Payload>, what: &str) -> Vec<u8> {
    let payload = payload.unwrap_or_else(|| panic!("{what}: no payload"));
    payload
        .binary()
        .unwrap_or_else(|| panic!("{what}: not a binary payload: {payload:?}"))
}

/// Binary payloads ([`Payload::from_bytes`]) as a run's input and output, a step's input and
/// output and a hook's payload read back byte for byte — every byte value, NUL, invalid UTF-8,
/// empty, 1 MiB — from the run's state, the step by position and by id, its history and its
/// events by correlation id.
pub async fn binary_payloads_round_trip_byte_for_byte(store: Arc<dyn Store>) {
    let m = Maker::new();
    let cases = byte_cases();
    let id = m.run_id();
    let input = Payload::from_bytes(&cases[0].1);
    store
        .create_run(external_queued(&m, &id, input.clone(), None))
        .await
        .unwrap();
    m.append(&*store, &id, vec![started()]).await.unwrap();
    let mut steps = Vec::new();
    let mut hooks = Vec::new();
    for (n, (_, case)) in cases.iter().enumerate() {
        let position = u32::try_from(n).unwrap();
        let step = m.ids.step_id();
        let hook = m.ids.hook_id();
        let hook_position = position + 100;
        let digest = format!("digest-binary-{n}");
        m.append(
            &*store,
            &id,
            vec![
                EventKind::ActivityScheduled {
                    position,
                    activity_id: step.clone(),
                    name: "bytes".into(),
                    input: Payload::from_bytes(case),
                    options: None,
                    inline: false,
                },
                step_started(position),
                EventKind::ActivityCompleted {
                    position,
                    attempt: 1,
                    output: Payload::from_bytes(&output_of(case, n as u8)),
                },
                super::hooks::created(hook_position, &hook, &digest),
                EventKind::HookReceived {
                    position: hook_position,
                    hook_id: hook.clone(),
                    payload: Payload::from_bytes(case),
                },
            ],
        )
        .await
        .unwrap();
        steps.push(step);
        hooks.push(hook);
    }
    let output = Payload::from_bytes(&cases[4].1);
    m.append(
        &*store,
        &id,
        vec![EventKind::WorkflowCompleted {
            output: output.clone(),
        }],
    )
    .await
    .unwrap();

    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(bytes_of(state.input.as_ref(), "run input"), cases[0].1);
    assert_eq!(
        state.input.as_ref().map(Payload::as_json),
        Some(input.as_json())
    );
    assert_eq!(bytes_of(state.output.as_ref(), "run output"), cases[4].1);
    let events = stored_events(&*store, &id).await;
    for (n, (what, case)) in cases.iter().enumerate() {
        let position = u32::try_from(n).unwrap();
        let out = output_of(case, n as u8);
        let in_state = state.activity(position).unwrap();
        assert_eq!(bytes_of(in_state.input.as_ref(), what), *case, "{what}");
        assert_eq!(bytes_of(in_state.output.as_ref(), what), out, "{what}");
        let by_position = store.get_activity(&id, position).await.unwrap();
        assert_eq!(bytes_of(by_position.input.as_ref(), what), *case, "{what}");
        assert_eq!(bytes_of(by_position.output.as_ref(), what), out, "{what}");
        let by_id = store.get_step(&steps[n], ResolveData::All).await.unwrap();
        assert_eq!(by_id.run_id, id);
        assert_eq!(bytes_of(by_id.step.input.as_ref(), what), *case, "{what}");
        assert_eq!(bytes_of(by_id.step.output.as_ref(), what), out, "{what}");

        let scheduled = events.iter().find_map(|e| match &e.kind {
            EventKind::ActivityScheduled {
                position: p, input, ..
            } if *p == position => Some(input),
            _ => None,
        });
        assert_eq!(bytes_of(scheduled, what), *case, "{what}");
        let completed = events.iter().find_map(|e| match &e.kind {
            EventKind::ActivityCompleted {
                position: p,
                output,
                ..
            } if *p == position => Some(output),
            _ => None,
        });
        assert_eq!(bytes_of(completed, what), out, "{what}");
        let received = |events: &[Arc<Event>]| {
            events.iter().find_map(|e| match &e.kind {
                EventKind::HookReceived {
                    hook_id, payload, ..
                } if *hook_id == hooks[n] => Some(payload.clone()),
                _ => None,
            })
        };
        let in_history: Vec<Arc<Event>> = events.iter().cloned().map(Arc::new).collect();
        assert_eq!(
            bytes_of(received(&in_history).as_ref(), what),
            *case,
            "{what}"
        );
        let by_hook = store
            .list_events_by_correlation_id(&hooks[n], &ListQuery::new())
            .await
            .unwrap()
            .data;
        assert_eq!(bytes_of(received(&by_hook).as_ref(), what), *case, "{what}");
    }
}

/// Errors as an outside runtime records them: message, stack, code and its serialized bytes.
fn runtime_error(message: &str, data: Option<Payload>) -> StructuredError {
    StructuredError {
        message: message.to_owned(),
        stack: Some(format!("{message}\n    at step (app.ts:1:1)")),
        code: Some("E_RUNTIME".into()),
        data: data.map(Box::new),
    }
}

/// Bytes no text holds: invalid UTF-8, NUL, then every byte value.
fn error_bytes() -> Vec<u8> {
    let mut bytes = vec![0xFF, 0x00, 0xC0, 0xAF];
    bytes.extend(0..=255u8);
    bytes
}

/// An error's runtime bytes ([`StructuredError::data`]) on a failed step and a failed run read
/// back exactly — binary, JSON holding NUL, or none — from the run's state, the step by
/// position and by id, and its history.
pub async fn error_data_round_trips_on_failed_steps_and_runs(store: Arc<dyn Store>) {
    let m = Maker::new();
    let id = m.run_id();
    store
        .create_run(external_queued(&m, &id, p(json!(1)), None))
        .await
        .unwrap();
    let errors = [
        runtime_error("binary", Some(Payload::from_bytes(&error_bytes()))),
        runtime_error(
            "json",
            Some(
                Payload::from_json(r#"{"name":"TypeError","cause":{"nul":"a\u0000b"},"n":1.0}"#)
                    .unwrap(),
            ),
        ),
        runtime_error("none", None),
        runtime_error("empty", Some(Payload::from_bytes(&[]))),
    ];
    let mut kinds = vec![started()];
    let mut steps = Vec::new();
    for (n, error) in errors.iter().enumerate() {
        let position = u32::try_from(n).unwrap();
        let (step, scheduled) = m.step(position, "fails");
        steps.push(step);
        kinds.extend([
            scheduled,
            step_started(position),
            EventKind::ActivityFailed {
                position,
                attempt: 1,
                error: error.clone(),
                retrying: false,
            },
        ]);
    }
    let run_error = runtime_error(
        "the run failed",
        Some(Payload::from_bytes(&error_bytes()[3..])),
    );
    kinds.push(EventKind::WorkflowFailed {
        error: run_error.clone(),
    });
    m.append(&*store, &id, kinds.clone()).await.unwrap();

    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.error.as_deref(), Some(&run_error));
    assert_eq!(
        bytes_of(
            state.error.as_ref().and_then(|e| e.data.as_deref()),
            "run error"
        ),
        error_bytes()[3..]
    );
    for (n, error) in errors.iter().enumerate() {
        let position = u32::try_from(n).unwrap();
        let what = &error.message;
        let in_state = state.activity(position).unwrap();
        assert_eq!(in_state.status, ActivityStatus::Failed, "{what}");
        assert_eq!(in_state.error.as_ref(), Some(error), "{what}");
        let by_position = store.get_activity(&id, position).await.unwrap();
        assert_eq!(by_position.error.as_ref(), Some(error), "{what}");
        let by_id = store.get_step(&steps[n], ResolveData::All).await.unwrap();
        assert_eq!(by_id.step.error.as_ref(), Some(error), "{what}");
    }
    assert_eq!(
        bytes_of(
            state
                .activity(0)
                .unwrap()
                .error
                .as_ref()
                .and_then(|e| e.data.as_deref()),
            "step error"
        ),
        error_bytes()
    );
    let events = stored_events(&*store, &id).await;
    let written: Vec<&EventKind> = events[1..].iter().map(|e| &e.kind).collect();
    assert_eq!(written, kinds.iter().collect::<Vec<_>>());
}

/// Through encryption at rest over the store, the runtime's data — execution context, binary
/// input, step input and output, hook payload, attribute writer, the bytes of a step's and a
/// run's error — is nowhere in plain text in what the store holds (its history, the run's
/// state, the step), and reads back exactly through the key.
pub async fn runtime_data_is_sealed_at_rest(store: Arc<dyn Store>) {
    let m = Maker::new();
    let keys = EncryptionKeys::new("k-runtime", [42; 32]).unwrap();
    let sealed: Arc<dyn Store> = Arc::new(SealedStore::new(store.clone(), keys));
    let cases = byte_cases();
    // Each secret is distinct, so that finding one names the field that leaked.
    let secret = |n: u8| -> Vec<u8> {
        let mut bytes = vec![0xFF, 0x00, n, 0x80];
        bytes.extend((0..=255u8).map(|b| b ^ n));
        bytes
    };
    let context = Payload::from_bytes(&secret(1));
    let info = RuntimeInfo {
        execution_context: Some(context.clone()),
        ..runtime_info()
    };
    let id = m.run_id();
    let input = Payload::from_bytes(&secret(2));
    let first = external_queued(&m, &id, input.clone(), Some(info.clone()));
    sealed.create_run(first).await.unwrap();
    let hook = m.ids.hook_id();
    let step = m.ids.step_id();
    let large = &cases[4].1;
    let kinds = vec![
        started(),
        EventKind::ActivityScheduled {
            position: 0,
            activity_id: step.clone(),
            name: "bytes".into(),
            input: Payload::from_bytes(&secret(3)),
            options: None,
            inline: false,
        },
        step_started(0),
        EventKind::ActivityCompleted {
            position: 0,
            attempt: 1,
            output: Payload::from_bytes(large),
        },
        super::hooks::created(1, &hook, "digest-sealed-runtime"),
        EventKind::HookReceived {
            position: 1,
            hook_id: hook.clone(),
            payload: Payload::from_bytes(&secret(4)),
        },
        EventKind::AttributesSet {
            changes: vec![set("team", "sealed")],
            correlation_id: None,
            writer: Some(Payload::from_bytes(&secret(5))),
        },
        scheduled(2, "fails"),
        step_started(2),
        EventKind::ActivityFailed {
            position: 2,
            attempt: 1,
            error: runtime_error("step", Some(Payload::from_bytes(&secret(6)))),
            retrying: false,
        },
        EventKind::WorkflowFailed {
            error: runtime_error("run", Some(Payload::from_bytes(&secret(7)))),
        },
    ];
    m.append(&*sealed, &id, kinds.clone()).await.unwrap();

    // What the store holds: no secret, in base64 (how JSON carries bytes) or otherwise.
    let plain: Vec<(String, String)> = (1..=7)
        .map(|n| {
            let text = Payload::from_bytes(&secret(n)).as_json().to_owned();
            let b64 = text[r#"{"$bytes":""#.len()..text.len() - 2].to_owned();
            (format!("secret {n}"), b64)
        })
        .chain([(
            "1 MiB".to_owned(),
            Payload::from_bytes(&large[..3000]).as_json()[11..4000].to_owned(),
        )])
        .collect();
    let history = store.history(&id, 0).await.unwrap();
    let state = store.get_run(&id, ResolveData::All).await.unwrap();
    let activities = [
        store.get_activity(&id, 0).await.unwrap(),
        store.get_activity(&id, 2).await.unwrap(),
        store.get_step(&step, ResolveData::All).await.unwrap().step,
    ];
    let at_rest = [
        ("history", serde_json::to_string(&history).unwrap()),
        ("state", serde_json::to_string(&state).unwrap()),
        ("steps", serde_json::to_string(&activities).unwrap()),
    ];
    for (where_, text) in &at_rest {
        assert!(text.contains("$sealed"), "{where_} holds sealed data");
        for (what, b64) in &plain {
            assert!(
                !text.contains(b64.as_str()),
                "{what} in plain text in the {where_}"
            );
        }
    }

    // Through the key, every byte is back.
    let opened = sealed.get_run(&id, ResolveData::All).await.unwrap();
    let mut now = info.clone();
    now.attributes.insert("team".into(), "sealed".into());
    assert_eq!(opened.runtime.as_deref(), Some(&now));
    assert_eq!(opened.input.as_ref(), Some(&input));
    assert_eq!(
        bytes_of(
            opened.error.as_ref().and_then(|e| e.data.as_deref()),
            "run error"
        ),
        secret(7)
    );
    let step_read = sealed.get_step(&step, ResolveData::All).await.unwrap().step;
    assert_eq!(bytes_of(step_read.output.as_ref(), "1 MiB"), *large);
    let events = stored_events(&*sealed, &id).await;
    let written: Vec<&EventKind> = events[1..].iter().map(|e| &e.kind).collect();
    assert_eq!(written, kinds.iter().collect::<Vec<_>>());
}

/// The rule the engine applies to a run id an outside runtime chooses
/// (`ExternalRuns::create_run`): 1 to 256 letters, digits and `_-.:`.
fn engine_takes(id: &str) -> bool {
    (1..=256).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// A run created under an id its runtime chose is found under it; a second create under that
/// id is a conflict and changes nothing; ids at the engine's length limit or beyond its rule
/// (`.`/`:`, NUL, `/`, `..`, 10 000 bytes, empty) are either refused as invalid input with
/// nothing created, or kept exactly — never stored under another id.
pub async fn caller_chosen_run_ids_are_kept_exactly_or_refused(store: Arc<dyn Store>) {
    let m = Maker::new();
    let info = runtime_info();
    let chosen = "wrun_01KCALLERCH0SENRUN1D0000";
    assert!(engine_takes(chosen));
    let first = external_queued(&m, chosen, p(json!({ "first": true })), Some(info.clone()));
    store.create_run(first.clone()).await.unwrap();
    let state = store.get_run(chosen, ResolveData::All).await.unwrap();
    assert_eq!(state.id, chosen);
    assert_eq!(state.runtime.as_deref(), Some(&info));
    let events = stored_events(&*store, chosen).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].run_id, chosen);
    assert_eq!(events[0].kind, first.kind);

    // Taken: refused alone and in a batch, the first run unchanged.
    let mut again = external_queued(&m, chosen, p(json!({ "second": true })), None);
    if let EventKind::WorkflowQueued(run) = &mut again.kind {
        run.name = "another".into();
        run.workflow_id = "another-workflow-id".into();
    }
    let refused = store.create_run(again.clone()).await;
    assert!(is_conflict(&refused), "{refused:?}");
    let in_batch = store.create_runs(vec![again]).await;
    assert!(is_conflict(&in_batch[0]), "{in_batch:?}");
    let kept = store.get_run(chosen, ResolveData::All).await.unwrap();
    assert_eq!(kept, state, "the first run is untouched");
    assert_eq!(store.history(chosen, 0).await.unwrap().len(), 1);
    assert!(is_not_found(
        &store
            .get_run("another-workflow-id", ResolveData::None)
            .await
    ));

    // At the limits and beyond: refused as invalid, or kept exactly.
    let edges = [
        "w".repeat(256),
        format!("wrun_{}", "0".repeat(195)),
        "wrun_a.b:c".to_owned(),
        "..".to_owned(),
        "../escape".to_owned(),
        "a/b".to_owned(),
        "a\u{0}b".to_owned(),
        "x".repeat(10_000),
        String::new(),
    ];
    let mut kept_ids = Vec::new();
    for id in &edges {
        let shown: String = id.chars().take(40).collect();
        let shown = format!(
            "{shown:?} ({} bytes, engine takes: {})",
            id.len(),
            engine_takes(id)
        );
        let created = store
            .create_run(external_queued(&m, id, p(json!(1)), Some(info.clone())))
            .await;
        match created {
            Ok(()) => {
                let state = store.get_run(id, ResolveData::All).await.unwrap();
                assert_eq!(&state.id, id, "{shown}");
                assert_eq!(state.runtime.as_deref(), Some(&info), "{shown}");
                let events = store.history(id, 0).await.unwrap();
                assert_eq!(events.len(), 1, "{shown}");
                assert_eq!(&events[0].run_id, id, "{shown}");
                kept_ids.push(id.clone());
            }
            Err(e) => {
                assert!(
                    is_invalid(&Err::<(), _>(e)),
                    "{shown}: refused, but not as invalid input"
                );
                assert!(
                    store.get_run(id, ResolveData::None).await.is_err(),
                    "{shown}: refused, yet found"
                );
            }
        }
    }
    // An id the store kept is its own: no other id, no prefix, finds it.
    for id in &kept_ids {
        let prefix = &id[..id.len() / 2];
        if !prefix.is_empty() && !kept_ids.iter().any(|k| k == prefix) {
            assert!(
                store.get_run(prefix, ResolveData::None).await.is_err(),
                "{prefix:?} finds {id:?}"
            );
        }
    }
    // The first run is still as it was.
    assert_eq!(
        store.get_run(chosen, ResolveData::All).await.unwrap(),
        state
    );
}
