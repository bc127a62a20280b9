//! The file formats' readers, reachable from outside the store for fuzzing: each takes bytes
//! as they could be found on disk and must answer an error, never panic or hang.

use std::collections::HashMap;
use std::path::Path;

use crate::store::MemoryStore;

use super::log::{apply_events, Records};
use super::record;
use super::wal_read::WalReplay;

/// Every decoder of one record line; a line that decodes must encode back to a record that
/// decodes to the same event.
pub(crate) fn record_line(line: &[u8]) {
    let _ = record::verify(line);
    let _ = record::decode_header(line);
    let _ = record::decode_legacy(line);
    let _ = record::add_checksum(line);
    if let Ok(event) = record::decode(line) {
        let mut again = Vec::new();
        record::encode_into(&mut again, &event).expect("a decoded event encodes");
        let reread = record::decode(again.trim_ascii_end()).expect("an encoded event decodes");
        assert_eq!(
            reread, event,
            "an event changed on its way through a record"
        );
    }
}

/// `bytes` read as a run's log, then as a write-ahead log, by the readers a store opens with.
/// With `seal`, every line is given its checksum first, so that the reading goes past the
/// checksums into the events and the history's rules.
pub(crate) fn logs(bytes: &[u8], seal: bool) {
    let sealed;
    let bytes = if seal {
        sealed = seal_lines(bytes);
        &sealed[..]
    } else {
        bytes
    };
    let path = Path::new("fuzz.ndjson");
    let run_id = first_run_id(bytes).unwrap_or_else(|| "wrun_fuzz".to_owned());
    for records in [Records::Checksummed, Records::Legacy] {
        let memory = MemoryStore::new();
        let _ = apply_events(path, &run_id, bytes, 0, 0, &memory, records);
        let counts = HashMap::new();
        let memory = MemoryStore::new();
        let whole = WalReplay::new(&memory, &counts, records, true).replay_bytes(path, bytes);
        // A segment is read in chunks: that must come to the same as reading it whole.
        for chunk in [7, 64] {
            let memory = MemoryStore::new();
            let chunked = WalReplay::new(&memory, &counts, records, true).replay_segment_from(
                &mut &bytes[..],
                path,
                true,
                chunk,
            );
            match (&whole, &chunked) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "chunks of {chunk}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "chunks of {chunk}"),
                _ => panic!("read whole: {whole:?}; in chunks of {chunk}: {chunked:?}"),
            }
        }
    }
}

/// The run id of the first line, as a log's reader would be given it.
fn first_run_id(bytes: &[u8]) -> Option<String> {
    let line = bytes.split(|&b| b == b'\n').next()?;
    #[derive(serde::Deserialize)]
    struct Id {
        run_id: String,
    }
    serde_json::from_slice::<Id>(line).ok().map(|id| id.run_id)
}

/// Each line that is a JSON object, sealed as a record; other lines kept as they are.
fn seal_lines(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 32);
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let last = lines.peek().is_none();
        if line.ends_with(b"}") && !last {
            let start = out.len();
            out.extend_from_slice(line);
            record::seal(&mut out, start);
        } else {
            out.extend_from_slice(line);
            if !last {
                out.push(b'\n');
            }
        }
    }
    out
}
