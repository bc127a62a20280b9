//! Payloads: serialized inputs and outputs.
//!
//! A [`Payload`] holds one JSON document, serialized once when a value enters the engine and
//! deserialized once where it is consumed. It clones in O(1), knows its size (for the payload
//! limit) and is written inline as JSON, so files and tools see readable data.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

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
    /// Serializes `value` to JSON.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(|raw| Payload(Arc::from(raw)))
    }

    /// Deserializes the payload into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// Wraps JSON text, checking that it is one well-formed JSON value.
    pub fn from_json(json: impl Into<String>) -> Result<Self, serde_json::Error> {
        RawValue::from_string(json.into()).map(|raw| Payload(Arc::from(raw)))
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
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through `Value` rather than `RawValue`: payloads sit inside internally tagged events,
        // which serde buffers, and a buffered value cannot become a `RawValue`.
        let value = serde_json::Value::deserialize(deserializer)?;
        serde_json::value::to_raw_value(&value)
            .map(|raw| Payload(Arc::from(raw)))
            .map_err(serde::de::Error::custom)
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
    fn from_json_rejects_malformed_text() {
        assert!(Payload::from_json("{").is_err());
        assert!(Payload::from_json("1 2").is_err());
        assert!(Payload::from_json("\"é\\u0000\"").is_ok());
    }
}
