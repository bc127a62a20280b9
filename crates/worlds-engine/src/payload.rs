//! Payloads: serialized inputs and outputs.
//!
//! A [`Payload`] holds one JSON document, serialized once when a value enters the engine and
//! deserialized once where it is consumed. It clones in O(1), knows its size (for the payload
//! limit) and is written inline as JSON, so files and tools see readable data.
//!
//! The engine never looks inside a payload: stores keep its text byte for byte, however deep it
//! nests and whatever its string escapes say (a lone surrogate such as `"\ud800"` is valid JSON
//! text even though no Rust string can hold it). Only [`Payload::decode`] parses it, for the code
//! that asked for the value. The one change made on the way in: line breaks between JSON tokens
//! (pretty-printed raw JSON) become spaces, so that a payload always fits on one line of a
//! log; a line break inside a JSON string is always escaped, so this never changes the value.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// The key of the JSON object that holds a binary payload ([`Payload::from_bytes`]).
pub const BYTES_KEY: &str = "$bytes";

/// One serialized JSON value, cheap to clone.
#[derive(Clone)]
pub struct Payload(Arc<RawValue>);

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for Payload {}

impl Payload {
    /// Bytes as a payload: the JSON object `{"$bytes": "<standard base64>"}`, the form every
    /// store keeps binary data in and the API carries it in (an outside runtime's serialized
    /// values, stream chunks). [`binary`](Self::binary) gives the bytes back exactly.
    ///
    /// ```
    /// use worlds_engine::Payload;
    /// let payload = Payload::from_bytes(&[0, 159, 255]);
    /// assert_eq!(payload.as_json(), r#"{"$bytes":"AJ//"}"#);
    /// assert_eq!(payload.binary(), Some(vec![0, 159, 255]));
    /// assert_eq!(Payload::from_json("[1]").unwrap().binary(), None);
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Self {
        use base64::Engine as _;
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        Payload::from_json(format!("{{\"{BYTES_KEY}\":\"{text}\"}}"))
            .expect("base64 text needs no escaping")
    }

    /// The bytes of a binary payload ([`from_bytes`](Self::from_bytes)), or `None` for any
    /// other JSON value (and for an object whose `$bytes` is not valid base64).
    pub fn binary(&self) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let text = self.as_json();
        if !text.trim_start().starts_with('{') || !text.contains(BYTES_KEY) {
            return None;
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Binary<'a> {
            #[serde(rename = "$bytes", borrow)]
            bytes: std::borrow::Cow<'a, str>,
        }
        let binary: Binary = serde_json::from_str(text).ok()?;
        base64::engine::general_purpose::STANDARD
            .decode(binary.bytes.as_bytes())
            .ok()
    }

    /// Serializes `value` to JSON.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).and_then(Payload::from_raw)
    }

    /// Wraps checked JSON text, turning line breaks between tokens into spaces (see the module
    /// docs).
    fn from_raw(raw: Box<RawValue>) -> Result<Self, serde_json::Error> {
        if !raw.get().bytes().any(|b| b == b'\n' || b == b'\r') {
            return Ok(Payload(Arc::from(raw)));
        }
        // Valid JSON has no raw line break inside a string, so each one is whitespace.
        let one_line = raw.get().replace(['\n', '\r'], " ");
        RawValue::from_string(one_line).map(|raw| Payload(Arc::from(raw)))
    }

    /// Deserializes the payload into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// Wraps JSON text, checking that it is one well-formed JSON value.
    pub fn from_json(json: impl Into<String>) -> Result<Self, serde_json::Error> {
        RawValue::from_string(json.into()).and_then(Payload::from_raw)
    }

    /// The JSON `null` payload.
    pub fn null() -> Self {
        Payload::encode(&()).unwrap_or_else(|_| unreachable!("unit always serializes"))
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// Size of the JSON text in bytes, the figure the payload limit is checked against.
    pub fn size(&self) -> usize {
        self.0.get().len()
    }

    /// The payload as a [`serde_json::Value`].
    pub fn to_value(&self) -> serde_json::Value {
        self.decode().unwrap_or(serde_json::Value::Null)
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 200;
        let json = self.0.get();
        if json.len() <= SHOWN {
            f.write_str(json)
        } else {
            let mut cut = SHOWN;
            while !json.is_char_boundary(cut) {
                cut -= 1;
            }
            write!(f, "{}… ({} bytes)", &json[..cut], json.len())
        }
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    /// Takes the value's JSON text as it is, without parsing it into a tree: this needs a
    /// `serde_json` deserializer (from text, a reader or a [`serde_json::Value`]), and fails
    /// inside containers that serde buffers (internally tagged or untagged enums, `flatten`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Payload::from_raw(raw).map_err(serde::de::Error::custom)
    }
}

impl From<serde_json::Value> for Payload {
    fn from(value: serde_json::Value) -> Self {
        Payload::encode(&value).unwrap_or_else(|_| Payload::null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_inline() {
        let p = Payload::encode(&serde_json::json!({"a": [1, 2]})).unwrap();
        assert_eq!(p.size(), p.as_json().len());
        let wrapped = serde_json::json!({ "input": serde_json::Value::Null }).to_string();
        assert_eq!(wrapped, r#"{"input":null}"#);
        #[derive(Serialize, Deserialize)]
        struct Holder {
            input: Payload,
        }
        let text = serde_json::to_string(&Holder { input: p.clone() }).unwrap();
        assert_eq!(text, r#"{"input":{"a":[1,2]}}"#);
        let back: Holder = serde_json::from_str(&text).unwrap();
        assert_eq!(back.input, p);
    }

    #[test]
    fn line_breaks_between_tokens_become_spaces() {
        let p = Payload::from_json("{\n  \"a\": \"x\\ny\"\r\n}").unwrap();
        assert_eq!(p.as_json(), "{   \"a\": \"x\\ny\"  }");
        assert_eq!(p.decode::<serde_json::Value>().unwrap()["a"], "x\ny");
        let raw = RawValue::from_string("[1,\n2]".into()).unwrap();
        assert_eq!(Payload::encode(&raw).unwrap().as_json(), "[1, 2]");
    }

    #[test]
    fn deep_and_odd_payloads_read_back_byte_for_byte() {
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        for json in [deep.as_str(), r#""\ud800""#, r#"{"k" :  [ 1e400 , -0 ]}"#] {
            let p = Payload::from_json(json).unwrap();
            let text = serde_json::to_string(&vec![p.clone()]).unwrap();
            let back: Vec<Payload> = serde_json::from_str(&text).unwrap();
            assert_eq!(back[0].as_json(), json);
        }
    }

    #[test]
    fn from_json_rejects_malformed_text() {
        assert!(Payload::from_json("{").is_err());
        assert!(Payload::from_json("1 2").is_err());
        assert!(Payload::from_json("\"é\\u0000\"").is_ok());
    }
}
