//! The keys payloads are encrypted with at rest ([`WorldConfig::encryption_keys`]).
//!
//! [`WorldConfig::encryption_keys`]: crate::WorldConfig::encryption_keys

use std::fmt;

use crate::WorldError;

/// The environment variable [`EncryptionKeys::from_env`] reads: keys as `id:hex`, separated by
/// commas, the active one first (`WORLDS_ENGINE_ENCRYPTION_KEYS=k2:9f…,k1:3a…`).
pub const ENCRYPTION_KEYS_ENV: &str = "WORLDS_ENGINE_ENCRYPTION_KEYS";

/// Longest key id, in bytes.
const MAX_ID: usize = 32;

/// The keys a world encrypts payloads with at rest: one active key, which seals everything
/// written from now on, and older keys kept to read what they sealed.
///
/// Each key is 32 random bytes (`openssl rand -hex 32` prints one) with a short id of your
/// choosing (letters, digits, `-`, `_`, `.`), which is stored next to everything the key
/// sealed so the right key is found when reading it back. Keys never leave the process.
///
/// Rotating keys: add a new key in front (it becomes the active one) and keep the old ones.
/// Data sealed under an old key stays readable for as long as the key is listed; new records,
/// including those of runs started before the rotation, are sealed under the new key.
///
/// ```
/// use worlds_engine::EncryptionKeys;
/// let keys = EncryptionKeys::parse(
///     "k2:1111111111111111111111111111111111111111111111111111111111111111,\
///      k1:2222222222222222222222222222222222222222222222222222222222222222",
/// )?;
/// assert_eq!(keys.active_id(), "k2");
/// assert_eq!(keys.ids().collect::<Vec<_>>(), ["k2", "k1"]);
/// # Ok::<(), worlds_engine::WorldError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptionKeys {
    /// The active key first.
    keys: Vec<(String, [u8; 32])>,
}

impl EncryptionKeys {
    /// One key, the active one.
    pub fn new(id: impl Into<String>, key: [u8; 32]) -> Result<Self, WorldError> {
        let id = id.into();
        check_id(&id)?;
        Ok(EncryptionKeys {
            keys: vec![(id, key)],
        })
    }

    /// Adds an older key, kept to read what it sealed; the active key stays the first.
    pub fn with_older(mut self, id: impl Into<String>, key: [u8; 32]) -> Result<Self, WorldError> {
        let id = id.into();
        check_id(&id)?;
        if self.keys.iter().any(|(known, _)| *known == id) {
            return Err(WorldError::invalid(
                "encryption_keys",
                format!("the key id '{id}' is listed twice: give each key its own id"),
            ));
        }
        self.keys.push((id, key));
        Ok(self)
    }

    /// Reads keys written as `id:hex` (64 hex digits), separated by commas, the active one
    /// first.
    pub fn parse(text: &str) -> Result<Self, WorldError> {
        let mut keys: Option<EncryptionKeys> = None;
        for (i, item) in text.split(',').map(str::trim).enumerate() {
            let Some((id, hex_key)) = item.split_once(':') else {
                return Err(WorldError::invalid(
                    "encryption_keys",
                    format!(
                        "key {} is not written as id:hex (for example k1: and 64 hex digits from `openssl rand -hex 32`)",
                        i + 1
                    ),
                ));
            };
            let key = parse_key(id.trim(), hex_key.trim())?;
            keys = Some(match keys {
                None => EncryptionKeys::new(id.trim(), key)?,
                Some(keys) => keys.with_older(id.trim(), key)?,
            });
        }
        keys.ok_or_else(|| WorldError::invalid("encryption_keys", "no key given"))
    }

    /// The keys in [`ENCRYPTION_KEYS_ENV`], if it is set (and not empty).
    pub fn from_env() -> Result<Option<Self>, WorldError> {
        match std::env::var(ENCRYPTION_KEYS_ENV) {
            Ok(text) if !text.trim().is_empty() => EncryptionKeys::parse(&text)
                .map(Some)
                .map_err(|e| WorldError::invalid(ENCRYPTION_KEYS_ENV, e.to_string())),
            _ => Ok(None),
        }
    }

    /// The id of the key that seals new data.
    pub fn active_id(&self) -> &str {
        &self.keys[0].0
    }

    /// Every key id, the active one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| id.as_str())
    }

    /// The active key.
    pub(crate) fn active(&self) -> (&str, &[u8; 32]) {
        let (id, key) = &self.keys[0];
        (id, key)
    }

    /// The key with this id.
    pub(crate) fn get(&self, id: &str) -> Option<&[u8; 32]> {
        self.keys
            .iter()
            .find(|(known, _)| known == id)
            .map(|(_, key)| key)
    }
}

impl fmt::Debug for EncryptionKeys {
    /// Lists the ids, never the keys.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionKeys")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

fn check_id(id: &str) -> Result<(), WorldError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(WorldError::invalid(
            "encryption_keys",
            format!(
                "the key id '{id}' is not usable: use 1 to {MAX_ID} letters, digits, '-', '_' or '.'"
            ),
        ))
    }
}

fn parse_key(id: &str, hex_key: &str) -> Result<[u8; 32], WorldError> {
    let mut key = [0u8; 32];
    hex::decode_to_slice(hex_key, &mut key).map_err(|_| {
        WorldError::invalid(
            "encryption_keys",
            format!(
                "the key '{id}' is not 64 hex digits (32 bytes): make one with `openssl rand -hex 32`"
            ),
        )
    })?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    #[test]
    fn keys_are_read_as_id_and_hex_the_active_one_first() {
        let keys = EncryptionKeys::parse(&format!(" new:{A} , old:{}", "ab".repeat(32))).unwrap();
        assert_eq!(keys.active_id(), "new");
        assert_eq!(keys.get("old"), Some(&[0xab; 32]));
        assert_eq!(keys.get("gone"), None);
    }

    #[test]
    fn bad_keys_are_refused_with_what_to_do() {
        for (text, says) in [
            ("", "not written as id:hex"),
            ("k1", "not written as id:hex"),
            ("k1:abcd", "64 hex digits"),
            (&format!("k1:{}", "zz".repeat(32)), "64 hex digits"),
            (&format!("k 1:{A}"), "not usable"),
            (&format!(":{A}"), "not usable"),
            (&format!("k1:{A},k1:{A}"), "listed twice"),
        ] {
            let error = EncryptionKeys::parse(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn debug_shows_ids_not_keys() {
        let keys = EncryptionKeys::parse(&format!("k1:{A}")).unwrap();
        let shown = format!("{keys:?}");
        assert!(shown.contains("k1") && !shown.contains("1111"), "{shown}");
    }
}
