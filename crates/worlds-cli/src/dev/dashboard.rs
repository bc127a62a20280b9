//! The dashboard of a `worlds dev` session: the world's API and dashboard on a local port,
//! with an API key made for the session (admin, expiring in a day) to sign in with.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use worlds_engine::model::keys::Scope;
use worlds_engine::World;
use worlds_server::auth::ApiKeys;
use worlds_server::{ApiOptions, ApiServer};

/// How long the session's key works.
const KEY_LIFETIME_MS: i64 = 24 * 3600 * 1000;

/// A served dashboard and the key to sign in with.
pub(crate) struct Dashboard {
    pub(crate) server: ApiServer,
    pub(crate) key: String,
}

impl Dashboard {
    /// Serves the dashboard on `addr` (another free port if that one is taken); `None` for
    /// `off`.
    pub(crate) async fn start(world: &Arc<World>, addr: &str) -> anyhow::Result<Option<Self>> {
        if addr.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let wanted: SocketAddr = addr.parse().with_context(|| {
            format!("--dashboard {addr}: not an address (host:port, e.g. 127.0.0.1:8080) or off")
        })?;
        let keys = ApiKeys::open(world.clone()).await?;
        let expires = world.clock().now_ms().saturating_add(KEY_LIFETIME_MS);
        let key = keys
            .create("worlds dev session", Scope::Admin, Some(expires))
            .await?
            .key;
        let options = ApiOptions::with_world_keys(keys);
        let server = match worlds_server::serve(world.clone(), wanted, options.clone()).await {
            Ok(server) => server,
            Err(_) => {
                let any = SocketAddr::new(wanted.ip(), 0);
                worlds_server::serve(world.clone(), any, options).await?
            }
        };
        Ok(Some(Dashboard { server, key }))
    }

    /// `http://127.0.0.1:8080/`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/", self.server.local_addr())
    }
}
