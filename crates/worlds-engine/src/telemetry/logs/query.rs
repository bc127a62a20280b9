//! Reading log files back: the entries of a directory that match a [`LogQuery`].

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{date, LogEntry, LogError, LogQuery};

/// The day files of `dir` (`YYYY-MM-DD.log`), oldest first. A missing directory has none.
pub(crate) fn day_files(dir: &Path) -> Result<Vec<(i64, PathBuf)>, LogError> {
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io("list", dir, e)),
    };
    let mut files = Vec::new();
    for item in listing {
        let item = item.map_err(|e| LogError::io("list", dir, e))?;
        let name = item.file_name();
        if let Some(day) = name.to_str().and_then(date::parse_file_name) {
            files.push((day, item.path()));
        }
    }
    files.sort();
    Ok(files)
}

/// The entries of the log directory `dir` that match `query`, oldest first; with a limit, the
/// most recent `limit` of them.
///
/// Safe while a world writes to the directory: a last line still being written is left for
/// the next read. Lines that are not entries (text a crash cut short) are skipped. A directory
/// that does not exist yet holds no entries.
///
/// ```
/// use worlds_engine::telemetry::logs::{read_logs, LogLevel, LogQuery};
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(
///     dir.path().join("2026-01-01.log"),
///     concat!(
///         r#"{"timestamp":1767225600000,"level":"info","category":"world","message":"started"}"#, "\n",
///         r#"{"timestamp":1767225601000,"level":"error","category":"workflow","message":"failed"}"#, "\n",
///     ),
/// ).unwrap();
/// let errors = read_logs(dir.path(), &LogQuery::new().level(LogLevel::Error)).unwrap();
/// assert_eq!(errors.len(), 1);
/// assert_eq!(errors[0].message, "failed");
/// ```
pub fn read_logs(dir: &Path, query: &LogQuery) -> Result<Vec<LogEntry>, LogError> {
    let mut files = day_files(dir)?;
    if let Some(since) = query.since {
        let first = date::day_of(since);
        files.retain(|(day, _)| *day >= first);
    }
    let limit = query.limit.unwrap_or(usize::MAX);
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    // Newest day first: once `limit` entries are found, older days cannot hold newer ones.
    for (_, path) in files.iter().rev() {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            // Removed by retention between the listing and now.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(LogError::io("read", path, e)),
        };
        let complete = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(end) => &bytes[..=end],
            None => continue,
        };
        let text = String::from_utf8_lossy(complete);
        found.extend(
            text.lines()
                .filter_map(|line| serde_json::from_str::<LogEntry>(line).ok())
                .filter(|entry| query.matches(entry)),
        );
        if found.len() >= limit {
            break;
        }
    }
    found.sort_by_key(|entry| entry.timestamp);
    let skip = found.len().saturating_sub(limit);
    found.drain(..skip);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::logs::{LogCategory, LogLevel};

    fn line(ts: i64, level: &str, category: &str, message: &str) -> String {
        format!(
            r#"{{"timestamp":{ts},"level":"{level}","category":"{category}","message":"{message}"}}"#
        )
    }

    #[test]
    fn filters_limit_and_partial_lines() {
        let dir = tempfile::tempdir().unwrap();
        let day = 86_400_000;
        let d1 = 20_454 * day;
        let d2 = d1 + day;
        let first = [
            line(d1, "debug", "worker", "tick"),
            line(d1 + 1, "warn", "worker", "slow"),
            "not json".to_owned(),
            line(d1 + 2, "error", "workflow", "broke"),
        ]
        .join("\n")
            + "\n";
        fs::write(dir.path().join(date::file_name(20_454)), first).unwrap();
        let second = line(d2, "info", "world", "up") + "\n" + &line(d2 + 5, "info", "world", "hal");
        fs::write(dir.path().join(date::file_name(20_455)), second).unwrap();
        fs::write(dir.path().join("README"), "ignored").unwrap();

        let all = read_logs(dir.path(), &LogQuery::new()).unwrap();
        let messages: Vec<_> = all.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            ["tick", "slow", "broke", "up"],
            "the torn tail is left"
        );

        let q = LogQuery::new().category(LogCategory::Worker);
        assert_eq!(read_logs(dir.path(), &q).unwrap().len(), 2);
        let q = LogQuery::new().level(LogLevel::Warn);
        assert_eq!(read_logs(dir.path(), &q).unwrap().len(), 2);
        let q = LogQuery::new().since(d1 + 2);
        assert_eq!(read_logs(dir.path(), &q).unwrap().len(), 2);
        let q = LogQuery::new().limit(2);
        let newest: Vec<_> = read_logs(dir.path(), &q)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect();
        assert_eq!(newest, ["broke", "up"]);
        let missing = dir.path().join("nope");
        assert!(read_logs(&missing, &LogQuery::new()).unwrap().is_empty());
    }
}
