//! API keys: random secrets shown once, kept only as SHA-256 digests, checked in constant time.
//!
//! A key reads `wek_<id>_<secret><check>`:
//!
//! | part | what | why |
//! |---|---|---|
//! | `wek_` | the kind of secret | a secret scanner (and a person) recognizes it |
//! | `<id>` | 8 base62 characters, stored in clear | names the key in lists, logs and revocations |
//! | `<secret>` | 43 base62 characters: 256 random bits | what the holder proves to have |
//! | `<check>` | 6 base62 characters: CRC32C of the secret | a mistyped or truncated key is refused as malformed before any look-up |
//!
//! Only the id and `sha256(secret)` are kept ([`ApiKeyRecord`]); a key that was not copied when
//! it was shown cannot be shown again, only revoked and replaced. A check runs in this order:
//! the shape and check characters (a malformed key), the id (an unknown key), the digests
//! compared in constant time (a wrong key), revocation, expiry; then the scope the route needs.

use std::collections::BTreeMap;

use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use worlds_engine::clock::Millis;

use super::{ApiKeyRecord, AuthError, Principal, Scope};

/// The prefix of every key.
pub const KEY_PREFIX: &str = "wek_";

const ID_LEN: usize = 8;
const SECRET_LEN: usize = 43;
const CHECK_LEN: usize = 6;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A key just created: the key itself, to show once, and what is kept of it.
#[derive(Debug)]
pub struct NewApiKey {
    /// The whole key (`wek_…`). Give it to its holder; it is not kept anywhere.
    pub key: String,
    /// What is kept.
    pub record: ApiKeyRecord,
}

/// The API keys a server accepts.
///
/// ```
/// use worlds_server::auth::{KeyRing, Scope};
/// let keys = KeyRing::new();
/// let new = keys.create("deploy bot", Scope::Write, 0, None);
/// let who = keys.verify(&new.key, 1_000).unwrap();
/// assert_eq!(who.scope, Scope::Write);
/// assert!(keys.verify("wek_nope", 1_000).is_err());
/// ```
#[derive(Debug, Default)]
pub struct KeyRing {
    keys: RwLock<BTreeMap<String, ApiKeyRecord>>,
}

impl KeyRing {
    /// A ring with no keys: every request is refused until one is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// A ring holding `records` (kept from an earlier run, say).
    pub fn with_records(records: impl IntoIterator<Item = ApiKeyRecord>) -> Self {
        let ring = Self::new();
        for record in records {
            ring.insert(record);
        }
        ring
    }

    /// Creates a key with `scope`, created at `now`, refused from `expires_at` on if given,
    /// and keeps it in this ring.
    pub fn create(
        &self,
        name: &str,
        scope: Scope,
        now: Millis,
        expires_at: Option<Millis>,
    ) -> NewApiKey {
        let new = Self::generate(name, scope, now, expires_at);
        self.insert(new.record.clone());
        new
    }

    /// Makes a new key without keeping it anywhere.
    pub fn generate(
        name: &str,
        scope: Scope,
        now: Millis,
        expires_at: Option<Millis>,
    ) -> NewApiKey {
        let id = random_base62(ID_LEN);
        let secret = random_base62(SECRET_LEN);
        let key = format!("{KEY_PREFIX}{id}_{secret}{}", check_of(&secret));
        let record = ApiKeyRecord {
            id,
            name: name.to_owned(),
            scope,
            digest: digest_hex(&secret),
            created_at: now,
            expires_at,
            revoked_at: None,
        };
        NewApiKey { key, record }
    }

    /// Adds (or replaces) a kept key.
    pub fn insert(&self, record: ApiKeyRecord) {
        self.keys.write().insert(record.id.clone(), record);
    }

    /// Revokes the key with this id at `now`; false if there is none.
    pub fn revoke(&self, id: &str, now: Millis) -> bool {
        match self.keys.write().get_mut(id) {
            Some(record) => {
                record.revoked_at.get_or_insert(now);
                true
            }
            None => false,
        }
    }

    /// Every key kept, by id.
    pub fn list(&self) -> Vec<ApiKeyRecord> {
        self.keys.read().values().cloned().collect()
    }

    /// The kept key with this id.
    pub fn get(&self, id: &str) -> Option<ApiKeyRecord> {
        self.keys.read().get(id).cloned()
    }

    /// Replaces every kept key with `records`.
    pub fn replace_all(&self, records: impl IntoIterator<Item = ApiKeyRecord>) {
        *self.keys.write() = records.into_iter().map(|r| (r.id.clone(), r)).collect();
    }

    /// The id of a well-formed key (`None` for a malformed one).
    pub fn id_of(key: &str) -> Option<&str> {
        parse(key).map(|(id, _)| id)
    }

    /// True if no key is kept.
    pub fn is_empty(&self) -> bool {
        self.keys.read().is_empty()
    }

