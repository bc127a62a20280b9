//! The deterministic simulation (`testing::simulation`) over programs that use every kind of
//! durable wait — steps with retries, sleeps, hooks, child runs, saga compensations — checked
//! against their fault-free runs over a few hundred seeds (the soak, `worlds simulate`, runs
//! many more). And the simulation itself must catch what it promises to catch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use worlds_engine::prelude::*;
use worlds_engine::testing::simulation::{Faults, Simulation};
use worlds_engine::RunStatus;

/// Orders that are charged (a step that fails once, then succeeds), wait a day, ship through
/// a child run, wait for an approval hook, and — for odd orders — fail at the end, which
/// compensates the charge and the shipment.
fn shop() -> Simulation {
    let simulation = Simulation::new(|world| {
        let charge = activity("charge", |ctx: ActivityContext, n: u64| async move {
            if ctx.attempt() == 1 {
                return Err(StepError::msg("card network timeout"));
            }
            Ok::<_, StepError>(format!("payment-{n}"))
        })
        .with_options(
            ActivityOptions::new().retry(
                RetryConfig::new()
                    .max_attempts(10)
                    .initial_interval(std::time::Duration::from_secs(1)),
            ),
        );
        let refund = activity(
            "refund",
            |_ctx: ActivityContext, payment: String| async move {
                Ok::<_, StepError>(format!("refunded {payment}"))
            },
        );
        let pack = activity("pack", |_ctx: ActivityContext, n: u64| async move {
            Ok::<_, StepError>(format!("parcel-{n}"))
        });
        let pack_step = pack.clone();
        let ship = workflow("ship", move |ctx: WorkflowContext, n: u64| {
            let pack = pack_step.clone();
            async move {
                let parcel = ctx.run(&pack, n).await?;
                ctx.sleep("2h").await?;
                Ok::<_, WorkflowError>(parcel)
            }
        });
        let (charge_step, refund_step, ship_flow) = (charge.clone(), refund.clone(), ship.clone());
        let order = workflow("order", move |ctx: WorkflowContext, n: u64| {
            let (charge, refund, ship) =
                (charge_step.clone(), refund_step.clone(), ship_flow.clone());
            async move {
                let payment = ctx.run(&charge, n).await?;
                ctx.add_compensation_step(&refund, payment.clone());
                ctx.sleep("1d").await?;
                let parcel = ctx
                    .execute_child(&ship, n, WorkflowOptions::default())
                    .await?;
                let approval =
                    ctx.create_hook_with::<Value>(HookOptions::new().token(format!("approve-{n}")));
                let decision = approval.wait().await?;
                if n % 2 == 1 {
                    return Err(WorkflowError::msg(format!(
                        "order {n} rejected: {decision}"
                    )));
                }
                Ok::<_, WorkflowError>(format!("{payment} {parcel} {decision}"))
            }
        })
        .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Compensate));
        world
            .register(&charge)?
            .register(&refund)?
            .register(&pack)?
            .register(&ship)?
            .register(&order)?;
        Ok(())
    });
    (0..4u64).fold(simulation, |sim, n| {
        sim.start("order", n).deliver(
            &format!("approve-{n}"),
            serde_json::json!({"by": "ada", "n": n}),
        )
    })
}

#[tokio::test]
async fn the_shop_keeps_every_promise_under_faults() {
    let simulation = shop();
    let reference = simulation.reference().await.unwrap();
    let statuses: Vec<RunStatus> = reference.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            RunStatus::Completed,
            RunStatus::Compensated,
            RunStatus::Completed,
            RunStatus::Compensated
        ]
    );
    assert_eq!(reference[1].compensations, 1);
    let report = simulation
        .run(0..150)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.seeds, 150);
    assert!(
        report.crashes > 100,
        "too few crashes to mean much: {report:?}"
    );
}

/// The same promises with encryption at rest: what the simulated disk holds is sealed, and
/// crashes, write errors and replays through the sealing store change nothing of the outcome.
#[tokio::test]
async fn the_shop_keeps_every_promise_with_encryption_at_rest() {
    let mut config = WorldConfig::memory();
    config.encryption_keys = Some(worlds_engine::EncryptionKeys::new("k1", [5; 32]).unwrap());
    let report = shop()
        .config(config)
        .run(0..60)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.seeds, 60);
}

#[tokio::test]
async fn each_kind_of_fault_alone_keeps_the_promises() {
    let only = |faults: Faults| shop().faults(faults);
    let none = Faults::none;
    let kinds = [
        ("crashes", none().crashes(4)),
        ("write errors", none().write_error_rate(0.1)),
        ("frozen workers", none().freeze_worker_rate(0.3)),
        ("clock jumps", none().clock_jumps(0.3, "1h")),
        ("duplicate deliveries", none().duplicate_deliveries(true)),
    ];
    for (kind, faults) in kinds {
        only(faults)
            .run(0..25)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}

/// A workflow that breaks the rules on purpose — it counts its own executions outside the
/// engine, so a replay after a crash returns a different result — must be caught, with a seed
/// that reproduces the failure.
#[tokio::test]
async fn a_workflow_that_is_not_deterministic_is_caught_with_its_seed() {
    let executions = Arc::new(AtomicU64::new(0));
    let counter = executions.clone();
    let simulation = Simulation::new(move |world| {
        let counter = counter.clone();
        let sloppy = workflow("sloppy", move |ctx: WorkflowContext, _: ()| {
            let counter = counter.clone();
            async move {
                // Wrong: state outside the history, read on every replay.
                let seen = counter.fetch_add(1, Ordering::SeqCst);
                ctx.sleep("1h").await?;
                Ok::<_, WorkflowError>(seen % 2)
            }
        });
        world.register(&sloppy)?;
        Ok(())
    })
    .start("sloppy", ())
    .faults(Faults::none().crashes(3));
    let failure = simulation.run(0..200).await.unwrap_err();
    assert!(
        failure.problems[0].contains("sim-0 finished differently"),
        "{failure}"
    );
    assert!(failure
        .to_string()
        .contains(&format!("run_seed({})", failure.seed)));
}

/// The guide's example program, through the documented entry point.
#[tokio::test]
async fn a_program_with_no_faults_matches_its_reference() {
    let simulation = shop().faults(Faults::none());
    let report = simulation.run(0..3).await.unwrap();
    assert_eq!((report.seeds, report.crashes), (3, 0));
}
