//! Worlds on PostgreSQL: the database `--database-url` and `--schema` name, opened for the
//! commands that read it ([`read`]) and for those that change it ([`with_world`]).
//!
//! Reads go through a [`PostgresStore`] and use only its read duties. Changes go through a
//! world on that store, never started, so the engine's rules apply (a cancellation reaches the
//! run's children, a resumed schedule skips the times it missed); the members running the
//! world see them like any other write. Neither ever migrates the schema: a schema missing or
//! at another version than this build's is refused, naming both versions.
//!
//! The URL's password is never printed: messages name `host:port/database`, and errors from
//! the driver are scrubbed of it.

pub(crate) mod doctor;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use sqlx::postgres::PgConnectOptions;
use worlds_engine::clock::SystemClock;
use worlds_engine::{redact_url, HookSecret, World, WorldConfig, WorldError, DATABASE_URL_ENV};
use worlds_postgres::{PostgresOptions, PostgresStore, Probe, SchemaStatus, SCHEMA_VERSION};

use super::runtime;
use crate::text::shell_word;

/// Where a world on PostgreSQL lives: `--database-url` (or `WORLDS_ENGINE_DATABASE_URL`) and
/// `--schema`. With a URL the command works on that database instead of `--dir`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct DatabaseArgs {
    /// Work on the PostgreSQL world at this URL (postgres://user:password@host:5432/db) instead
    /// of a directory. Giving --dir as well is an error.
    #[arg(long, env = DATABASE_URL_ENV, value_name = "URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,

    /// The PostgreSQL schema holding the world's tables (with --database-url).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_SCHEMA)]
    pub(crate) schema: String,
}

impl DatabaseArgs {
    /// The URL, when one was given (an empty one counts as none).
    pub(crate) fn url(&self) -> Option<&str> {
        self.database_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
    }

    /// The database the arguments name, if they name one.
    pub(crate) fn world(&self) -> Option<Database> {
        self.url().map(|url| Database::new(url, &self.schema))
    }
}

/// The default `--schema`: the engine's default for a PostgreSQL world.
pub(crate) const DEFAULT_SCHEMA: &str = "worlds";

/// How long a command waits for the server to answer.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A PostgreSQL world named on the command line: a server, a database and a schema.
#[derive(Clone)]
pub(crate) struct Database {
    url: String,
    schema: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("url", &redact_url(&self.url))
            .field("schema", &self.schema)
            .finish()
    }
}

impl Database {
    /// The world at `url`, in `schema`.
    pub(crate) fn new(url: &str, schema: &str) -> Self {
        Self {
            url: url.to_owned(),
            schema: schema.to_owned(),
        }
    }

    /// The URL, password included: only for connecting.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The schema.
    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    /// `host:port/database`, for messages (the whole URL without its password if it does not
    /// parse).
    pub(crate) fn server(&self) -> String {
        match PgConnectOptions::from_str(&self.url) {
            Ok(options) => format!(
                "{}:{}/{}",
                options.get_host(),
                options.get_port(),
                options.get_database().unwrap_or("postgres")
            ),
            Err(_) => redact_url(&self.url),
        }
    }

    /// `host:port`, for connection errors.
    pub(crate) fn host_port(&self) -> String {
        match PgConnectOptions::from_str(&self.url) {
            Ok(options) => format!("{}:{}", options.get_host(), options.get_port()),
            Err(_) => redact_url(&self.url),
        }
    }

    /// `schema 'worlds' on host:port/db`, for messages.
    pub(crate) fn describe(&self) -> String {
        format!("schema '{}' on {}", self.schema, self.server())
    }

    /// ` --database-url URL --schema NAME` for a command the user is told to run (the URL
    /// without its password; no `--database-url` when `WORLDS_ENGINE_DATABASE_URL` holds it,
    /// no `--schema` for the default).
    pub(crate) fn flags(&self) -> String {
        let from_env = std::env::var(DATABASE_URL_ENV).is_ok_and(|env| env == self.url);
        self.flags_with(from_env)
    }

