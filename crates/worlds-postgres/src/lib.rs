//! PostgreSQL storage for worlds-engine: [`PostgresStore`] implements every storage duty of the
//! engine (`worlds_engine::store::Store`) on one database that many processes share.
//!
//! # Schema
//!
//! Everything lives in one PostgreSQL schema (option [`PostgresOptions::schema`], default
//! `worlds`), created and migrated by [`PostgresStore::connect`] from migrations embedded in
//! this crate (`migrations/*.sql`). A database whose schema is newer than this build knows is
//! refused, naming both versions.
//!
//! | table | holds |
//! |---|---|
//! | `runs` | one row per run: narrow columns for filters and claims (status, name, parent, idempotency key, `next_seq`, when it ended), the lease (`owner`, `epoch`), and a snapshot of the run state materialized from its events (JSON, as of `state_seq`) |
//! | `events` | each run's history, insert-only, `PRIMARY KEY (run_id, seq)`: a position in a log holds one event, so a step can never be recorded twice |
//! | `steps`, `hooks` | lookups by step id and hook id; a partial unique index keeps a token digest on one waiting hook |
//! | `timers` | durable timers, ordered by `fire_at` |
//! | `streams`, `chunks` | streams with dense chunk indexes and write keys |
//! | `schedules` | schedule records, changed under a per-id lock so one firing starts one run |
//! | `members` | one row per process using the store, with a heartbeat |
//! | `api_keys` | the records of the world's API keys (digests of their secrets, never the keys) |
//! | `logs` | the world's log entries from every member ([`LogStore`](worlds_engine::telemetry::logs::LogStore)), by time |
//!
//! # What is synced when
//!
//! Every write is committed before the call returns: an acknowledged write is as durable as
//! the database makes a commit (with `synchronous_commit = on`, flushed to the WAL). When the
//! connection fails mid-call the answer is `Unavailable`: the write may or may not have
//! landed, and the engine reads the run back before going on.
//!
//! Appends are group-committed: a writer task per store collects the appends waiting from any
//! number of concurrent callers and runs (up to 512) and commits them together, answering each
//! caller after the commit. Appends to runs this store holds, checked against the run state it
//! cached at its own last write, go in one self-committing statement that writes a run only if
//! its row is still as cached (`next_seq` and lease epoch): one round trip per batch. The rest
//! (a run another process wrote to meanwhile, hook changes, runs this store does not hold) go
//! in a transaction that locks the runs, checks each append against its run's state with the
//! engine's rules (`WorkflowState::check`/`apply`) and the lease epoch, and writes all accepted
//! events, steps and run states with one statement (arrays through `UNNEST`); a refused append
//! (seq taken, lease lost, invalid transition, hook token held) gets its own error and the
//! others commit. The run row's stored state is rewritten every 64 events (every sixteenth of
//! its events, for a long run) and on every status change (`state_seq` records where); readers apply the events since, so an append costs the
//! same early and late in a long run.
//!
//! The store also keeps the last events it committed for each run it holds, so the engine's
//! reads of its own recent records (`history_tip`) need no round trip; a read from further
//! back, or after another process wrote to the run, goes to the database.
//!
//! The three append levels of `EventStore` map to the server's commit levels. `append` waits
//! for a commit the server flushed (as its `synchronous_commit` says, `on` by default).
//! `append_written` waits for a commit the server answered without flushing it
//! (`synchronous_commit = off` for that commit alone, when nothing else in its batch needs
//! more): it survives this process's crash, not the server's. `append_nowait` returns at once
//! where the append is accepted at call time (see `batch/accept.rs`), and is written the same
//! way. `wait_durable` flushes whatever the writer committed without a flush. A commit is the
//! first moment readers in other processes may see the events, so nothing returns before one
//! except an accepted `append_nowait`. Should the server restart and lose commits it had not
//! flushed, the store reads the runs they touched back before appending to them again: those
//! whose writer connection failed before a flush, and any held run whose row went back behind
//! what this store committed (found by `external_changes`). Run creations are group-committed
//! by the writer too (one statement for a batch's new runs, flushed); stream chunks, timers and
//! schedules are one flushed transaction each. Reads go to the database.
//!
//! # Leases and fencing
//!
//! Each store registers a member row at connect and renews its heartbeat from a background
//! task; all lease time is the database's `now()`. A run is leased to the member that created
//! or claimed it (`runs.owner`), and every acquisition bumps `runs.epoch`. A member whose
//! heartbeat is older than the lease duration is dead: [`claim_runs`] takes its unfinished
//! runs over (`FOR UPDATE SKIP LOCKED`, so two claimers never take one run). The store keeps
//! the epoch it holds for each of its runs, and an append to such a run checks
//! `owner = me AND epoch = held` under the row lock: after a takeover the old holder's append
//! fails with `WorldError::LeaseLost` and stores nothing. Writes to runs this store does not
//! hold are limited to what reaches a run from outside it — a cancellation, a hook's payload, a
//! child's result — so a process that lost a run and forgot it still cannot drive it.
//! [`external_changes`] reports the held runs another process appended to, found by comparing
//! each run's `next_seq` with the last one this store saw.
//!
//! A member takes only the timers of runs it holds (see `timers`); a run's new holder re-arms
//! and fires them. [`PostgresStore::close`] (or dropping the last handle), and a world's
//! shutdown (`LeaseStore::leave`), release this member's leases so another member claims its
//! runs at once; members whose heartbeat stopped longer ago than
//! [`PostgresOptions::forget_dead_members_after`] are deleted.
//!
//! Each member records its lease in its row and is judged dead by it, whatever lease the
//! member looking uses. It also keeps its own view of its lease on a monotonic clock: until
//! when its last heartbeat keeps it live, and whether two heartbeats were ever further apart
//! than the lease (then every run it held is suspect until a read of its row shows it still
//! holds it). Before a step's code runs the engine asks for that view
//! (`LeaseStore::lease_confirmed`) and, when it does not vouch for the lease, asks the
//! database (`LeaseStore::confirm_lease`). `LeaseStore::owned_runs` lists the runs whose rows
//! name this member, taking up again under a new epoch any this store did not know of (a claim
//! whose answer was lost), so the engine drives every run leased to it.
//!
//! # Wake-ups
//!
//! Members wake each other with LISTEN/NOTIFY on one channel per schema
//! (`worlds_{schema}`). After a commit (never inside it) the store queues a hint for a new
//! run, a write to a run another member holds (a cancellation, a child's result, a hook's
//! payload), a run released at close, and a stream chunk or close; a notifier task sends the
//! queue coalesced, one statement per burst. One dedicated listener connection per store
//! (not from the pool), pinged every 5 s, listens again and raises the change signal after
//! every reconnect. A hint raises [`changes`] (the engine polls claims and external changes
//! at once) or wakes this process's live readers of the run's streams. Hints may be lost;
//! the engine's polling stays on and finds the change at its next interval.
//!
//! [`changes`]: worlds_engine::store::LeaseStore::changes
//!
//! # From outside the world
//!
//! Tools work on a world's schema without joining it, each on a connection of its own:
//! [`probe()`] reads the server's and the schema's versions, [`migrate()`] brings the schema
//! to this build's, [`doctor()`] reports the world's health (members, runs, leases, timers,
//! dead row versions) as a typed [`DoctorReport`] of [`Finding`]s, each with what to do,
//! judged by the world's lease; [`vacuum_runs`] and [`drop_schema`] do what their names say.
//! [`PostgresStore::connect_visitor`] opens a store that reads the world and delivers what
//! reaches its runs from outside, and [`PostgresStore::lease_holder`] says which member
//! drives a run. The connection pool stays inside the store.
//!
//! [`claim_runs`]: worlds_engine::store::LeaseStore::claim_runs
//! [`external_changes`]: worlds_engine::store::LeaseStore::external_changes

