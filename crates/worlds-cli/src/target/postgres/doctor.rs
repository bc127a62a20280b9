//! `worlds doctor --database-url`: a PostgreSQL world's health, with advice for each problem.
//!
//! It checks, in order: that the server answers (host and port), the schema's version against
//! this build's, the members (live or dead by the age of their heartbeat), the runs by status,
//! the runs leased to dead members (waiting for a live member to take them over) and the
//! timers that are due. Problems are listed with what to do; any problem makes the command
//! exit non-zero.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use sqlx::Row;
use worlds_engine::{ResolveData, RunStatus, WorkflowQueryFilter};
use worlds_postgres::{PostgresOptions, PostgresStore, SCHEMA_VERSION};

use super::{connect, leave, probe, unusable, Database};
use crate::target::scan::{collect_runs, format_stuck, stuck_runs, STUCK_SCAN};
use crate::text::{duration, now_ms};

/// A member whose heartbeat is older than this is dead, unless it recorded its own lease
/// (`DatabaseConfig::lease_duration`; members of builds before schema version 8 did not): the
/// store's default lease.
fn lease() -> Duration {
    PostgresOptions::default().lease_duration
}

/// Seconds, as PostgreSQL's `make_interval` takes them.
fn lease_secs() -> f64 {
    lease().as_secs_f64()
}

/// A member of the world, as its heartbeat row shows it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// `mbr_…`.
    pub(crate) id: String,
    /// Milliseconds since its last heartbeat.
    pub(crate) silent_ms: u64,
    /// Unfinished runs it holds the lease of.
    pub(crate) holds: i64,
    /// Its lease, as it recorded it (else the default).
    pub(crate) lease: Duration,
}

impl Member {
    /// Whether its heartbeat is recent enough for its leases to hold.
    pub(crate) fn live(&self) -> bool {
        Duration::from_millis(self.silent_ms) <= self.lease
    }
}

/// What the doctor read from the database.
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    /// The members, most recent heartbeat first.
    pub(crate) members: Vec<Member>,
    /// Runs by status, and their events.
    pub(crate) by_status: Vec<(String, i64, i64)>,
    /// Runs not finished.
    pub(crate) unfinished: i64,
    /// Unfinished runs leased to no live member (dead members' and unowned).
    pub(crate) orphaned: i64,
    /// Timers due now, and how long ago the oldest was due (ms).
    pub(crate) due_timers: i64,
    /// How overdue the oldest due timer is (ms).
    pub(crate) oldest_due_ms: u64,
    /// Whether the server's autovacuum is on.
    pub(crate) autovacuum: bool,
    /// Dead row versions in the `runs` table and its live rows, as the server's statistics
    /// count them.
    pub(crate) runs_dead: i64,
    pub(crate) runs_live: i64,
}

/// Dead row versions in `runs` past which the doctor speaks up: well past what the table's
/// own autovacuum settings (migration 6: 5 000) let pile up.
const DEAD_ROWS_WORTH_A_WORD: i64 = 50_000;

/// Runs `worlds doctor` on a PostgreSQL world.
pub(crate) fn doctor(db: &Database, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(out, "database: {} (schema '{}')", db.server(), db.schema())?;
    super::check_schema_name(db.schema())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let probed = runtime.block_on(probe(db));
    let probe = match probed {
        Ok(probe) => probe,
        Err(e) => {
            writeln!(out, "connection: FAILED")?;
            return Err(e);
        }
    };
    writeln!(
        out,
        "connection: ok ({}, PostgreSQL {})",
        db.host_port(),
        probe.server_version
    )?;
    let version = match probe.version {
        Some(v) => v.to_string(),
        None if probe.schema_exists => "none (no worlds-engine tables)".to_owned(),
        None => "none (no such schema)".to_owned(),
    };
    writeln!(
        out,
        "schema version: {version} (this build: {SCHEMA_VERSION})"
    )?;
    if let Some(problem) = unusable(db, &probe) {
        writeln!(out, "problem: {}", db.scrub(&problem))?;
        bail!("1 problem found (see above)");
    }
    let (findings, stuck) = runtime.block_on(async {
        let store = connect(db).await?;
        let found = async {
            let findings = findings(&store).await?;
            let unfinished = WorkflowQueryFilter::new()
                .status([
                    RunStatus::Pending,
                    RunStatus::Running,
                    RunStatus::Compensating,
                ])
                .resolve_data(ResolveData::None)
                .oldest_first();
            let (runs, _) = collect_runs(&store, unfinished, STUCK_SCAN).await?;
            let stuck = stuck_runs(&store, &runs, now_ms()).await?;
            anyhow::Ok((findings, stuck))
        }
        .await;
        leave(&store).await;
        found.map_err(|e| db.error(format!("{e:#}")))
    })?;
    let mut text = format_findings(&findings);
    text.push_str(&format_stuck(&stuck));
    out.write_all(text.as_bytes())?;
    let problems = text.lines().filter(|l| l.starts_with("problem:")).count();
    if problems > 0 {
        bail!("{problems} problem(s) found (see above)");
    }
    Ok(())
}

