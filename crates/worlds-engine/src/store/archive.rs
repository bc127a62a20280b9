//! Retention archives: finished runs written out before a sweep removes them, for an
//! investigation later (`worlds runs show --archive`, `worlds runs import`).
//!
//! An archive is a directory of files named by the UTC day of the sweep that wrote them,
//! `runs-YYYY-MM-DD.ndjson.gz`. Each file is a series of gzip members, one per page a sweep
//! archived, appended and synced before the page's runs are removed; a member holds one JSON line
//! per run:
//!
//! ```text
//! {"run_id":"wrun_…","run":{…the run's state, its history included…}}
//! {"run_id":"wrun_…","sealed":"sealed:k1:…"}      (a world with encryption keys)
//! ```
//!
//! A sealed line is the run's JSON sealed with AES-256-GCM under the run's own key, derived from
//! the world's active key as for the store's payloads: reading it needs the keys. A crash between
//! an archive write and the removals writes the page again on the next attempt, so a run may be
//! in an archive twice; readers keep the last copy. A member cut short by a crash is skipped with
//! a warning.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use flate2::bufread::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};

use super::sealed::Cipher;
use crate::clock::Millis;
use crate::config::EncryptionKeys;
use crate::error::WorldError;
use crate::model::WorkflowState;

/// One line of an archive.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run: Option<Box<WorkflowState>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<String>,
}

/// The archive file a sweep judging at `at` (ms since the Unix epoch) writes to.
pub fn archive_file(dir: &Path, at: Millis) -> PathBuf {
    let day = jiff::Timestamp::from_millisecond(at)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_else(|_| "unknown-day".to_owned());
    dir.join(format!("runs-{day}.ndjson.gz"))
}

/// Appends `runs` (each with its history) to the archive file of day `at` under `dir` as one
/// gzip member, sealed with `keys` when given, and syncs it. Returns the file written.
pub fn append_runs(
    dir: &Path,
    at: Millis,
    runs: &[WorkflowState],
    keys: Option<&EncryptionKeys>,
) -> Result<PathBuf, WorldError> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        WorldError::StorageIo(format!(
            "could not {what} the retention archive {}: {e}",
            path.display()
        ))
    };
    fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let path = archive_file(dir, at);
    let cipher = keys.map(|keys| Cipher::new(keys.clone()));
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    for run in runs {
        let json = serde_json::to_string(run).map_err(|e| {
            WorldError::invalid("run", format!("could not archive run {}: {e}", run.id))
        })?;
        let line = match &cipher {
            Some(cipher) => Line {
                run_id: run.id.clone(),
                run: None,
                sealed: Some(cipher.seal_text(&run.id, &json)?),
            },
            None => Line {
                run_id: run.id.clone(),
                run: Some(Box::new(run.clone())),
                sealed: None,
            },
        };
        let mut text =
            serde_json::to_vec(&line).map_err(|e| WorldError::invalid("run", e.to_string()))?;
        text.push(b'\n');
        encoder
            .write_all(&text)
            .map_err(|e| io("compress", &path, e))?;
    }
    let member = encoder.finish().map_err(|e| io("compress", &path, e))?;
    let created = !path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io("open", &path, e))?;
    file.write_all(&member).map_err(|e| io("write", &path, e))?;
    file.sync_data().map_err(|e| io("sync", &path, e))?;
    if created {
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(path)
}

/// What an archive file holds: each run once (the last copy written), in the order first
/// written, and what could not be read.
#[derive(Debug, Default)]
pub struct ArchiveContents {
    /// The runs, each with its history.
    pub runs: Vec<WorkflowState>,
    /// Lines or members skipped, and why (a member cut short by a crash, a sealed run without
    /// its key).
    pub warnings: Vec<String>,
}

