//! Hook tokens: unguessable, derived again on replay, and stored only as digests.
//!
//! A random token is `HMAC-SHA256(key, run_id ":" position)`, cut to 192 bits and written in
//! hex. Derivation (rather than a random draw recorded in history) lets replay hand the workflow
//! the same token without the token ever being written down: history and indexes keep only its
//! SHA-256 digest, and a digest cannot be turned back into a token.
//!
//! The key comes from [`WorldConfig::hook_secret`](crate::WorldConfig::hook_secret) when set —
//! the way to keep it out of the data directory entirely — or else from `state/hook-key` in a
//! durable world's directory (created on first use, readable by the owner only), or, in memory,
//! from fresh randomness per world.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

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

    /// The key kept in `state/hook-key` under `root`, created if missing. Several processes on
    /// one directory read the same key.
    pub(crate) fn load_or_create(root: &Path) -> std::io::Result<Self> {
        let state = root.join("state");
        fs::create_dir_all(&state)?;
        let path = state.join("hook-key");
        for _ in 0..2 {
            match fs::read(&path) {
                Ok(bytes) if bytes.len() == 64 => {
                    let text = String::from_utf8_lossy(&bytes);
                    let mut key = [0u8; 32];
                    for (i, byte) in key.iter_mut().enumerate() {
                        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| {
                            std::io::Error::new(
                                std::io::ErrorKind::InvalidData,
                                format!("{} is not a hex key", path.display()),
                            )
                        })?;
                    }
                    return Ok(HookKey(key));
                }
                Ok(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{} is not a 32-byte hex key", path.display()),
                    ))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let key = HookKey::random();
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            // Written to a temporary file and linked into place, so no process reads half a key.
            let tmp = state.join(format!("hook-key.{}.tmp", std::process::id()));
            let _ = fs::remove_file(&tmp);
            let mut file = options.open(&tmp)?;
            file.write_all(hex(&key.0).as_bytes())?;
            file.sync_all()?;
            let linked = fs::hard_link(&tmp, &path);
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => return Ok(key),
                // Another process created it first: read theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "could not read or create {}",
            path.display()
        )))
    }

    /// The token of the hook at `position` of run `run_id`.
    pub(crate) fn token(&self, run_id: &str, position: u32) -> String {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(run_id.as_bytes());
        mac.update(b":");
        mac.update(position.to_string().as_bytes());
        let out = mac.finalize().into_bytes();
        hex(&out[..TOKEN_BYTES])
    }
}

/// The hex SHA-256 digest of a token: what history and indexes keep instead of the token.
pub fn token_digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
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
    fn the_key_file_is_created_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let a = HookKey::load_or_create(dir.path()).unwrap();
        let b = HookKey::load_or_create(dir.path()).unwrap();
        assert_eq!(a.token("r", 1), b.token("r", 1));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join("state/hook-key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        fs::write(dir.path().join("state/hook-key"), b"short").unwrap();
        assert!(HookKey::load_or_create(dir.path()).is_err());
    }
}
