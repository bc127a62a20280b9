//! One stored record: an event as one line of JSON that ends with its own checksum.
//!
//! ```text
//! {"id":"evnt_…","run_id":"wrun_…",…,"output":21,"crc":"1c2b3a4d"}\n
//! ```
//!
//! The checksum is the CRC32C of every byte of the line before `,"crc":`, written as 8
//! lower-case hex digits in a field of its own at the very end, so the line stays one JSON
//! object that any tool can read, and checking it needs no parsing: the last 18 bytes of a line
//! are always `,"crc":"xxxxxxxx"}`. Run logs and the hybrid store's write-ahead log hold the
//! same records (compaction copies lines byte for byte), from store format 4 on.
//!
//! The hybrid store's write-ahead log and segments also hold *tombstones*: a run removed by
//! retention, as a record of its own, checksummed the same way.
//!
//! ```text
//! {"removed":"wrun_…","ended":1700000000000,"crc":"1c2b3a4d"}\n
//! ```
//!
//! Every record of the run before its tombstone is dropped when the files are read back;
//! records after it belong to a run created again with the same id. Builds before tombstones
//! refuse such a line as not an event (a corruption error naming the file and offset), so they
//! never misread a directory that holds one; run logs never hold tombstones.
//!
//! A line is either *torn* or *whole*. Only a last line without its newline is torn — an
//! append a crash cut short, never acknowledged. A whole line (newline included) that fails its
//! checksum or does not decode is corruption, wherever it is in the file.

use std::fmt;

use crate::model::Event;

/// The first store format whose records carry checksums.
pub(in crate::store) const FIRST_CHECKSUMMED_FORMAT: u32 = 4;

/// `,"crc":"` — what comes before the checksum's digits.
const CRC_KEY: &[u8] = b",\"crc\":\"";
/// The bytes a checksum adds to a line (before its newline): `,"crc":"xxxxxxxx"}` replaces the
/// object's closing brace.
pub(in crate::store) const CRC_TAIL: usize = CRC_KEY.len() + 8 + 2;

/// Why a whole line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) enum BadRecord {
    /// The line has no checksum field at its end.
    NoChecksum,
    /// The checksum does not match the line: its bytes were changed after it was written.
    Mismatch {
        /// What the line says.
        stored: u32,
        /// What its bytes give.
        computed: u32,
    },
    /// The checksum matches but the line is not a valid event.
    NotAnEvent(String),
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRecord::NoChecksum => f.write_str(
                "the record has no checksum (it should end with ,\"crc\":\"<8 hex digits>\"})",
            ),
            BadRecord::Mismatch { stored, computed } => write!(
                f,
                "checksum mismatch (the record says {stored:08x}, its bytes give {computed:08x}): it was changed after it was written"
            ),
            BadRecord::NotAnEvent(why) => write!(f, "not a valid event ({why})"),
        }
    }
}

/// The CRC32C of a record's body.
fn checksum(body: &[u8]) -> u32 {
    crc32c::crc32c(body)
}

/// Appends `event` to `buf` as one record and its newline.
pub(in crate::store) fn encode_into(buf: &mut Vec<u8>, event: &Event) -> serde_json::Result<()> {
    let start = buf.len();
    serde_json::to_writer(&mut *buf, event)?;
    seal(buf, start);
    Ok(())
}

/// Turns the JSON object at `buf[start..]` into a record: its closing brace is replaced by the
/// checksum field, then the brace and a newline.
pub(super) fn seal(buf: &mut Vec<u8>, start: usize) {
    debug_assert_eq!(buf.last(), Some(&b'}'));
    buf.pop();
    let crc = checksum(&buf[start..]);
    buf.extend_from_slice(CRC_KEY);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..8).rev() {
        buf.push(HEX[(crc >> (shift * 4)) as usize & 0xf]);
    }
    buf.extend_from_slice(b"\"}\n");
}

