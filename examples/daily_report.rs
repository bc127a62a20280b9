//! Daily report: a cron schedule (`0 9 * * *`, every day at 09:00 UTC) that starts a run of
//! the `process-reports` workflow.
//!
//! So that it finishes by itself in a moment, the example runs on a `TestWorld`, whose clock is
//! virtual: `advance("72h")` moves three days ahead, stopping at each firing, and the runs those
//! firings start execute for real. In a program, make the world with
//! `World::new(WorldConfig::default())` (hybrid storage in `.worlds-engine/`) and the same
//! `world.schedules().cron(..)` call fires on the system clock; the schedule is stored in the directory,
//! survives restarts, and `worlds schedules list` shows it.
//!
//! Run it with `cargo run --example daily_report`.

use serde::{Deserialize, Serialize};
use worlds_engine::clock::Millis;
use worlds_engine::prelude::*;
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::WorkflowQueryFilter;

/// What a report run is asked for; the schedule's input is `{}`, so every field has a default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct ReportRequest {
    recipients: Vec<String>,
}

/// 2026-01-05T08:00:00Z, a Monday, an hour before the first firing.
const START: Millis = 1_767_600_000_000;
const HOUR: Millis = 3_600_000;

/// `at` as "day N, HH:MM UTC", counting days from the start.
fn when(at: Millis) -> String {
    let since = at - (START - 8 * HOUR);
    let minutes = (since / 60_000) % (24 * 60);
    format!(
        "day {}, {:02}:{:02} UTC",
        since / (24 * HOUR) + 1,
        minutes / 60,
        minutes % 60
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), WorldError> {
    let collect = activity(
        "collect-figures",
        |ctx: ActivityContext, _: ()| async move {
            // A real step would query a database; here the figure is made up from the run's
            // workflow id, `sched:daily-job:{firing time}`.
            let orders = 80 + ctx.workflow_id().bytes().map(u64::from).sum::<u64>() % 50;
            Ok::<_, StepError>(orders)
        },
    );
    let step = collect.clone();
    let reports = workflow(
        "process-reports",
        move |ctx: WorkflowContext, request: ReportRequest| {
            let step = step.clone();
            async move {
                let orders = ctx.run(&step, ()).await?;
                let to = if request.recipients.is_empty() {
                    "the team".to_owned()
                } else {
                    request.recipients.join(", ")
                };
                Ok::<_, WorkflowError>(format!("{orders} orders yesterday, sent to {to}"))
            }
        },
    );

    let world = TestWorld::with_options(TestWorldOptions {
        initial_time: START,
        ..TestWorldOptions::default()
    })
    .await;
    world.register(&collect)?.register(&reports)?;

    // The specification's example: id, workflow, input, cron expression.
    let schedule = world
        .schedules()
        .cron(
            "daily-job",
            "process-reports",
            ReportRequest::default(),
            "0 9 * * *",
        )
        .await?;
    println!(
        "scheduled {} ({}), next at {}",
        schedule.id,
        schedule.cron_expression.as_deref().unwrap_or("once"),
        schedule.next_execution.map(when).unwrap_or_default()
    );

    world.advance("72h").await;
    let mut runs = world
        .query_workflows(WorkflowQueryFilter::new().workflow_name("process-reports"))
        .await?;
    runs.reverse();
    for run in &runs {
        let handle = world.handle::<String>(&run.id).await?;
        println!("{}: {}", run.workflow_id, handle.result().await?);
    }

    // Paused, it skips a day; resumed, it goes on from the next 09:00.
    world.schedules().pause("daily-job").await?;
    world.advance("24h").await;
    let resumed = world.schedules().resume("daily-job").await?;
    println!(
        "paused for a day; resumed, next at {}",
        resumed.next_execution.map(when).unwrap_or_default()
    );

    for s in world.schedules().list().await? {
        println!(
            "{}: {} runs, last at {}",
            s.id,
            s.total_executions,
            s.last_execution.map(when).unwrap_or_default()
        );
    }
    world.schedules().delete("daily-job").await?;
    world.shutdown().await?;
    Ok(())
}
