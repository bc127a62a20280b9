//! Work on a world's schema from outside the world, on a connection of its own: [`probe`] (the
//! server's and the schema's versions), [`vacuum_runs`] and [`drop_schema`].

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, PgConnection};
use worlds_engine::WorldError;

use crate::{migrate::check_schema_name, server_options, PostgresOptions, SCHEMA_VERSION};

/// What one connection to the server finds: that it answers, its version, and the state of the
/// schema [`PostgresOptions::schema`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `host:port` of the server.
    pub server: String,
    /// The server's version, as its `server_version` setting says (`15.4 (Debian …)`).
    pub server_version: String,
    /// The schema's state.
    pub schema: SchemaStatus,
}

/// The state of a world's schema, as [`probe`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaStatus {
    /// There is no schema of that name: no world has opened there yet.
    Missing,
    /// The schema exists but holds no worlds-engine tables (it was never migrated).
    Empty,
    /// The schema was migrated to this version. This build reads and writes only
    /// [`SCHEMA_VERSION`]: an older one needs [`migrate()`](crate::migrate()), a newer one the
    /// build that migrated it.
    At(i64),
}

impl SchemaStatus {
    /// The schema's version, if it was migrated.
    pub fn version(self) -> Option<i64> {
        match self {
            SchemaStatus::At(version) => Some(version),
            SchemaStatus::Missing | SchemaStatus::Empty => None,
        }
    }

    /// Whether this build can use the schema as it is (at [`SCHEMA_VERSION`]).
    pub fn usable(self) -> bool {
        self == SchemaStatus::At(SCHEMA_VERSION)
    }
}

/// Why [`connect`] failed.
pub(crate) enum ConnectError {
    /// The server did not answer, or refused the connection: what happened, naming
    /// `host:port` ([`UNREACHABLE_ACTION`] says what to check).
    Unreachable(String),
    /// Anything else (a URL that does not parse, a bad schema name).
    Other(WorldError),
}

impl From<ConnectError> for WorldError {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Unreachable(found) => {
                WorldError::Unavailable(format!("{found}; {UNREACHABLE_ACTION}"))
            }
            ConnectError::Other(e) => e,
        }
    }
}

/// What to do when the server does not answer.
pub(crate) const UNREACHABLE_ACTION: &str = "check that the server is running, that the URL's host, port, user and database are right, and that it accepts connections";

/// One connection to the server of `url` (no schema on its search path: it may not exist),
/// within [`PostgresOptions::connect_timeout`], and `host:port` for messages.
pub(crate) async fn connect(
    url: &str,
    options: &PostgresOptions,
) -> Result<(PgConnection, String), ConnectError> {
    check_schema_name(&options.schema).map_err(ConnectError::Other)?;
    let connect = server_options(url)
        .map_err(ConnectError::Other)?
        .application_name("worlds-engine probe")
        .options([(
            "statement_timeout",
            options.statement_timeout.as_millis().to_string(),
        )]);
    let server = format!("{}:{}", connect.get_host(), connect.get_port());
    let unreachable = |detail: String| {
        ConnectError::Unreachable(format!(
            "cannot connect to PostgreSQL at {server}: {detail}"
        ))
    };
    let timeout = options.connect_timeout;
    match tokio::time::timeout(timeout, PgConnection::connect_with(&connect)).await {
        Ok(Ok(conn)) => Ok((conn, server)),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!(
            "no answer within {}",
            seconds(timeout)
        ))),
    }
}

/// `5 s`, `0.5 s`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

/// Connects once to the server of `url`, reads its version and the state of the schema
/// `options.schema` names, and disconnects: whether a command can work on the world there,
/// before it opens a store. Nothing is created nor migrated.
///
/// Fails with `Unavailable` when the server does not answer within
/// [`PostgresOptions::connect_timeout`] or refuses the connection (the message names
/// `host:port` and what to check), with `InvalidInput` for a URL or schema name that is not
/// usable.
///
/// ```no_run
/// # async fn demo() -> Result<(), worlds_engine::WorldError> {
/// let found = worlds_postgres::probe("postgres://app@db.internal/app", &Default::default()).await?;
/// if !found.schema.usable() {
///     eprintln!("schema at {:?}, this build knows {}", found.schema, worlds_postgres::SCHEMA_VERSION);
/// }
/// # Ok(()) }
/// ```
pub async fn probe(url: &str, options: &PostgresOptions) -> Result<Probe, WorldError> {
    let (mut conn, server) = connect(url, options).await?;
    let result = probe_on(&mut conn, &server, &options.schema).await;
    let _ = conn.close().await;
    result
}

