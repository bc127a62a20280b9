//! Hook tokens: unguessable, derived again on replay, and stored only as digests.
//!
//! A random token is `HMAC-SHA256(key, run_id ":" position)`, cut to 192 bits and written in
//! hex. Derivation (rather than a random draw recorded in history) lets replay hand the workflow
//! the same token without the token ever being written down: history and indexes keep only its
//! SHA-256 digest, and a digest cannot be turned back into a token.
//!
//! Where the key comes from is decided in [`key`](super::key).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Bytes of HMAC output kept in a token (192 bits).
const TOKEN_BYTES: usize = 24;

/// The secret tokens are derived from.
#[derive(Clone)]
pub(crate) struct HookKey([u8; 32]);

impl std::fmt::Debug for HookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookKey(..)")
    }
}

impl HookKey {
    /// A fresh random key.
    pub(crate) fn random() -> Self {
        HookKey(rand::random())
    }

    /// The key for a configured secret.
    pub(crate) fn from_secret(secret: &str) -> Self {
        HookKey(Sha256::digest(secret.as_bytes()).into())
    }

    /// The key written as 64 hex digits (what `state/hook-key` and a key file hold); `None` if
    /// `text`, less surrounding whitespace, is anything else.
    pub(crate) fn from_hex(text: &str) -> Option<Self> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key).ok()?;
        Some(HookKey(key))
    }

    /// The key as 64 hex digits.
    pub(crate) fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The token of the hook at `position` of run `run_id`.
    pub(crate) fn token(&self, run_id: &str, position: u32) -> String {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(run_id.as_bytes());
        mac.update(b":");
        mac.update(position.to_string().as_bytes());
        let out = mac.finalize().into_bytes();
        hex::encode(&out[..TOKEN_BYTES])
    }
}

/// The hex SHA-256 digest of a token: what history and indexes keep instead of the token.
pub fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stable_per_key_run_and_position_and_192_bits() {
        let key = HookKey::from_secret("s3cret");
        let token = key.token("wrun_1", 3);
        assert_eq!(token.len(), 48);
        assert_eq!(token, HookKey::from_secret("s3cret").token("wrun_1", 3));
        assert_ne!(token, key.token("wrun_1", 4));
        assert_ne!(token, key.token("wrun_2", 3));
        assert_ne!(token, HookKey::from_secret("other").token("wrun_1", 3));
        assert_ne!(
            HookKey::random().token("r", 0),
            HookKey::random().token("r", 0)
        );
    }

    #[test]
    fn digests_are_sha256_hex() {
        assert_eq!(
            token_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn keys_round_trip_through_hex() {
        let key = HookKey::random();
        let back = HookKey::from_hex(&format!("{}\n", key.to_hex())).unwrap();
        assert_eq!(key.token("r", 1), back.token("r", 1));
        assert!(HookKey::from_hex("short").is_none());
        assert!(HookKey::from_hex(&"zz".repeat(32)).is_none());
    }
}