/// Checks the checksum of a whole `line` (without its newline).
pub(in crate::store) fn verify(line: &[u8]) -> Result<(), BadRecord> {
    let Some(body_len) = line.len().checked_sub(CRC_TAIL) else {
        return Err(BadRecord::NoChecksum);
    };
    let (body, tail) = line.split_at(body_len);
    let digits = tail
        .strip_prefix(CRC_KEY)
        .and_then(|rest| rest.strip_suffix(b"\"}"))
        .ok_or(BadRecord::NoChecksum)?;
    let stored = std::str::from_utf8(digits)
        .ok()
        .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|d| u32::from_str_radix(d, 16).ok())
        .ok_or(BadRecord::NoChecksum)?;
    let computed = checksum(body);
    if stored != computed {
        return Err(BadRecord::Mismatch { stored, computed });
    }
    Ok(())
}

/// Verifies and decodes a whole `line` (without its newline).
pub(in crate::store) fn decode(line: &[u8]) -> Result<Event, BadRecord> {
    verify(line)?;
    serde_json::from_slice(line).map_err(|e| BadRecord::NotAnEvent(e.to_string()))
}

/// The part of a record compaction needs: which run, which position in its history, and
/// whether it is a tombstone.
#[derive(Debug, serde::Deserialize)]
pub(in crate::store) struct Header<'a> {
    /// The run.
    #[serde(borrow)]
    pub(in crate::store) run_id: std::borrow::Cow<'a, str>,
    /// Its position in the run's history (0 for a tombstone).
    pub(in crate::store) seq: u64,
    /// The record is the run's tombstone, not an event.
    #[serde(skip)]
    pub(in crate::store) removed: bool,
}

/// How every tombstone starts (an event starts with its id).
const TOMBSTONE_START: &[u8] = b"{\"removed\":";

/// A tombstone: the run removed, and when it had ended (ms since the Unix epoch), for whoever
/// reads the file.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Tombstone<'a> {
    #[serde(borrow)]
    removed: std::borrow::Cow<'a, str>,
    ended: i64,
}

/// One record of a write-ahead log or segment.
#[derive(Debug)]
pub(in crate::store) enum Line {
    /// An event.
    Event(Box<Event>),
    /// The tombstone of a removed run (its id).
    Removed(String),
}

/// True if the whole `line` (without its newline) is a tombstone.
pub(in crate::store) fn is_tombstone(line: &[u8]) -> bool {
    line.starts_with(TOMBSTONE_START)
}

/// Appends the tombstone of `run_id`, which ended at `ended`, to `buf` as one record and its
/// newline.
pub(in crate::store) fn encode_tombstone(buf: &mut Vec<u8>, run_id: &str, ended: i64) {
    let start = buf.len();
    let tombstone = Tombstone {
        removed: run_id.into(),
        ended,
    };
    serde_json::to_writer(&mut *buf, &tombstone).expect("a tombstone serializes");
    seal(buf, start);
}

/// Verifies and decodes a whole `line` (without its newline) of a write-ahead log or segment:
/// an event or a tombstone.
pub(in crate::store) fn decode_line(line: &[u8]) -> Result<Line, BadRecord> {
    verify(line)?;
    if is_tombstone(line) {
        let tombstone: Tombstone<'_> =
            serde_json::from_slice(line).map_err(|e| BadRecord::NotAnEvent(e.to_string()))?;
        return Ok(Line::Removed(tombstone.removed.into_owned()));
    }
    serde_json::from_slice(line)
        .map(|event| Line::Event(Box::new(event)))
        .map_err(|e| BadRecord::NotAnEvent(e.to_string()))
}

