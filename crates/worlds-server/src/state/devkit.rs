//! What the DevKit's routes keep between requests: the turns of the writes to each run, and
//! the origins the queue may deliver to. It lies here, below the handlers, because every
//! handler's state ([`Api`](super::Api)) holds it.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use worlds_engine::WorldError;

/// Locks that make the DevKit writes to one run take turns in this server, so two of them do
/// not both pick the same free position. (Servers sharing a database still may; the engine
/// refuses the second write, and the runtime retries the event.)
pub(crate) struct RunLocks {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

impl RunLocks {
    const STRIPES: usize = 64;

    pub(crate) fn new() -> Arc<Self> {
        Arc::new(RunLocks {
            stripes: (0..Self::STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        })
    }

    /// The lock of this run (shared with the runs whose ids hash alike).
    pub(crate) async fn lock(&self, run_id: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        run_id.hash(&mut hasher);
        let stripe = (hasher.finish() % Self::STRIPES as u64) as usize;
        self.stripes[stripe].lock().await
    }
}

/// Where the queue may deliver: only the origins a program allows
/// ([`ApiOptions::devkit_callback_origins`](crate::ApiOptions::devkit_callback_origins)), and
/// nowhere by default. So a caller with a write key cannot make the server send requests to any
/// host it names — a cloud metadata address such as `169.254.169.254`, or another service
/// listening on this machine. An allowed loopback origin (`http://localhost:3000`) stands for
/// that port under every loopback name (`127.0.0.1`, `[::1]`); the entry `loopback` allows
/// every port of this machine.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallbackOrigins {
    allowed: Vec<Origin>,
    /// Every port of this machine (the entry `loopback`).
    loopback: bool,
}

/// The entry of [`ApiOptions::devkit_callback_origins`](crate::ApiOptions::devkit_callback_origins)
/// that allows every port of this machine's loopback addresses.
pub const LOOPBACK: &str = "loopback";

/// `scheme://host:port`, lower case, the port made explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of an absolute http(s) URL; `None` for anything else, and for a URL with
    /// user information (`http://localhost@elsewhere/` names `elsewhere`).
    fn of(url: &str) -> Option<Origin> {
        let uri: axum::http::Uri = url.trim().parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let port = match (authority.port_u16(), scheme.as_str()) {
            (Some(port), "http" | "https") => port,
            (None, "http") => 80,
            (None, "https") => 443,
            _ => return None,
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        Some(Origin { scheme, host, port })
    }

    fn is_loopback(&self) -> bool {
        if self.host == "localhost" {
            return true;
        }
        match self.host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
            Ok(std::net::IpAddr::V6(ip)) => {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            Err(_) => false,
        }
    }
}

impl CallbackOrigins {
    /// `origins` (`https://app.example.com`, `http://10.0.0.5:3000`, [`LOOPBACK`]); an entry
    /// that is none of these is left out, with a warning.
    pub(crate) fn new(origins: &[String]) -> Self {
        let loopback = origins
            .iter()
            .any(|o| o.trim().eq_ignore_ascii_case(LOOPBACK));
        let allowed = origins
            .iter()
            .filter(|o| !o.trim().eq_ignore_ascii_case(LOOPBACK))
            .filter_map(|o| {
                let origin = Origin::of(o);
                if origin.is_none() {
                    tracing::warn!(origin = %o, "not an http(s) origin: the DevKit queue will not deliver to it");
                }
                origin
            })
            .collect();
        CallbackOrigins { allowed, loopback }
    }

    /// Whether `origin` is allowed: listed, or a loopback origin whose port is listed under any
    /// loopback name, or any loopback origin when [`LOOPBACK`] is.
    fn allows(&self, origin: &Origin) -> bool {
        if origin.is_loopback() {
            return self.loopback
                || self.allowed.iter().any(|allowed| {
                    allowed.is_loopback()
                        && allowed.scheme == origin.scheme
                        && allowed.port == origin.port
                });
        }
        self.allowed.contains(origin)
    }

    /// Refuses a callback URL outside the allowed origins.
    pub(crate) fn check(&self, callback_url: &str) -> Result<(), WorldError> {
        if Origin::of(callback_url).is_some_and(|origin| self.allows(&origin)) {
            return Ok(());
        }
        Err(WorldError::InvalidInput {
            field: "callbackUrl".into(),
            message: format!(
                "{callback_url:?} is not an origin this server delivers to: it delivers only to the origins it is given; allow the app's (`worlds serve --devkit-callback-origin http://localhost:3000`, `loopback` for every port of this machine, or ApiOptions::devkit_callback_origins)"
            ),
        })
    }
}
