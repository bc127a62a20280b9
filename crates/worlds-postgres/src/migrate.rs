//! The embedded migrations, applied at connect under a try-lock with a deadline.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection, SqlSafeStr};
use worlds_engine::WorldError;

use crate::PostgresOptions;

/// The migrations, in order: (version, description, SQL).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", include_str!("../migrations/0001_initial.sql")),
    (
        2,
        "settings",
        include_str!("../migrations/0002_settings.sql"),
    ),
    (
        3,
        "state snapshots",
        include_str!("../migrations/0003_state_snapshots.sql"),
    ),
    (4, "logs", include_str!("../migrations/0004_logs.sql")),
    (
        5,
        "api keys",
        include_str!("../migrations/0005_api_keys.sql"),
    ),
    (
        6,
        "vacuum hot tables",
        include_str!("../migrations/0006_vacuum_hot_tables.sql"),
    ),
    (
        7,
        "code versions",
        include_str!("../migrations/0007_code_versions.sql"),
    ),
    (
        8,
        "member leases",
        include_str!("../migrations/0008_member_leases.sql"),
    ),
    (
        9,
        "retention",
        include_str!("../migrations/0009_retention.sql"),
    ),
    (10, "pauses", include_str!("../migrations/0010_pauses.sql")),
];

/// The schema version this build creates and knows: the newest embedded migration.
pub const SCHEMA_VERSION: i64 = 10;

/// Refuses a schema name that is not a plain lower-case identifier (what
/// [`PostgresOptions::schema`] accepts), so a caller can check one before connecting.
pub fn check_schema_name(schema: &str) -> Result<(), WorldError> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= 63 && !schema.starts_with("pg_") {
        return Ok(());
    }
    Err(WorldError::InvalidInput {
        field: "schema".into(),
        message: format!(
            "'{schema}' is not a usable schema name: use lower-case letters, digits and '_', starting with a letter or '_', at most 63 bytes, not starting with 'pg_'"
        ),
    })
}

fn migrator() -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .map(|(version, description, sql)| {
            Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                AssertSqlSafe(*sql).into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    // Locked here instead, with a deadline: sqlx's lock waits without one.
    migrator.set_locking(false);
    migrator
}

/// Creates the schema if needed and applies the missing migrations, on a connection of its
/// own (closed afterwards, so the session lock cannot leak into a pool). Returns the version
/// the schema was at before (`None`: it had no worlds-engine tables).
pub(crate) async fn migrate(
    connect: &PgConnectOptions,
    server: &str,
    options: &PostgresOptions,
) -> Result<Option<i64>, WorldError> {
    let unreachable = |detail: String| {
        WorldError::Unavailable(format!(
            "cannot connect to PostgreSQL at {server}: {detail}; check that the server is running, that the URL's host and port are right, and that it accepts connections"
        ))
    };
    let mut conn =
        match tokio::time::timeout(options.connect_timeout, PgConnection::connect_with(connect))
            .await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {} ms",
                    options.connect_timeout.as_millis()
                )))
            }
        };
    let result = migrate_on(&mut conn, server, options).await;
    let _ = conn.close().await;
    result
}

async fn migrate_on(
    conn: &mut PgConnection,
    server: &str,
    options: &PostgresOptions,
) -> Result<Option<i64>, WorldError> {
    let schema = &options.schema;
    let err = |what: &str, e: sqlx::Error| crate::db::error(server, what, e);
    let lock_key = format!("worlds-engine migrate {schema}");
    let deadline = Instant::now() + options.migration_lock_timeout;
    loop {
        let locked: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
                .bind(&lock_key)
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| err("taking the migration lock", e))?;
        if locked {
            break;
        }
        if Instant::now() >= deadline {
            return Err(WorldError::Unavailable(format!(
                "another process has held the migration lock of schema '{schema}' on {server} for over {} s; wait for it to finish or end its session",
                options.migration_lock_timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = apply(conn, server, schema).await;
    let _ = sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))")
        .bind(&lock_key)
        .execute(&mut *conn)
        .await;
    result
}

async fn apply(
    conn: &mut PgConnection,
    server: &str,
    schema: &str,
) -> Result<Option<i64>, WorldError> {
    let err = |what: &str, e: sqlx::Error| crate::db::error(server, what, e);
    // The name is checked (a plain identifier), and quoted.
    sqlx::query(AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
    )))
    .execute(&mut *conn)
    .await
    .map_err(|e| err("creating the schema", e))?;
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| err("reading the schema version", e))?;
    let mut before = None;
    if exists.is_some() {
        let version: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| err("reading the schema version", e))?;
        if let Some(version) = version.filter(|v| *v > SCHEMA_VERSION) {
            return Err(WorldError::Unsupported(format!(
                "schema '{schema}' on {server} is at version {version}, newer than version {SCHEMA_VERSION} that this build of worlds-postgres knows; run a newer build, or use another schema"
            )));
        }
        before = version;
    }
    migrator().run(&mut *conn).await.map_err(|e| {
        WorldError::Internal(format!(
            "migrating schema '{schema}' on {server} to version {SCHEMA_VERSION} failed: {e}"
        ))
    })?;
    Ok(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["worlds", "_x", "t_01abc", &"a".repeat(63)] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Worlds",
            "1x",
            "a-b",
            "a\"b",
            "pg_temp",
            &"a".repeat(64),
        ] {
            let err = check_schema_name(bad).unwrap_err();
            assert!(err.to_string().contains("schema"), "{err}");
        }
    }

    #[test]
    fn the_embedded_migrations_end_at_the_schema_version() {
        let last = MIGRATIONS.last().map(|m| m.0);
        assert_eq!(last, Some(SCHEMA_VERSION));
        assert!(MIGRATIONS.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
