//! Test support: a fresh schema per test on the database named by `WORLDS_TEST_DATABASE_URL`,
//! dropped afterwards.

#![allow(dead_code, unreachable_pub)]

pub mod pair;

use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, PgConnection};
use worlds_engine::store::Store;
use worlds_engine::testing::conformance::Fixture;
use worlds_postgres::{PostgresOptions, PostgresStore};

/// The default test database.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The test database's URL.
pub fn url() -> String {
    std::env::var("WORLDS_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A schema name no other test uses.
pub fn fresh_schema() -> String {
    format!("t_{}", ulid::Ulid::generate().to_string().to_lowercase())
}

/// True if the database answers. When it does not: with `CI=true` this panics (the test
/// fails); otherwise it prints how to start one and the caller skips the test.
pub async fn database_up() -> bool {
    let url = url();
    let up = matches!(
        tokio::time::timeout(Duration::from_secs(3), PgConnection::connect(&url)).await,
        Ok(Ok(_))
    );
    if up {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "PostgreSQL at {url} is not reachable and CI=true: start it (e.g. `pg_ctlcluster 15 main start`) or set WORLDS_TEST_DATABASE_URL"
    );
    eprintln!(
        "\n*** SKIPPED: PostgreSQL at {url} is not reachable. Start one (e.g. `docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15`, or `pg_ctlcluster 15 main start`) or set WORLDS_TEST_DATABASE_URL. ***\n"
    );
    false
}

/// Drops a schema and everything in it.
pub async fn drop_schema(schema: &str) {
    if let Ok(mut conn) = PgConnection::connect(&url()).await {
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&mut conn)
        .await;
        let _ = conn.close().await;
    }
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
    let pool = store.pool().clone();
    Fixture::new(Arc::new(store) as Arc<dyn Store>).with_cleanup(async move {
        pool.close().await;
        drop_schema(&schema).await;
    })
}
