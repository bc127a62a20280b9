//! Dashboard sign-in: a person pastes an API key once; the server checks it with the API's
//! [`AuthProvider`] and answers with a session cookie (`HttpOnly`, `SameSite=Strict`, path
//! `/`) holding a random session id, never the key. Sessions live in memory: a restarted server
//! asks for the key again.
//!
//! A session is bound to its key: the key is kept with the session (in memory only) and checked
//! again with the provider on every request, so a key that is revoked or expires ends its
//! sessions at their next request, and a live page's event stream within [`RECHECK`].
//!
//! Actions (POST) also need the request to come from the dashboard's own pages: a browser says
//! so in `Sec-Fetch-Site` (`same-origin`) or, failing that, in an `Origin` equal to the page's
//! host. Together with `SameSite=Strict` this refuses cross-site forms (CSRF) without tokens.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request};
use base64::Engine as _;
use parking_lot::Mutex;
use worlds_engine::clock::{Clock, Millis};

use crate::auth::{AuthError, AuthProvider, Principal};

/// The cookie's name.
pub(crate) const COOKIE: &str = "worlds_session";

/// A session ends after this long without a request.
const IDLE: Duration = Duration::from_secs(12 * 3600);

/// Most sessions kept at once; beyond it the least recently used goes.
const MAX_SESSIONS: usize = 10_000;

/// How often a long-lived answer (a live page's event stream) checks that its session's key
/// is still good.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// One signed-in browser.
struct Session {
    /// The key it signed in with, checked again on every request.
    key: Key,
    last_seen: Millis,
}

/// A key kept for a session; never printed.
struct Key(String);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The session a request came with (attached by the dashboard's guard), for answers that last.
#[derive(Debug, Clone)]
pub(crate) struct SessionId(pub(crate) String);

/// The dashboard's sessions.
pub(crate) struct Sessions {
    provider: Arc<dyn AuthProvider>,
    clock: Arc<dyn Clock>,
    sessions: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    pub(crate) fn new(provider: Arc<dyn AuthProvider>, clock: Arc<dyn Clock>) -> Self {
        Sessions {
            provider,
            clock,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Checks `key` as the API would: who holds it, or why it is refused.
    async fn authenticate(&self, key: &str) -> Result<Principal, AuthError> {
        let request = Request::builder()
            .uri("/")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .body(())
            .map_err(|_| AuthError::Malformed)?;
        let (parts, ()) = request.into_parts();
        self.provider.authenticate(&parts).await
    }

    /// Checks `key` as the API would and opens a session for it: the `Set-Cookie` value.
    pub(crate) async fn sign_in(&self, key: &str) -> Result<(Principal, HeaderValue), AuthError> {
        let key = key.trim();
        let principal = self.authenticate(key).await?;
        let id =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        let now = self.clock.now_ms();
        {
            let mut sessions = self.sessions.lock();
            sessions.retain(|_, s| now - s.last_seen < idle_ms());
            if sessions.len() >= MAX_SESSIONS {
                if let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(id, _)| id.clone())
                {
                    sessions.remove(&oldest);
                }
            }
            sessions.insert(
                id.clone(),
                Session {
                    key: Key(key.to_owned()),
                    last_seen: now,
                },
            );
        }
        let cookie = format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
        let cookie = HeaderValue::from_str(&cookie).map_err(|_| AuthError::Malformed)?;
        Ok((principal, cookie))
    }

    /// The request's session id and its key's principal, if the cookie names a live session
    /// whose key the provider still accepts. A session whose key is refused (revoked,
    /// expired) ends here.
    pub(crate) async fn principal(&self, headers: &HeaderMap) -> Option<(SessionId, Principal)> {
        let id = session_id(headers)?;
        let principal = self.check(id, true).await?;
        Some((SessionId(id.to_owned()), principal))
    }

    /// Whether the session `id` is still live and its key still accepted (without counting
    /// as activity).
    pub(crate) async fn is_live(&self, id: &SessionId) -> bool {
        self.check(&id.0, false).await.is_some()
    }

    /// Completes once the session `id` has ended (signed out, idle, or its key refused),
    /// looking every [`RECHECK`]: a live page's stream ends with its session.
    pub(crate) async fn ended(self: Arc<Self>, id: SessionId) {
        loop {
            tokio::time::sleep(RECHECK).await;
            if !self.is_live(&id).await {
                return;
            }
        }
    }

    async fn check(&self, id: &str, touch: bool) -> Option<Principal> {
        let now = self.clock.now_ms();
        let key = {
            let mut sessions = self.sessions.lock();
            let session = sessions.get_mut(id)?;
            if now - session.last_seen >= idle_ms() {
                sessions.remove(id);
                return None;
            }
            if touch {
                session.last_seen = now;
            }
            session.key.0.clone()
        };
        match self.authenticate(&key).await {
            Ok(principal) => Some(principal),
            Err(e) => {
                tracing::info!(reason = %e, "a dashboard session ended: its key is refused now");
                self.sessions.lock().remove(id);
                None
            }
        }
    }

    /// Ends the request's session; the `Set-Cookie` value that clears the cookie.
    pub(crate) fn sign_out(&self, headers: &HeaderMap) -> HeaderValue {
        if let Some(id) = session_id(headers) {
            self.sessions.lock().remove(id);
        }
        HeaderValue::from_static("worlds_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    }
}

fn idle_ms() -> Millis {
    Millis::try_from(IDLE.as_millis()).unwrap_or(Millis::MAX)
}

/// The session id in the `Cookie` header.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// Whether a request that changes something comes from the dashboard's own pages.
pub(crate) fn same_origin(parts: &Parts) -> bool {
    from_own_page(&parts.method, &parts.headers)
}

/// Whether a request with `method` and `headers` comes from the dashboard's own pages (any
/// `GET` or `HEAD` does; others need `Sec-Fetch-Site: same-origin` or an `Origin` equal to
/// the host). Signing in is checked too, so another site cannot sign a browser in with the
/// attacker's key (login CSRF).
pub(crate) fn from_own_page(method: &Method, headers: &HeaderMap) -> bool {
    if *method == Method::GET || *method == Method::HEAD {
        return true;
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return site == "same-origin" || site == "none";
    }
    let (Some(origin), Some(host)) = (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, headers: &[(&str, &str)]) -> Parts {
        let mut request = Request::builder().method(method).uri("/runs/x/cancel");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_same_origin_requests_may_act() {
        assert!(same_origin(&parts(Method::GET, &[])));
        assert!(same_origin(&parts(
            Method::POST,
            &[("sec-fetch-site", "same-origin")]
        )));
        assert!(!same_origin(&parts(
            Method::POST,
            &[
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://a"),
                ("host", "a")
            ]
        )));
        assert!(same_origin(&parts(
            Method::POST,
            &[
                ("origin", "http://127.0.0.1:8080"),
                ("host", "127.0.0.1:8080")
            ]
        )));
        assert!(!same_origin(&parts(
            Method::POST,
            &[("origin", "http://evil.test"), ("host", "127.0.0.1:8080")]
        )));
        assert!(
            !same_origin(&parts(Method::POST, &[])),
            "no evidence: refused"
        );
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; worlds_session=abc; other=1"),
        );
        assert_eq!(session_id(&headers), Some("abc"));
        headers.insert(header::COOKIE, HeaderValue::from_static("worlds_session="));
        assert_eq!(session_id(&headers), None);
    }
}
