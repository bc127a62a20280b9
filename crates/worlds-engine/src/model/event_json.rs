//! The JSON form of an [`Event`]: one flat object, its header fields first, then `"type"` and
//! the fields of its kind.
//!
//! ```json
//! {"id":"evnt_…","run_id":"wrun_…","seq":4,"timestamp":1700000000000,"v":1,
//!  "type":"activity_completed","position":1,"attempt":1,"output":{"total":42}}
//! ```
//!
//! Both directions are written by hand rather than with serde's `flatten` and internal tagging,
//! because those buffer the whole object into an intermediate tree before the kind sees it: that
//! tree walks every payload again inside the event's own nesting (a payload 127 levels deep
//! fits the JSON parser's depth limit at its own root but not two levels down), and it cannot
//! hand a payload over as raw text. Here the kind's fields are collected as raw JSON text and
//! given to the kind's derived `Deserialize` one by one, so a payload is only skipped over by the
//! event decoder (without a depth limit, and without checking what its string escapes mean) and
//! kept byte for byte: decoding it is left to the code that asks for it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, IntoDeserializer, MapAccess, Visitor};
use serde::ser::{self, Impossible, SerializeMap};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::{Event, EventKind};

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("run_id", &self.run_id)?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("timestamp", &self.timestamp)?;
        map.serialize_entry("v", &self.version)?;
        // The kind writes `"type"` (its serde variant name, the one `Deserialize` matches)
        // and then its fields.
        self.kind.serialize(FieldsInto(&mut map))?;
        map.end()
    }
}

/// A serializer that writes an event kind (a struct variant, or a newtype variant holding a
/// struct) as entries of the map it borrows: `"type"` with the variant's name, then its fields.
struct FieldsInto<'m, M>(&'m mut M);

fn not_fields<E: ser::Error>() -> E {
    E::custom("an event kind must be a struct variant or a newtype variant holding a struct")
}

impl<'m, M: SerializeMap> Serializer for FieldsInto<'m, M> {
    type Ok = ();
    type Error = M::Error;
    type SerializeSeq = Impossible<(), M::Error>;
    type SerializeTuple = Impossible<(), M::Error>;
    type SerializeTupleStruct = Impossible<(), M::Error>;
    type SerializeTupleVariant = Impossible<(), M::Error>;
    type SerializeMap = Impossible<(), M::Error>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, M::Error> {
        Ok(self)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self, M::Error> {
        self.0.serialize_entry("type", variant)?;
        Ok(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), M::Error> {
        self.0.serialize_entry("type", variant)?;
        value.serialize(self)
    }

    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), M::Error> {
        self.0.serialize_entry("type", variant)
    }

    fn serialize_bool(self, _: bool) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_i8(self, _: i8) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_i16(self, _: i16) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_i32(self, _: i32) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_i64(self, _: i64) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_u8(self, _: u8) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_u16(self, _: u16) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_u32(self, _: u32) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_u64(self, _: u64) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_f32(self, _: f32) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_f64(self, _: f64) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_char(self, _: char) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_str(self, _: &str) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_none(self) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_unit(self) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), M::Error> {
        Err(not_fields())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, M::Error> {
        Err(not_fields())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, M::Error> {
        Err(not_fields())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, M::Error> {
        Err(not_fields())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, M::Error> {
        Err(not_fields())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, M::Error> {
        Err(not_fields())
    }
}

impl<'m, M: SerializeMap> ser::SerializeStruct for FieldsInto<'m, M> {
    type Ok = ();
    type Error = M::Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), M::Error> {
        self.0.serialize_entry(key, value)
    }

    fn end(self) -> Result<(), M::Error> {
        Ok(())
    }
}

impl<'m, M: SerializeMap> ser::SerializeStructVariant for FieldsInto<'m, M> {
    type Ok = ();
    type Error = M::Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), M::Error> {
        self.0.serialize_entry(key, value)
    }

    fn end(self) -> Result<(), M::Error> {
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Event {
    /// Reads the flat JSON form. The kind's fields are taken as raw JSON text, so this needs a
    /// `serde_json` deserializer (from text, a reader or a [`serde_json::Value`]).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EventVisitor)
    }
}

/// A key or a type name: borrowed from the input when it can be.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

struct EventVisitor;

/// Sets a header field once; a second occurrence is an error, as with derived structs.
fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::duplicate_field(name));
    }
    Ok(())
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a history event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let (mut id, mut run_id, mut seq, mut timestamp, mut version) =
            (None, None, None, None, None);
        let mut kind_name: Option<Text<'de>> = None;
        let mut fields: Vec<(Text<'de>, Box<RawValue>)> = Vec::new();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "id" => once(&mut id, "id", map.next_value()?)?,
                "run_id" => once(&mut run_id, "run_id", map.next_value()?)?,
                "seq" => once(&mut seq, "seq", map.next_value()?)?,
                "timestamp" => once(&mut timestamp, "timestamp", map.next_value()?)?,
                "v" => once(&mut version, "v", map.next_value()?)?,
                "type" => once(&mut kind_name, "type", map.next_value()?)?,
                // The record checksum of a stored line, verified on the bytes before parsing.
                "crc" => {
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let value = map.next_value::<Box<RawValue>>()?;
                    fields.push((key, value));
                }
            }
        }
        let kind_name = kind_name.ok_or_else(|| de::Error::missing_field("type"))?;
        let kind = EventKind::deserialize(KindFields {
            name: &kind_name.0,
            fields: &fields,
        })
        .map_err(de::Error::custom)?;
        Ok(Event {
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            run_id: run_id.ok_or_else(|| de::Error::missing_field("run_id"))?,
            seq: seq.ok_or_else(|| de::Error::missing_field("seq"))?,
            timestamp: timestamp.ok_or_else(|| de::Error::missing_field("timestamp"))?,
            version: version.ok_or_else(|| de::Error::missing_field("v"))?,
            kind,
        })
    }
}

