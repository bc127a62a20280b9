//! Hooks and webhooks: a workflow pauses until the outside world sends it a payload.
//!
//! Inside a workflow, [`WorkflowContext::create_hook`](crate::WorkflowContext::create_hook)
//! returns a [`Hook`](crate::Hook) at once, with a token to hand out (in an email, a chat message, a URL).
//! `hook.wait().await` suspends the run — holding no worker, surviving restarts — until someone
//! calls [`World::resume_hook`](crate::World::resume_hook) with that token and a payload. A
//! [`Webhook`](crate::Webhook) is a hook whose payload is an HTTP request, with a URL to call.
//!
//! ```
//! use worlds_engine::prelude::*;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Approval { approved: bool, by: String }
//!
//! let approve = workflow("approve-expense", |ctx: WorkflowContext, amount: u64| async move {
//!     let hook = ctx.create_hook_with::<Approval>(HookOptions::new().expires_in("168h"));
//!     // Hand `hook.token()` to a person, e.g. through a notification step.
//!     let decision = hook.wait().await?;
//!     Ok::<_, WorkflowError>(decision.approved && amount < 10_000)
//! });
//! # let _ = approve;
//! ```
//!
//! Tokens are never stored: history keeps only their SHA-256 digest (see [`token_digest`]), and
//! random tokens are derived from a secret so that replay can hand the workflow the same token
//! again (see [`WorldConfig::hook_secret`](crate::WorldConfig::hook_secret), and
//! [`HOOK_SECRET_ENV`] for where else the secret can come from). A hook takes one payload. When its run finishes, every hook still waiting is disposed and its token released.

mod key;
mod token;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::duration::IntoDuration;

pub use crate::config::webhook_signature::{
    SignatureRefusal, SignatureScheme, Verified, WebhookSecret, WebhookSignature, DEFAULT_TOLERANCE,
};
pub use key::HOOK_SECRET_ENV;
pub use token::token_digest;
pub(crate) use token::HookKey;

/// Options of a hook: a token of your own, an expiry, and for a webhook the HTTP methods that
/// resume it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookOptions {
    pub(crate) token: Option<String>,
    pub(crate) expires_in: Option<Result<std::time::Duration, String>>,
    pub(crate) methods: Option<Vec<String>>,
    pub(crate) signature: Option<String>,
}

impl HookOptions {
    /// Defaults: a random token, no expiry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this token instead of a random one (for example `order-42-approval`, so the sender
    /// needs no message from the workflow). It must be deterministic: replay uses it again. While
    /// a hook with this token is waiting in any run, another hook cannot take it: that one gets a
    /// `hook_conflict` event and its `wait()` fails with a conflict.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The hook stops accepting payloads this long after it is created (`"15m"`, `"168h"`, or
    /// milliseconds). Resuming it later is refused (410), and its `wait()` fails.
    pub fn expires_in(mut self, duration: impl IntoDuration) -> Self {
        self.expires_in = Some(duration.into_duration().map_err(|e| e.to_string()));
        self
    }

    /// The HTTP methods whose requests resume a webhook (`["POST", "PUT"]`); any other method
    /// is answered `405` and leaves the webhook waiting. Default `POST` only, so that link
    /// previews and scanners, which send `GET` and `HEAD`, cannot use a webhook up. Only for
    /// [`create_webhook_with`](crate::WorkflowContext::create_webhook_with): a plain hook given
    /// methods fails its `wait()` with an invalid argument.
    pub fn methods<I, S>(mut self, methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.methods = Some(methods.into_iter().map(Into::into).collect());
        self
    }
}

impl HookOptions {
    /// Requests to this webhook must be signed as the world's named signature `name` says
    /// ([`WebhookServerOptions::named_signatures`](crate::config::WebhookServerOptions::named_signatures)),
    /// instead of the world's default one. Requests are refused (401) until the world
    /// receiving them configures that name. Only for webhooks, like [`methods`](Self::methods).
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    ///
    /// let deploys = workflow("deploy-on-push", |ctx: WorkflowContext, _: ()| async move {
    ///     let push = ctx.create_webhook_with(HookOptions::new().signature("github"));
    ///     // Give `push.url()` to GitHub, with the secret of `named_signatures["github"]`.
    ///     let request = push.wait().await?;
    ///     Ok::<_, WorkflowError>(request.body.len())
    /// });
    /// # let _ = deploys;
    /// ```
    pub fn signature(mut self, name: impl Into<String>) -> Self {
        self.signature = Some(name.into());
        self
    }
}