/// Reads the members, runs, leases and timers (the command joined no world: it has no member
/// row of its own).
pub(crate) async fn findings(store: &PostgresStore) -> anyhow::Result<Findings> {
    let pool = store.pool();
    let rows = sqlx::query(
        "SELECT m.member_id,
                (extract(epoch FROM now() - m.heartbeat_at) * 1000)::bigint AS silent_ms,
                (SELECT count(*) FROM runs r WHERE r.owner = m.member_id AND NOT r.finished)
                    AS holds,
                m.lease_ms
         FROM members m ORDER BY m.heartbeat_at DESC",
    )
    .fetch_all(pool)
    .await?;
    let members = rows
        .iter()
        .map(|row| Member {
            id: row.get("member_id"),
            silent_ms: u64::try_from(row.get::<i64, _>("silent_ms")).unwrap_or(0),
            holds: row.get("holds"),
            lease: row
                .get::<Option<i64>, _>("lease_ms")
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or_else(lease, Duration::from_millis),
        })
        .collect();
    let rows = sqlx::query(
        "SELECT status, count(*) AS runs, coalesce(sum(next_seq), 0)::bigint AS events,
                count(*) FILTER (WHERE NOT finished) AS unfinished
         FROM runs GROUP BY status ORDER BY status",
    )
    .fetch_all(pool)
    .await?;
    let by_status = rows
        .iter()
        .map(|row| (row.get("status"), row.get("runs"), row.get("events")))
        .collect();
    let unfinished = rows.iter().map(|row| row.get::<i64, _>("unfinished")).sum();
    let orphaned: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs r WHERE NOT r.finished AND NOT EXISTS (
             SELECT 1 FROM members m WHERE m.member_id = r.owner
             AND m.heartbeat_at > now() - coalesce(m.lease_ms * interval '1 millisecond',
                                                   make_interval(secs => $1)))",
    )
    .bind(lease_secs())
    .fetch_one(pool)
    .await?;
    let row = sqlx::query(
        "SELECT count(*) AS due,
                coalesce((extract(epoch FROM now()) * 1000)::bigint - min(fire_at), 0)::bigint
                    AS oldest
         FROM timers WHERE fire_at <= (extract(epoch FROM now()) * 1000)::bigint",
    )
    .fetch_one(pool)
    .await?;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(pool)
        .await?;
    let (runs_live, runs_dead): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0) FROM pg_stat_user_tables
         WHERE schemaname = current_schema() AND relname = 'runs'",
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or((0, 0));
    Ok(Findings {
        members,
        by_status,
        unfinished,
        orphaned,
        due_timers: row.get("due"),
        oldest_due_ms: u64::try_from(row.get::<i64, _>("oldest")).unwrap_or(0),
        autovacuum: autovacuum == "on",
        runs_dead,
        runs_live,
    })
}

