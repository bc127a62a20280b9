//! `worlds doctor --database-url`: a PostgreSQL world's health, with advice for each problem.
//!
//! The checks are worlds-postgres's ([`worlds_postgres::doctor`]): that the server answers
//! (host and port), the schema's version against this build's, the members (live or dead by
//! the age of their heartbeat against their lease), the runs by status, the runs leased to
//! dead members (waiting for a live member to take them over), the timers that are due and dead
//! row versions piling up, judged by the world's lease (`--lease-duration`). This module prints
//! its report, then the runs that look stuck (the same scan as a directory's). Problems are
//! listed with what to do; any problem makes the command exit non-zero.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use worlds_engine::{ResolveData, RunStatus, WorkflowQueryFilter};
use worlds_postgres::{
    DoctorReport, FindingKind, Health, HolderState, PostgresOptions, PostgresStore, Severity,
    SCHEMA_VERSION,
};

use super::{connect, leave, unusable, Database, CONNECT_TIMEOUT};
use crate::target::scan::{collect_runs, format_stuck, retention_note, stuck_runs, STUCK_SCAN};
use crate::text::{duration, now_ms};

/// Milliseconds, as [`duration`] takes them.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs `worlds doctor` on a PostgreSQL world whose lease is `lease` (the world's
/// `DatabaseConfig::lease_duration`).
pub(crate) fn doctor(db: &Database, lease: Duration, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(out, "database: {} (schema '{}')", db.server(), db.schema())?;
    super::check_schema_name(db.schema())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let options = PostgresOptions {
        schema: db.schema().to_owned(),
        connect_timeout: CONNECT_TIMEOUT,
        lease_duration: lease,
        ..PostgresOptions::default()
    };
    let report = match runtime.block_on(worlds_postgres::doctor(db.url(), &options)) {
        Ok(report) => report,
        Err(e) => {
            writeln!(out, "connection: FAILED")?;
            return Err(db.error(e));
        }
    };
    let Some(probe) = &report.probe else {
        writeln!(out, "connection: FAILED")?;
        let why = report
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::Unreachable)
            .map_or_else(
                || "the server did not answer".to_owned(),
                ToString::to_string,
            );
        return Err(db.error(why));
    };
    writeln!(
        out,
        "connection: ok ({}, PostgreSQL {})",
        db.host_port(),
        probe.server_version
    )?;
    let version = match probe.schema {
        worlds_postgres::SchemaStatus::At(v) => v.to_string(),
        worlds_postgres::SchemaStatus::Empty => "none (no worlds-engine tables)".to_owned(),
        worlds_postgres::SchemaStatus::Missing => "none (no such schema)".to_owned(),
    };
    writeln!(
        out,
        "schema version: {version} (this build: {SCHEMA_VERSION})"
    )?;
    // The schema's problems in the command's words (with the flags to give).
    if let Some(problem) = unusable(db, probe) {
        writeln!(out, "problem: {}", db.scrub(&problem))?;
        bail!("1 problem found (see above)");
    }
    let (stuck, retention) = runtime.block_on(async {
        let store = connect(db).await?;
        let found = async {
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
            anyhow::Ok((stuck, retention_note(&store, now_ms()).await?))
        }
        .await;
        leave(&store).await;
        found.map_err(|e| db.error(format!("{e:#}")))
    })?;
    let mut text = format_report(&report);
    text.push_str(&format_stuck(&stuck));
    text.push_str(&retention);
    out.write_all(text.as_bytes())?;
    let problems = text.lines().filter(|l| l.starts_with("problem:")).count();
    if problems > 0 {
        bail!("{problems} problem(s) found (see above)");
    }
    Ok(())
}

/// The report of a schema this build uses, as text: the figures, one `note:` line per note and
/// one `problem:` line (with its advice) per problem, then `healthy` or nothing.
pub(crate) fn format_report(report: &DoctorReport) -> String {
    let mut text = report
        .health
        .as_ref()
        .map(format_health)
        .unwrap_or_default();
    for severity in [Severity::Note, Severity::Problem] {
        let label = match severity {
            Severity::Note => "note",
            Severity::Problem => "problem",
        };
        for finding in report.findings.iter().filter(|f| f.severity == severity) {
            let _ = writeln!(text, "{label}: {finding}");
        }
    }
    if report.healthy() {
        text.push_str("healthy\n");
    }
    text
}

