//! Saga compensations under the `compensate` failure strategy: when the workflow fails, the
//! compensations it registered run last-registered-first, each on its own (one failing does not
//! stop the others), each outcome is recorded, and the run ends `compensated`. Compensation
//! progress is durable: a restart in the middle of compensating does not undo anything twice.

mod common;

use std::sync::Arc;

use common::{event_types, test_world, Mode};
use parking_lot::Mutex;
use worlds_engine::error::codes;
use worlds_engine::prelude::*;
use worlds_engine::store::{MemoryStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};
use worlds_engine::{EventKind, RunStatus, WorkflowState};

/// The order in which steps really ran, shared with the activities that write it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, entry: String) {
        self.0.lock().push(entry);
    }

    fn entries(&self) -> Vec<String> {
        self.0.lock().clone()
    }
}

/// An activity that logs `name:input` and returns `prefix-input`.
fn logged(name: &str, prefix: &str, log: &Log) -> Activity<String, String> {
    let (label, prefix, log) = (name.to_owned(), prefix.to_owned(), log.clone());
    activity(name, move |_ctx: ActivityContext, input: String| {
        let (label, prefix, log) = (label.clone(), prefix.clone(), log.clone());
        async move {
            log.push(format!("{label}:{input}"));
            Ok::<_, StepError>(format!("{prefix}-{input}"))
        }
    })
}

/// An activity that logs its call and fails for good (no retry) with `message`.
fn broken(name: &str, message: &str, log: &Log) -> Activity<String, String> {
    let (label, message, log) = (name.to_owned(), message.to_owned(), log.clone());
    activity(name, move |_ctx: ActivityContext, input: String| {
        let (label, message, log) = (label.clone(), message.clone(), log.clone());
        async move {
            log.push(format!("{label}:{input}"));
            Err::<String, _>(StepError::fatal(message))
        }
    })
}

fn compensate() -> WorkflowOptions {
    WorkflowOptions::new().failure_strategy(FailureStrategy::Compensate)
}

/// The history without step, timer and value events: the run's life and its compensations.
fn saga_events(state: &WorkflowState) -> Vec<&'static str> {
    event_types(state)
        .into_iter()
        .filter(|t| t.starts_with("workflow_") || t.starts_with("compensation_"))
        .collect()
}

/// Every status the run passed through, from its history.
fn statuses(state: &WorkflowState) -> Vec<RunStatus> {
    state
        .history
        .iter()
        .filter_map(|e| e.kind.status_change())
        .collect()
}

/// Compensation outcomes in the order they were recorded: (id, error message if it failed).
fn outcomes(state: &WorkflowState) -> Vec<(String, Option<String>)> {
    state
        .history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::CompensationExecuted {
                compensation_id, ..
            } => Some((compensation_id.clone(), None)),
            EventKind::CompensationFailed {
                compensation_id,
                error,
                ..
            } => Some((compensation_id.clone(), Some(error.message.clone()))),
            _ => None,
        })
        .collect()
}

/// Compensation ids in the order they were registered (`compensation_added` events).
fn added(state: &WorkflowState) -> Vec<String> {
    state
        .history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::CompensationAdded {
                compensation_id, ..
            } => Some(compensation_id.clone()),
            _ => None,
        })
        .collect()
}

fn seq_of(state: &WorkflowState, what: impl Fn(&EventKind) -> bool) -> u64 {
    state
        .history
        .iter()
        .find(|e| what(&e.kind))
        .map(|e| e.seq)
        .unwrap_or_else(|| panic!("event not found in {:?}", event_types(state)))
}

