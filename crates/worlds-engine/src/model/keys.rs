//! API keys as a world keeps them: what a key may do ([`Scope`]) and the record of it
//! ([`ApiKeyRecord`]), which never holds the key itself. Making and checking keys is the HTTP
//! server's (`worlds-server`); storing the records is the store's ([`KeyStore`]).
//!
//! [`KeyStore`]: crate::store::KeyStore

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;

/// What a caller of the world's API may do. Each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Look: every `GET`.
    Read,
    /// Act on runs: start, cancel, resume hooks, write streams.
    Write,
    /// Manage the world: keys, schedules, bulk operations.
    Admin,
}

impl Scope {
    /// True if a caller with this scope may use a route that needs `needed`.
    pub fn allows(self, needed: Scope) -> bool {
        self >= needed
    }

    /// The scope's name, as in `--scope read|write|admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            other => Err(format!("unknown scope '{other}': use read, write or admin")),
        }
    }
}

/// What is kept of an API key: never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// The key's public id: 8 letters and digits, also part of the key.
    pub id: String,
    /// A name for people: what the key is for.
    pub name: String,
    /// What the key may do.
    pub scope: Scope,
    /// `sha256` of the key's secret part, in lower-case hex.
    pub digest: String,
    /// When it was created (ms since the epoch, on the world's clock).
    pub created_at: Millis,
    /// From this moment on the key is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Millis>,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Millis>,
}

/// Refuses a key id that is not 8 ASCII letters or digits (ids name files and rows).
pub fn check_key_id(id: &str) -> Result<(), WorldError> {
    if id.len() == 8 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(WorldError::InvalidInput {
            field: "key id".into(),
            message: format!("'{id}' is not a key id (8 letters or digits)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_include_the_ones_before_them() {
        assert!(Scope::Admin.allows(Scope::Write) && Scope::Admin.allows(Scope::Read));
        assert!(Scope::Write.allows(Scope::Read) && !Scope::Write.allows(Scope::Admin));
        assert!(!Scope::Read.allows(Scope::Write));
        assert_eq!("write".parse::<Scope>(), Ok(Scope::Write));
        assert!("root"
            .parse::<Scope>()
            .unwrap_err()
            .contains("read, write or admin"));
        assert!(check_key_id("3fK9aQ2m").is_ok());
        assert!(check_key_id("../etc/x").is_err() && check_key_id("short").is_err());
    }
}