/// The findings as text: one `problem:` line (with its advice) per problem, then `healthy` or
/// nothing.
pub(crate) fn format_findings(f: &Findings) -> String {
    let mut text = String::new();
    let live = f.members.iter().filter(|m| m.live()).count();
    let dead = f.members.len() - live;
    let _ = writeln!(
        text,
        "members: {live} live, {dead} dead (no heartbeat within their lease)"
    );
    for m in &f.members {
        let _ = writeln!(
            text,
            "  {}  {}  heartbeat {} ago (lease {})  holds {} unfinished run(s)",
            m.id,
            if m.live() { "live" } else { "dead" },
            duration(m.silent_ms / 1000 * 1000),
            duration(u64::try_from(m.lease.as_millis()).unwrap_or(u64::MAX)),
            m.holds
        );
    }
    let runs: i64 = f.by_status.iter().map(|(_, n, _)| n).sum();
    let events: i64 = f.by_status.iter().map(|(_, _, e)| e).sum();
    let _ = writeln!(text, "runs: {runs} ({events} events)");
    for (status, count, _) in &f.by_status {
        let _ = writeln!(text, "  {status}: {count}");
    }
    let unfinished = f.unfinished;
    let _ = writeln!(
        text,
        "runs leased to no live member: {} (waiting for a member to take them over)",
        f.orphaned
    );
    let _ = writeln!(
        text,
        "timers due: {}{}",
        f.due_timers,
        if f.due_timers > 0 {
            format!(
                " (the oldest for {})",
                duration(f.oldest_due_ms / 1000 * 1000)
            )
        } else {
            String::new()
        }
    );
    let mut problems = Vec::new();
    if live == 0 && unfinished > 0 {
        problems.push(format!(
            "{unfinished} unfinished run(s) and no live member: nothing drives them; start the world's program (every process opened with worlds_postgres::open on this database and schema is a member) and it takes them over"
        ));
    } else if live > 0 && f.orphaned > 0 {
        let stuck = f
            .members
            .iter()
            .filter(|m| !m.live() && m.holds > 0)
            .any(|m| Duration::from_millis(m.silent_ms) > m.lease * 4);
        if stuck {
            problems.push(format!(
                "{} run(s) are still leased to members dead for over {}: the live members have not taken them over; check their logs (can they reach the database? are the runs' workflows registered in them?)",
                f.orphaned,
                duration(u64::try_from((lease() * 4).as_millis()).unwrap_or(u64::MAX))
            ));
        }
    }
    if f.due_timers > 0 && Duration::from_millis(f.oldest_due_ms) > lease() {
        problems.push(if live == 0 {
            format!(
                "{} timer(s) are due and no member is live to fire them: start the world's program",
                f.due_timers
            )
        } else {
            format!(
                "{} timer(s) have been due for up to {}: the live members are behind; check their logs and load (more members, or more workers per member, help)",
                f.due_timers,
                duration(f.oldest_due_ms / 1000 * 1000)
            )
        });
    }
    if f.runs_dead > DEAD_ROWS_WORTH_A_WORD {
        let _ = writeln!(
            text,
            "table runs: {} live rows, {} dead row versions",
            f.runs_live, f.runs_dead
        );
        problems.push(if f.autovacuum {
            format!(
                "the runs table holds {} dead row versions: autovacuum is behind, so status counts, run lists and claims walk them; check for long transactions on the server (they hold vacuum back), or run VACUUM on the schema's runs table",
                f.runs_dead
            )
        } else {
            format!(
                "the runs table holds {} dead row versions and the server's autovacuum is off: status counts, run lists and claims slow down as they pile up; turn autovacuum on (ALTER SYSTEM SET autovacuum = on, then SELECT pg_reload_conf()), or run VACUUM on the schema's runs table regularly",
                f.runs_dead
            )
        });
    }
    let idle_dead = f
        .members
        .iter()
        .filter(|m| !m.live() && m.holds == 0)
        .count();
    if idle_dead > 0 {
        let _ = writeln!(
            text,
            "note: {idle_dead} dead member(s) hold no runs: processes that stopped; harmless"
        );
    }
    for problem in &problems {
        let _ = writeln!(text, "problem: {problem}");
    }
    if problems.is_empty() {
        text.push_str("healthy\n");
    }
    text
}

