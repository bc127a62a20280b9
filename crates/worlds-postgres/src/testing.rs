//! Support for tests that run against a real PostgreSQL (feature `test-util`): the database to
//! use, whether it is up, and schemas of their own that are dropped afterwards.
//!
//! The URL comes from [`TEST_DATABASE_URL_ENV`] (default [`DEFAULT_TEST_URL`], the local
//! server). A test that finds no server fails under `CI=true` and is skipped, loudly, otherwise:
//!
//! ```no_run
//! # async fn demo() {
//! use worlds_postgres::testing::{database_up, test_url, TestSchema};
//! if !database_up().await {
//!     return;
//! }
//! let schema = TestSchema::fresh();
//! let mut config = worlds_engine::WorldConfig::postgres(test_url());
//! config.database.schema = schema.name().to_owned();
//! // … the schema is dropped when `schema` goes out of scope.
//! # }
//! ```

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The environment variable naming the test database.
pub const TEST_DATABASE_URL_ENV: &str = "WORLDS_TEST_DATABASE_URL";

/// The test database when [`TEST_DATABASE_URL_ENV`] is unset.
pub const DEFAULT_TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The test database's URL.
pub fn test_url() -> String {
    std::env::var(TEST_DATABASE_URL_ENV).unwrap_or_else(|_| DEFAULT_TEST_URL.to_owned())
}

/// True if the test database answers. When it does not: under `CI=true` this panics (the test
/// fails); otherwise it prints how to start one, and the caller skips its test.
pub async fn database_up() -> bool {
    let url = test_url();
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
        "PostgreSQL at {} is not reachable and CI=true: start it (e.g. `pg_ctlcluster 15 main start`) or set {TEST_DATABASE_URL_ENV}",
        worlds_engine::redact_url(&url)
    );
    eprintln!(
        "\n*** SKIPPED: PostgreSQL at {} is not reachable. Start one (e.g. `docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15`, or `pg_ctlcluster 15 main start`) or set {TEST_DATABASE_URL_ENV}. ***\n",
        worlds_engine::redact_url(&url)
    );
    false
}

/// A schema name no other test uses (`t_` and a ULID).
pub fn fresh_schema_name() -> String {
    format!("t_{}", ulid::Ulid::generate().to_string().to_lowercase())
}

/// Drops a schema of the test database and everything in it (errors ignored).
pub async fn drop_schema(schema: &str) {
    if let Ok(mut conn) = PgConnection::connect(&test_url()).await {
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&mut conn)
        .await;
        let _ = conn.close().await;
    }
}

/// A schema of its own for one test, dropped when this value is (the test passed or not).
#[derive(Debug)]
pub struct TestSchema(String);

impl TestSchema {
    /// A fresh schema name (the schema itself is created by whoever connects to it first).
    pub fn fresh() -> Self {
        Self(fresh_schema_name())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let schema = self.0.clone();
        // On a thread of its own: the test's runtime may be shutting down.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test schema");
            runtime.block_on(drop_schema(&schema));
        })
        .join();
    }
}
