//! The cipher: per-run keys, and the sealed forms of payloads, texts and bytes.
//!
//! **Keys.** Each run (and each schedule) has its own pair of keys, derived from a world key
//! with HKDF-SHA256: salt [`SALT`], input the world key, info the scope (`run:<id>`), 64 bytes
//! out: an AES-256-GCM key and a nonce key. A leaked run key opens that run only.
//!
//! **Sealing.** AES-256-GCM with the scope as associated data, so a sealed value copied into
//! another run does not open there. The nonce is synthetic: the first 12 bytes of
//! HMAC-SHA256(nonce key, form ‖ plaintext). The same value sealed twice in one run gives the
//! same text, which keeps idempotent writes idempotent (a store that compares a repeated append
//! with what it holds still sees equal events) and never reuses a nonce for two different
//! plaintexts. The price: within one run, an observer of the store can tell that two sealed
//! values are equal, nothing more.
//!
//! **Forms.** A payload (one JSON value) is sealed as a JSON object,
//! `{"$sealed":1,"key":"<id>","nonce":"<base64>","data":"<base64>"}`, so every store keeps
//! valid JSON; a text (an error message) as `$sealed:1:<id>:<nonce>:<data>`; bytes (a stream
//! chunk) as the text form's bytes. Values not in a sealed form are read as they are: data
//! written before encryption was turned on stays readable.

use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload as Message};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use sha2::Sha256;

use crate::config::EncryptionKeys;
use crate::payload::Payload;
use crate::{Unopened, WorldError};

/// HKDF salt: names the scheme, so that keys derived for another use of the same world key
/// differ.
const SALT: &[u8] = b"worlds-engine encryption at rest v1";

/// The start of a sealed payload's JSON text.
const PAYLOAD_PREFIX: &str = "{\"$sealed\":1,";

/// The start of a sealed text.
const TEXT_PREFIX: &str = "$sealed:1:";

/// Derived keys kept before the cache is emptied (each is two small keys).
const CACHED_SCOPES: usize = 4096;

/// Payloads kept in the clear by nonce before that cache is emptied.
const CACHED_PAYLOADS: usize = 65_536;

/// The form a value is sealed in; part of the nonce, so a text and a payload with the same
/// bytes seal differently.
#[derive(Clone, Copy)]
enum Form {
    Payload = 1,
    Text = 2,
    Bytes = 3,
}

/// True if the payload is in the sealed form (encrypted at rest, not opened).
pub(crate) fn is_sealed_payload(payload: &Payload) -> bool {
    payload.as_json().starts_with(PAYLOAD_PREFIX)
}

/// The id of the key a sealed payload, text or bytes (any of the sealed forms, as bytes) was
/// sealed with; `None` if the value is not sealed or does not say.
pub(crate) fn sealed_key_id(sealed: &[u8]) -> Option<&str> {
    let head = &sealed[..sealed.len().min(256)];
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    let id = match text.strip_prefix(PAYLOAD_PREFIX) {
        Some(rest) => rest.strip_prefix("\"key\":\"")?.split('"').next()?,
        None => text.strip_prefix(TEXT_PREFIX)?.split(':').next()?,
    };
    Some(id)
}

/// The error for a sealed value read by a world without keys.
pub(crate) fn no_keys(scope: &str, sealed: &[u8]) -> WorldError {
    WorldError::Encrypted {
        what: scope.to_owned(),
        reason: Unopened::NoKeys {
            key_id: sealed_key_id(sealed).unwrap_or("?").to_owned(),
        },
    }
}

/// True if the text is in the sealed form.
pub(crate) fn is_sealed_text(text: &str) -> bool {
    text.starts_with(TEXT_PREFIX)
}

/// True if the bytes are in the sealed form.
pub(crate) fn is_sealed_bytes(bytes: &[u8]) -> bool {
    bytes.starts_with(TEXT_PREFIX.as_bytes())
}

/// The keys of one scope under one world key.
struct ScopeKeys {
    aead: Aes256Gcm,
    nonce: Hmac<Sha256>,
}