    fn flags_with(&self, url_from_env: bool) -> String {
        let mut flags = if url_from_env {
            String::new()
        } else {
            format!(" --database-url {}", shell_word(&redact_url(&self.url)))
        };
        if self.schema != DEFAULT_SCHEMA {
            flags.push_str(&format!(" --schema {}", shell_word(&self.schema)));
        }
        flags
    }

    /// `text` with the URL's password replaced by `***`, wherever it appears.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let Some(password) = password_of(&self.url) else {
            return text.to_owned();
        };
        let mut text = text.to_owned();
        for form in [password.clone(), percent_decode(&password)] {
            if form.len() >= 2 {
                text = text.replace(&form, "***");
            }
        }
        text
    }

    /// An error about this database, scrubbed of the password.
    pub(crate) fn error(&self, error: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!(self.scrub(&error.to_string()))
    }
}

/// The password of a URL, as written in it.
fn password_of(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let (credentials, _) = authority.rsplit_once('@')?;
    let (_, password) = credentials.split_once(':')?;
    (!password.is_empty()).then(|| password.to_owned())
}

/// `%XX` escapes decoded (bytes that do not form UTF-8 are kept escaped).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// Connects once, reads the server's and the schema's versions, and disconnects
/// ([`worlds_postgres::probe`]). Fails with a message naming host and port when the server
/// does not answer.
pub(crate) async fn probe(db: &Database) -> anyhow::Result<Probe> {
    let options = PostgresOptions {
        schema: db.schema().to_owned(),
        connect_timeout: CONNECT_TIMEOUT,
        ..PostgresOptions::default()
    };
    worlds_postgres::probe(db.url(), &options)
        .await
        .map_err(|e| db.error(e))
}

/// Refuses a schema name the store would refuse, before connecting.
pub(crate) fn check_schema_name(schema: &str) -> anyhow::Result<()> {
    worlds_postgres::check_schema_name(schema).map_err(|e| anyhow::anyhow!("--schema: {e}"))
}

/// Why a probed schema cannot be used by this build, if it cannot.
pub(crate) fn unusable(db: &Database, probe: &Probe) -> Option<String> {
    match probe.schema {
        SchemaStatus::Missing => Some(format!(
            "there is no schema '{}' in {}: no world has run there yet (check --schema; a world creates its schema when it first opens, e.g. `worlds dev --persistence postgres{}`, and `worlds db migrate{}` creates it empty)",
            db.schema(),
            db.server(),
            db.flags(),
            db.flags()
        )),
        SchemaStatus::Empty => Some(format!(
            "schema '{}' in {} holds no worlds-engine tables (check --schema)",
            db.schema(),
            db.server()
        )),
        SchemaStatus::At(v) if v > SCHEMA_VERSION => Some(format!(
            "{} is at schema version {v}, newer than version {SCHEMA_VERSION} that this build of worlds knows: use the worlds command of the build the world runs",
            db.describe()
        )),
        SchemaStatus::At(v) if v < SCHEMA_VERSION => Some(format!(
            "{} is at schema version {v}, older than version {SCHEMA_VERSION} that this build of worlds knows: use the worlds command of the build the world runs, or migrate it (`worlds db migrate{}`; a world's program also migrates the schema when it opens)",
            db.describe(),
            db.flags()
        )),
        SchemaStatus::At(_) => None,
    }
}

/// Connects a store on the world's schema without joining the world (no member row, no
/// heartbeat), after checking the schema is there at this build's version (so the command
/// never creates nor migrates it).
pub(crate) async fn connect(db: &Database) -> anyhow::Result<PostgresStore> {
    check_schema_name(db.schema())?;
    let probe = probe(db).await?;
    if let Some(problem) = unusable(db, &probe) {
        bail!(problem);
    }
    let options = PostgresOptions {
        pool_size: 2,
        schema: db.schema().to_owned(),
        connect_timeout: CONNECT_TIMEOUT,
        ..PostgresOptions::default()
    };
    PostgresStore::connect_visitor(db.url(), options)
        .await
        .map_err(|e| db.error(e))
}

/// Closes the command's store: it joined no world (see `PostgresStore::connect_visitor`), so
/// there is nothing to hand over and closing cannot fail.
pub(crate) async fn leave(store: &PostgresStore) {
    let _ = store.close().await;
}

