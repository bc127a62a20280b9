//! Keeps the suite complete: every method of every storage duty trait is called by some check.
//!
//! The traits are read from the store's source and the checks from this suite's source, so a
//! method added to a duty without a conformance check fails here, naming it.

/// The storage sources that declare duty traits.
const TRAITS: [&str; 6] = [
    include_str!("../../src/store/mod.rs"),
    include_str!("../../src/store/keys/mod.rs"),
    include_str!("../../src/store/streams/mod.rs"),
    include_str!("../../src/store/schedules/mod.rs"),
    include_str!("../../src/store/retention.rs"),
    include_str!("../../src/store/pauses/mod.rs"),
];

/// The suite (`worlds_engine::testing::conformance`): its main file and one file per duty.
const CHECKS: [&str; 13] = [
    include_str!("../../src/testing/conformance/mod.rs"),
    include_str!("../../src/testing/conformance/api_keys.rs"),
    include_str!("../../src/testing/conformance/events.rs"),
    include_str!("../../src/testing/conformance/hooks.rs"),
    include_str!("../../src/testing/conformance/keys.rs"),
    include_str!("../../src/testing/conformance/leases.rs"),
    include_str!("../../src/testing/conformance/pauses.rs"),
    include_str!("../../src/testing/conformance/retention.rs"),
    include_str!("../../src/testing/conformance/runs.rs"),
    include_str!("../../src/testing/conformance/schedules.rs"),
    include_str!("../../src/testing/conformance/steps.rs"),
    include_str!("../../src/testing/conformance/streams.rs"),
    include_str!("../../src/testing/conformance/timers.rs"),
];

/// `(trait, method)` for every method declared in a `pub trait` block of `source`.
fn trait_methods(source: &str) -> Vec<(String, String)> {
    let mut methods = Vec::new();
    let mut current: Option<String> = None;
    for line in source.lines() {
        if let Some(rest) = line.strip_prefix("pub trait ") {
            let name = rest.split([':', ' ', '<', '{']).next().unwrap_or_default();
            current = Some(name.to_owned());
        } else if line == "}" {
            current = None;
        } else if let Some(name) = &current {
            let signature = line.trim_start();
            let signature = signature.strip_prefix("async ").unwrap_or(signature);
            if let Some(rest) = signature.strip_prefix("fn ") {
                let method = rest.split(['(', '<']).next().unwrap_or_default();
                methods.push((name.clone(), method.to_owned()));
            }
        }
    }
    methods
}

#[test]
fn every_duty_method_is_called_by_a_check() {
    let methods: Vec<(String, String)> = TRAITS.iter().flat_map(|s| trait_methods(s)).collect();
    let traits: std::collections::BTreeSet<&str> =
        methods.iter().map(|(t, _)| t.as_str()).collect();
    // The reader must see every duty, or it would pass by finding nothing.
    for duty in [
        "RunStore",
        "IdempotencyStore",
        "EventStore",
        "StepStore",
        "HookStore",
        "LeaseStore",
        "TimerStore",
        "StreamStore",
        "ScheduleStore",
        "KeyStore",
        "RetentionStore",
        "PauseStore",
    ] {
        assert!(
            traits.contains(duty),
            "no methods read for {duty}: {traits:?}"
        );
    }
    let missing: Vec<String> = methods
        .iter()
        .filter(|(_, method)| {
            let call = format!(".{method}(");
            !CHECKS.iter().any(|check| check.contains(&call))
        })
        .map(|(duty, method)| format!("{duty}::{method}"))
        .collect();
    assert!(
        missing.is_empty(),
        "no conformance check calls {missing:?}: add one to src/testing/conformance/"
    );
}
