//! Test support: a fresh schema per test on the database named by `WORLDS_TEST_DATABASE_URL`,
//! dropped afterwards.

#![allow(dead_code, unreachable_pub)]

pub mod pair;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use worlds_engine::store::Store;
use worlds_engine::testing::conformance::Fixture;
use worlds_postgres::{PostgresOptions, PostgresStore};

pub use worlds_postgres::testing::{database_up, drop_schema, test_url as url};

/// A workflow `chain` that runs `step` `steps` times in sequence, each on the last result.
pub fn chain(
    step: &worlds_engine::Activity<u64, u64>,
    steps: u64,
) -> worlds_engine::Workflow<u64, u64> {
    use worlds_engine::prelude::*;
    let step = step.clone();
    workflow("chain", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move {
            let mut acc = n;
            for _ in 0..steps {
                acc = ctx.run(&step, acc).await?;
            }
            Ok::<_, WorkflowError>(acc)
        }
    })
}

/// The config of a test world on `schema`: a small pool.
pub fn world_config(schema: &str) -> worlds_engine::WorldConfig {
    let mut config = worlds_engine::WorldConfig::postgres(url());
    config.database.schema = schema.to_owned();
    config.database.pool_size = 4;
    config
}

/// A pool of the test's own on the test database, with `schema` on its search path: for reading
/// and changing the tables directly, which no store's API does. Its sessions are named like a
/// store's on that schema (`worlds-engine {schema}`), so a test that cuts the world's sessions
/// cuts these too. One per schema, connected on first use.
pub fn sql(schema: &str) -> PgPool {
    static POOLS: OnceLock<Mutex<HashMap<String, PgPool>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Mutex::default).lock().unwrap();
    pools
        .entry(schema.to_owned())
        .or_insert_with(|| {
            let options = PgConnectOptions::from_str(&url())
                .expect("the test database's URL")
                .application_name(&format!("worlds-engine {schema}"))
                .options([("search_path", schema)]);
            PgPoolOptions::new()
                .max_connections(2)
                .connect_lazy_with(options)
        })
        .clone()
}

/// A schema name no other test uses.
pub fn fresh_schema() -> String {
    worlds_postgres::testing::fresh_schema_name()
}

/// Options for a test store on `schema`: a small pool.
pub fn options(schema: &str) -> PostgresOptions {
    PostgresOptions {
        pool_size: 4,
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    }
}

/// A store on `schema`.
pub async fn store(schema: &str, options: PostgresOptions) -> PostgresStore {
    let _ = schema;
    PostgresStore::connect(&url(), options)
        .await
        .expect("connect to the test database")
}

/// The conformance fixture: a store on a fresh schema, dropped after the check.
pub async fn fixture() -> Fixture {
    if !database_up().await {
        return Fixture::skip();
    }
    let schema = fresh_schema();
    let store = store(&schema, options(&schema)).await;
    let closing = store.clone();
    Fixture::new(Arc::new(store) as Arc<dyn Store>).with_cleanup(async move {
        let _ = closing.close().await;
        drop_schema(&schema).await;
    })
}

/// [`fixture`], through encryption at rest: a sealed PostgreSQL store must behave exactly as
/// the store it wraps.
pub async fn sealed_fixture() -> Fixture {
    if !database_up().await {
        return Fixture::skip();
    }
    let schema = fresh_schema();
    let store = store(&schema, options(&schema)).await;
    let closing = store.clone();
    let keys = worlds_engine::EncryptionKeys::new("k1", [9; 32]).unwrap();
    let sealed = worlds_engine::store::SealedStore::new(Arc::new(store), keys);
    Fixture::new(Arc::new(sealed) as Arc<dyn Store>).with_cleanup(async move {
        let _ = closing.close().await;
        drop_schema(&schema).await;
    })
}

/// The run's state once `done` holds, read every 20 ms for at most 30 s.
pub async fn until(
    world: &worlds_engine::World,
    id: &str,
    done: impl Fn(&worlds_engine::WorkflowState) -> bool,
) -> worlds_engine::WorkflowState {
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let state = world
                .get_run(id, worlds_engine::ResolveData::None)
                .await
                .unwrap();
            if done(&state) {
                return state;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("run {id} did not get there"))
}
