//! How stored values are written on a page: readable, bounded, and never the storage form.
//!
//! A binary payload (`{"$bytes": "<base64>"}`, what an outside runtime such as a Workflow
//! DevKit app stores its serialized values as) is shown as bytes: its size, a hex and ASCII
//! preview of its first bytes, and its text when the bytes are UTF-8 (pretty-printed when that
//! text is JSON). Everything returned here is plain text: the templates escape it, and control
//! characters (NUL included) are written as `\u{…}` escapes, so nothing invisible reaches the
//! page. Every text is cut at a bound, saying so.

use worlds_engine::clock::Millis;
use worlds_engine::{Payload, BYTES_KEY};

/// The most text one value shows (its size is given when it is cut).
pub(crate) const SHOWN_TEXT: usize = 16 * 1024;
/// The longest id (of a step, hook or wait) shown, in bytes.
pub(crate) const ID_TEXT: usize = 256;
/// The longest name (of a workflow or step) shown, in bytes.
pub(crate) const NAME_TEXT: usize = 1024;
/// The bytes a hex / ASCII preview covers.
const PREVIEW: usize = 64;
/// The bytes a one-line summary's hex covers.
const LINE_PREVIEW: usize = 24;
/// The characters a one-line summary's text covers.
const LINE_TEXT: usize = 160;

/// `1234567` as `1 234 567`.
pub(crate) fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// `binary, 1 234 bytes`.
fn size_text(len: usize) -> String {
    format!(
        "binary, {} byte{}",
        grouped(len),
        if len == 1 { "" } else { "s" }
    )
}

