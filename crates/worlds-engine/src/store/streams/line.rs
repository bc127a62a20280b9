//! One line of a stream file: a chunk, or the close.
//!
//! ```text
//! {"index":0,"id":"chnk_01J…","at":1767225600000,"text":"hello"}
//! {"index":1,"id":"chnk_01J…","at":1767225600005,"key":"w1.0","b64":"AAEC"}
//! {"done":true}
//! ```
//!
//! Data that is UTF-8 is kept as `text`, anything else as standard base64 in `b64`; `key` is the
//! write key, when the chunk has one.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::model::stream::StreamChunk;

/// A line of a stream file.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) index: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) b64: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) done: bool,
}

impl Line {
    /// The line of a chunk, newline included.
    pub(super) fn chunk(chunk: &StreamChunk, key: Option<&str>) -> Vec<u8> {
        let (text, b64) = match std::str::from_utf8(&chunk.data) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (None, Some(encode_base64(&chunk.data))),
        };
        let line = Line {
            index: Some(chunk.index),
            id: Some(chunk.id.clone()),
            at: Some(chunk.created_at),
            key: key.map(str::to_owned),
            text,
            b64,
            done: false,
        };
        Self::bytes(&line)
    }

    /// The line that closes a stream, newline included.
    pub(super) fn close() -> Vec<u8> {
        Self::bytes(&Line {
            done: true,
            ..Line::default()
        })
    }

    fn bytes(line: &Line) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        let mut out = serde_json::to_vec(line).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// The chunk this line holds (and its key), or `None` for the close line.
    pub(super) fn into_chunk(self) -> Result<Option<(StreamChunk, Option<String>)>, String> {
        if self.done {
            return Ok(None);
        }
        let (Some(index), Some(id)) = (self.index, self.id) else {
            return Err("a chunk line needs an index and an id".into());
        };
        let data = match (self.text, self.b64) {
            (Some(text), None) => Bytes::from(text),
            (None, Some(b64)) => Bytes::from(decode_base64(&b64)?),
            (None, None) => Bytes::new(),
            (Some(_), Some(_)) => return Err("a chunk line has both text and b64".into()),
        };
        let chunk = StreamChunk {
            id,
            index,
            data,
            created_at: self.at.unwrap_or_default(),
        };
        Ok(Some((chunk, self.key)))
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64, with padding.
fn encode_base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let bad = || format!("invalid base64: {text:?}");
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for group in bytes.chunks(4) {
        let mut n = 0u32;
        let mut pad = 0;
        for &c in group {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' => {
                    pad += 1;
                    0
                }
                _ => return Err(bad()),
            };
            if pad > 0 && c != b'=' {
                return Err(bad());
            }
            n = (n << 6) | u32::from(v);
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad.min(2)]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        for len in 0..20u8 {
            let data: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37) ^ 0xA5).collect();
            assert_eq!(decode_base64(&encode_base64(&data)).unwrap(), data);
        }
        assert_eq!(encode_base64(b"hi!"), "aGkh");
        assert_eq!(encode_base64(&[0xff, 0xfe]), "//4=");
        assert!(decode_base64("a").is_err());
        assert!(decode_base64("a=b=").is_err());
    }
}
