//! A claim and the reading back of what it claimed are two calls; the database can fail
//! between them. Whatever fails, a run leased to a live member is driven by it: none stays
//! held by a member that has forgotten it (which no other member would ever take, since its
//! holder is alive). Faults are injected with `PostgresStore::faults` on a real database.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use worlds_engine::clock::SystemClock;
use worlds_engine::prelude::*;
use worlds_engine::store::RunStore;
use worlds_engine::{HookSecret, ResolveData, WorkflowQueryFilter};
use worlds_postgres::{PostgresOptions, PostgresStore};

/// Runs in each test.
const RUNS: u64 = 12;
/// Steps per run.
const STEPS: u64 = 3;

fn config(schema: &str) -> WorldConfig {
    let mut config = WorldConfig::postgres(common::url());
    config.database.schema = schema.to_owned();
    config.shared_poll_interval = Duration::from_millis(100).into();
    config.hook_secret = Some(HookSecret("claims-test".into()));
    config
}

async fn store(schema: &str) -> PostgresStore {
    let options = PostgresOptions {
        lease_duration: Duration::from_secs(1),
        heartbeat_interval: Some(Duration::from_millis(200)),
        ..common::options(schema)
    };
    PostgresStore::connect(&common::url(), options)
        .await
        .unwrap()
}

fn definitions() -> (Activity<u64, u64>, Workflow<u64, u64>) {
    let add = activity("add", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n + 1)
    });
    let chain = common::chain(&add, STEPS);
    (add, chain)
}

fn world(schema: &str, store: &PostgresStore) -> World {
    let world = World::with_store(
        config(schema),
        Arc::new(SystemClock),
        Arc::new(store.clone()),
    );
    let (add, chain) = definitions();
    world.register(&add).unwrap();
    world.register(&chain).unwrap();
    world
}

/// Creates `RUNS` runs through a world that is never started, on `store`: they are leased to
/// that store's member and nothing drives them.
async fn create_runs(schema: &str, store: &PostgresStore) {
    let world = world(schema, store);
    let (_, chain) = definitions();
    let items = (0..RUNS).map(|n| (n * 100, WorkflowOptions::default()));
    for started in world.execute_batch(&chain, items).await.unwrap() {
        started.unwrap();
    }
}

/// Waits until every run completed, failing with the unfinished ones after `limit`.
async fn all_complete(reader: &PostgresStore, limit: Duration) {
    let started = Instant::now();
    loop {
        let open = reader
            .list_runs(
                &WorkflowQueryFilter::default()
                    .status(vec![RunStatus::Pending, RunStatus::Running])
                    .limit(RUNS as usize),
            )
            .await
            .unwrap();
        if open.data.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "{} run(s) still unfinished after {limit:?}, leased to a live member that does not drive them: {:?}",
            open.data.len(),
            open.data.iter().map(|r| &r.id).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let page = reader
        .list_runs(&WorkflowQueryFilter::default().limit(RUNS as usize + 1))
        .await
        .unwrap();
    assert_eq!(page.data.len() as u64, RUNS);
    for run in page.data {
        let state = reader.get_run(&run.id, ResolveData::All).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "run {}", run.id);
        let input: u64 = state.input.unwrap().decode().unwrap();
        let output: u64 = state.output.unwrap().decode().unwrap();
        assert_eq!(output, input + STEPS, "run {}", run.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_claimed_at_start_whose_reads_fail_are_driven_anyway() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    {
        let creator = store(&schema).await;
        create_runs(&schema, &creator).await;
        creator.close().await.unwrap();
    }
    let member = store(&schema).await;
    // The claim at start commits; then the reads of the first three runs it took fail.
    member.faults().fail_reads_after_next_claim(3);
    let world = world(&schema, &member);
    world
        .start()
        .await
        .expect("a read that fails after a claim does not fail the start");
    all_complete(&member, Duration::from_secs(30)).await;
    world.shutdown().await.unwrap();
    member.close().await.unwrap();
    common::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_taken_over_whose_reads_fail_are_driven_anyway() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let member = store(&schema).await;
    let world = world(&schema, &member);
    world.start().await.unwrap();
    // The next claim is the takeover of a dead member's runs; the reads after it fail.
    member.faults().fail_reads_after_next_claim(4);
    let dead = store(&schema).await;
    create_runs(&schema, &dead).await;
    // Stops renewing its lease without releasing anything, as a killed process does.
    dead.stop_heartbeat();
    all_complete(&member, Duration::from_secs(30)).await;
    world.shutdown().await.unwrap();
    member.close().await.unwrap();
    drop(dead);
    common::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_whose_claim_answer_was_lost_are_driven_anyway() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    {
        let creator = store(&schema).await;
        create_runs(&schema, &creator).await;
        creator.close().await.unwrap();
    }
    let member = store(&schema).await;
    // The claim commits, but its answer is lost: the runs are leased to this member without
    // its knowing, and no other member may take them while it lives.
    member.faults().lose_next_claim_answers(1);
    let world = world(&schema, &member);
    world
        .start()
        .await
        .expect("a claim whose answer was lost does not fail the start");
    let claimed = Instant::now();
    let sql = common::sql(&schema);
    loop {
        let owners: Vec<Option<String>> = sqlx::query_scalar("SELECT DISTINCT owner FROM runs")
            .fetch_all(&sql)
            .await
            .unwrap();
        if owners == vec![Some(member.member_id().to_owned())] {
            break;
        }
        assert!(
            claimed.elapsed() < Duration::from_secs(10),
            "the member claims the runs: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    all_complete(&member, Duration::from_secs(30)).await;
    world.shutdown().await.unwrap();
    member.close().await.unwrap();
    common::drop_schema(&schema).await;
}
