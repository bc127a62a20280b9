//! Worlds opened on PostgreSQL: workflows run end to end, and every member of a world shares
//! its hook key.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::HookSecret;

use common::world_config as config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_runs_workflows_with_steps_on_postgres() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let world = worlds_postgres::open(config(&schema)).await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let double = activity("double", move |_ctx: ActivityContext, n: u64| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok::<_, StepError>(n * 2)
        }
    });
    let step = double.clone();
    let flow = workflow("twice", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move {
            let once = ctx.run(&step, n).await?;
            Ok::<_, WorkflowError>(ctx.run(&step, once).await?)
        }
    });
    world.register(&double).unwrap();
    world.register(&flow).unwrap();
    world.start().await.unwrap();

    let handle = world
        .execute(&flow, 5, WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(handle.result().await.unwrap(), 20);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let state = handle.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(world.data_dir(), None);

    world.shutdown().await.unwrap();
    common::drop_schema(&schema).await;
}

#[tokio::test]
async fn every_member_derives_hook_tokens_from_one_key_kept_in_the_database() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let first = worlds_postgres::open(config(&schema)).await.unwrap();
    let second = worlds_postgres::open(config(&schema)).await.unwrap();
    let a = first
        .config()
        .hook_secret
        .clone()
        .expect("a key from the database");
    let b = second
        .config()
        .hook_secret
        .clone()
        .expect("a key from the database");
    assert_eq!(a, b);
    assert_eq!(a.0.len(), 64);

    // A configured key wins over the database's.
    let mut own = config(&schema);
    own.hook_secret = Some(HookSecret("configured".to_owned()));
    let third = worlds_postgres::open(own).await.unwrap();
    assert_eq!(third.config().hook_secret.as_ref().unwrap().0, "configured");

    drop((first, second, third));
    common::drop_schema(&schema).await;
}

#[tokio::test]
async fn opening_refuses_other_backends_and_a_missing_url() {
    let err = worlds_postgres::open(WorldConfig::memory())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WorldConfig::postgres"), "{err}");

    let mut config = WorldConfig::postgres("");
    config.database.url = None;
    if std::env::var_os(worlds_engine::DATABASE_URL_ENV).is_none() {
        let err = worlds_postgres::open(config).await.unwrap_err();
        assert!(
            err.to_string().contains("WORLDS_ENGINE_DATABASE_URL"),
            "{err}"
        );
    }

    let err = World::new(WorldConfig::postgres("postgres://x@127.0.0.1/y")).unwrap_err();
    assert!(err.to_string().contains("worlds_postgres::open"), "{err}");
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error_naming_host_and_port() {
    // Nothing listens on port 1.
    let started = std::time::Instant::now();
    let err = worlds_postgres::open(WorldConfig::postgres(
        "postgres://postgres@127.0.0.1:1/test",
    ))
    .await
    .unwrap_err();
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_members_log_entries_are_kept_in_the_database_and_read_from_any() {
    if !common::database_up().await {
        return;
    }
    use worlds_engine::telemetry::logs::{LogCategory, LogLevel, LogQuery};
    let schema = common::fresh_schema();
    let boom = workflow("boom", |ctx: WorkflowContext, _: ()| async move {
        ctx.info("about to fail");
        Err::<(), _>(WorkflowError::msg("warehouse on fire"))
    });
    let mut config = config(&schema);
    config.failure_strategy = FailureStrategy::Ignore;
    let a = worlds_postgres::open(config.clone()).await.unwrap();
    let b = worlds_postgres::open(config).await.unwrap();
    for world in [&a, &b] {
        world.register(&boom).unwrap();
        world.start().await.unwrap();
    }
    let run = a
        .execute(&boom, (), WorkflowOptions::default())
        .await
        .unwrap();
    assert!(run.result().await.is_err());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();

    // Read through either member: both members' entries, each naming its member.
    let all = b.logs().query(LogQuery::new()).await.unwrap();
    let started: Vec<_> = all
        .iter()
        .filter(|e| e.message == "world started")
        .collect();
    assert_eq!(started.len(), 2, "{all:?}");
    assert_ne!(
        started[0].metadata["member"], started[1].metadata["member"],
        "{started:?}"
    );
    let lines: Vec<_> = all.iter().map(|e| e.message.as_str()).collect();
    assert!(lines.contains(&"about to fail"), "{lines:?}");
    assert!(all.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));

    // Filters: level, category, time, and the limit keeps the most recent.
    let warnings = a
        .logs()
        .query(LogQuery::new().level(LogLevel::Warn))
        .await
        .unwrap();
    assert!(!warnings.is_empty());
    assert!(warnings.iter().all(|e| e.level >= LogLevel::Warn));
    assert!(
        warnings.iter().any(|e| e.message == "run failed"),
        "{warnings:?}"
    );
    let world = a
        .logs()
        .query(LogQuery::new().category(LogCategory::World))
        .await
        .unwrap();
    assert!(world.iter().all(|e| e.category == LogCategory::World));
    assert!(world.len() >= 4, "two started, two stopped: {world:?}");
    let last = a.logs().query(LogQuery::new().limit(1)).await.unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].message, all.last().unwrap().message);
    let after = all.last().unwrap().timestamp + 1;
    assert!(a
        .logs()
        .query(LogQuery::new().since(after))
        .await
        .unwrap()
        .is_empty());
    drop((a, b));
    common::drop_schema(&schema).await;
}