/// Verifies a whole `line` and reads its [`Header`]; the rest of the line is skipped over
/// without being decoded. A tombstone's header names its run, with `removed` set.
pub(in crate::store) fn decode_header(line: &[u8]) -> Result<Header<'_>, BadRecord> {
    verify(line)?;
    if is_tombstone(line) {
        let tombstone: Tombstone<'_> =
            serde_json::from_slice(line).map_err(|e| BadRecord::NotAnEvent(e.to_string()))?;
        return Ok(Header {
            run_id: tombstone.removed,
            seq: 0,
            removed: true,
        });
    }
    serde_json::from_slice(line).map_err(|e| BadRecord::NotAnEvent(e.to_string()))
}

/// Decodes a whole `line` of an older format, which may lack a checksum; one that is there is
/// verified.
pub(in crate::store) fn decode_legacy(line: &[u8]) -> Result<Event, BadRecord> {
    match verify(line) {
        Ok(()) | Err(BadRecord::NoChecksum) => {
            serde_json::from_slice(line).map_err(|e| BadRecord::NotAnEvent(e.to_string()))
        }
        Err(bad) => Err(bad),
    }
}

/// A line written before records carried checksums (store format 3 and older), as a record:
/// the same bytes with the checksum added. A line that already is a valid record is returned
/// as it is, so running this twice (a migration a crash interrupted) changes nothing more.
/// Fails if the line is not a valid event.
pub(in crate::store) fn add_checksum(line: &[u8]) -> Result<Vec<u8>, BadRecord> {
    let sealed = verify(line).is_ok();
    serde_json::from_slice::<Event>(line).map_err(|e| BadRecord::NotAnEvent(e.to_string()))?;
    if sealed {
        let mut record = line.to_vec();
        record.push(b'\n');
        return Ok(record);
    }
    let body = line.trim_ascii_end();
    let mut record = Vec::with_capacity(body.len() + CRC_TAIL + 1);
    record.extend_from_slice(body);
    seal(&mut record, 0);
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn event(output: &str) -> Event {
        Event {
            id: "evnt_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            run_id: "wrun_x".into(),
            seq: 1,
            timestamp: 5,
            version: EVENT_FORMAT_VERSION,
            kind: EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output: Payload::from_json(output).unwrap(),
            },
        }
    }

    fn record(event: &Event) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_into(&mut buf, event).unwrap();
        buf
    }

    #[test]
    fn a_record_is_one_json_line_ending_in_its_checksum() {
        let line = record(&event("21"));
        assert_eq!(line.last(), Some(&b'\n'));
        let line = &line[..line.len() - 1];
        let json: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(json["output"], 21);
        let crc = json["crc"].as_str().unwrap();
        assert_eq!(crc.len(), 8);
        let body = &line[..line.len() - CRC_TAIL];
        assert_eq!(format!("{:08x}", crc32c::crc32c(body)), crc);
        assert_eq!(decode(line).unwrap(), event("21"));
    }

    #[test]
    fn any_changed_byte_is_detected() {
        let line = record(&event(r#"{"total":21,"items":["a","b"]}"#));
        let line = &line[..line.len() - 1];
        for at in 0..line.len() {
            let mut bad = line.to_vec();
            bad[at] ^= 0x04;
            assert!(decode(&bad).is_err(), "byte {at} changed, still accepted");
        }
        let edited = String::from_utf8(line.to_vec())
            .unwrap()
            .replace("21", "31");
        assert!(matches!(
            decode(edited.as_bytes()),
            Err(BadRecord::Mismatch { .. })
        ));
    }

    #[test]
    fn lines_without_a_checksum_are_refused_and_can_be_given_one() {
        let plain = serde_json::to_vec(&event("[1,2]")).unwrap();
        assert_eq!(decode(&plain), Err(BadRecord::NoChecksum));
        let sealed = add_checksum(&plain).unwrap();
        assert_eq!(sealed, record(&event("[1,2]")));
        // Already a record: unchanged.
        assert_eq!(add_checksum(&sealed[..sealed.len() - 1]).unwrap(), sealed);
        assert!(matches!(
            add_checksum(b"{\"not\":\"an event\"}"),
            Err(BadRecord::NotAnEvent(_))
        ));
    }
}
