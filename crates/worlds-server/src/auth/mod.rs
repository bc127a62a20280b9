//! Who may call the API: every route but health checks asks an [`AuthProvider`] who the
//! caller is, and refuses a caller whose [`Scope`] does not cover the route.
//!
//! The built-in provider is a [`KeyRing`] of API keys sent as `Authorization: Bearer wek_…`. A
//! program plugs its own check (OIDC tokens, an mTLS identity set by its proxy) by implementing
//! [`AuthProvider`].

mod keys;
mod world_keys;

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use worlds_engine::clock::Clock;

pub use keys::{KeyRing, NewApiKey, KEY_PREFIX};
pub use world_keys::ApiKeys;
pub use worlds_engine::model::keys::{ApiKeyRecord, Scope};

use crate::error::ApiError;

/// A caller the provider recognized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Who it is, for logs (`key:<id>` for an API key).
    pub subject: String,
    /// What it may do.
    pub scope: Scope,
}

/// Why a caller was not recognized (all answered 401, with the reason in the body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials were sent.
    #[error("this route needs an API key: send `Authorization: Bearer wek_…`")]
    Missing,
    /// The credentials are not of the expected shape (or fail their check characters).
    #[error("the API key is malformed (mistyped or cut short?)")]
    Malformed,
    /// No such key, or the secret does not match it.
    #[error("the API key is not known to this server")]
    UnknownKey,
    /// The key was revoked.
    #[error("the API key was revoked")]
    Revoked,
    /// The key expired.
    #[error("the API key has expired")]
    Expired,
    /// A provider's own refusal.
    #[error("{0}")]
    Refused(String),
}

/// Recognizes callers. Implement it to authenticate with something other than the server's
/// API keys; it sees the request's method, URI and headers (not its body).
///
/// ```
/// use async_trait::async_trait;
/// use axum::http::request::Parts;
/// use worlds_server::auth::{AuthError, AuthProvider, Principal, Scope};
///
/// /// Trusts the identity a TLS-terminating proxy puts in `x-client-cert-subject`.
/// struct ProxyIdentity;
///
/// #[async_trait]
/// impl AuthProvider for ProxyIdentity {
///     async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError> {
///         let subject = request
///             .headers
///             .get("x-client-cert-subject")
///             .and_then(|v| v.to_str().ok())
///             .ok_or(AuthError::Missing)?;
///         Ok(Principal { subject: subject.to_owned(), scope: Scope::Write })
///     }
/// }
/// ```
#[async_trait]
pub trait AuthProvider: Send + Sync + 'static {
    /// The caller of `request`, or why it is refused.
    async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError>;
}

/// API keys checked against the world's clock.
pub(crate) struct KeyAuth {
    pub(crate) keys: Arc<KeyRing>,
    pub(crate) clock: Arc<dyn Clock>,
}

#[async_trait]
impl AuthProvider for KeyAuth {
    async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError> {
        self.keys.verify(bearer_key(request)?, self.clock.now_ms())
    }
}

/// The key of `Authorization: Bearer <key>` (the scheme's name in any case, as HTTP has it).
pub(crate) fn bearer_key(request: &Parts) -> Result<&str, AuthError> {
    let header = request
        .headers
        .get(header::AUTHORIZATION)
        .ok_or(AuthError::Missing)?;
    let value = header.to_str().map_err(|_| AuthError::Malformed)?.trim();
    let (scheme, key) = value.split_once(' ').ok_or(AuthError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Malformed);
    }
    Ok(key.trim())
}

/// Requests each caller may make, counted per [`Principal::subject`].
pub(crate) type Limiter = governor::DefaultKeyedRateLimiter<String>;

/// What a guarded group of routes needs: the provider and the scope; and the callers' rate
/// limit, if there is one.
#[derive(Clone)]
pub(crate) struct Guard {
    pub(crate) provider: Arc<dyn AuthProvider>,
    pub(crate) needs: Scope,
    pub(crate) limiter: Option<Arc<Limiter>>,
}

/// Middleware: refuses a caller the provider does not recognize (401) or whose scope does not
/// cover the route (403); otherwise passes the request on with its [`Principal`] attached.
pub(crate) async fn require(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    match guard.provider.authenticate(&parts).await {
        Ok(principal) if principal.scope.allows(guard.needs) => {
            if let Some(limiter) = &guard.limiter {
                if let Err(not_until) = limiter.check_key(&principal.subject) {
                    let wait = not_until.wait_time_from(governor::clock::Clock::now(
                        &governor::clock::DefaultClock::default(),
                    ));
                    return too_many(wait);
                }
            }
            parts.extensions.insert(principal);
            next.run(Request::from_parts(parts, body)).await
        }
        Ok(principal) => ApiError::forbidden(format!(
            "this route needs the {} scope; the key used has {}",
            guard.needs.as_str(),
            principal.scope.as_str()
        ))
        .into_response(),
        Err(e) => {
            let mut response = ApiError::unauthenticated(e.to_string()).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"worlds\""),
            );
            response
        }
    }
}

/// 429 with `Retry-After` (whole seconds, at least 1).
fn too_many(wait: std::time::Duration) -> Response {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let seconds = seconds.max(1);
    let mut response = ApiError::rate_limited(format!(
        "too many requests with this key: try again in {seconds} s"
    ))
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}