#[tokio::test]
async fn log_entries_older_than_the_days_kept_are_deleted() {
    if !common::database_up().await {
        return;
    }
    use worlds_engine::telemetry::logs::{LogCategory, LogEntry, LogLevel, LogQuery, LogStore};
    let schema = common::fresh_schema();
    let store = worlds_postgres::PostgresStore::connect(
        &common::url(),
        worlds_postgres::PostgresOptions {
            log_days: Some(2),
            ..common::options(&schema)
        },
    )
    .await
    .unwrap();
    const DAY: i64 = 86_400_000;
    let entry = |at: i64, message: &str| LogEntry {
        timestamp: at,
        level: LogLevel::Info,
        category: LogCategory::System,
        message: message.to_owned(),
        metadata: serde_json::Map::new(),
    };
    let day0 = 20_000 * DAY;
    store
        .append(vec![
            entry(day0 + 1, "day 0"),
            entry(day0 + DAY + 1, "day 1"),
        ])
        .unwrap();
    store.flush().await;
    assert_eq!(store.query(&LogQuery::new()).await.unwrap().len(), 2);
    // Day 2 begins: with two days kept, day 0 goes.
    store
        .append(vec![entry(day0 + 2 * DAY + 1, "day 2")])
        .unwrap();
    store.flush().await;
    let left: Vec<String> = store
        .query(&LogQuery::new())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(left, ["day 1", "day 2"]);
    store.close().await.unwrap();
    common::drop_schema(&schema).await;
}

/// The tables rewritten as runs move on are vacuumed after a few thousand changed rows, not
/// after a fifth of the table: dead index entries of past statuses must not pile up under the
/// capped counts of a large store.
#[tokio::test]
async fn hot_tables_are_vacuumed_after_a_few_thousand_changes() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let migrated = worlds_postgres::migrate(&common::url(), &common::options(&schema))
        .await
        .unwrap();
    assert_eq!(migrated.to, worlds_postgres::SCHEMA_VERSION);
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&common::url())
        .await
        .unwrap();
    for (table, wanted) in [
        ("runs", "autovacuum_vacuum_threshold=5000"),
        ("runs", "autovacuum_vacuum_scale_factor=0.0"),
        ("runs", "fillfactor=90"),
        ("runs", "autovacuum_vacuum_cost_delay=0"),
        ("timers", "autovacuum_vacuum_threshold=1000"),
        ("hooks", "autovacuum_vacuum_scale_factor=0.0"),
    ] {
        let options: Vec<String> = sqlx::query_scalar(
            "SELECT coalesce(c.reloptions, '{}') FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2",
        )
        .bind(&schema)
        .bind(table)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert!(options.iter().any(|o| o == wanted), "{table}: {options:?}");
    }
    common::drop_schema(&schema).await;
}
