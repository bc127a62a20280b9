//! A PostgreSQL world's health, read from its tables from outside the world: [`doctor()`] and
//! its [`DoctorReport`], and [`PostgresStore::lease_holder`].

use std::fmt;
use std::time::Duration;

use sqlx::{Connection, PgConnection, Row};
use worlds_engine::{RunStatus, WorldError};

use crate::admin::{self, ConnectError, Probe, SchemaStatus};
use crate::{PostgresOptions, PostgresStore, SCHEMA_VERSION};

/// Dead row versions in `runs` past which the doctor speaks up: well past what the table's own
/// autovacuum settings (migration 6: 5 000) let pile up.
pub const DEAD_ROWS_WORTH_A_WORD: u64 = 50_000;

/// What [`doctor()`] found: what the server and the schema are, the world's figures, and the
/// findings they make, each with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorReport {
    /// What the first connection found; `None` when the server did not answer (then the only
    /// finding, of kind [`FindingKind::Unreachable`], says why).
    pub probe: Option<Probe>,
    /// The world's figures, read when the schema is at this build's [`SCHEMA_VERSION`]
    /// (`None` otherwise: a finding says what is wrong with the schema).
    pub health: Option<Health>,
    /// The problems found, most pressing first, then the notes (see [`Health::findings`]).
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// How many findings are problems.
    pub fn problems(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Problem)
            .count()
    }

    /// True when nothing is a problem (notes may remain).
    pub fn healthy(&self) -> bool {
        self.problems() == 0
    }
}

/// A world's figures, as its tables show them at one moment, and the lease they were judged by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// The world's lease ([`PostgresOptions::lease_duration`] given to [`doctor()`]): members
    /// that recorded no lease of their own (builds before schema version 8) are judged by it,
    /// and timers due for longer are late.
    pub lease: Duration,
    /// The members, most recent heartbeat first.
    pub members: Vec<MemberHealth>,
    /// Runs and their events by status, in the order of the statuses' names.
    pub runs: Vec<StatusCount>,
    /// Runs not finished.
    pub unfinished: u64,
    /// Unfinished runs leased to no live member (dead members' and unowned): waiting for a
    /// live member to take them over.
    pub orphaned: u64,
    /// Timers due now.
    pub due_timers: u64,
    /// How long the oldest due timer has been due (zero when none is).
    pub oldest_due: Duration,
    /// Whether the server's autovacuum is on.
    pub autovacuum: bool,
    /// The `runs` table's rows, as the server's statistics count them.
    pub runs_table: TableRows,
}

/// A member of the world, as its heartbeat row shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberHealth {
    /// `mbr_…`.
    pub member_id: String,
    /// Time since its last heartbeat (the database's clock).
    pub silent_for: Duration,
    /// Its lease, as it recorded it, else the world's ([`Health::lease`]).
    pub lease: Duration,
    /// Unfinished runs it holds the lease of.
    pub unfinished_runs: u64,
}

impl MemberHealth {
    /// Whether its heartbeat is recent enough for its leases to hold.
    pub fn live(&self) -> bool {
        self.silent_for <= self.lease
    }
}

/// How many runs have one status, and their events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCount {
    /// The status.
    pub status: RunStatus,
    /// Runs with it.
    pub runs: u64,
    /// Their events.
    pub events: u64,
}

/// A table's live rows and dead row versions (rows updated or deleted that a vacuum has not
/// reclaimed yet), as the server's statistics (`pg_stat_user_tables`) count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableRows {
    /// Live rows.
    pub live: u64,
    /// Dead row versions.
    pub dead: u64,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth knowing; nothing to do.
    Note,
    /// Something is wrong or stuck: [`Finding::action`] says what to do.
    Problem,
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FindingKind {
    /// The server did not answer or refused the connection.
    Unreachable,
    /// There is no schema of that name.
    SchemaMissing,
    /// The schema holds no worlds-engine tables.
    SchemaEmpty,
    /// The schema is at an older version than this build's [`SCHEMA_VERSION`].
    SchemaOlder,
    /// The schema is at a newer version than this build's [`SCHEMA_VERSION`].
    SchemaNewer,
    /// Unfinished runs and no live member to drive them.
    NoLiveMember,
    /// Runs still leased to members dead for over four leases while live members exist: the
    /// live members are not taking them over.
    TakeoverStalled,
    /// Timers due for longer than the lease.
    TimersLate,
    /// Dead row versions piling up in the `runs` table.
    DeadRows,
    /// Dead members that hold no runs (processes that stopped).
    IdleDeadMembers,
}

