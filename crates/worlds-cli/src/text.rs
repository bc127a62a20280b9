//! Plain values to and from the text the commands print and read: times, durations, tables,
//! words for a shell, `--since`, and what is shown of encrypted data.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comfy_table::Table;
use worlds_engine::clock::Millis;
use worlds_engine::store::Reveal;
use worlds_engine::EncryptionKeys;

/// The current time, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A time as `2024-01-02 03:04:05Z` (UTC).
pub(crate) fn timestamp(at: Millis) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0));
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replacen('T', " ", 1)
}

/// Milliseconds from `from` to `to` (0 if `to` is earlier).
pub(crate) fn elapsed(from: Millis, to: Millis) -> u64 {
    u64::try_from(to.saturating_sub(from)).unwrap_or(0)
}

/// A duration as `1s 250ms`.
pub(crate) fn duration(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// Time since the first event: `+12ms`, `+1.250s`, `+2m 5s`.
pub(crate) fn offset(ms: u64) -> String {
    if ms < 1_000 {
        format!("+{ms}ms")
    } else if ms < 60_000 {
        format!("+{}.{:03}s", ms / 1_000, ms % 1_000)
    } else {
        format!("+{}", duration(ms))
    }
}

/// The first line of `text`, cut to `max` characters.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max && line.len() == text.trim_end().len() {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// A borderless table as text, without trailing spaces.
pub(crate) fn plain(table: &Table) -> String {
    let lines: Vec<String> = table.lines().map(|l| l.trim_end().to_owned()).collect();
    lines.join("\n")
}

/// `text` as one word for a POSIX shell: as is when it holds only safe characters, otherwise
/// in single quotes.
pub(crate) fn shell_word(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:=@,%".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// What is shown of data stored encrypted: opened with the keys in the environment
/// (`WORLDS_ENGINE_ENCRYPTION_KEYS`), `(encrypted)` without them.
pub(crate) fn reveal() -> Reveal {
    let keys = EncryptionKeys::from_env().unwrap_or_else(|e| {
        eprintln!("warning: {e}; encrypted values are shown as (encrypted)");
        None
    });
    Reveal::new(keys)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_format_times_and_errors() {
        assert_eq!(offset(12), "+12ms");
        assert_eq!(offset(1_250), "+1.250s");
        assert_eq!(offset(125_000), "+2m 5s");
        assert_eq!(timestamp(0), "1970-01-01 00:00:00Z");
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("a long message", 6), "a lon…");
        assert_eq!(shorten("two\nlines", 10), "two…");
    }

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
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("/tmp/w"), "/tmp/w");
        assert_eq!(shell_word("/tmp/my w"), "'/tmp/my w'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