#![forbid(unsafe_code)]

mod admin;
mod batch;
mod db;
mod doctor;
mod ended;
mod events;
mod faults;
mod keys;
mod leases;
mod logs;
mod migrate;
mod notify;
mod pauses;
mod reads;
mod retention;
mod runs;
mod schedules;
mod streams;
#[cfg(feature = "test-util")]
pub mod testing;
mod timers;
mod world;

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHashSet};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;
use worlds_engine::{Event, WorkflowState, WorldError};

pub use admin::{drop_schema, probe, vacuum_runs, Probe, SchemaStatus};
pub use doctor::{
    doctor, DoctorReport, Finding, FindingKind, Health, HolderState, LeaseHolder, MemberHealth,
    Severity, StatusCount, TableRows, DEAD_ROWS_WORTH_A_WORD,
};
#[cfg(feature = "test-util")]
pub use faults::Faults;
pub use migrate::{check_schema_name, SCHEMA_VERSION};
pub use world::{open, open_with_clock};

/// Options of [`PostgresStore::connect`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Most connections the store opens. Default 10.
    pub pool_size: u32,
    /// The PostgreSQL schema holding the tables (created if missing). Lower-case letters,
    /// digits and `_`, starting with a letter or `_`, at most 63 bytes. Default `worlds`.
    pub schema: String,
    /// How long to wait for a connection before giving up with an error. Default 5 s.
    pub connect_timeout: Duration,
    /// `statement_timeout` of the store's sessions. Default 30 s.
    pub statement_timeout: Duration,
    /// `idle_in_transaction_session_timeout` of the store's sessions. Default 60 s.
    pub idle_in_transaction_timeout: Duration,
    /// How long a run stays leased to a process whose heartbeat stopped. Default 30 s.
    pub lease_duration: Duration,
    /// How often the heartbeat is renewed. Default a third of the lease duration.
    pub heartbeat_interval: Option<Duration>,
    /// Waiting this long for the migration lock (another process migrating) is an error.
    /// Default 60 s.
    pub migration_lock_timeout: Duration,
    /// A member whose heartbeat stopped this long ago is deleted from the `members` table (its
    /// runs were claimable since its lease expired). Default 1 hour.
    pub forget_dead_members_after: Duration,
    /// Days of log entries kept in the `logs` table, today (UTC, by the entries' clock)
    /// included: older ones are deleted as new ones arrive, like the files'
    /// [`LogsConfig::max_files`](worlds_engine::telemetry::logs::LogsConfig::max_files), which
    /// [`open`] passes here. Default: all are kept.
    pub log_days: Option<usize>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 10,
            schema: "worlds".to_owned(),
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(60),
            lease_duration: Duration::from_secs(30),
            heartbeat_interval: None,
            migration_lock_timeout: Duration::from_secs(60),
            forget_dead_members_after: Duration::from_secs(3600),
            log_days: None,
        }
    }
}

