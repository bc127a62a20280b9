//! Small records kept one per file in a world's directory, outside the write-ahead log (API
//! keys, pauses): JSON of `{"format": N, "<field>": {...}}`, read back with a damaged file
//! named and a newer format refused.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::WorldError;

/// The record under `field` of the file at `path` holding `bytes`, written in format `known`
/// or older. `what` names the kind of file in errors ("key"), `if_deleted` says what deleting
/// a damaged one does.
pub(crate) fn parse<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    field: &str,
    known: u32,
    what: &str,
    if_deleted: &str,
) -> Result<T, WorldError> {
    let damaged = |e: serde_json::Error| {
        WorldError::Internal(format!(
            "{what} file {} is damaged ({e}); fix or delete it ({if_deleted})",
            path.display()
        ))
    };
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(damaged)?;
    let format = value
        .get("format")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| {
            damaged(<serde_json::Error as serde::de::Error>::missing_field(
                "format",
            ))
        })?;
    if format > u64::from(known) {
        return Err(WorldError::Unsupported(format!(
            "{what} file {} has format {format}, newer than this build knows ({known}); upgrade worlds-engine",
            path.display()
        )));
    }
    let record = value
        .get_mut(field)
        .map(serde_json::Value::take)
        .ok_or_else(|| {
            damaged(<serde_json::Error as serde::de::Error>::custom(format!(
                "missing field `{field}`"
            )))
        })?;
    serde_json::from_value(record).map_err(damaged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &str) -> Result<Vec<u32>, WorldError> {
        parse(
            Path::new("pauses/p.json"),
            bytes.as_bytes(),
            "pause",
            1,
            "pause",
            "deleting it lifts the pause",
        )
    }

    #[test]
    fn a_record_is_read_and_a_damaged_or_newer_file_is_named() {
        assert_eq!(
            read(r#"{"format": 1, "pause": [1, 2]}"#).unwrap(),
            vec![1, 2]
        );
        for damaged in [
            "{",
            r#"{"pause": [1]}"#,
            r#"{"format": 1}"#,
            r#"{"format": 1, "pause": "x"}"#,
        ] {
            let e = read(damaged).unwrap_err().to_string();
            assert!(
                e.contains("pause file pauses/p.json is damaged") && e.contains("lifts the pause"),
                "{damaged}: {e}"
            );
        }
        let e = read(r#"{"format": 2, "pause": [1]}"#).unwrap_err();
        assert!(matches!(e, WorldError::Unsupported(_)), "{e}");
        assert!(e
            .to_string()
            .contains("format 2, newer than this build knows (1)"));
    }
}
