//! `worlds logs`: read a world's log files, with filters.
//!
//! Reads the day files (`{dir}/logs/YYYY-MM-DD.log`) with the engine's own reader, which only
//! reads, so it is safe while a world writes to them; with `--database-url`, the `logs` table
//! every member of a PostgreSQL world writes to.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use worlds_engine::telemetry::logs::{LogEntry, LogQuery};

use crate::cli::LogsArgs;
use crate::escape::escaped;
use crate::target::Target;
use crate::text::now_ms;

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
    let (mut entries, note) =
        Target::local(&args.world).logs(&query, args.log_dir.as_deref(), filtered)?;
    if let Some(note) = note {
        eprintln!("{note}");
    }
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