/// Seals and opens values with a world's [`EncryptionKeys`].
pub(crate) struct Cipher {
    keys: EncryptionKeys,
    /// Derived keys by scope, then world key id (looked up without allocating).
    derived: Mutex<FxHashMap<String, KeysById>>,
    /// Payloads this process sealed or opened, by nonce. A run reads back what it just wrote
    /// (a step's input and result, the run's state at its end): found here, that costs a
    /// lookup instead of a decryption. Only authenticated values are kept.
    plain: Mutex<FxHashMap<[u8; 12], Plain>>,
}

/// A scope's derived keys, by world key id.
type KeysById = Vec<(String, Arc<ScopeKeys>)>;

/// A payload in the clear, with the scope and key it was sealed under.
struct Plain {
    scope: Box<str>,
    key_id: Box<str>,
    payload: Payload,
}

#[derive(Deserialize)]
struct SealedPayload {
    key: String,
    nonce: String,
    data: String,
}

impl Cipher {
    pub(crate) fn new(keys: EncryptionKeys) -> Cipher {
        Cipher {
            keys,
            derived: Mutex::new(FxHashMap::default()),
            plain: Mutex::new(FxHashMap::default()),
        }
    }

    fn scope_keys(&self, key_id: &str, scope: &str) -> Result<Arc<ScopeKeys>, WorldError> {
        if let Some(keys) = self
            .derived
            .lock()
            .get(scope)
            .and_then(|by_id| by_id.iter().find(|(id, _)| id == key_id))
        {
            return Ok(keys.1.clone());
        }
        let Some(world_key) = self.keys.get(key_id) else {
            return Err(WorldError::Encrypted {
                what: scope.to_owned(),
                reason: Unopened::MissingKey {
                    key_id: key_id.to_owned(),
                    has: self.keys.ids().map(str::to_owned).collect(),
                },
            });
        };
        let mut okm = [0u8; 64];
        Hkdf::<Sha256>::new(Some(SALT), world_key)
            .expand(scope.as_bytes(), &mut okm)
            .map_err(|_| WorldError::Internal("HKDF refused a 64-byte output".into()))?;
        let keys = Arc::new(ScopeKeys {
            aead: Aes256Gcm::new_from_slice(&okm[..32])
                .map_err(|_| WorldError::Internal("AES-256-GCM refused a 32-byte key".into()))?,
            nonce: <Hmac<Sha256> as Mac>::new_from_slice(&okm[32..])
                .map_err(|_| WorldError::Internal("HMAC refused a 32-byte key".into()))?,
        });
        let mut derived = self.derived.lock();
        if derived.len() >= CACHED_SCOPES {
            derived.clear();
        }
        derived
            .entry(scope.to_owned())
            .or_default()
            .push((key_id.to_owned(), keys.clone()));
        Ok(keys)
    }