/// `worlds db migrate`: creates the schema or brings it to this build's version.
pub(crate) fn migrate(args: &DatabaseArgs, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let Some(db) = args.world() else {
        bail!("worlds db migrate needs the world's database: give --database-url, or set {DATABASE_URL_ENV}");
    };
    check_schema_name(db.schema())?;
    let options = PostgresOptions {
        schema: db.schema().to_owned(),
        connect_timeout: CONNECT_TIMEOUT,
        ..PostgresOptions::default()
    };
    let done = runtime()?
        .block_on(worlds_postgres::migrate(db.url(), &options))
        .map_err(|e| db.error(e))?;
    match done.from {
        None => writeln!(
            out,
            "created {} at schema version {}",
            db.describe(),
            done.to
        )?,
        Some(from) if from == done.to => writeln!(
            out,
            "{} is at schema version {} already",
            db.describe(),
            done.to
        )?,
        Some(from) => writeln!(
            out,
            "migrated {} from schema version {from} to {}",
            db.describe(),
            done.to
        )?,
    }
    Ok(())
}

/// Opens the world's store, runs `read` on it, and closes it.
pub(crate) fn read<T>(
    db: &Database,
    read: impl AsyncFnOnce(&PostgresStore) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    runtime()?.block_on(async {
        let store = connect(db).await?;
        let result = read(&store).await;
        leave(&store).await;
        result.map_err(|e| db.error(format!("{e:#}")))
    })
}

/// Opens the world on its database (not started) and runs `write` on it: the engine's rules
/// apply, and the members running the world see the change like any other write.
pub(crate) fn with_world<T>(
    db: &Database,
    write: impl AsyncFnOnce(&World) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    runtime()?.block_on(async {
        let store = connect(db).await?;
        let mut config = WorldConfig::postgres(db.url());
        config.database.schema = db.schema().to_owned();
        // Never started, so no workflow code asks for a hook token: a key of its own keeps the
        // command from reading the world's.
        config.hook_secret = Some(HookSecret(ulid::Ulid::generate().to_string()));
        let result = match config.validate() {
            Ok(()) => {
                let world =
                    World::with_store(config, Arc::new(SystemClock), Arc::new(store.clone()));
                let result = write(&world).await;
                drop(world);
                result
            }
            Err(e) => Err(anyhow::Error::new(e)),
        };
        leave(&store).await;
        result.map_err(|e| db.error(format!("{e:#}")))
    })
}

/// Drops a schema and everything in it (benchmarks and tests).
pub(crate) async fn drop_schema(url: &str, schema: &str) -> Result<(), WorldError> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        connect_timeout: CONNECT_TIMEOUT,
        ..PostgresOptions::default()
    };
    worlds_postgres::drop_schema(url, &options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_server_never_the_password() {
        let db = Database::new("postgres://app:s%40cret@db.internal:6543/shop", "worlds");
        assert_eq!(db.server(), "db.internal:6543/shop");
        assert_eq!(db.host_port(), "db.internal:6543");
        assert_eq!(db.describe(), "schema 'worlds' on db.internal:6543/shop");
        assert_eq!(
            db.flags_with(false),
            " --database-url 'postgres://app:***@db.internal:6543/shop'"
        );
        assert_eq!(db.flags_with(true), "");
        assert_eq!(
            db.scrub("auth s%40cret failed for s@cret"),
            "auth *** failed for ***"
        );
        assert!(!format!("{db:?}").contains("cret"));
        let db = Database::new("postgres://app@db/shop", "other");
        assert_eq!(
            db.flags_with(false),
            " --database-url postgres://app@db/shop --schema other"
        );
        assert_eq!(db.flags_with(true), " --schema other");
        assert_eq!(db.scrub("nothing to hide"), "nothing to hide");
    }

    #[test]
    fn schema_names_are_checked_before_connecting() {
        check_schema_name("worlds").unwrap();
        check_schema_name("bench_01abc").unwrap();
        for bad in ["", "Worlds", "a-b", "x\"; drop", "pg_x"] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }
}