/// `text` with its control characters (but line breaks and tabs) written as `\u{…}`, cut
/// after `max` bytes (on a character boundary) with a note of its whole size.
pub(crate) fn clean(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 16);
    for c in text.chars() {
        if out.len() >= max {
            out.push_str(&format!(" … (cut; {} bytes in all)", grouped(text.len())));
            break;
        }
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` on one line (line breaks and tabs escaped too), at most `max` characters.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.push_str(&c.escape_default().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first bytes as hex pairs, with `…` when there are more.
fn hex(bytes: &[u8], max: usize) -> String {
    let mut out = bytes[..bytes.len().min(max)]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    if bytes.len() > max {
        out.push_str(" …");
    }
    out
}

/// The first bytes as ASCII, `.` for anything not printable.
fn ascii(bytes: &[u8], max: usize) -> String {
    bytes[..bytes.len().min(max)]
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect()
}

/// The bytes as their text, when they are UTF-8: pretty-printed JSON when they are JSON, else
/// the text cleaned.
fn decoded(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        let pretty = serde_json::to_string_pretty(&readable(value)).unwrap_or_default();
        return Some(clean(&pretty, SHOWN_TEXT));
    }
    Some(clean(text, SHOWN_TEXT))
}

/// Bytes as a block of text: `binary, N bytes`, a hex and ASCII preview, and the decoded text
/// when the bytes are UTF-8.
pub(crate) fn bytes_text(bytes: &[u8]) -> String {
    let mut out = size_text(bytes.len());
    if bytes.is_empty() {
        return out;
    }
    out.push_str(&format!(
        "\nhex    {}\nascii  {}",
        hex(bytes, PREVIEW),
        ascii(bytes, PREVIEW)
    ));
    match decoded(bytes) {
        Some(text) => {
            out.push_str("\ntext (UTF-8):\n");
            out.push_str(&text);
        }
        None => out.push_str("\n(not UTF-8 text)"),
    }
    out
}

/// Bytes on one line: `(binary, N bytes) <text>` when they are readable text (UTF-8 without
/// control characters but line breaks and tabs), else with their first bytes in hex.
pub(crate) fn bytes_line(bytes: &[u8]) -> String {
    let readable = std::str::from_utf8(bytes)
        .ok()
        .filter(|text| !text.chars().any(|c| c.is_control() && !c.is_whitespace()));
    match readable {
        Some(text) => format!("({}) {}", size_text(bytes.len()), one_line(text, LINE_TEXT)),
        None => format!("({}) {}", size_text(bytes.len()), hex(bytes, LINE_PREVIEW)),
    }
}

/// The bytes of a `{"$bytes": …}` value (that key alone, valid base64).
fn value_bytes(value: &serde_json::Value) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    let text = map.get(BYTES_KEY)?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// `value` with each binary value in it (at any depth) replaced by its one-line summary
/// ([`bytes_line`]), for JSON shown to people.
pub(crate) fn readable(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    if let Some(bytes) = value_bytes(&value) {
        return Value::String(bytes_line(&bytes));
    }
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(readable).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, readable(v))).collect())
        }
        other => other,
    }
}

/// JSON pretty-printed for people, binary values summarized, cut at [`SHOWN_TEXT`].
pub(crate) fn json_text(value: serde_json::Value) -> String {
    let pretty = serde_json::to_string_pretty(&readable(value)).unwrap_or_default();
    clean(&pretty, SHOWN_TEXT)
}

/// A payload for people: a binary one as bytes ([`bytes_text`]), any other as pretty JSON
/// with the binary values inside it summarized.
pub(crate) fn payload_text(payload: &Payload) -> String {
    match payload.binary() {
        Some(bytes) => bytes_text(&bytes),
        None => json_text(payload.to_value()),
    }
}

/// A duration as people read it: `250 ms`, `1.5 s`, `2m 5s`, `1h 5m`.
pub(crate) fn duration_text(ms: Millis) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration_text(250), "250 ms");
        assert_eq!(duration_text(1_500), "1.5 s");
        assert_eq!(duration_text(125_000), "2m 5s");
        assert_eq!(duration_text(3_900_000), "1h 5m");
    }

    #[test]
    fn sizes_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234), "1 234");
        assert_eq!(grouped(1_234_567), "1 234 567");
    }

    #[test]
    fn binary_payloads_show_size_preview_and_text() {
        let json = payload_text(&Payload::from_bytes(br#"{"order":"A-1"}"#));
        assert!(
            json.starts_with("binary, 15 bytes\nhex    7b 22 6f"),
            "{json}"
        );
        assert!(json.contains("ascii  {\"order\":\"A-1\"}"), "{json}");
        assert!(json.contains("\"order\": \"A-1\""), "pretty JSON: {json}");
        assert!(!json.contains(BYTES_KEY), "{json}");

        let raw = payload_text(&Payload::from_bytes(&[0, 0xff, b'<', b'a']));
        assert!(
            raw.starts_with("binary, 4 bytes\nhex    00 ff 3c 61\nascii  ..<a"),
            "{raw}"
        );
        assert!(raw.contains("not UTF-8"), "{raw}");
        assert_eq!(payload_text(&Payload::from_bytes(&[])), "binary, 0 bytes");
        assert!(payload_text(&Payload::from_bytes(&[7])).starts_with("binary, 1 byte\n"));
    }

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        let text = payload_text(&Payload::from_bytes(b"a\0b\x1bc"));
        assert!(text.contains("a\\u{0}b\\u{1b}c"), "{text}");
        assert!(!text.contains('\0'));
        let huge = "x".repeat(100_000);
        let shown = payload_text(&Payload::from_bytes(huge.as_bytes()));
        assert!(shown.len() < SHOWN_TEXT + 500, "{}", shown.len());
        assert!(shown.contains("binary, 100 000 bytes"));
        assert!(shown.contains("cut; 100 000 bytes in all"));
        let json = payload_text(&Payload::encode(&"\0".repeat(50_000)).unwrap());
        assert!(json.len() < SHOWN_TEXT + 500 && !json.contains('\0'));
    }

    #[test]
    fn nested_binary_values_become_one_line_summaries() {
        let value = serde_json::json!({
            "input": {"$bytes": "AAEC"},
            "list": [{"$bytes": "aGk="}],
            "other": {"$bytes": "AA==", "x": 1},
        });
        let shown = json_text(value);
        assert!(
            shown.contains("\"input\": \"(binary, 3 bytes) 00 01 02\""),
            "{shown}"
        );
        assert!(shown.contains("\"(binary, 2 bytes) hi\""), "{shown}");
        assert!(shown.contains("\"x\": 1"), "not a binary value: {shown}");
        // Text with control characters in it is shown as hex; line breaks stay text, escaped.
        assert_eq!(bytes_line(b"a\0b"), "(binary, 3 bytes) 61 00 62");
        assert_eq!(bytes_line(b"a\nb"), "(binary, 3 bytes) a\\nb");
    }
}