/// The member driving a run, for `runs show`: `member mbr_… (live)`, or how long its
/// heartbeat has been silent; `None` for a run no one holds.
pub(crate) async fn driver_of(
    store: &PostgresStore,
    run_id: &str,
) -> anyhow::Result<Option<String>> {
    let row = sqlx::query(
        "SELECT r.owner,
                (extract(epoch FROM now() - m.heartbeat_at) * 1000)::bigint AS silent_ms,
                m.lease_ms
         FROM runs r LEFT JOIN members m ON m.member_id = r.owner
         WHERE r.run_id = $1 AND NOT r.finished AND r.owner IS NOT NULL",
    )
    .bind(run_id)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(|row| {
        let owner: String = row.get("owner");
        let lease = row
            .get::<Option<i64>, _>("lease_ms")
            .and_then(|ms| u64::try_from(ms).ok())
            .map_or_else(lease, Duration::from_millis);
        match row.get::<Option<i64>, _>("silent_ms") {
            Some(ms) if Duration::from_millis(u64::try_from(ms).unwrap_or(0)) <= lease => {
                format!("member {owner}")
            }
            Some(ms) => format!(
                "member {owner} (dead: no heartbeat for {}; a live member takes the run over)",
                duration(u64::try_from(ms).unwrap_or(0) / 1000 * 1000)
            ),
            None => format!("member {owner} (gone; a live member takes the run over)"),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, silent_s: u64, holds: i64) -> Member {
        Member {
            id: id.to_owned(),
            silent_ms: silent_s * 1000,
            holds,
            lease: lease(),
        }
    }

    #[test]
    fn a_world_with_live_members_and_nothing_due_is_healthy() {
        let findings = Findings {
            members: vec![member("mbr_a", 1, 2), member("mbr_b", 600, 0)],
            by_status: vec![("completed".into(), 5, 40), ("running".into(), 2, 6)],
            ..Findings::default()
        };
        let text = format_findings(&findings);
        assert!(text.contains("members: 1 live, 1 dead"), "{text}");
        assert!(text.contains("runs: 7 (46 events)"), "{text}");
        assert!(text.contains("  running: 2"), "{text}");
        assert!(text.contains("1 dead member(s) hold no runs"), "{text}");
        assert!(text.ends_with("healthy\n"), "{text}");
    }

    #[test]
    fn problems_come_with_advice() {
        let findings = Findings {
            members: vec![member("mbr_a", 90, 3)],
            by_status: vec![("running".into(), 3, 9)],
            unfinished: 3,
            orphaned: 3,
            due_timers: 2,
            oldest_due_ms: 120_000,
            ..Findings::default()
        };
        let text = format_findings(&findings);
        assert!(
            text.contains("no live member: nothing drives them"),
            "{text}"
        );
        assert!(text.contains("start the world's program"), "{text}");
        assert!(text.contains("2 timer(s) are due"), "{text}");
        assert!(!text.contains("healthy"), "{text}");

        let findings = Findings {
            members: vec![member("mbr_a", 1, 0), member("mbr_b", 600, 3)],
            by_status: vec![("running".into(), 3, 9)],
            unfinished: 3,
            orphaned: 3,
            ..Findings::default()
        };
        let text = format_findings(&findings);
        assert!(text.contains("have not taken them over"), "{text}");
    }

    #[test]
    fn dead_rows_piling_up_are_a_problem_with_the_way_out() {
        let quiet = Findings {
            members: vec![member("mbr_a", 1, 0)],
            runs_live: 1_000_000,
            runs_dead: 4_000,
            autovacuum: false,
            ..Findings::default()
        };
        assert!(format_findings(&quiet).ends_with("healthy\n"));
        let piled = Findings {
            runs_dead: 900_000,
            ..quiet.clone()
        };
        let text = format_findings(&piled);
        assert!(text.contains("900000 dead row versions"), "{text}");
        assert!(text.contains("autovacuum is off"), "{text}");
        assert!(text.contains("ALTER SYSTEM SET autovacuum = on"), "{text}");
        let behind = Findings {
            autovacuum: true,
            ..piled
        };
        let text = format_findings(&behind);
        assert!(text.contains("autovacuum is behind"), "{text}");
        assert!(text.contains("long transactions"), "{text}");
    }
}