/// Checks the methods of a webhook and returns them upper case, without repeats.
pub(crate) fn check_methods(methods: &[String]) -> Result<Vec<String>, String> {
    if methods.is_empty() {
        return Err("a webhook needs at least one HTTP method (the default is POST)".into());
    }
    let mut checked: Vec<String> = Vec::new();
    for method in methods {
        let upper = method.to_ascii_uppercase();
        if !is_token(&upper) {
            return Err(format!(
                "{method:?} is not an HTTP method; use names such as \"POST\" or \"PUT\""
            ));
        }
        if !checked.contains(&upper) {
            checked.push(upper);
        }
    }
    Ok(checked)
}

/// Whether `name` is an HTTP token (RFC 9110 §5.6.2), the syntax of a method name: one or more
/// letters, digits or `!#$%&'*+-.^_`|~`. Checked here rather than by an HTTP library so that
/// creating webhooks does not need the `http` feature.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What runs need to make hooks: the token key and where webhook URLs point.
pub(crate) struct HookKit {
    pub(crate) key: HookKey,
    pub(crate) webhook_base_url: String,
    /// Payload checks by hook type: the names of registered definitions, and the type names
    /// of hooks this process created.
    validators: parking_lot::RwLock<rustc_hash::FxHashMap<String, HookValidator>>,
}

impl std::fmt::Debug for HookKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookKit")
            .field("webhook_base_url", &self.webhook_base_url)
            .finish()
    }
}

impl HookKit {
    /// The kit the configuration calls for (see [`key`] for where the key comes from).
    /// Fails if a configured key cannot be read.
    pub(crate) fn for_config(
        config: &crate::config::WorldConfig,
    ) -> Result<Self, crate::WorldError> {
        let (key, _source) = key::resolve(config, |name| std::env::var(name).ok())?;
        Ok(Self::with_key(config, key))
    }

    /// The kit for a world whose store was handed over ready-made: a key that cannot be read is
    /// logged and replaced by a random one, whose tokens do not outlive the process.
    pub(crate) fn for_config_or_random(config: &crate::config::WorldConfig) -> Self {
        Self::for_config(config).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "no hook key; hook tokens will change after a restart");
            Self::with_key(config, HookKey::random())
        })
    }

    fn with_key(config: &crate::config::WorldConfig, key: HookKey) -> Self {
        HookKit {
            key,
            webhook_base_url: config.webhook_base_url.clone(),
            validators: Default::default(),
        }
    }

    /// Registers the payload check of a hook type (the first registration of a name stays).
    pub(crate) fn add_validator(&self, kind: &str, validator: impl FnOnce() -> HookValidator) {
        if self.validators.read().contains_key(kind) {
            return;
        }
        self.validators
            .write()
            .entry(kind.to_owned())
            .or_insert_with(validator);
    }

    /// The payload check of a hook type, if this process knows it.
    pub(crate) fn validator(&self, kind: &str) -> Option<HookValidator> {
        self.validators.read().get(kind).cloned()
    }
}

/// Longest caller-chosen token.
const MAX_TOKEN_LEN: usize = 200;

/// Checks a caller-chosen token: 1 to 200 characters that need no escaping in a URL path, not
/// only dots (HTTP clients resolve `.` and `..` away, so such a webhook URL cannot be called).
pub(crate) fn check_token(token: &str) -> Result<(), String> {
    if !token.is_empty() && token.bytes().all(|b| b == b'.') {
        return Err(format!(
            "a hook token must not consist of dots only ({token:?}): clients resolve it away as a path segment; add a letter or digit"
        ));
    }
    let ok = !token.is_empty()
        && token.len() <= MAX_TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a hook token must be 1 to {MAX_TOKEN_LEN} ASCII letters, digits, '-', '_', '.' or '~'; got {token:?}"
        ))
    }
}

/// What the executor records for a new hook.
#[derive(Debug)]
pub(crate) struct NewHook {
    pub(crate) position: u32,
    pub(crate) hook_id: String,
    pub(crate) token_digest: String,
    pub(crate) expires_at: Option<Millis>,
    pub(crate) webhook: bool,
    /// The HTTP methods of a webhook; empty for the default (`POST`).
    pub(crate) methods: Vec<String>,
    pub(crate) hook_type: Option<String>,
    /// The named signature of a webhook.
    pub(crate) signature: Option<String>,
    /// The caller chose the token, so it may clash with another live hook's.
    pub(crate) chosen: bool,
    /// Data for whoever resumes it (an external runtime's hook metadata).
    pub(crate) metadata: Option<crate::payload::Payload>,
}

