//! What an outside runtime records about a run driven from outside (a Workflow DevKit app): its
//! protocol version, its execution context, and the run's attributes.
//!
//! Attributes are string keys with string values that the runtime and the run's code set and
//! read back (lineage, tags); keys starting with `$` are reserved for the runtime's own
//! tooling and refused unless the change says it may set them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::WorldError;
use crate::payload::Payload;

/// The most attributes a run holds.
pub const MAX_ATTRIBUTES: usize = 256;
/// The longest attribute key, in bytes.
pub const MAX_ATTRIBUTE_KEY: usize = 256;
/// The longest attribute value, in bytes.
pub const MAX_ATTRIBUTE_VALUE: usize = 4096;

/// What a run's outside runtime recorded about it when it created the run, with the attributes
/// as they stand now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// The version of the runtime's protocol the run was created under (the DevKit's
    /// `specVersion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_version: Option<u32>,
    /// Data the runtime keeps with the run for itself (the DevKit's `executionContext`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_context: Option<Payload>,
    /// The run's attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

impl RuntimeInfo {
    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.spec_version.is_none()
            && self.execution_context.is_none()
            && self.attributes.is_empty()
    }
}

/// One change to a run's attributes: `value` sets the key, `None` removes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeChange {
    /// The key.
    pub key: String,
    /// The new value, or `None` to remove the key.
    pub value: Option<String>,
}

/// Checks attribute changes before they are recorded: keys not empty and not too long, values
/// not too long, no reserved (`$`) key unless `allow_reserved`, and no more than
/// [`MAX_ATTRIBUTES`] keys once applied to `current`.
///
/// ```
/// use std::collections::BTreeMap;
/// use worlds_engine::model::{check_attribute_changes, AttributeChange};
///
/// let set = |k: &str| AttributeChange { key: k.into(), value: Some("v".into()) };
/// assert!(check_attribute_changes(&BTreeMap::new(), &[set("team")], false).is_ok());
/// assert!(check_attribute_changes(&BTreeMap::new(), &[set("$lineage")], false).is_err());
/// assert!(check_attribute_changes(&BTreeMap::new(), &[set("$lineage")], true).is_ok());
/// ```
pub fn check_attribute_changes(
    current: &BTreeMap<String, String>,
    changes: &[AttributeChange],
    allow_reserved: bool,
) -> Result<(), WorldError> {
    for change in changes {
        let key = &change.key;
        if key.is_empty() || key.len() > MAX_ATTRIBUTE_KEY {
            return Err(WorldError::invalid(
                "attributes",
                format!(
                    "an attribute key is 1 to {MAX_ATTRIBUTE_KEY} bytes long, not {} bytes",
                    key.len()
                ),
            ));
        }
        if key.contains('\0') || change.value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err(WorldError::invalid(
                "attributes",
                format!(
                    "attribute {key:?} holds a NUL character; keys and values are text without NUL"
                ),
            ));
        }
        if key.starts_with('$') && !allow_reserved {
            return Err(WorldError::invalid(
                "attributes",
                format!("attribute key {key:?} starts with `$`, which is reserved for the runtime's own attributes"),
            ));
        }
        if let Some(value) = &change.value {
            if value.len() > MAX_ATTRIBUTE_VALUE {
                return Err(WorldError::invalid(
                    "attributes",
                    format!(
                        "attribute {key:?} is {} bytes long; a value holds at most {MAX_ATTRIBUTE_VALUE}",
                        value.len()
                    ),
                ));
            }
        }
    }
    let after = apply_attribute_changes(current.clone(), changes);
    if after.len() > MAX_ATTRIBUTES {
        return Err(WorldError::invalid(
            "attributes",
            format!(
                "a run holds at most {MAX_ATTRIBUTES} attributes; these changes would make {}",
                after.len()
            ),
        ));
    }
    Ok(())
}

/// The attributes after `changes`, applied in order.
pub fn apply_attribute_changes(
    mut attributes: BTreeMap<String, String>,
    changes: &[AttributeChange],
) -> BTreeMap<String, String> {
    for change in changes {
        match &change.value {
            Some(value) => {
                attributes.insert(change.key.clone(), value.clone());
            }
            None => {
                attributes.remove(&change.key);
            }
        }
    }
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: &str, value: Option<&str>) -> AttributeChange {
        AttributeChange {
            key: key.into(),
            value: value.map(str::to_owned),
        }
    }

    #[test]
    fn changes_apply_in_order_and_none_removes() {
        let start = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        let after = apply_attribute_changes(
            start,
            &[
                change("b", Some("2")),
                change("a", None),
                change("b", Some("3")),
            ],
        );
        assert_eq!(after, BTreeMap::from([("b".to_owned(), "3".to_owned())]));
    }

    #[test]
    fn bad_keys_and_values_are_refused_with_the_reason() {
        let none = BTreeMap::new();
        for (changes, reserved, words) in [
            (vec![change("", Some("v"))], false, "1 to"),
            (
                vec![change(&"k".repeat(MAX_ATTRIBUTE_KEY + 1), Some("v"))],
                false,
                "1 to",
            ),
            (
                vec![change("k", Some(&"v".repeat(MAX_ATTRIBUTE_VALUE + 1)))],
                false,
                "at most",
            ),
            (vec![change("k\0", Some("v"))], false, "NUL"),
            (vec![change("k", Some("v\0"))], false, "NUL"),
            (vec![change("$x", Some("v"))], false, "reserved"),
        ] {
            let err = check_attribute_changes(&none, &changes, reserved).unwrap_err();
            assert!(err.to_string().contains(words), "{err}");
        }
        let many: Vec<_> = (0..=MAX_ATTRIBUTES)
            .map(|i| change(&format!("k{i}"), Some("v")))
            .collect();
        assert!(check_attribute_changes(&none, &many, false).is_err());
        // Removing keeps a full run within the limit.
        let full = apply_attribute_changes(BTreeMap::new(), &many[..MAX_ATTRIBUTES]);
        assert!(check_attribute_changes(&full, &[change("k0", None)], false).is_ok());
    }
}