    /// Who holds `key` at `now`, or why it is refused.
    pub fn verify(&self, key: &str, now: Millis) -> Result<Principal, AuthError> {
        let (id, secret) = parse(key).ok_or(AuthError::Malformed)?;
        let keys = self.keys.read();
        let record = keys.get(id).ok_or(AuthError::UnknownKey)?;
        let given = Sha256::digest(secret.as_bytes());
        let kept = decode_hex(&record.digest).ok_or(AuthError::UnknownKey)?;
        if !bool::from(given.as_slice().ct_eq(&kept)) {
            return Err(AuthError::UnknownKey);
        }
        if record.revoked_at.is_some() {
            return Err(AuthError::Revoked);
        }
        if record.expires_at.is_some_and(|at| now >= at) {
            return Err(AuthError::Expired);
        }
        Ok(Principal {
            subject: format!("key:{}", record.id),
            scope: record.scope,
        })
    }
}

/// The id and secret of a well-formed key.
fn parse(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (id, tail) = rest.split_once('_')?;
    if id.len() != ID_LEN || tail.len() != SECRET_LEN + CHECK_LEN {
        return None;
    }
    if !id
        .bytes()
        .chain(tail.bytes())
        .all(|b| b.is_ascii_alphanumeric())
    {
        return None;
    }
    let (secret, check) = tail.split_at(SECRET_LEN);
    (check_of(secret) == check).then_some((id, secret))
}

fn random_base62(len: usize) -> String {
    // Rejection sampling keeps every character equally likely (256 is not a multiple of 62).
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let byte: u8 = rand::random();
        if byte < 248 {
            out.push(char::from(BASE62[usize::from(byte % 62)]));
        }
    }
    out
}

/// The check characters of a secret: its CRC32C in base62, 6 characters.
fn check_of(secret: &str) -> String {
    let mut n = u64::from(crc32c::crc32c(secret.as_bytes()));
    let mut digits = [b'0'; CHECK_LEN];
    for digit in digits.iter_mut().rev() {
        *digit = BASE62[(n % 62) as usize];
        n /= 62;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

fn digest_hex(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_has_its_shape_and_carries_256_bits() {
        let ring = KeyRing::new();
        let new = ring.create("ci", Scope::Read, 5, None);
        let key = &new.key;
        assert!(key.starts_with("wek_"), "{key}");
        assert_eq!(key.len(), 4 + ID_LEN + 1 + SECRET_LEN + CHECK_LEN);
        // 43 characters of 62 kinds: log2(62^43) = 256.03 bits.
        assert!(43.0 * 62f64.log2() >= 256.0);
        assert!(!new.record.digest.is_empty());
        assert!(!format!("{:?}", new.record).contains(&key[13..]));
        assert_eq!(ring.list(), vec![new.record.clone()]);
    }

    #[test]
    fn keys_are_checked_in_order_and_refused_with_a_reason() {
        let ring = KeyRing::new();
        let write = ring.create("w", Scope::Write, 0, Some(100));
        let read = ring.create("r", Scope::Read, 0, None);
        assert_eq!(ring.verify(&write.key, 99).unwrap().scope, Scope::Write);
        assert_eq!(ring.verify(&read.key, 10_000).unwrap().scope, Scope::Read);
        assert_eq!(ring.verify(&write.key, 100), Err(AuthError::Expired));

        // A typo is caught by the check characters, before any look-up.
        let mut typo = read.key.clone().into_bytes();
        let at = 4 + ID_LEN + 1 + 3;
        typo[at] = if typo[at] == b'a' { b'b' } else { b'a' };
        let typo = String::from_utf8(typo).unwrap();
        assert_eq!(ring.verify(&typo, 0), Err(AuthError::Malformed));
        assert_eq!(ring.verify("Bearer", 0), Err(AuthError::Malformed));
        assert_eq!(ring.verify(&read.key[..20], 0), Err(AuthError::Malformed));

        // Well formed but another id, or the right id with another secret.
        let other = KeyRing::new().create("x", Scope::Admin, 0, None);
        assert_eq!(ring.verify(&other.key, 0), Err(AuthError::UnknownKey));
        let forged = format!("{KEY_PREFIX}{}_{}", read.record.id, &other.key[13..]);
        assert_eq!(ring.verify(&forged, 0), Err(AuthError::UnknownKey));

        assert!(ring.revoke(&read.record.id, 7));
        assert_eq!(ring.verify(&read.key, 8), Err(AuthError::Revoked));
        assert!(!ring.revoke("nope", 7));
    }

    #[test]
    fn kept_records_verify_after_a_restart() {
        let first = KeyRing::new();
        let new = first.create("svc", Scope::Admin, 0, None);
        let json = serde_json::to_string(&first.list()).unwrap();
        assert!(!json.contains(&new.key[13..]), "the secret is never kept");
        let records: Vec<ApiKeyRecord> = serde_json::from_str(&json).unwrap();
        let again = KeyRing::with_records(records);
        assert_eq!(again.verify(&new.key, 1).unwrap().scope, Scope::Admin);
    }
}