/// What a step needs to recover a hook's token: the run, the hook's position and id (and the
/// token itself only when the caller chose it, since it cannot be derived). See
/// [`Hook::ticket`](crate::Hook::ticket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookTicket {
    /// The run that created the hook.
    pub run_id: String,
    /// The hook's command position.
    pub position: u32,
    /// The hook id.
    pub hook_id: String,
    /// The token, for a caller-chosen one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// An HTTP request delivered to a webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// Header names (lower case) and values; repeated headers are joined with `, `.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The query string, without the `?`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The body, as text (bytes that are not UTF-8 are replaced).
    #[serde(default)]
    pub body: String,
}

impl WebhookRequest {
    /// A request with this method and body and no headers.
    pub fn new(method: impl Into<String>, body: impl Into<String>) -> Self {
        WebhookRequest {
            method: method.into(),
            body: body.into(),
            ..Self::default()
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers
            .insert(name.into().to_ascii_lowercase(), value.into());
        self
    }

    /// The body parsed as JSON. For a webhook made with
    /// [`create_json_webhook`](crate::WorkflowContext::create_json_webhook)`::<T>` this cannot
    /// fail: a body that is not a `T` was refused before it reached the run.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.body)
    }
}

/// Where a resumed hook belongs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookResumed {
    /// The run that waits on the hook.
    pub run_id: String,
    /// The hook id.
    pub hook_id: String,
}

/// A typed hook factory: the payload type is fixed once, for creating and for resuming.
///
/// Registered on a world (`world.register(&approval)`), it also lets
/// [`World::resume_hook`](crate::World::resume_hook) refuse a payload of the wrong shape with a
/// 400 before the run sees it.
///
/// ```
/// use worlds_engine::prelude::*;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Approval { approved: bool }
///
/// let approval = define_hook::<Approval>("approval");
/// let hooks = approval.clone();
/// let flow = workflow("needs-approval", move |ctx: WorkflowContext, _: ()| {
///     let hooks = hooks.clone();
///     async move {
///         let hook = hooks.create(&ctx, HookOptions::new());
///         Ok::<_, WorkflowError>(hook.wait().await?.approved)
///     }
/// });
/// # let _ = flow;
/// ```
pub struct HookDefinition<T> {
    pub(crate) name: Arc<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for HookDefinition<T> {
    fn clone(&self) -> Self {
        HookDefinition {
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for HookDefinition<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookDefinition")
            .field("name", &self.name)
            .finish()
    }
}

/// A typed hook factory named `name` (unique among the hook definitions of a world).
pub fn define_hook<T: Serialize + DeserializeOwned>(name: impl Into<String>) -> HookDefinition<T> {
    HookDefinition {
        name: Arc::from(name.into()),
        _type: PhantomData,
    }
}

impl<T: Serialize + DeserializeOwned + 'static> HookDefinition<T> {
    /// The definition's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The payload check for this definition's type.
    pub(crate) fn payload_check(&self) -> fn() -> HookValidator {
        validator_of::<T>
    }

    /// Checks that a JSON payload has this definition's type.
    pub(crate) fn validator(&self) -> HookValidator {
        validator_of::<T>()
    }
}

/// Checks a payload's shape.
pub(crate) type HookValidator =
    Arc<dyn Fn(&crate::payload::Payload) -> Result<(), String> + Send + Sync>;

/// The payload check for type `T`.
pub(crate) fn validator_of<T: DeserializeOwned>() -> HookValidator {
    Arc::new(|payload: &crate::payload::Payload| check_json::<T>(payload.as_json()))
}

/// The payload check of a webhook whose request body must be JSON of type `T`.
pub(crate) fn json_body_validator_of<T: DeserializeOwned>() -> HookValidator {
    Arc::new(|payload: &crate::payload::Payload| {
        let request: WebhookRequest = payload
            .decode()
            .map_err(|e| format!("not a webhook request: {e}"))?;
        check_json::<T>(&request.body).map_err(|e| format!("the request body {e}"))
    })
}

/// Checks that `json` reads as a `T`, naming the field at fault: `field `approved`: invalid
/// type: string "yes", expected a boolean at line 1 column 17`.
fn check_json<T: DeserializeOwned>(json: &str) -> Result<(), String> {
    let mut reader = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize::<_, T>(&mut reader)
        .map(drop)
        .map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                format!("is not valid: {}", e.inner())
            } else {
                format!("field `{path}`: {}", e.inner())
            }
        })
}