/// A run this store holds the lease of.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The fencing epoch of the acquisition.
    epoch: i64,
    /// The run's `next_seq` as of the last write this store made or saw.
    seen_seq: i64,
}

/// A run's state as of `next_seq` events, kept to check the next append without a replay, and
/// the last events before `next_seq` this store committed or read, so the engine reads its own
/// recent records without a round trip (see [`PostgresStore::cached_tail`]).
struct Cached {
    next_seq: i64,
    /// `runs.state_seq` as of `next_seq`: where the stored snapshot stands.
    state_seq: i64,
    /// Taken out by the writer's fast path while it works on the run, so that it changes the
    /// state in place instead of copying it (a state grows with its run's history).
    state: Option<Arc<WorkflowState>>,
    /// Events `next_seq - tail.len() .. next_seq`, in order (at most [`TAIL_LIMIT`]).
    tail: VecDeque<Arc<Event>>,
}

/// Most recent events kept per cached run: enough for the engine to catch up on what it just
/// recorded; an older position is read from the database.
const TAIL_LIMIT: usize = 256;

/// Most run states kept in memory between appends.
const CACHE_LIMIT: usize = 10_000;

struct Inner {
    pool: PgPool,
    schema: String,
    /// `host:port`, for error messages.
    server: String,
    member_id: String,
    lease_duration: Duration,
    held: Mutex<FxHashMap<String, Held>>,
    cache: Mutex<FxHashMap<String, Cached>>,
    /// Runs whose end (timers deleted, streams closed) this store committed.
    ended: Mutex<ended::RecentlyEnded>,
    /// Appends accepted at call time that the writer has not written, and runs one of them
    /// poisoned.
    accepted: Mutex<batch::accept::AcceptedRuns>,
    /// Runs the writer wrote with commits the server may not have flushed to disk yet
    /// (`append_written`, `append_nowait`): if the writer's connection fails before a later
    /// commit flushes them, the server may have restarted and lost them, so they are read
    /// back.
    unflushed: Mutex<FxHashSet<String>>,
    signals: Mutex<FxHashMap<String, watch::Sender<u64>>>,
    heartbeat: CancellationToken,
    /// Ends the listener task.
    listening: CancellationToken,
    /// Appends waiting for the writer task (group commit).
    writer: batch::Writer,
    /// Log entries waiting for the log writer task.
    logs: logs::LogQueue,
    /// Notifications waiting for the notifier task.
    notifier: mpsc::UnboundedSender<String>,
    /// Raised when another process may have changed something this one cares about.
    changes: Arc<Notify>,
    /// Dead members are forgotten after this long.
    forget_dead_members_after: Duration,
    /// False for a visitor ([`PostgresStore::connect_visitor`]): no member row, never claims.
    joined: bool,
    /// Set once the leases were released (by `close`), so a drop does not do it again.
    closed: std::sync::atomic::AtomicBool,
    /// This member's own view of its lease (see `leases::LeaseClock`).
    lease_clock: Mutex<leases::LeaseClock>,
    /// Set while the world is shut down (`LeaseStore::leave`): no heartbeat, no claims, no
    /// member row, until `rejoin`.
    away: std::sync::atomic::AtomicBool,
    /// Failures injected by tests.
    #[cfg(feature = "test-util")]
    faults: faults::Faults,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listening.cancel();
        let released = self.closed.swap(true, std::sync::atomic::Ordering::AcqRel);
        // A world that stopped has already handed its runs over (`leave`): a second release,
        // in the background after the last handle is gone, would only race whatever the
        // program does next with the schema (dropping it, for one).
        let left = self.away.load(std::sync::atomic::Ordering::Acquire);
        if !released && !left && !self.heartbeat.is_cancelled() {
            // A graceful drop: hand this member's runs over at once rather than after the
            // lease expires.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let pool = self.pool.clone();
                let member = self.member_id.clone();
                let channel = notify::channel(&self.schema);
                runtime.spawn(async move {
                    let _ = leases::release(&pool, &member, &channel).await;
                });
            }
        }
        self.heartbeat.cancel();
    }
}