    /// Encrypts `plain` in `scope` with the active key: (key id, nonce, ciphertext).
    fn seal(
        &self,
        scope: &str,
        form: Form,
        plain: &[u8],
    ) -> Result<(&str, [u8; 12], Vec<u8>), WorldError> {
        let (key_id, _) = self.keys.active();
        let keys = self.scope_keys(key_id, scope)?;
        let mut mac = keys.nonce.clone();
        mac.update(&[form as u8]);
        mac.update(plain);
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&mac.finalize().into_bytes()[..12]);
        let data = keys
            .aead
            .encrypt(
                Nonce::from_slice(&nonce),
                Message {
                    msg: plain,
                    aad: scope.as_bytes(),
                },
            )
            .map_err(|_| WorldError::Internal("AES-256-GCM could not encrypt".into()))?;
        Ok((key_id, nonce, data))
    }

    /// Decrypts a sealed value of `scope`.
    fn open(
        &self,
        scope: &str,
        key_id: &str,
        nonce: &[u8],
        data: &[u8],
    ) -> Result<Vec<u8>, WorldError> {
        let keys = self.scope_keys(key_id, scope)?;
        if nonce.len() != 12 {
            return Err(tampered(scope));
        }
        keys.aead
            .decrypt(
                Nonce::from_slice(nonce),
                Message {
                    msg: data,
                    aad: scope.as_bytes(),
                },
            )
            // A wrong key and a changed value fail alike: the error says both.
            .map_err(|_| WorldError::Encrypted {
                what: scope.to_owned(),
                reason: Unopened::DoesNotOpen {
                    key_id: key_id.to_owned(),
                },
            })
    }

    /// The payload in its sealed form.
    pub(crate) fn seal_payload(
        &self,
        scope: &str,
        payload: &Payload,
    ) -> Result<Payload, WorldError> {
        let (key_id, nonce, data) =
            self.seal(scope, Form::Payload, payload.as_json().as_bytes())?;
        self.keep(nonce, scope, key_id, payload);
        // Key ids are letters, digits, '-', '_' and '.': no escaping needed.
        Payload::from_json(format!(
            "{PAYLOAD_PREFIX}\"key\":\"{key_id}\",\"nonce\":\"{}\",\"data\":\"{}\"}}",
            B64.encode(nonce),
            B64.encode(data)
        ))
        .map_err(|e| WorldError::Internal(format!("a sealed payload is not JSON: {e}")))
    }

    /// The payload opened, if it is sealed; as it is otherwise.
    pub(crate) fn open_payload(
        &self,
        scope: &str,
        payload: &Payload,
    ) -> Result<Payload, WorldError> {
        if !is_sealed_payload(payload) {
            return Ok(payload.clone());
        }
        let parsed;
        let (key_id, nonce, data) = match payload_parts(payload.as_json()) {
            Some(parts) => parts,
            None => {
                // Not as this module writes it (a store that re-encoded the JSON): read it in
                // full.
                parsed = serde_json::from_str::<SealedPayload>(payload.as_json())
                    .map_err(|_| tampered(scope))?;
                (
                    parsed.key.as_str(),
                    parsed.nonce.as_str(),
                    parsed.data.as_str(),
                )
            }
        };
        let nonce = B64.decode(nonce).map_err(|_| tampered(scope))?;
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| tampered(scope))?;
        if let Some(plain) = self.plain.lock().get(&nonce) {
            if &*plain.scope == scope && &*plain.key_id == key_id {
                return Ok(plain.payload.clone());
            }
        }
        let data = B64.decode(data).map_err(|_| tampered(scope))?;
        let plain = self.open(scope, key_id, &nonce, &data)?;
        let json = String::from_utf8(plain).map_err(|_| tampered(scope))?;
        let payload = Payload::from_json(json).map_err(|_| tampered(scope))?;
        self.keep(nonce, scope, key_id, &payload);
        Ok(payload)
    }

    /// Remembers a payload in the clear under its nonce.
    fn keep(&self, nonce: [u8; 12], scope: &str, key_id: &str, payload: &Payload) {
        let mut plain = self.plain.lock();
        if plain.len() >= CACHED_PAYLOADS {
            plain.clear();
        }
        plain.insert(
            nonce,
            Plain {
                scope: scope.into(),
                key_id: key_id.into(),
                payload: payload.clone(),
            },
        );
    }

    /// The text in its sealed form.
    pub(crate) fn seal_text(&self, scope: &str, text: &str) -> Result<String, WorldError> {
        let (key_id, nonce, data) = self.seal(scope, Form::Text, text.as_bytes())?;
        Ok(format!(
            "{TEXT_PREFIX}{key_id}:{}:{}",
            B64.encode(nonce),
            B64.encode(data)
        ))
    }

    /// The text opened, if it is sealed; as it is otherwise.
    pub(crate) fn open_text(&self, scope: &str, text: &str) -> Result<String, WorldError> {
        let Some(rest) = text.strip_prefix(TEXT_PREFIX) else {
            return Ok(text.to_owned());
        };
        let plain = self.open_parts(scope, rest)?;
        String::from_utf8(plain).map_err(|_| tampered(scope))
    }

    /// The bytes in their sealed form.
    pub(crate) fn seal_bytes(&self, scope: &str, bytes: &[u8]) -> Result<Vec<u8>, WorldError> {
        let (key_id, nonce, data) = self.seal(scope, Form::Bytes, bytes)?;
        Ok(format!(
            "{TEXT_PREFIX}{key_id}:{}:{}",
            B64.encode(nonce),
            B64.encode(data)
        )
        .into_bytes())
    }

    /// The bytes opened, if they are sealed; as they are otherwise.
    pub(crate) fn open_bytes(&self, scope: &str, bytes: &[u8]) -> Result<Vec<u8>, WorldError> {
        let Some(rest) = bytes.strip_prefix(TEXT_PREFIX.as_bytes()) else {
            return Ok(bytes.to_vec());
        };
        let rest = std::str::from_utf8(rest).map_err(|_| tampered(scope))?;
        self.open_parts(scope, rest)
    }

    /// Opens `<id>:<nonce>:<data>`.
    fn open_parts(&self, scope: &str, rest: &str) -> Result<Vec<u8>, WorldError> {
        let mut parts = rest.splitn(3, ':');
        let (Some(key_id), Some(nonce), Some(data)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(tampered(scope));
        };
        let nonce = B64.decode(nonce).map_err(|_| tampered(scope))?;
        let data = B64.decode(data).map_err(|_| tampered(scope))?;
        self.open(scope, key_id, &nonce, &data)
    }
}