/// An event kind as its type name and its fields' raw JSON, presented to the kind's derived
/// (externally tagged) `Deserialize` as an enum whose variant content is a map.
struct KindFields<'a> {
    name: &'a str,
    fields: &'a [(Text<'a>, Box<RawValue>)],
}

impl<'a> KindFields<'a> {
    fn map(
        &self,
    ) -> de::value::MapDeserializer<
        'a,
        impl Iterator<Item = (&'a str, &'a RawValue)>,
        serde_json::Error,
    > {
        de::value::MapDeserializer::new(self.fields.iter().map(|(k, v)| (k.0.as_ref(), &**v)))
    }
}

impl<'de> Deserializer<'de> for KindFields<'de> {
    type Error = serde_json::Error;

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        visitor.visit_enum(self)
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, serde_json::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

impl<'a> de::EnumAccess<'a> for KindFields<'a> {
    type Error = serde_json::Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'a>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), serde_json::Error> {
        let name: de::value::StrDeserializer<'a, serde_json::Error> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, self))
    }
}

impl<'a> de::VariantAccess<'a> for KindFields<'a> {
    type Error = serde_json::Error;

    fn unit_variant(self) -> Result<(), serde_json::Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'a>>(
        self,
        seed: T,
    ) -> Result<T::Value, serde_json::Error> {
        seed.deserialize(self.map())
    }

    fn tuple_variant<V: Visitor<'a>>(self, _: usize, _: V) -> Result<V::Value, serde_json::Error> {
        Err(de::Error::custom("event kinds have no tuple variants"))
    }

    fn struct_variant<V: Visitor<'a>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        visitor.visit_map(self.map())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn event(kind: EventKind) -> Event {
        Event {
            id: "evnt_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            run_id: "wrun_x".into(),
            seq: 3,
            timestamp: 10,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    #[test]
    fn events_are_flat_objects_that_read_back() {
        let kinds = vec![
            EventKind::ActivityCompleted {
                position: 1,
                attempt: 2,
                output: Payload::encode(&5).unwrap(),
            },
            EventKind::WorkflowQueued(Box::new(QueuedRun::new(
                "checkout",
                "order-1",
                Payload::encode(&serde_json::json!({"a": [1, "x\"y"]})).unwrap(),
            ))),
            EventKind::WorkflowCompensating {},
            EventKind::WorkflowCancelled { reason: None },
        ];
        for kind in kinds {
            let event = event(kind);
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["type"], event.kind.type_name());
            assert_eq!(json["v"], 1);
            assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event);
            let text = serde_json::to_string(&event).unwrap();
            assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), event);
        }
        let json = serde_json::to_value(event(EventKind::WorkflowQueued(Box::new(
            QueuedRun::new("checkout", "order-1", Payload::null()),
        ))))
        .unwrap();
        assert_eq!(json["workflow_id"], "order-1");
    }

    #[test]
    fn payloads_are_kept_as_raw_text_whatever_their_depth_or_escapes() {
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        for raw in [deep.as_str(), r#""\ud800""#, r#"{"a" : [1,  2]}"#] {
            let output = Payload::from_json(raw).unwrap();
            let text = serde_json::to_string(&event(EventKind::ActivityCompleted {
                position: 0,
                attempt: 1,
                output,
            }))
            .unwrap();
            let back: Event = serde_json::from_str(&text).unwrap();
            let EventKind::ActivityCompleted { output, .. } = back.kind else {
                panic!("wrong kind");
            };
            assert_eq!(output.as_json(), raw);
        }
    }

    #[test]
    fn a_missing_type_or_header_field_is_an_error() {
        let missing_type = r#"{"id":"e","run_id":"r","seq":0,"timestamp":0,"v":1}"#;
        assert!(serde_json::from_str::<Event>(missing_type)
            .unwrap_err()
            .to_string()
            .contains("type"));
        let missing_seq =
            r#"{"id":"e","run_id":"r","timestamp":0,"v":1,"type":"timer_fired","position":1}"#;
        assert!(serde_json::from_str::<Event>(missing_seq)
            .unwrap_err()
            .to_string()
            .contains("seq"));
        let unknown =
            r#"{"id":"e","run_id":"r","seq":0,"timestamp":0,"v":1,"type":"no_such_kind"}"#;
        assert!(serde_json::from_str::<Event>(unknown).is_err());
        let twice = r#"{"id":"e","id":"f","run_id":"r","seq":0,"timestamp":0,"v":1,"type":"timer_fired","position":1}"#;
        assert!(serde_json::from_str::<Event>(twice).is_err());
    }
}
