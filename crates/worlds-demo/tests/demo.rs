//! The bundled demo workflows end as the examples and `worlds dev` say they do.

use std::time::Duration;

use worlds_demo::{Demo, DemoOptions};
use worlds_engine::prelude::*;

/// A memory world with every demo definition, pausing 1 ms.
async fn world() -> (World, Demo) {
    let demo = Demo::new(&DemoOptions::new().pause(Duration::from_millis(1)));
    let world = World::new(WorldConfig::memory()).unwrap();
    demo.register(&world).unwrap();
    world.start().await.unwrap();
    (world, demo)
}

#[tokio::test]
async fn runs_take_turns_and_end_completed_or_compensated() {
    let (world, demo) = world().await;
    assert_eq!(demo.workflow_names(), vec!["checkout", "order-saga"]);

    let checkout = demo.start(&world, 0).await.unwrap();
    assert_eq!(checkout.workflow, "checkout");
    assert_eq!(
        checkout.handle.result().await.unwrap(),
        "payment-A-1000 / parcel-A-1000"
    );

    let saga = demo.start(&world, 1).await.unwrap();
    assert_eq!(saga.workflow, "order-saga");
    let error = saga.handle.result().await.unwrap_err();
    assert!(error.to_string().contains("carrier unavailable"), "{error}");
    let state = saga.handle.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Compensated);
    assert!(state.compensations.iter().all(|c| c.executed));
    assert_eq!(state.compensations.len(), 2);
    // Two attempts at the shipment, then the undo steps, newest first.
    let steps: Vec<&str> = state.activities.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(state.activities[2].attempt, 2);
    assert_eq!(
        steps,
        vec![
            "charge-card",
            "reserve-inventory",
            "create-shipment",
            "release-inventory",
            "refund-card"
        ]
    );

    // Starting the same turn again starts another run.
    let again = demo.start(&world, 0).await.unwrap();
    assert_ne!(again.handle.id, checkout.handle.id);
    world.shutdown().await.unwrap();
}