/// The key id, nonce and data of a sealed payload as [`Cipher::seal_payload`] writes it.
fn payload_parts(json: &str) -> Option<(&str, &str, &str)> {
    let rest = json
        .strip_prefix(PAYLOAD_PREFIX)?
        .strip_prefix("\"key\":\"")?;
    let (key_id, rest) = rest.split_once('"')?;
    let (nonce, rest) = rest.strip_prefix(",\"nonce\":\"")?.split_once('"')?;
    let data = rest.strip_prefix(",\"data\":\"")?.strip_suffix("\"}")?;
    Some((key_id, nonce, data))
}

fn tampered(scope: &str) -> WorldError {
    WorldError::Internal(format!(
        "{scope}: a sealed value does not open: it was changed, or sealed for another run"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(spec: &str) -> EncryptionKeys {
        EncryptionKeys::parse(spec).unwrap()
    }

    fn k(id: &str, byte: u8) -> String {
        format!("{id}:{}", format!("{byte:02x}").repeat(32))
    }

    fn payload(json: &str) -> Payload {
        Payload::from_json(json).unwrap()
    }

    #[test]
    fn a_payload_sealed_opens_to_the_same_json_and_shows_none_of_it() {
        let cipher = Cipher::new(keys(&k("k1", 1)));
        let secret = payload(r#"{"card":"4242 4242 4242 4242","n":[1,2,3]}"#);
        let sealed = cipher.seal_payload("run:a", &secret).unwrap();
        assert!(is_sealed_payload(&sealed));
        assert!(!sealed.as_json().contains("4242"), "{sealed}");
        assert!(sealed.as_json().contains("\"key\":\"k1\""));
        assert_eq!(cipher.open_payload("run:a", &sealed).unwrap(), secret);
    }

    #[test]
    fn sealing_is_deterministic_within_a_scope_and_differs_between_scopes() {
        let cipher = Cipher::new(keys(&k("k1", 1)));
        let value = payload("42");
        let once = cipher.seal_payload("run:a", &value).unwrap();
        assert_eq!(cipher.seal_payload("run:a", &value).unwrap(), once);
        assert_ne!(cipher.seal_payload("run:b", &value).unwrap(), once);
        assert_ne!(cipher.seal_payload("run:a", &payload("43")).unwrap(), once);
    }

    #[test]
    fn a_value_sealed_for_one_run_does_not_open_in_another() {
        let cipher = Cipher::new(keys(&k("k1", 1)));
        let sealed = cipher.seal_payload("run:a", &payload("1")).unwrap();
        let error = cipher.open_payload("run:b", &sealed).unwrap_err();
        assert!(error.to_string().contains("does not open"), "{error}");
    }

    #[test]
    fn a_sealed_payload_re_encoded_by_a_store_still_opens() {
        let writer = Cipher::new(keys(&k("k1", 1)));
        let sealed = writer.seal_payload("run:a", &payload("[1,2]")).unwrap();
        // Its fields in another order, as a store that re-encodes JSON with sorted keys would
        // write it.
        let value: serde_json::Value = serde_json::from_str(sealed.as_json()).unwrap();
        let re_encoded = payload(&serde_json::to_string(&value).unwrap());
        assert_ne!(re_encoded, sealed);
        assert!(payload_parts(re_encoded.as_json()).is_none());
        let reader = Cipher::new(keys(&k("k1", 1)));
        assert_eq!(
            reader.open_payload("run:a", &re_encoded).unwrap(),
            payload("[1,2]")
        );
    }

    #[test]
    fn a_payload_read_back_by_another_process_is_authenticated() {
        let writer = Cipher::new(keys(&k("k1", 1)));
        let sealed = writer
            .seal_payload("run:a", &payload("\"pay 10\""))
            .unwrap();
        // Another process has nothing in the clear: a changed ciphertext is detected.
        let json = sealed.as_json();
        let at = json.len() - 4;
        let flipped = if &json[at..at + 1] == "A" { "B" } else { "A" };
        let changed = payload(&format!("{}{flipped}{}", &json[..at], &json[at + 1..]));
        let reader = Cipher::new(keys(&k("k1", 1)));
        assert!(reader.open_payload("run:a", &changed).is_err());
        assert_eq!(
            reader.open_payload("run:a", &sealed).unwrap(),
            payload("\"pay 10\"")
        );
        // The writer knows the value it sealed: the same text opens to it at once.
        assert_eq!(
            writer.open_payload("run:a", &sealed).unwrap(),
            payload("\"pay 10\"")
        );
    }

    #[test]
    fn a_changed_byte_is_detected() {
        let cipher = Cipher::new(keys(&k("k1", 1)));
        let sealed = cipher.seal_text("run:a", "boom").unwrap();
        let mut bytes = sealed.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(bytes).unwrap();
        assert!(cipher.open_text("run:a", &changed).is_err());
        assert_eq!(cipher.open_text("run:a", &sealed).unwrap(), "boom");
    }

    #[test]
    fn plain_values_are_read_as_they_are() {
        let cipher = Cipher::new(keys(&k("k1", 1)));
        assert_eq!(
            cipher
                .open_payload("run:a", &payload(r#"{"a":1}"#))
                .unwrap(),
            payload(r#"{"a":1}"#)
        );
        assert_eq!(cipher.open_text("run:a", "plain").unwrap(), "plain");
        assert_eq!(
            cipher.open_bytes("run:a", b"\x00\xff").unwrap(),
            b"\x00\xff"
        );
    }

    #[test]
    fn after_a_rotation_old_values_open_and_new_ones_use_the_new_key() {
        let old = Cipher::new(keys(&k("k1", 1)));
        let sealed_before = old.seal_bytes("run:a", b"chunk").unwrap();
        let rotated = Cipher::new(keys(&format!("{},{}", k("k2", 2), k("k1", 1))));
        assert_eq!(
            rotated.open_bytes("run:a", &sealed_before).unwrap(),
            b"chunk"
        );
        let sealed_after = rotated.seal_bytes("run:a", b"chunk").unwrap();
        assert!(sealed_after.starts_with(b"$sealed:1:k2:"));
        // A world that dropped the old key says which key it lacks.
        let without_old = Cipher::new(keys(&k("k2", 2)));
        let error = without_old.open_bytes("run:a", &sealed_before).unwrap_err();
        assert!(error.to_string().contains("'k1'"), "{error}");
    }

    #[test]
    fn a_value_that_looks_sealed_is_sealed_like_any_other() {
        let cipher = Cipher::new(keys(&k("k1", 1)));
        let lookalike = payload(r#"{"$sealed":1,"key":"k1","nonce":"","data":""}"#);
        let sealed = cipher.seal_payload("run:a", &lookalike).unwrap();
        assert_ne!(sealed, lookalike);
        assert_eq!(cipher.open_payload("run:a", &sealed).unwrap(), lookalike);
        let text = cipher.seal_text("run:a", "$sealed:1:k1:x:y").unwrap();
        assert_eq!(
            cipher.open_text("run:a", &text).unwrap(),
            "$sealed:1:k1:x:y"
        );
    }
}