/// One thing the doctor found: what, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// What it is about.
    pub kind: FindingKind,
    /// What was found, in words (with its figures).
    pub found: String,
    /// What to do, when there is something to do.
    pub action: Option<String>,
}

impl Finding {
    fn problem(kind: FindingKind, found: String, action: impl Into<String>) -> Self {
        Self {
            severity: Severity::Problem,
            kind,
            found,
            action: Some(action.into()),
        }
    }
}

/// `found; action`, or `found` alone.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            Some(action) => write!(f, "{}; {action}", self.found),
            None => f.write_str(&self.found),
        }
    }
}

/// A duration as `2m 30s`.
fn words(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// `d` cut to whole seconds.
fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

impl Health {
    /// Members whose heartbeat is recent enough for their leases to hold.
    pub fn live_members(&self) -> usize {
        self.members.iter().filter(|m| m.live()).count()
    }

    /// The findings these figures make: problems, most pressing first, then notes.
    pub fn findings(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        let live = self.live_members();
        let unfinished = self.unfinished;
        if live == 0 && unfinished > 0 {
            findings.push(Finding::problem(
                FindingKind::NoLiveMember,
                format!("{unfinished} unfinished run(s) and no live member: nothing drives them"),
                "start the world's program (every process opened with worlds_postgres::open on this database and schema is a member) and it takes them over",
            ));
        } else if live > 0 && self.orphaned > 0 {
            let stalled = self
                .members
                .iter()
                .filter(|m| !m.live() && m.unfinished_runs > 0)
                .any(|m| m.silent_for > m.lease * 4);
            if stalled {
                findings.push(Finding::problem(
                    FindingKind::TakeoverStalled,
                    format!(
                        "{} run(s) are still leased to members dead for over {}: the live members have not taken them over",
                        self.orphaned,
                        words(self.lease * 4)
                    ),
                    "check their logs (can they reach the database? are the runs' workflows registered in them?)",
                ));
            }
        }
        if self.due_timers > 0 && self.oldest_due > self.lease {
            findings.push(if live == 0 {
                Finding::problem(
                    FindingKind::TimersLate,
                    format!(
                        "{} timer(s) are due and no member is live to fire them",
                        self.due_timers
                    ),
                    "start the world's program",
                )
            } else {
                Finding::problem(
                    FindingKind::TimersLate,
                    format!(
                        "{} timer(s) have been due for up to {}: the live members are behind",
                        self.due_timers,
                        words(whole_seconds(self.oldest_due))
                    ),
                    "check their logs and load (more members, or more workers per member, help)",
                )
            });
        }
        let dead_rows = self.runs_table.dead;
        if dead_rows > DEAD_ROWS_WORTH_A_WORD {
            findings.push(if self.autovacuum {
                Finding::problem(
                    FindingKind::DeadRows,
                    format!(
                        "the runs table holds {dead_rows} dead row versions: autovacuum is behind, so status counts, run lists and claims walk them"
                    ),
                    "check for long transactions on the server (they hold vacuum back), or run VACUUM on the schema's runs table",
                )
            } else {
                Finding::problem(
                    FindingKind::DeadRows,
                    format!(
                        "the runs table holds {dead_rows} dead row versions and the server's autovacuum is off: status counts, run lists and claims slow down as they pile up"
                    ),
                    "turn autovacuum on (ALTER SYSTEM SET autovacuum = on, then SELECT pg_reload_conf()), or run VACUUM on the schema's runs table regularly",
                )
            });
        }
        let idle_dead = self
            .members
            .iter()
            .filter(|m| !m.live() && m.unfinished_runs == 0)
            .count();
        if idle_dead > 0 {
            findings.push(Finding {
                severity: Severity::Note,
                kind: FindingKind::IdleDeadMembers,
                found: format!(
                    "{idle_dead} dead member(s) hold no runs: processes that stopped; harmless"
                ),
                action: None,
            });
        }
        findings
    }
}

/// The finding a schema this build cannot use makes, if it makes one.
fn schema_finding(probe: &Probe, schema: &str) -> Option<Finding> {
    let server = &probe.server;
    Some(match probe.schema {
        SchemaStatus::Missing => Finding::problem(
            FindingKind::SchemaMissing,
            format!("there is no schema '{schema}' at {server}: no world has run there yet"),
            "check the schema's name; a world creates its schema when it first opens, and migrate() (`worlds db migrate`) creates it empty",
        ),
        SchemaStatus::Empty => Finding::problem(
            FindingKind::SchemaEmpty,
            format!("schema '{schema}' at {server} holds no worlds-engine tables"),
            "check the schema's name",
        ),
        SchemaStatus::At(v) if v > SCHEMA_VERSION => Finding::problem(
            FindingKind::SchemaNewer,
            format!("schema '{schema}' at {server} is at version {v}, newer than version {SCHEMA_VERSION} that this build knows"),
            "use the build the world runs",
        ),
        SchemaStatus::At(v) if v < SCHEMA_VERSION => Finding::problem(
            FindingKind::SchemaOlder,
            format!("schema '{schema}' at {server} is at version {v}, older than version {SCHEMA_VERSION} that this build knows"),
            "use the build the world runs, or migrate it (migrate(), `worlds db migrate`; a world's program also migrates the schema when it opens)",
        ),
        SchemaStatus::At(_) => return None,
    })
}

/// Checks the health of the PostgreSQL world at `url` in the schema `options.schema` names,
/// from outside it, on one connection of its own (it joins no world, writes nothing, and
/// creates nor migrates anything): that the server answers, the schema's version against this
/// build's, the members (live or dead by the age of their heartbeat against their lease), the
/// runs by status, the runs leased to no live member, the timers that are due, and dead row
/// versions piling up in the `runs` table.
///
/// Pass the world's lease in [`PostgresOptions::lease_duration`]
/// (`DatabaseConfig::lease_duration`, default 30 s): members that recorded no lease of their
/// own are judged by it, timers due for longer are late, and runs still leased to members
/// dead for four leases mean the takeover is stalled. [`PostgresOptions::connect_timeout`]
/// bounds the wait for the server; [`PostgresOptions::statement_timeout`] each query.
///
/// A server that does not answer, and a schema this build cannot use, are findings of the
/// report, not errors: the error is for a URL or schema name that is not usable, and for a
/// query that fails once connected.
///
/// ```no_run
/// # async fn demo() -> Result<(), worlds_engine::WorldError> {
/// let options = worlds_postgres::PostgresOptions {
///     schema: "shop".into(),
///     lease_duration: std::time::Duration::from_secs(10),
///     ..Default::default()
/// };
/// let report = worlds_postgres::doctor("postgres://app@db.internal/app", &options).await?;
/// for finding in &report.findings {
///     println!("{:?}: {finding}", finding.severity);
/// }
/// # Ok(()) }
/// ```
pub async fn doctor(url: &str, options: &PostgresOptions) -> Result<DoctorReport, WorldError> {
    let (mut conn, server) = match admin::connect(url, options).await {
        Ok(connected) => connected,
        Err(ConnectError::Unreachable(found)) => {
            return Ok(DoctorReport {
                probe: None,
                health: None,
                findings: vec![Finding::problem(
                    FindingKind::Unreachable,
                    found,
                    admin::UNREACHABLE_ACTION,
                )],
            });
        }
        Err(ConnectError::Other(e)) => return Err(e),
    };
    let result = async {
        let probe = admin::probe_on(&mut conn, &server, &options.schema).await?;
        if let Some(finding) = schema_finding(&probe, &options.schema) {
            return Ok(DoctorReport {
                probe: Some(probe),
                health: None,
                findings: vec![finding],
            });
        }
        let health = health(&mut conn, &options.schema, options.lease_duration)
            .await
            .map_err(|e| crate::db::error(&server, "reading the world's health", e))?;
        Ok(DoctorReport {
            probe: Some(probe),
            findings: health.findings(),
            health: Some(health),
        })
    }
    .await;
    let _ = conn.close().await;
    result
}

/// A count or a number of milliseconds the database answered, never negative.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Reads the members, runs, leases, timers and the `runs` table's rows.
async fn health(
    conn: &mut PgConnection,
    schema: &str,
    lease: Duration,
) -> Result<Health, sqlx::Error> {
    sqlx::query("SELECT set_config('search_path', $1, false)")
        .bind(schema)
        .execute(&mut *conn)
        .await?;
    let rows = sqlx::query(
        "SELECT m.member_id,
                (extract(epoch FROM now() - m.heartbeat_at) * 1000)::bigint AS silent_ms,
                (SELECT count(*) FROM runs r WHERE r.owner = m.member_id AND NOT r.finished)
                    AS holds,
                m.lease_ms
         FROM members m ORDER BY m.heartbeat_at DESC",
    )
    .fetch_all(&mut *conn)
    .await?;
    let members = rows
        .iter()
        .map(|row| MemberHealth {
            member_id: row.get("member_id"),
            silent_for: Duration::from_millis(count(row.get("silent_ms"))),
            unfinished_runs: count(row.get("holds")),
            lease: row
                .get::<Option<i64>, _>("lease_ms")
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or(lease, Duration::from_millis),
        })
        .collect();
    let rows = sqlx::query(
        "SELECT status, count(*) AS runs, coalesce(sum(next_seq), 0)::bigint AS events,
                count(*) FILTER (WHERE NOT finished) AS unfinished
         FROM runs GROUP BY status ORDER BY status",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut runs = Vec::with_capacity(rows.len());
    for row in &rows {
        let status: String = row.get("status");
        let status = status
            .parse::<RunStatus>()
            .map_err(|e| sqlx::Error::Decode(e.into()))?;
        runs.push(StatusCount {
            status,
            runs: count(row.get("runs")),
            events: count(row.get("events")),
        });
    }
    let unfinished = rows
        .iter()
        .map(|row| count(row.get::<i64, _>("unfinished")))
        .sum();
    let orphaned: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs r WHERE NOT r.finished AND NOT EXISTS (
             SELECT 1 FROM members m WHERE m.member_id = r.owner
             AND m.heartbeat_at > now() - coalesce(m.lease_ms * interval '1 millisecond',
                                                   make_interval(secs => $1)))",
    )
    .bind(lease.as_secs_f64())
    .fetch_one(&mut *conn)
    .await?;
    let (due, oldest): (i64, i64) = sqlx::query_as(
        "SELECT count(*),
                coalesce((extract(epoch FROM now()) * 1000)::bigint - min(fire_at), 0)::bigint
         FROM timers WHERE fire_at <= (extract(epoch FROM now()) * 1000)::bigint",
    )
    .fetch_one(&mut *conn)
    .await?;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&mut *conn)
        .await?;
    let (live, dead): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0) FROM pg_stat_user_tables
         WHERE schemaname = current_schema() AND relname = 'runs'",
    )
    .fetch_optional(&mut *conn)
    .await?
    .unwrap_or((0, 0));
    Ok(Health {
        lease,
        members,
        runs,
        unfinished,
        orphaned: count(orphaned),
        due_timers: count(due),
        oldest_due: Duration::from_millis(count(oldest)),
        autovacuum: autovacuum == "on",
        runs_table: TableRows {
            live: count(live),
            dead: count(dead),
        },
    })
}