/// The world's figures as text.
fn format_health(h: &Health) -> String {
    let mut text = String::new();
    let live = h.live_members();
    let dead = h.members.len() - live;
    let _ = writeln!(
        text,
        "members: {live} live, {dead} dead (no heartbeat within their lease)"
    );
    for m in &h.members {
        let _ = writeln!(
            text,
            "  {}  {}  heartbeat {} ago (lease {})  holds {} unfinished run(s)",
            m.member_id,
            if m.live() { "live" } else { "dead" },
            duration(m.silent_for.as_secs() * 1000),
            duration(ms(m.lease)),
            m.unfinished_runs
        );
    }
    let runs: u64 = h.runs.iter().map(|c| c.runs).sum();
    let events: u64 = h.runs.iter().map(|c| c.events).sum();
    let _ = writeln!(text, "runs: {runs} ({events} events)");
    for count in &h.runs {
        let _ = writeln!(text, "  {}: {}", count.status, count.runs);
    }
    let _ = writeln!(
        text,
        "runs leased to no live member: {} (waiting for a member to take them over)",
        h.orphaned
    );
    let _ = writeln!(
        text,
        "timers due: {}{}",
        h.due_timers,
        if h.due_timers > 0 {
            format!(
                " (the oldest for {})",
                duration(h.oldest_due.as_secs() * 1000)
            )
        } else {
            String::new()
        }
    );
    if h.runs_table.dead > worlds_postgres::DEAD_ROWS_WORTH_A_WORD {
        let _ = writeln!(
            text,
            "table runs: {} live rows, {} dead row versions",
            h.runs_table.live, h.runs_table.dead
        );
    }
    text
}

/// The member driving a run, for `runs show`: `member mbr_… (live)`, or how long its
/// heartbeat has been silent; `None` for a run no one holds.
pub(crate) async fn driver_of(
    store: &PostgresStore,
    run_id: &str,
) -> anyhow::Result<Option<String>> {
    Ok(store.lease_holder(run_id).await?.map(|holder| {
        let owner = holder.member_id;
        match holder.state {
            HolderState::Live => format!("member {owner}"),
            HolderState::Dead { silent_for } => format!(
                "member {owner} (dead: no heartbeat for {}; a live member takes the run over)",
                duration(silent_for.as_secs() * 1000)
            ),
            HolderState::Gone => format!("member {owner} (gone; a live member takes the run over)"),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use worlds_postgres::{MemberHealth, StatusCount, TableRows};

    const LEASE: Duration = Duration::from_secs(30);

    fn member(id: &str, silent_s: u64, holds: u64) -> MemberHealth {
        MemberHealth {
            member_id: id.to_owned(),
            silent_for: Duration::from_secs(silent_s),
            lease: LEASE,
            unfinished_runs: holds,
        }
    }

    fn count(status: RunStatus, runs: u64, events: u64) -> StatusCount {
        StatusCount {
            status,
            runs,
            events,
        }
    }

    /// The report worlds-postgres makes of `health`.
    fn text(health: Health) -> String {
        format_report(&DoctorReport {
            probe: None,
            findings: health.findings(),
            health: Some(health),
        })
    }

    #[test]
    fn a_world_with_live_members_and_nothing_due_is_healthy() {
        let text = text(Health {
            lease: LEASE,
            members: vec![member("mbr_a", 1, 2), member("mbr_b", 600, 0)],
            runs: vec![
                count(RunStatus::Completed, 5, 40),
                count(RunStatus::Running, 2, 6),
            ],
            ..Health::default()
        });
        assert!(text.contains("members: 1 live, 1 dead"), "{text}");
        assert!(
            text.contains(
                "  mbr_b  dead  heartbeat 10m ago (lease 30s)  holds 0 unfinished run(s)"
            ),
            "{text}"
        );
        assert!(text.contains("runs: 7 (46 events)"), "{text}");
        assert!(text.contains("  running: 2"), "{text}");
        assert!(
            text.contains("note: 1 dead member(s) hold no runs: processes that stopped; harmless"),
            "{text}"
        );
        assert!(text.ends_with("healthy\n"), "{text}");
    }

    #[test]
    fn problems_come_with_advice() {
        let text = text(Health {
            lease: LEASE,
            members: vec![member("mbr_a", 90, 3)],
            runs: vec![count(RunStatus::Running, 3, 9)],
            unfinished: 3,
            orphaned: 3,
            due_timers: 2,
            oldest_due: Duration::from_secs(120),
            ..Health::default()
        });
        assert!(
            text.contains("problem: 3 unfinished run(s) and no live member: nothing drives them; start the world's program"),
            "{text}"
        );
        assert!(text.contains("timers due: 2 (the oldest for 2m)"), "{text}");
        assert!(text.contains("problem: 2 timer(s) are due"), "{text}");
        assert!(!text.contains("healthy"), "{text}");
    }

    #[test]
    fn dead_rows_show_with_their_problem() {
        let quiet = Health {
            lease: LEASE,
            members: vec![member("mbr_a", 1, 0)],
            runs_table: TableRows {
                live: 1_000_000,
                dead: 4_000,
            },
            ..Health::default()
        };
        let text_quiet = text(quiet.clone());
        assert!(!text_quiet.contains("table runs"), "{text_quiet}");
        assert!(text_quiet.ends_with("healthy\n"), "{text_quiet}");
        let piled = text(Health {
            runs_table: TableRows {
                live: 1_000_000,
                dead: 900_000,
            },
            ..quiet
        });
        assert!(
            piled.contains("table runs: 1000000 live rows, 900000 dead row versions"),
            "{piled}"
        );
        assert!(
            piled.contains("problem: the runs table holds 900000 dead row versions"),
            "{piled}"
        );
    }
}