/// Storage on PostgreSQL, shared by every process that connects to the same schema. Cheap to
/// clone (clones share the pool and the lease).
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.inner.server)
            .field("schema", &self.inner.schema)
            .field("member_id", &self.inner.member_id)
            .finish()
    }
}

/// True for a URL to a server on this machine that does not ask for an `sslmode` (nor does
/// `PGSSLMODE`): such a connection goes without TLS. TLS to the loopback protects nothing, and
/// with sqlx 0.9.0, which leaves Nagle's algorithm on, a statement sent as more than one TLS
/// record waits for the server's delayed acknowledgement (about 40 ms) on every round trip.
fn plain_on_this_machine(url: &str, host: &str) -> bool {
    !url.contains("sslmode=")
        && std::env::var_os("PGSSLMODE").is_none()
        && matches!(host, "localhost" | "127.0.0.1" | "::1" | "[::1]")
}

/// The connection options for the server of `url`, as every connection of the world makes them:
/// without TLS to this machine (`localhost`, `127.0.0.1`, `::1`) unless the URL names an
/// `sslmode` or `PGSSLMODE` is set — TLS to the loopback protects nothing and costs a delayed
/// acknowledgement per handshake. Also for the connections of [`probe()`], [`doctor()`] and
/// the other work from outside the world.
pub(crate) fn server_options(url: &str) -> Result<PgConnectOptions, WorldError> {
    let base = PgConnectOptions::from_str(url).map_err(|e| WorldError::InvalidInput {
        field: "url".into(),
        message: format!("'{}' is not a PostgreSQL URL: {e}", redact(url)),
    })?;
    Ok(if plain_on_this_machine(url, base.get_host()) {
        base.ssl_mode(PgSslMode::Disable)
    } else {
        base
    })
}

