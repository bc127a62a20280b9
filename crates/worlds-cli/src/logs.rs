//! `worlds logs`: read a world's log files, with filters.
//!
//! Reads the day files (`{dir}/logs/YYYY-MM-DD.log`) with the engine's own reader, which only
//! reads, so it is safe while a world writes to them; with `--database-url`, the `logs` table
//! every member of a PostgreSQL world writes to.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use worlds_engine::clock::Millis;
use worlds_engine::telemetry::logs::{read_logs, LogEntry, LogQuery};

use crate::cli::LogsArgs;
use crate::escape::escaped;

/// Where `--since` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
    /// This long before now (`1h`, `30m`, `2d`).
    Ago(Duration),
    /// This moment (`2026-01-01T00:00:00Z`).
    At(Millis),
}

impl Since {
    /// The moment, given the current time.
    pub(crate) fn resolve(self, now: Millis) -> Millis {
        match self {
            Since::Ago(ago) => {
                now.saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX))
            }
            Since::At(at) => at,
        }
    }
}

/// Parses `--since`: a duration before now, or an RFC 3339 time.
pub(crate) fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(ago) = humantime::parse_duration(text) {
        return Ok(Since::Ago(ago));
    }
    let at = humantime::parse_rfc3339_weak(text).map_err(|_| {
        format!("'{text}' is neither a duration (1h, 30m, 2d) nor an RFC 3339 time (2026-01-31T08:00:00Z)")
    })?;
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("'{text}' is before 1970"))?
        .as_millis();
    Ok(Since::At(i64::try_from(ms).unwrap_or(i64::MAX)))
}

/// `worlds logs`.
pub(crate) fn logs(args: &LogsArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let mut query = LogQuery::new().limit(args.limit.saturating_add(1));
    if let Some(category) = args.category {
        query = query.category(category);
    }
    if let Some(level) = args.level {
        query = query.level(level);
    }
    if let Some(since) = args.since {
        query = query.since(since.resolve(now_ms()));
    }
    let filtered = args.category.is_some() || args.level.is_some() || args.since.is_some();
    let mut entries = match crate::postgres::target(&args.database) {
        Some(db) => {
            if args.log_dir.is_some() {
                anyhow::bail!(
                    "both --log-dir and a database name a world's logs: pick one (drop --log-dir to read the database's, or the URL to read the files)"
                );
            }
            let entries =
                crate::postgres::read(&db, async |store| Ok(store.query_logs(&query).await?))?;
            if entries.is_empty() && !filtered {
                eprintln!(
                    "no log records were written to {} yet. Its members write their own records (started, runs created, resumed, failed, quarantined) in batches, every 2 s and when they shut down; with `world.logs().init()` or `world.logs().layer()` in a program's subscriber, its other tracing events go there too.",
                    db.describe()
                );
            }
            entries
        }
        None => {
            let dir = log_dir(args);
            match &args.log_dir {
                None => crate::inspect::check_dir(&args.dir)?,
                Some(named) if !named.exists() => {
                    anyhow::bail!("{} does not exist", named.display())
                }
                Some(_) => {}
            }
            if !dir.is_dir() {
                // A world that has not written its first batch yet (or was killed before
                // it): nothing is wrong with the directory.
                eprintln!("{}", no_records_yet(&dir));
                return Ok(());
            }
            let entries = read_logs(&dir, &query)
                .with_context(|| format!("could not read {}", dir.display()))?;
            if entries.is_empty() && !filtered {
                eprintln!("{}", no_records_yet(&dir));
            }
            entries
        }
    };
    let more = entries.len() > args.limit;
    if more {
        entries.remove(0);
    }
    if args.json {
        for entry in &entries {
            writeln!(out, "{}", serde_json::to_string(entry)?)?;
        }
    } else {
        for entry in &entries {
            writeln!(out, "{}", format_entry(entry))?;
        }
    }
    if more {
        eprintln!(
            "showing the newest {} entries; more match (raise --limit)",
            entries.len()
        );
    }
    Ok(())
}

/// What to say when a directory holds no log records: that none were written yet, and how a
/// world comes to write them.
fn no_records_yet(dir: &Path) -> String {
    format!(
        "no log records were written to {} yet. A file or hybrid world writes its own records \
         there (started, runs created, resumed, failed, quarantined) in batches, every 2 s and \
         when it shuts down, so a world killed before its first batch leaves none; with \
         `world.logs().init()` or `world.logs().layer()` in the program's subscriber, \
         its other tracing events go there too. A world whose LogsConfig::dir is elsewhere is \
         read with --log-dir.",
        escaped(&dir.display().to_string())
    )
}

/// The directory the command reads.
fn log_dir(args: &LogsArgs) -> PathBuf {
    args.log_dir
        .clone()
        .unwrap_or_else(|| args.dir.join("logs"))
}

fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One entry as a line: time, level, category, message, then the metadata as JSON.
pub(crate) fn format_entry(entry: &LogEntry) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(entry.timestamp.max(0) as u64);
    let mut line = format!(
        "{} {:<5} {:<8} {}",
        humantime::format_rfc3339_millis(at),
        entry.level.as_str().to_uppercase(),
        entry.category.as_str(),
        escaped(&entry.message)
    );
    if !entry.metadata.is_empty() {
        line.push(' ');
        line.push_str(&serde_json::Value::Object(entry.metadata.clone()).to_string());
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use worlds_engine::telemetry::logs::{LogCategory, LogLevel};

    #[test]
    fn since_is_a_duration_ago_or_a_time() {
        let now = 1_767_225_600_000;
        let ago = parse_since("1h").unwrap();
        assert_eq!(ago.resolve(now), now - 3_600_000);
        let at = parse_since("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(at.resolve(0), now);
        assert!(parse_since("yesterday").is_err());
    }

    #[test]
    fn an_entry_is_one_readable_line() {
        let mut metadata = serde_json::Map::new();
        metadata.insert("run_id".into(), "wrun_1".into());
        let entry = LogEntry {
            timestamp: 1_767_225_600_250,
            level: LogLevel::Warn,
            category: LogCategory::Worker,
            message: "slow".into(),
            metadata,
        };
        assert_eq!(
            format_entry(&entry),
            r#"2026-01-01T00:00:00.250Z WARN  worker   slow {"run_id":"wrun_1"}"#
        );
    }
}