/// The spec's saga: charge, reserve, ship; shipping fails. The refund is a closure that first
/// sleeps (so the compensation phase waits on a durable timer and, when evicting, replays),
/// the release is a one-step compensation.
async fn compensations_run_in_reverse_and_the_run_ends_compensated(mode: Mode) {
    let log = Log::default();
    let charge = logged("charge", "pay", &log);
    let reserve = logged("reserve", "res", &log);
    let ship = broken("ship", "carrier refused the parcel", &log);
    let refund = logged("refund", "refunded", &log);
    let release = logged("release", "released", &log);
    let steps = (
        charge.clone(),
        reserve.clone(),
        ship.clone(),
        refund.clone(),
        release.clone(),
    );
    let saga = workflow("order-saga", move |ctx: WorkflowContext, order: String| {
        let (charge, reserve, ship, refund, release) = steps.clone();
        async move {
            let payment = ctx.run(&charge, order.clone()).await?;
            ctx.add_compensation(move |ctx| async move {
                ctx.sleep("1m").await?;
                ctx.run(&refund, payment).await?;
                Ok(())
            });
            let reservation = ctx.run(&reserve, order.clone()).await?;
            ctx.add_compensation_step(&release, reservation);
            Ok::<_, WorkflowError>(ctx.run(&ship, order).await?)
        }
    })
    .with_options(compensate());
    let t = test_world(mode).await;
    for step in [&charge, &reserve, &ship, &refund, &release] {
        t.register(step).unwrap();
    }
    t.register(&saga).unwrap();
    let run = t
        .execute(&saga, "A1".to_owned(), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();

    assert_eq!(state.status, RunStatus::Compensated, "{:?}", state.error);
    // Every step ran exactly once, however often the workflow was replayed, and the undo
    // steps ran last-registered-first: release before refund.
    assert_eq!(
        log.entries(),
        vec![
            "charge:A1",
            "reserve:A1",
            "ship:A1",
            "release:res-A1",
            "refund:pay-A1"
        ]
    );
    assert_eq!(
        saga_events(&state),
        vec![
            "workflow_queued",
            "workflow_started",
            "compensation_added",
            "compensation_added",
            "workflow_failed",
            "workflow_compensating",
            "compensation_executed",
            "compensation_executed",
            "workflow_compensated",
        ]
    );
    assert_eq!(
        statuses(&state),
        vec![
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Failed,
            RunStatus::Compensating,
            RunStatus::Compensated,
        ]
    );
    // The state lists compensations in registration order; they ran in the reverse order.
    let registered = added(&state);
    let ids: Vec<String> = state.compensations.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids, registered);
    assert_eq!(registered.len(), 2);
    let ran: Vec<String> = outcomes(&state).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ran,
        registered.iter().rev().cloned().collect::<Vec<_>>(),
        "LIFO"
    );
    assert!(state
        .compensations
        .iter()
        .all(|c| c.executed && c.error.is_none()));
    // The undo steps are workflow code of the compensation phase: recorded after it began.
    let compensating = seq_of(&state, |k| matches!(k, EventKind::WorkflowCompensating {}));
    let release_scheduled = seq_of(
        &state,
        |k| matches!(k, EventKind::ActivityScheduled { name, .. } if name == "release"),
    );
    assert!(release_scheduled > compensating);
    // The compensation's durable sleep really was waited out.
    assert!(event_types(&state).contains(&"timer_fired"));

    // The run's error, and what the caller gets, is the original failure.
    let error = state
        .error
        .clone()
        .expect("a compensated run keeps its error");
    assert!(error.message.contains("carrier refused"), "{error}");
    match run.result().await {
        Err(WorldError::RunFailed { error, run_id }) => {
            assert_eq!(run_id, run.id);
            assert!(error.message.contains("carrier refused"), "{error}");
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
}

/// One failing compensation must not stop the others: a step that fails for good, a closure
/// that returns an error and a closure that panics are each recorded as `compensation_failed`,
/// and the compensation registered first still runs, last.
async fn a_failing_compensation_is_recorded_and_the_others_still_run(mode: Mode) {
    let log = Log::default();
    let undo_ok = logged("undo-ok", "ok", &log);
    let undo_broken = broken("undo-broken", "undo service down", &log);
    let steps = (undo_ok.clone(), undo_broken.clone());
    let saga = workflow("fragile-saga", move |ctx: WorkflowContext, _: ()| {
        let (undo_ok, undo_broken) = steps.clone();
        async move {
            ctx.add_compensation_step(&undo_ok, "a".to_owned());
            ctx.add_compensation_step(&undo_broken, "b".to_owned());
            ctx.add_compensation(|_ctx| async move {
                Err(WorkflowError::msg("cannot undo c: already archived"))
            });
            ctx.add_compensation(|_ctx| async move {
                if true {
                    panic!("undo d exploded");
                }
                Ok(())
            });
            ctx.sleep("1s").await?;
            Err::<(), _>(WorkflowError::msg("boom"))
        }
    })
    .with_options(compensate());
    let t = test_world(mode).await;
    t.register(&undo_ok)
        .unwrap()
        .register(&undo_broken)
        .unwrap()
        .register(&saga)
        .unwrap();
    let run = t
        .execute(&saga, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();

    assert_eq!(state.status, RunStatus::Compensated, "{:?}", state.error);
    assert_eq!(log.entries(), vec!["undo-broken:b", "undo-ok:a"]);
    let registered = added(&state);
    assert_eq!(registered.len(), 4);
    let recorded = outcomes(&state);
    let order: Vec<&str> = recorded.iter().map(|(id, _)| id.as_str()).collect();
    let expected: Vec<&str> = registered.iter().rev().map(String::as_str).collect();
    assert_eq!(order, expected, "LIFO, each exactly once");

    // In registration order: a ran fine, b, c and d failed with their own errors.
    let c = &state.compensations;
    assert_eq!(c.len(), 4);
    assert!(c.iter().all(|c| c.executed), "{c:?}");
    assert_eq!(c[0].error, None);
    let error_of = |i: usize| c[i].error.clone().unwrap_or_default();
    assert!(error_of(1).contains("undo service down"), "{c:?}");
    assert!(error_of(2).contains("cannot undo c"), "{c:?}");
    assert!(error_of(3).contains("panicked"), "{c:?}");
    assert!(error_of(3).contains("undo d exploded"), "{c:?}");
    assert_eq!(
        event_types(&state)
            .iter()
            .filter(|t| **t == "compensation_failed")
            .count(),
        3
    );
    // The run's error stays the workflow's own failure, not a compensation's.
    assert!(state.error.unwrap().message.contains("boom"));
}

/// A compensation closure that panics before it even returns its future is still one
/// compensation failing: it is recorded and the rest run.
async fn a_compensation_panicking_before_its_future_exists_is_contained(mode: Mode) {
    let log = Log::default();
    let undo_ok = logged("undo-ok", "ok", &log);
    let step = undo_ok.clone();
    let saga = workflow("eager-panic-saga", move |ctx: WorkflowContext, _: ()| {
        let undo_ok = step.clone();
        async move {
            ctx.add_compensation_step(&undo_ok, "a".to_owned());
            ctx.add_compensation(
                |_ctx| -> futures::future::Ready<Result<(), WorkflowError>> {
                    panic!("undo e exploded early")
                },
            );
            Err::<(), _>(WorkflowError::msg("boom"))
        }
    })
    .with_options(compensate());
    let t = test_world(mode).await;
    t.register(&undo_ok).unwrap().register(&saga).unwrap();
    let run = t
        .execute(&saga, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Compensated);
    assert_eq!(
        log.entries(),
        vec!["undo-ok:a"],
        "the other compensation ran"
    );
    let c = &state.compensations;
    assert!(c.iter().all(|c| c.executed), "{c:?}");
    assert_eq!(c[0].error, None);
    assert!(
        c[1].error.as_deref().unwrap_or_default().contains("undo e"),
        "{c:?}"
    );
}

/// With the `compensate` strategy but nothing registered, there is nothing to undo: the run
/// just ends `failed`.
async fn without_compensations_the_run_just_fails(mode: Mode) {
    let saga = workflow(
        "nothing-to-undo",
        |ctx: WorkflowContext, _: ()| async move {
            ctx.sleep("1s").await?;
            Err::<(), _>(WorkflowError::msg("boom"))
        },
    )
    .with_options(compensate());
    let t = test_world(mode).await;
    t.register(&saga).unwrap();
    let run = t
        .execute(&saga, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert!(state.compensations.is_empty());
    assert_eq!(
        saga_events(&state),
        vec!["workflow_queued", "workflow_started", "workflow_failed"]
    );
    assert!(state.error.unwrap().message.contains("boom"));
}

/// Only what was registered before the failure is undone: a step failing before the second
/// registration leaves one compensation.
async fn only_compensations_registered_before_the_failure_run(mode: Mode) {
    let log = Log::default();
    let undo_first = logged("undo-first", "u", &log);
    let undo_second = logged("undo-second", "u", &log);
    let fail = broken("fail", "no stock", &log);
    let steps = (undo_first.clone(), undo_second.clone(), fail.clone());
    let saga = workflow("half-saga", move |ctx: WorkflowContext, _: ()| {
        let (undo_first, undo_second, fail) = steps.clone();
        async move {
            ctx.add_compensation_step(&undo_first, "1".to_owned());
            ctx.run(&fail, "x".to_owned()).await?;
            ctx.add_compensation_step(&undo_second, "2".to_owned());
            Ok::<_, WorkflowError>(())
        }
    })
    .with_options(compensate());
    let t = test_world(mode).await;
    for step in [&undo_first, &undo_second, &fail] {
        t.register(step).unwrap();
    }
    t.register(&saga).unwrap();
    let run = t
        .execute(&saga, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Compensated);
    assert_eq!(log.entries(), vec!["fail:x", "undo-first:1"]);
    assert_eq!(state.compensations.len(), 1);
    assert!(state.compensations[0].executed);
    assert_eq!(outcomes(&state).len(), 1);
    let error = state.error.unwrap();
    assert!(error.message.contains("no stock"), "{error}");
    assert_eq!(error.code.as_deref(), Some(codes::FATAL));
}

/// A compensation registered in the same breath as the failure (no await in between) is as
/// registered as any other: recorded, listed, and run.
async fn a_compensation_registered_right_before_the_failure_runs(mode: Mode) {
    let log = Log::default();
    let undo = logged("undo", "u", &log);
    let step = undo.clone();
    let saga = workflow("last-moment-saga", move |ctx: WorkflowContext, _: ()| {
        let undo = step.clone();
        async move {
            ctx.add_compensation_step(&undo, "x".to_owned());
            Err::<(), _>(WorkflowError::msg("boom"))
        }
    })
    .with_options(compensate());
    let t = test_world(mode).await;
    t.register(&undo).unwrap().register(&saga).unwrap();
    let run = t
        .execute(&saga, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Compensated);
    assert_eq!(log.entries(), vec!["undo:x"]);
    assert_eq!(added(&state).len(), 1, "{:?}", event_types(&state));
    assert_eq!(state.compensations.len(), 1);
    assert!(state.compensations[0].executed);
    assert_eq!(outcomes(&state).len(), 1);
}

in_both_modes!(
    without_compensations_the_run_just_fails,
    compensations_run_in_reverse_and_the_run_ends_compensated,
    a_compensation_registered_right_before_the_failure_runs,
    a_failing_compensation_is_recorded_and_the_others_still_run,
    a_compensation_panicking_before_its_future_exists_is_contained,
    only_compensations_registered_before_the_failure_run,
);

async fn world_on(store: &Arc<dyn Store>, start: i64) -> TestWorld {
    let mut config = common::memory_config();
    config.failure_strategy = FailureStrategy::Compensate;
    TestWorld::with_options(TestWorldOptions {
        store: Some(store.clone()),
        initial_time: start,
        config,
        ..TestWorldOptions::default()
    })
    .await
}

/// A trip: book a flight, book a hotel, pay; paying fails. The hotel is cancelled first (it was
/// registered last), then the flight.
fn trip(
    book: &Activity<String, String>,
    pay: &Activity<String, String>,
    cancel_flight: &Activity<String, String>,
    cancel_hotel: &Activity<String, String>,
) -> Workflow<String, String> {
    let steps = (
        book.clone(),
        pay.clone(),
        cancel_flight.clone(),
        cancel_hotel.clone(),
    );
    workflow("trip", move |ctx: WorkflowContext, who: String| {
        let (book, pay, cancel_flight, cancel_hotel) = steps.clone();
        async move {
            let flight = ctx.run(&book, format!("flight-{who}")).await?;
            ctx.add_compensation_step(&cancel_flight, flight);
            let hotel = ctx.run(&book, format!("hotel-{who}")).await?;
            ctx.add_compensation_step(&cancel_hotel, hotel);
            Ok::<_, WorkflowError>(ctx.run(&pay, who).await?)
        }
    })
}

/// World A fails the trip and cancels the hotel, then stops while the flight's cancellation is
/// running. World B, on the same store, must finish compensating without cancelling the hotel
/// again; the cancellation A lost is recorded as such and retried.
#[tokio::test]
async fn a_restart_in_the_middle_of_compensating_resumes_without_redoing_work() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log_a = Log::default();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let stuck_cancel_flight = {
        let (release_rx, log) = (release_rx.clone(), log_a.clone());
        activity("cancel-flight", move |_ctx: ActivityContext, id: String| {
            let rx = release_rx.lock().take();
            let log = log.clone();
            async move {
                log.push(format!("cancel-flight:{id}"));
                if let Some(rx) = rx {
                    let _ = rx.await;
                }
                Ok::<_, StepError>(format!("cancelled-{id}"))
            }
        })
    };
    let a = world_on(&store, DEFAULT_START).await;
    let (book, pay, cancel_hotel) = (
        logged("book", "booked", &log_a),
        broken("pay", "card declined", &log_a),
        logged("cancel-hotel", "cancelled", &log_a),
    );
    for step in [&book, &pay, &stuck_cancel_flight, &cancel_hotel] {
        a.register(step).unwrap();
    }
    let flow = trip(&book, &pay, &stuck_cancel_flight, &cancel_hotel);
    a.register(&flow).unwrap();
    let run = a
        .execute(&flow, "ann".to_owned(), WorkflowOptions::default())
        .await
        .unwrap();
    a.settle().await;
    let mid = a.query(&run.id).await.unwrap();
    assert_eq!(mid.status, RunStatus::Compensating);
    assert_eq!(
        log_a.entries(),
        vec![
            "book:flight-ann",
            "book:hotel-ann",
            "pay:ann",
            "cancel-hotel:booked-hotel-ann",
            "cancel-flight:booked-flight-ann",
        ]
    );
    assert_eq!(
        outcomes(&mid).len(),
        1,
        "the hotel is cancelled, the flight not yet"
    );

    // World A "dies" here. B runs fresh code objects against the same store.
    let log_b = Log::default();
    let b = world_on(&store, a.now() + 10).await;
    let (book_b, pay_b, cancel_flight_b, cancel_hotel_b) = (
        logged("book", "booked", &log_b),
        broken("pay", "card declined", &log_b),
        logged("cancel-flight", "cancelled", &log_b),
        logged("cancel-hotel", "cancelled", &log_b),
    );
    for step in [&book_b, &pay_b, &cancel_flight_b, &cancel_hotel_b] {
        b.register(step).unwrap();
    }
    b.register(trip(&book_b, &pay_b, &cancel_flight_b, &cancel_hotel_b))
        .unwrap();
    let state = b.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Compensated, "{:?}", state.error);
    assert_eq!(
        log_b.entries(),
        vec!["cancel-flight:booked-flight-ann"],
        "only the unfinished compensation runs again; nothing forward, no second hotel cancel"
    );
    let registered = added(&state);
    let ran: Vec<String> = outcomes(&state).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ran, vec![registered[1].clone(), registered[0].clone()]);
    assert!(state
        .compensations
        .iter()
        .all(|c| c.executed && c.error.is_none()));
    let flight_cancel = state
        .activities
        .iter()
        .find(|s| s.name == "cancel-flight")
        .unwrap();
    assert_eq!(flight_cancel.attempt, 2, "A's attempt was lost, B retried");
    let lost = state
        .history
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ActivityFailed {
                position,
                error,
                attempt: 1,
                ..
            } if *position == flight_cancel.position => Some(error.clone()),
            _ => None,
        })
        .expect("the lost attempt is recorded");
    assert_eq!(lost.code.as_deref(), Some(codes::WORKER_LOST));

    // A's stalled step finishes late: its record is refused and the outcome stands.
    release_tx.send(()).unwrap();
    a.settle().await;
    let after = b.query(&run.id).await.unwrap();
    assert_eq!(after.history.len(), state.history.len());
    assert_eq!(after.status, RunStatus::Compensated);
}