/// [`probe`] on an open connection.
pub(crate) async fn probe_on(
    conn: &mut PgConnection,
    server: &str,
    schema: &str,
) -> Result<Probe, WorldError> {
    let fail = |e| crate::db::error(server, "reading the server's and the schema's versions", e);
    let server_version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut *conn)
        .await
        .map_err(fail)?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut *conn)
            .await
            .map_err(fail)?;
    let status = if !exists {
        SchemaStatus::Missing
    } else {
        let table: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .bind(format!("\"{schema}\"._sqlx_migrations"))
            .fetch_one(&mut *conn)
            .await
            .map_err(fail)?;
        if table.is_none() {
            SchemaStatus::Empty
        } else {
            // The schema name was checked (a plain identifier), and is quoted.
            let version: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT max(version) FROM \"{schema}\"._sqlx_migrations WHERE success"
            )))
            .fetch_one(&mut *conn)
            .await
            .map_err(fail)?;
            version.map_or(SchemaStatus::Empty, SchemaStatus::At)
        }
    };
    Ok(Probe {
        server: server.to_owned(),
        server_version,
        schema: status,
    })
}

/// Runs `sql` (naming the schema, already checked) on a connection of its own, with no
/// statement timeout (a vacuum of a large table takes as long as it takes).
async fn run(
    url: &str,
    options: &PostgresOptions,
    what: &str,
    sql: String,
) -> Result<(), WorldError> {
    run_once(url, options, what, &sql)
        .await
        .map_err(Fault::into_error)
}

/// Why [`run_once`] failed: the server chose the statement as a deadlock's victim (rolled back,
/// safe to try again), or anything else.
enum Fault {
    Deadlock(WorldError),
    Other(WorldError),
}

impl Fault {
    fn into_error(self) -> WorldError {
        match self {
            Fault::Deadlock(e) | Fault::Other(e) => e,
        }
    }
}

/// [`run`], once, telling a deadlock apart (SQLSTATE 40P01).
async fn run_once(
    url: &str,
    options: &PostgresOptions,
    what: &str,
    sql: &str,
) -> Result<(), Fault> {
    let (mut conn, server) = connect(url, options)
        .await
        .map_err(|e| Fault::Other(e.into()))?;
    let result = async {
        sqlx::query("SET statement_timeout = 0")
            .execute(&mut conn)
            .await?;
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
    }
    .await
    .map(|_| ())
    .map_err(|e| {
        let deadlock =
            matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("40P01"));
        let error = crate::db::error(&server, what, e);
        if deadlock {
            Fault::Deadlock(error)
        } else {
            Fault::Other(error)
        }
    });
    let _ = conn.close().await;
    result
}

/// `VACUUM (ANALYZE)` of the `runs` table in the schema `options.schema` names: what the
/// server's autovacuum does after a burst of writes, for a server that does not run it (the
/// doctor's advice when dead row versions pile up, see [`FindingKind::DeadRows`]).
///
/// [`FindingKind::DeadRows`]: crate::FindingKind::DeadRows
pub async fn vacuum_runs(url: &str, options: &PostgresOptions) -> Result<(), WorldError> {
    let schema = &options.schema;
    run(
        url,
        options,
        "vacuuming the runs table",
        format!("VACUUM (ANALYZE) \"{schema}\".runs"),
    )
    .await
}

/// Drops the schema `options.schema` names and everything in it: every run, event, key and log
/// entry of the world there, at once and for good. For benchmarks and tests that made a world
/// of their own; nothing is left to undo it. A schema that does not exist is no error.
///
/// A session still finishing a transaction on the schema's tables (a process that was just
/// stopped) can make the server pick the drop as a deadlock's victim; the drop is then rolled
/// back whole and tried again, a few times.
pub async fn drop_schema(url: &str, options: &PostgresOptions) -> Result<(), WorldError> {
    let schema = &options.schema;
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    let mut tries = 0;
    loop {
        tries += 1;
        match run_once(url, options, "dropping the schema", &sql).await {
            Err(Fault::Deadlock(_)) if tries < DROP_TRIES => {
                tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
            }
            result => return result.map_err(Fault::into_error),
        }
    }
}

/// How many times [`drop_schema`] tries when the server picks it as a deadlock's victim.
const DROP_TRIES: u64 = 5;
