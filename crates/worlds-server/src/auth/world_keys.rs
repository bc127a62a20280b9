//! API keys kept by the world's store ([`ApiKeys`]): created, listed and revoked here or by
//! another process (the `worlds keys` command, another server on the same storage), checked
//! from memory.

use std::sync::Arc;

use async_trait::async_trait;
use axum::http::request::Parts;
use parking_lot::Mutex;
use worlds_engine::clock::Millis;
use worlds_engine::{World, WorldError};

use super::{
    bearer_key, ApiKeyRecord, AuthError, AuthProvider, KeyRing, NewApiKey, Principal, Scope,
};

/// How long the records in memory are trusted before the store is read again, so that a key
/// revoked by another process is refused within this time.
const REFRESH_MS: Millis = 1_000;

/// A key id not in memory reads the store again before the key is refused, so a key made by
/// another process (`worlds keys create`) works on its first request. Such reads are allowed
/// [`LOOKUP_BURST`] at once, then one per this interval: a flood of made-up keys costs the
/// store ten reads a second, not one per request.
const LOOKUP_MS: Millis = 100;

/// Reads for unknown key ids allowed at once after a quiet spell.
const LOOKUP_BURST: u32 = 5;

/// The world's API keys: records in its store, checked from a copy in memory that is read
/// again once it is a second old, or before a key whose id is not in it is refused (a few at
/// once, then at most every 100 ms).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::sync::Arc;
/// use worlds_engine::prelude::*;
/// use worlds_server::auth::{ApiKeys, Scope};
/// let world = Arc::new(World::new(WorldConfig::memory())?);
/// let keys = ApiKeys::open(world.clone()).await?;
/// let new = keys.create("ci", Scope::Read, None).await?;
/// assert_eq!(keys.verify(&new.key).await.unwrap().scope, Scope::Read);
/// keys.revoke(&new.record.id).await?;
/// assert!(keys.verify(&new.key).await.is_err());
/// # Ok::<(), WorldError>(())
/// # }).unwrap();
/// ```
pub struct ApiKeys {
    world: Arc<World>,
    ring: KeyRing,
    /// When the ring was last read from the store (the world's clock).
    read_at: Mutex<Millis>,
    /// The reads for unknown key ids still allowed now.
    lookups: Mutex<Lookups>,
}

/// A token bucket for the store reads of unknown key ids: [`LOOKUP_BURST`] tokens, one more
/// every [`LOOKUP_MS`].
#[derive(Debug)]
struct Lookups {
    tokens: u32,
    /// When the last token was added (or the bucket found full).
    filled_at: Millis,
}

impl Lookups {
    /// Takes a token at `now`, if there is one.
    fn take(&mut self, now: Millis) -> bool {
        let earned = now.saturating_sub(self.filled_at) / LOOKUP_MS;
        if earned > 0 {
            let room = LOOKUP_BURST - self.tokens;
            let added = u32::try_from(earned).unwrap_or(u32::MAX).min(room);
            self.tokens += added;
            self.filled_at = match self.tokens == LOOKUP_BURST {
                true => now,
                false => self.filled_at + Millis::from(added) * LOOKUP_MS,
            };
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.ring.list().len())
            .finish()
    }
}

impl ApiKeys {
    /// The keys of `world`, read from its store.
    pub async fn open(world: Arc<World>) -> Result<Arc<Self>, WorldError> {
        let keys = ApiKeys {
            ring: KeyRing::new(),
            read_at: Mutex::new(0),
            lookups: Mutex::new(Lookups {
                tokens: LOOKUP_BURST,
                filled_at: world.clock().now_ms(),
            }),
            world,
        };
        keys.reload().await?;
        Ok(Arc::new(keys))
    }

    fn now(&self) -> Millis {
        self.world.clock().now_ms()
    }

    async fn reload(&self) -> Result<(), WorldError> {
        let records = self.world.keys().list().await?;
        self.ring.replace_all(records);
        *self.read_at.lock() = self.now();
        Ok(())
    }

    /// Creates a key, saved in the world's store before it is returned. The key itself is in
    /// the answer only: show it once.
    pub async fn create(
        &self,
        name: &str,
        scope: Scope,
        expires_at: Option<Millis>,
    ) -> Result<NewApiKey, WorldError> {
        let new = KeyRing::generate(name, scope, self.now(), expires_at);
        self.world.keys().save(&new.record).await?;
        self.ring.insert(new.record.clone());
        Ok(new)
    }

    /// Revokes the key with this id: refused from now on, here at once and by other servers
    /// of the world within a second. `NotFound` if there is no such key.
    pub async fn revoke(&self, id: &str) -> Result<ApiKeyRecord, WorldError> {
        self.reload().await?;
        let mut record = self.ring.get(id).ok_or_else(|| WorldError::NotFound {
            what: "API key",
            id: id.to_owned(),
        })?;
        record.revoked_at.get_or_insert(self.now());
        self.world.keys().save(&record).await?;
        self.ring.insert(record.clone());
        Ok(record)
    }

    /// Every key's record, as the store holds them now.
    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        self.reload().await?;
        Ok(self.ring.list())
    }

    /// Who holds `key`, or why it is refused.
    pub async fn verify(&self, key: &str) -> Result<Principal, AuthError> {
        let age = self.now().saturating_sub(*self.read_at.lock());
        let unknown = KeyRing::id_of(key).is_some_and(|id| self.ring.get(id).is_none());
        if age >= REFRESH_MS || (unknown && self.lookups.lock().take(self.now())) {
            if let Err(e) = self.reload().await {
                // The copy in memory still answers; the store is tried again next time.
                tracing::warn!(error = %e, "could not read the API keys again");
            }
        }
        self.ring.verify(key, self.now())
    }
}

#[async_trait]
impl AuthProvider for ApiKeys {
    async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError> {
        self.verify(bearer_key(request)?).await
    }
}