/// The connection options for `url` under `options` (schema on the search path, timeouts,
/// the application name), and `host:port` for messages.
fn connect_options(
    url: &str,
    options: &PostgresOptions,
) -> Result<(PgConnectOptions, String), WorldError> {
    let base = server_options(url)?;
    let server = format!("{}:{}", base.get_host(), base.get_port());
    // Named for the schema, so an operator (or a test) can tell one world's sessions from
    // another's in `pg_stat_activity`.
    let application = format!("worlds-engine {}", options.schema);
    let connect = base.application_name(&application).options([
        ("search_path", options.schema.clone()),
        (
            "statement_timeout",
            options.statement_timeout.as_millis().to_string(),
        ),
        (
            "idle_in_transaction_session_timeout",
            options.idle_in_transaction_timeout.as_millis().to_string(),
        ),
    ]);
    Ok((connect, server))
}

/// What [`migrate()`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The schema's version before (`None`: it held no worlds-engine tables).
    pub from: Option<i64>,
    /// Its version now ([`SCHEMA_VERSION`]).
    pub to: i64,
}

/// Creates the schema `options.schema` names at `url` if needed and brings it to this build's
/// [`SCHEMA_VERSION`], without joining the world (no member row, nothing kept open): what
/// `worlds db migrate` runs before a deploy. [`PostgresStore::connect`] does the same on
/// every open. A schema of a newer build is refused, naming both versions.
///
/// ```no_run
/// # async fn demo() -> Result<(), worlds_engine::WorldError> {
/// let done = worlds_postgres::migrate("postgres://app@db.internal/app", &Default::default()).await?;
/// assert_eq!(done.to, worlds_postgres::SCHEMA_VERSION);
/// # Ok(()) }
/// ```
pub async fn migrate(url: &str, options: &PostgresOptions) -> Result<Migrated, WorldError> {
    migrate::check_schema_name(&options.schema)?;
    let (connect, server) = connect_options(url, options)?;
    let from = migrate::migrate(&connect, &server, options).await?;
    Ok(Migrated {
        from,
        to: SCHEMA_VERSION,
    })
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`), creates or
    /// migrates the schema, registers this process as a member and starts its heartbeat.
    ///
    /// Fails with `Unavailable`, naming host and port, if the server does not answer within
    /// [`PostgresOptions::connect_timeout`]; with `Unsupported` if the schema was migrated by
    /// a newer build.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, WorldError> {
        Self::open(url, options, true).await
    }

    /// Connects without joining the world: for a command that reads the world or delivers
    /// what reaches its runs from outside (a cancellation, a hook's payload, a schedule
    /// change) while members run it. No migration (the schema must be at this build's
    /// [`SCHEMA_VERSION`], else `Unsupported` naming both versions), no member row, no
    /// heartbeat, no listener: it never holds a run, so it may write only what any process
    /// may (`EventKind::comes_from_outside`), and it leaves nothing behind.
    pub async fn connect_visitor(url: &str, options: PostgresOptions) -> Result<Self, WorldError> {
        Self::open(url, options, false).await
    }

    async fn open(url: &str, options: PostgresOptions, join: bool) -> Result<Self, WorldError> {
        migrate::check_schema_name(&options.schema)?;
        if options.pool_size == 0 {
            return Err(WorldError::InvalidInput {
                field: "pool_size".into(),
                message: "a pool needs at least one connection".into(),
            });
        }
        let (connect, server) = connect_options(url, &options)?;
        if join {
            migrate::migrate(&connect, &server, &options).await?;
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size)
            .acquire_timeout(options.connect_timeout)
            .connect_lazy_with(connect.clone());
        let member_id = format!("mbr_{}", ulid::Ulid::generate());
        let channel = notify::channel(&options.schema);
        let (writer, appends) = mpsc::unbounded_channel();
        let (notifier, notes) = mpsc::unbounded_channel();
        let (log_queue, log_batches) = mpsc::unbounded_channel();
        notify::spawn_notifier(pool.clone(), channel.clone(), notes);
        let inner = Arc::new(Inner {
            pool,
            schema: options.schema.clone(),
            server,
            member_id,
            lease_duration: options.lease_duration,
            held: Mutex::default(),
            cache: Mutex::default(),
            ended: Mutex::default(),
            accepted: Mutex::default(),
            unflushed: Mutex::default(),
            signals: Mutex::default(),
            heartbeat: CancellationToken::new(),
            listening: CancellationToken::new(),
            writer,
            logs: log_queue,
            notifier,
            changes: Arc::new(Notify::new()),
            forget_dead_members_after: options.forget_dead_members_after,
            joined: join,
            closed: std::sync::atomic::AtomicBool::new(!join),
            lease_clock: Mutex::default(),
            away: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "test-util")]
            faults: faults::Faults::default(),
        });
        batch::spawn_writer(Arc::downgrade(&inner), appends);
        logs::spawn_log_writer(Arc::downgrade(&inner), log_batches, options.log_days);
        if !join {
            // Nothing to heartbeat, release or listen for.
            inner.heartbeat.cancel();
            inner.listening.cancel();
            let store = Self { inner };
            store.check_version().await?;
            return Ok(store);
        }
        notify::spawn_listener(
            Arc::downgrade(&inner),
            connect,
            channel,
            inner.changes.clone(),
            inner.listening.clone(),
        );
        let store = Self { inner };
        store.heartbeat_once().await?;
        if let Err(e) = store.log_lease_waits().await {
            tracing::debug!(error = %e, "could not look for members whose leases still hold runs");
        }
        let interval = options
            .heartbeat_interval
            .unwrap_or(options.lease_duration / 3)
            .max(Duration::from_millis(10));
        leases::spawn_heartbeat(&store.inner, interval);
        Ok(store)
    }

    /// Refuses a schema that is not at this build's version (a visitor does not migrate it).
    async fn check_version(&self) -> Result<(), WorldError> {
        let version: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.inner.pool)
                .await
                .map_err(|e| match &e {
                    sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01") => {
                        WorldError::Unsupported(format!(
                            "schema '{}' on {} holds no worlds-engine tables; open a world there first, or run `worlds db migrate`",
                            self.inner.schema, self.inner.server
                        ))
                    }
                    _ => self.err("reading the schema version", e),
                })?;
        match version {
            Some(SCHEMA_VERSION) => Ok(()),
            other => Err(WorldError::Unsupported(format!(
                "schema '{}' on {} is at version {}, not version {SCHEMA_VERSION} that this build knows; use the build the world runs, or migrate it (`worlds db migrate`)",
                self.inner.schema,
                self.inner.server,
                other.map_or("none".to_owned(), |v| v.to_string())
            ))),
        }
    }

    /// This process's member id (`mbr_…`), the owner of the runs it leases.
    pub fn member_id(&self) -> &str {
        &self.inner.member_id
    }

    /// The schema the tables are in.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The connection pool.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// Stops renewing this process's heartbeat: once the lease duration passes, other
    /// processes take its runs over and its appends to them fail with `LeaseLost`. For a
    /// handover at shutdown, and for tests of takeover.
    pub fn stop_heartbeat(&self) {
        self.inner.heartbeat.cancel();
    }

    /// Closes the store gracefully: stops the heartbeat, releases the leases of this member's
    /// unfinished runs (so another process claims them at once instead of after the lease
    /// expires), removes its member row, tells the other processes and closes the pool. Calls
    /// made afterwards fail with `Unavailable`. Dropping the last handle of a store does the
    /// same in the background, without waiting.
    pub async fn close(&self) -> Result<(), WorldError> {
        let first = !self
            .inner
            .closed
            .swap(true, std::sync::atomic::Ordering::AcqRel);
        self.inner.heartbeat.cancel();
        self.inner.listening.cancel();
        if first {
            // Accepted appends are written while the leases they were accepted under hold.
            if let Err(e) = self.flush_writes(None).await {
                tracing::warn!(error = %e, "appends were still being written when the store closed");
            }
        }
        let released = if first {
            leases::release(
                &self.inner.pool,
                &self.inner.member_id,
                &notify::channel(&self.inner.schema),
            )
            .await
            .map_err(|e| self.err("releasing this member's leases", e))
        } else {
            Ok(())
        };
        self.inner.held.lock().clear();
        self.inner.cache.lock().clear();
        self.inner.pool.close().await;
        released
    }

    /// The fencing epoch this store holds for a run, if it holds the run's lease.
    pub fn held_epoch(&self, run_id: &str) -> Option<i64> {
        self.inner.held.lock().get(run_id).map(|h| h.epoch)
    }

    pub(crate) fn err(&self, what: &str, e: sqlx::Error) -> WorldError {
        db::error(&self.inner.server, what, e)
    }

    /// Caches a run's state as of `next_seq`, after `appended` (the events just before
    /// `next_seq`, committed) were added to its history.
    fn cache_put(
        &self,
        run_id: &str,
        (next_seq, state_seq): (i64, i64),
        state: Arc<WorkflowState>,
        appended: &[Arc<Event>],
    ) {
        let mut cache = self.inner.cache.lock();
        if state.status.is_terminal() {
            cache.remove(run_id);
            return;
        }
        if cache.len() >= CACHE_LIMIT && !cache.contains_key(run_id) {
            // Forget an arbitrary half: a forgotten state is rebuilt from its events. Not a
            // run with accepted appends in flight: its state is ahead of the database.
            let accepted = self.inner.accepted.lock();
            let forget: Vec<String> = cache
                .keys()
                .step_by(2)
                .filter(|key| !accepted.in_flight(key))
                .cloned()
                .collect();
            drop(accepted);
            for key in forget {
                cache.remove(&key);
            }
        }
        let first = next_seq - appended.len() as i64;
        let cached = match cache.get_mut(run_id) {
            Some(cached) => cached,
            None => cache.entry(run_id.to_owned()).or_insert(Cached {
                next_seq: first,
                state_seq,
                state: None,
                tail: VecDeque::new(),
            }),
        };
        // Contiguous with what was cached: the tail grows; otherwise it starts over.
        if cached.next_seq != first {
            cached.tail.clear();
        }
        cached.tail.extend(appended.iter().cloned());
        while cached.tail.len() > TAIL_LIMIT {
            cached.tail.pop_front();
        }
        cached.next_seq = next_seq;
        cached.state_seq = state_seq;
        cached.state = Some(state);
    }

    fn cache_get(&self, run_id: &str, next_seq: i64) -> Option<Arc<WorkflowState>> {
        let cache = self.inner.cache.lock();
        if self.inner.accepted.lock().in_flight(run_id) {
            // Ahead of the database: not what a reader of `next_seq` events may see.
            return None;
        }
        cache
            .get(run_id)
            .filter(|c| c.next_seq == next_seq)
            .and_then(|c| c.state.clone())
    }

    /// Takes the cached state of a run this store holds: `(next_seq, state_seq, epoch, state)`
    /// as of this store's last write, for an append that assumes nobody wrote since. The
    /// append puts the new state back ([`cache_put`](Self::cache_put)); until then, or if it
    /// does not land, the run's state is rebuilt from its events when needed.
    fn take_cached_held(&self, run_id: &str) -> Option<(i64, i64, i64, Arc<WorkflowState>)> {
        let held = self.inner.held.lock().get(run_id).copied()?;
        let mut cache = self.inner.cache.lock();
        if self.inner.accepted.lock().in_flight(run_id) {
            // Ahead of the database until the writer writes what was accepted.
            return None;
        }
        let c = cache.get_mut(run_id)?;
        let state = c.state.take()?;
        Some((c.next_seq, c.state_seq, held.epoch, state))
    }

    /// The run's events from `from_seq` on, from memory, if this store holds the run and its
    /// cached tail reaches back to `from_seq` and forward to everything this store has seen of
    /// the run (its own commits and, through [`LeaseStore::external_changes`], others'
    /// writes). Such a read is an earlier read of the database: another process's write
    /// landing since is reported by `external_changes`, which moves `seen_seq` past the tail,
    /// so the read after that wake-up goes to the database.
    ///
    /// [`LeaseStore::external_changes`]: worlds_engine::store::LeaseStore::external_changes
    pub(crate) fn cached_tail(&self, run_id: &str, from_seq: u64) -> Option<Vec<Arc<Event>>> {
        let seen = self.inner.held.lock().get(run_id)?.seen_seq;
        let cache = self.inner.cache.lock();
        let cached = cache.get(run_id)?;
        let start = cached.next_seq - cached.tail.len() as i64;
        let from = i64::try_from(from_seq).ok()?;
        if cached.next_seq < seen || from < start {
            return None;
        }
        let skip = usize::try_from(from - start).ok()?;
        Some(cached.tail.iter().skip(skip).cloned().collect())
    }

    /// A stream of the run changed here: wakes this process's readers and, through a
    /// notification, other processes' readers.
    fn stream_changed(&self, run_id: &str) {
        self.bump(run_id);
        self.announce(notify::Change::Stream, run_id);
    }

    /// Wakes this process's readers of the run's streams.
    fn bump(&self, run_id: &str) {
        let mut signals = self.inner.signals.lock();
        if let Some(tx) = signals.get(run_id) {
            if tx.receiver_count() == 0 {
                signals.remove(run_id);
            } else {
                tx.send_modify(|v| *v += 1);
            }
        }
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_servers_go_without_tls_unless_asked() {
        if std::env::var_os("PGSSLMODE").is_some() {
            return;
        }
        assert!(plain_on_this_machine(
            "postgres://u@127.0.0.1/db",
            "127.0.0.1"
        ));
        assert!(plain_on_this_machine(
            "postgres://u@localhost:5433/db",
            "localhost"
        ));
        assert!(!plain_on_this_machine(
            "postgres://u@127.0.0.1/db?sslmode=require",
            "127.0.0.1"
        ));
        assert!(!plain_on_this_machine(
            "postgres://u@db.internal/db",
            "db.internal"
        ));
    }

    #[test]
    fn urls_in_messages_hide_the_password() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
    }

    #[tokio::test]
    async fn bad_options_are_refused_before_connecting() {
        let err = PostgresStore::connect("not a url", PostgresOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), worlds_engine::ErrorKind::InvalidInput);
        let err = PostgresStore::connect(
            "postgres://localhost/x",
            PostgresOptions {
                schema: "Bad-Name".into(),
                ..PostgresOptions::default()
            },
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("Bad-Name"), "{err}");
    }
}