/// The member holding an unfinished run's lease, as [`PostgresStore::lease_holder`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// `mbr_…`.
    pub member_id: String,
    /// Whether it is alive.
    pub state: HolderState,
}

/// Whether the member holding a run's lease is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderState {
    /// Its heartbeat is recent enough for its lease to hold: it drives the run.
    Live,
    /// Its heartbeat stopped longer ago than its lease: a live member takes the run over.
    Dead {
        /// Time since its last heartbeat.
        silent_for: Duration,
    },
    /// It has no member row any more (it left, or was forgotten): a live member takes the run
    /// over.
    Gone,
}

impl PostgresStore {
    /// The member holding the lease of run `run_id` and whether it is alive, judged by the
    /// lease it recorded (else this store's [`PostgresOptions::lease_duration`]); `None` for a
    /// run that is finished, unknown or held by no member.
    pub async fn lease_holder(&self, run_id: &str) -> Result<Option<LeaseHolder>, WorldError> {
        let row = sqlx::query(
            "SELECT r.owner,
                    (extract(epoch FROM now() - m.heartbeat_at) * 1000)::bigint AS silent_ms,
                    m.lease_ms
             FROM runs r LEFT JOIN members m ON m.member_id = r.owner
             WHERE r.run_id = $1 AND NOT r.finished AND r.owner IS NOT NULL",
        )
        .bind(run_id)
        .fetch_optional(self.pool())
        .await
        .map_err(|e| self.err("reading a run's lease holder", e))?;
        Ok(row.map(|row| {
            let lease = row
                .get::<Option<i64>, _>("lease_ms")
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or(self.inner.lease_duration, Duration::from_millis);
            let state = match row.get::<Option<i64>, _>("silent_ms") {
                None => HolderState::Gone,
                Some(ms) => {
                    let silent_for = Duration::from_millis(count(ms));
                    if silent_for <= lease {
                        HolderState::Live
                    } else {
                        HolderState::Dead { silent_for }
                    }
                }
            };
            LeaseHolder {
                member_id: row.get("owner"),
                state,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    fn member(id: &str, silent_s: u64, holds: u64) -> MemberHealth {
        MemberHealth {
            member_id: id.to_owned(),
            silent_for: Duration::from_secs(silent_s),
            lease: LEASE,
            unfinished_runs: holds,
        }
    }

    fn kinds(health: &Health) -> Vec<(Severity, FindingKind)> {
        health
            .findings()
            .iter()
            .map(|f| (f.severity, f.kind))
            .collect()
    }

    #[test]
    fn a_world_with_live_members_and_nothing_due_has_only_a_note() {
        let health = Health {
            lease: LEASE,
            members: vec![member("mbr_a", 1, 2), member("mbr_b", 600, 0)],
            ..Health::default()
        };
        let findings = health.findings();
        assert_eq!(
            kinds(&health),
            [(Severity::Note, FindingKind::IdleDeadMembers)]
        );
        assert_eq!(
            findings[0].to_string(),
            "1 dead member(s) hold no runs: processes that stopped; harmless"
        );
    }

    #[test]
    fn problems_come_with_what_to_do() {
        let health = Health {
            lease: LEASE,
            members: vec![member("mbr_a", 90, 3)],
            unfinished: 3,
            orphaned: 3,
            due_timers: 2,
            oldest_due: Duration::from_secs(120),
            ..Health::default()
        };
        let findings = health.findings();
        assert_eq!(
            kinds(&health),
            [
                (Severity::Problem, FindingKind::NoLiveMember),
                (Severity::Problem, FindingKind::TimersLate)
            ]
        );
        assert!(findings[0].found.contains("nothing drives them"));
        assert!(findings[0]
            .action
            .as_deref()
            .unwrap()
            .starts_with("start the world's program"));
        assert_eq!(
            findings[1].to_string(),
            "2 timer(s) are due and no member is live to fire them; start the world's program"
        );

        let stalled = Health {
            lease: LEASE,
            members: vec![member("mbr_a", 1, 0), member("mbr_b", 600, 3)],
            unfinished: 3,
            orphaned: 3,
            ..Health::default()
        };
        let findings = stalled.findings();
        assert_eq!(findings[0].kind, FindingKind::TakeoverStalled);
        assert!(
            findings[0].found.contains("dead for over 2m"),
            "{}",
            findings[0]
        );
        // Dead for less than four leases: the live members may still be taking them over.
        let recent = Health {
            members: vec![member("mbr_a", 1, 0), member("mbr_b", 100, 3)],
            ..stalled
        };
        assert!(recent.findings().is_empty());
    }

    #[test]
    fn the_worlds_lease_decides_what_is_late() {
        let due = Health {
            lease: Duration::from_secs(300),
            members: vec![MemberHealth {
                lease: Duration::from_secs(300),
                ..member("mbr_a", 1, 1)
            }],
            unfinished: 1,
            due_timers: 1,
            oldest_due: Duration::from_secs(120),
            ..Health::default()
        };
        assert!(due.findings().is_empty(), "{:?}", due.findings());
        let short = Health {
            lease: Duration::from_secs(10),
            ..due
        };
        assert_eq!(
            kinds(&short),
            [(Severity::Problem, FindingKind::TimersLate)]
        );
        assert!(short.findings()[0].found.contains("due for up to 2m"));
    }

    #[test]
    fn dead_rows_piling_up_are_a_problem_with_the_way_out() {
        let quiet = Health {
            lease: LEASE,
            members: vec![member("mbr_a", 1, 0)],
            runs_table: TableRows {
                live: 1_000_000,
                dead: 4_000,
            },
            ..Health::default()
        };
        assert!(quiet.findings().is_empty());
        let piled = Health {
            runs_table: TableRows {
                live: 1_000_000,
                dead: 900_000,
            },
            ..quiet.clone()
        };
        let text = piled.findings()[0].to_string();
        assert!(text.contains("900000 dead row versions"), "{text}");
        assert!(text.contains("autovacuum is off"), "{text}");
        assert!(text.contains("ALTER SYSTEM SET autovacuum = on"), "{text}");
        let behind = Health {
            autovacuum: true,
            ..piled
        };
        let text = behind.findings()[0].to_string();
        assert!(text.contains("autovacuum is behind"), "{text}");
        assert!(text.contains("long transactions"), "{text}");
    }
}