/// Reads an archive file, opening sealed runs with `keys`.
pub fn read_archive(
    path: &Path,
    keys: Option<&EncryptionKeys>,
) -> Result<ArchiveContents, WorldError> {
    let file = fs::File::open(path).map_err(|e| {
        WorldError::StorageIo(format!(
            "could not open the archive {}: {e}",
            path.display()
        ))
    })?;
    let mut text = Vec::new();
    let mut contents = ArchiveContents::default();
    let mut decoder = MultiGzDecoder::new(BufReader::new(file));
    if let Err(e) = decoder.read_to_end(&mut text) {
        if text.is_empty() {
            return Err(WorldError::invalid(
                "archive",
                format!(
                    "{} is not a retention archive (a gzip-compressed runs-YYYY-MM-DD.ndjson.gz written by a sweep): {e}",
                    path.display()
                ),
            ));
        }
        // A member cut short (a crash mid-write): what came before it is whole.
        contents.warnings.push(format!(
            "the end of {} could not be read ({e}); the runs before it are shown",
            path.display()
        ));
        // What the cut member gave ends mid-line: only whole lines count.
        let whole = text
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        text.truncate(whole);
    }
    let cipher = keys.map(|keys| Cipher::new(keys.clone()));
    let mut order: Vec<String> = Vec::new();
    let mut by_id: std::collections::HashMap<String, WorkflowState> = Default::default();
    for (number, line) in text.lines().enumerate() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = match serde_json::from_str(&line) {
            Ok(parsed) => parsed,
            Err(e) => {
                contents
                    .warnings
                    .push(format!("line {} is not an archived run: {e}", number + 1));
                continue;
            }
        };
        let run = match (parsed.run, parsed.sealed, &cipher) {
            (Some(run), _, _) => *run,
            (None, Some(sealed), Some(cipher)) => {
                match cipher.open_text(&parsed.run_id, &sealed).and_then(|json| {
                    serde_json::from_str(&json)
                        .map_err(|e| WorldError::invalid("archive", e.to_string()))
                }) {
                    Ok(run) => run,
                    Err(e) => {
                        contents
                            .warnings
                            .push(format!("run {} could not be opened: {e}", parsed.run_id));
                        continue;
                    }
                }
            }
            (None, Some(_), None) => {
                contents.warnings.push(format!(
                    "run {} is sealed: give the world's encryption keys to read it",
                    parsed.run_id
                ));
                continue;
            }
            (None, None, _) => continue,
        };
        if !by_id.contains_key(&run.id) {
            order.push(run.id.clone());
        }
        by_id.insert(run.id.clone(), run);
    }
    contents.runs = order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .collect();
    Ok(contents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, EventKind, QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn run(id: &str) -> WorkflowState {
        let first = Event {
            id: "evnt_1".into(),
            run_id: id.into(),
            seq: 0,
            timestamp: 1_767_225_600_000,
            version: EVENT_FORMAT_VERSION,
            kind: EventKind::WorkflowQueued(Box::new(QueuedRun::new(
                "greet".to_owned(),
                id.to_owned(),
                Payload::from(serde_json::json!("secret input")),
            ))),
        };
        let mut state = WorkflowState::from_history(std::slice::from_ref(&first)).unwrap();
        state.history = vec![first];
        state
    }

    #[test]
    fn runs_round_trip_sealed_or_not_last_copy_wins_and_a_torn_end_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let at = 1_767_225_600_000;
        let path = append_runs(dir.path(), at, &[run("wrun_a"), run("wrun_b")], None).unwrap();
        assert!(path.ends_with("runs-2026-01-01.ndjson.gz"));
        let mut again = run("wrun_a");
        again.name = "greet-again".into();
        append_runs(dir.path(), at, &[again], None).unwrap();
        let read = read_archive(&path, None).unwrap();
        assert!(read.warnings.is_empty(), "{:?}", read.warnings);
        let ids: Vec<&str> = read.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["wrun_a", "wrun_b"]);
        assert_eq!(read.runs[0].name, "greet-again");
        assert_eq!(read.runs[1].history.len(), 1);

        // A torn last member: the members before it read.
        let mut bytes = fs::read(&path).unwrap();
        let whole = bytes.len();
        append_runs(dir.path(), at, &[run("wrun_c")], None).unwrap();
        bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..whole + (bytes.len() - whole) / 2]).unwrap();
        let read = read_archive(&path, None).unwrap();
        assert_eq!(read.runs.len(), 2);
        assert_eq!(read.warnings.len(), 1, "{:?}", read.warnings);

        // Not an archive at all: refused, saying what an archive is.
        let junk = dir.path().join("junk.ndjson.gz");
        fs::write(&junk, b"not gzip at all").unwrap();
        let refused = read_archive(&junk, None).unwrap_err();
        assert!(
            refused.to_string().contains("not a retention archive"),
            "{refused}"
        );

        // Sealed: nothing readable without the keys, everything with them.
        let keys = EncryptionKeys::new("k1", [7; 32]).unwrap();
        let sealed_dir = tempfile::tempdir().unwrap();
        let path = append_runs(sealed_dir.path(), at, &[run("wrun_s")], Some(&keys)).unwrap();
        let mut raw = Vec::new();
        MultiGzDecoder::new(BufReader::new(fs::File::open(&path).unwrap()))
            .read_to_end(&mut raw)
            .unwrap();
        let raw = String::from_utf8(raw).unwrap();
        assert!(
            !raw.contains("secret input") && !raw.contains("greet"),
            "{raw}"
        );
        let without = read_archive(&path, None).unwrap();
        assert!(without.runs.is_empty());
        assert!(
            without.warnings[0].contains("sealed"),
            "{:?}",
            without.warnings
        );
        let with = read_archive(&path, Some(&keys)).unwrap();
        assert_eq!(with.runs[0].id, "wrun_s");
        assert_eq!(with.runs[0].history.len(), 1);
    }
}
