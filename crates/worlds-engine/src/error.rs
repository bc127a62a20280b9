//! The engine's error type and the stored error form.
//!
//! [`WorldError`] is what every world operation returns. Each variant belongs to an [`ErrorKind`],
//! and each kind has one HTTP status, declared here once, so an HTTP layer can answer with the
//! right code without guessing. [`StructuredError`] is how failures are written into history.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::payload::Payload;
use crate::status::RunStatus;

/// What went wrong, in the categories an API caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The run, hook, schedule or definition does not exist (404).
    NotFound,
    /// The request clashes with existing state: a duplicate id, a finished run (409).
    Conflict,
    /// The request itself is malformed (400).
    InvalidInput,
    /// A payload is over the configured size limit (413).
    PayloadTooLarge,
    /// A run ended in failure (500 when surfaced over HTTP).
    RunFailed,
    /// A run was cancelled (409: the result will never come).
    RunCancelled,
    /// Waiting for something took longer than the caller allowed (504).
    Timeout,
    /// The world is not started or is shutting down (503).
    Unavailable,
    /// The feature or mode is not available in this build, or the data is stored encrypted
    /// and this world cannot open it (501).
    Unsupported,
    /// The thing existed but is gone for good: an expired hook (410).
    Gone,
    /// A webhook was called with an HTTP method it does not accept (405).
    MethodNotAllowed,
    /// A request body did not arrive in time (408).
    RequestTimeout,
    /// The caller could not be recognized: no credentials, wrong ones, or a webhook request
    /// whose signature does not hold (401).
    Unauthenticated,
    /// The disk the store writes to is full (or over its quota): nothing was written and
    /// nothing acknowledged was lost; the world goes on by itself once space is freed (507).
    StorageFull,
    /// The disk the store writes to failed a read or write (EIO): nothing was acknowledged;
    /// the world tries again by itself (503).
    StorageIo,
    /// A fault inside the engine or its storage (500).
    Internal,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 16] = [
        ErrorKind::NotFound,
        ErrorKind::Conflict,
        ErrorKind::InvalidInput,
        ErrorKind::PayloadTooLarge,
        ErrorKind::RunFailed,
        ErrorKind::RunCancelled,
        ErrorKind::Timeout,
        ErrorKind::Unavailable,
        ErrorKind::Unsupported,
        ErrorKind::Gone,
        ErrorKind::MethodNotAllowed,
        ErrorKind::RequestTimeout,
        ErrorKind::Unauthenticated,
        ErrorKind::StorageFull,
        ErrorKind::StorageIo,
        ErrorKind::Internal,
    ];

    /// The stable code of this kind in API answers (the `code` of the HTTP API's error body,
    /// `worlds_wire::ErrorBody`): `NOT_FOUND`, `CONFLICT`, `INVALID_INPUT`, …
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "NOT_FOUND",
            ErrorKind::Conflict => "CONFLICT",
            ErrorKind::InvalidInput => "INVALID_INPUT",
            ErrorKind::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorKind::RunFailed => "RUN_FAILED",
            ErrorKind::RunCancelled => "RUN_CANCELLED",
            ErrorKind::Timeout => "TIMEOUT",
            ErrorKind::Unavailable => "UNAVAILABLE",
            ErrorKind::Unsupported => "UNSUPPORTED",
            ErrorKind::Gone => "GONE",
            ErrorKind::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorKind::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorKind::Unauthenticated => "UNAUTHENTICATED",
            ErrorKind::StorageFull => "STORAGE_FULL",
            ErrorKind::StorageIo => "STORAGE_IO",
            ErrorKind::Internal => "INTERNAL",
        }
    }

    /// The kind of a [`code`](Self::code), if it is one.
    pub fn from_code(code: &str) -> Option<ErrorKind> {
        Self::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// The HTTP status code that answers an error of this kind.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict | ErrorKind::RunCancelled => 409,
            ErrorKind::InvalidInput => 400,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::Timeout => 504,
            ErrorKind::Unavailable | ErrorKind::StorageIo => 503,
            ErrorKind::StorageFull => 507,
            ErrorKind::Unsupported => 501,
            ErrorKind::Gone => 410,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::RunFailed | ErrorKind::Internal => 500,
        }
    }
}

/// The error returned by world operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorldError {
    /// A run, step, hook or other record was not found.
    #[error("{what} not found: {id}")]
    NotFound {
        /// What was looked up ("run", "hook"...).
        what: &'static str,
        /// The id that was looked up.
        id: String,
    },
    /// A workflow name that was never registered.
    #[error(
        "workflow '{name}' is not registered: call world.register(...) with it before executing it"
    )]
    UnknownWorkflow {
        /// The name that was asked for.
        name: String,
    },
    /// An activity name that was never registered.
    #[error("activity '{name}' is not registered: call world.register(...) with it before a workflow runs it")]
    UnknownActivity {
        /// The name that was asked for.
        name: String,
    },
    /// The request clashes with existing state.
    #[error("{message}")]
    Conflict {
        /// What clashed, and what to do about it.
        message: String,
    },
    /// A malformed request; `field` names the part that was wrong.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// The offending field or argument.
        field: String,
        /// Why it was rejected.
        message: String,
    },
    /// A payload over the configured limit.
    #[error("{what} is {size} bytes, over the payload limit of {limit} bytes; keep large data outside the engine and pass a reference to it")]
    PayloadTooLarge {
        /// Which payload ("input of workflow 'x'", "output of step #3 'y'"...).
        what: String,
        /// Its size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A status change that the run status machine does not allow.
    #[error("run {run_id} cannot go from {from} to {to}")]
    InvalidTransition {
        /// The run.
        run_id: String,
        /// Its current status.
        from: RunStatus,
        /// The status that was asked for.
        to: RunStatus,
    },
    /// This process's lease on a run expired and another process took the run over: the write
    /// was refused and nothing was stored. The run is the other process's to drive now.
    #[error("run {run_id} was taken over by another process after this process's lease on it expired; the write was refused and stored nothing: stop driving the run here")]
    LeaseLost {
        /// The run.
        run_id: String,
    },
    /// The run ended in failure.
    #[error("run {run_id} failed: {error}")]
    RunFailed {
        /// The run.
        run_id: String,
        /// The recorded failure.
        error: StructuredError,
    },
    /// The run was cancelled before it produced a result.
    #[error("run {run_id} was cancelled")]
    RunCancelled {
        /// The run.
        run_id: String,
    },
    /// Waiting took longer than allowed.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the caller waited, in (clock) milliseconds.
        waited_ms: i64,
    },
    /// The world cannot take the request in its current state.
    #[error("{0}")]
    Unavailable(String),
    /// The feature or mode is not available in this build.
    #[error("{0}")]
    Unsupported(String),
    /// The thing asked for existed but is gone for good (an expired hook).
    #[error("{0}")]
    Gone(String),
    /// A webhook was called with a method it was not created for.
    #[error("a webhook does not accept {method} requests; it accepts {}: send one of those", allowed.join(", "))]
    MethodNotAllowed {
        /// The method of the request.
        method: String,
        /// The methods the webhook accepts.
        allowed: Vec<String>,
    },
    /// A request (its body) did not arrive within the time the server allows.
    #[error("{0}")]
    RequestTimeout(String),
    /// A value could not be serialized or deserialized.
    #[error("could not convert {what}: {source}")]
    Serialization {
        /// What was being converted.
        what: String,
        /// The serde error.
        source: serde_json::Error,
    },
    /// The caller could not be recognized, e.g. a webhook request whose signature does not
    /// hold.
    #[error("{message}")]
    Unauthenticated {
        /// Why, as a stable code (`signature_mismatch`, `missing_header`, …).
        reason: &'static str,
        /// What was wrong and what to do.
        message: String,
    },
    /// The store's disk is full: the write was not made. Say which file and what to free.
    #[error("{0}")]
    StorageFull(String),
    /// The store's disk failed a read or write (EIO).
    #[error("{0}")]
    StorageIo(String),
    /// Stored data is encrypted at rest and this world cannot open it: it has no encryption
    /// keys, lacks the key the data was sealed with, or that key does not open it. Nothing was
    /// read out and nothing was written: a world that cannot open a run does not write to it.
    #[error("{what}: encrypted, and {reason}")]
    Encrypted {
        /// What could not be opened (`run:<id>`, `schedule:<id>`).
        what: String,
        /// Why this world cannot open it.
        reason: Unopened,
    },
    /// A fault in the engine or its storage.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a world cannot open data stored encrypted ([`WorldError::Encrypted`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unopened {
    /// The world has no encryption keys.
    #[error("this world has no keys: it was sealed with the encryption key '{key_id}'; configure WorldConfig::encryption_keys (or WORLDS_ENGINE_ENCRYPTION_KEYS) with that key")]
    NoKeys {
        /// The id of the key the data was sealed with.
        key_id: String,
    },
    /// The world has keys, but not the one the data was sealed with.
    #[error("it was sealed with the encryption key '{key_id}', which this world does not have (it has {}): add that key to the encryption keys", has.join(", "))]
    MissingKey {
        /// The id of the key the data was sealed with.
        key_id: String,
        /// The ids of the keys the world has.
        has: Vec<String>,
    },
    /// The world has a key of that id, but the data does not open with it.
    #[error("a sealed value does not open with the encryption key '{key_id}': that key's bytes may not be the ones it was sealed with (check the key), or the value was changed or copied from another run")]
    DoesNotOpen {
        /// The id of the key that was tried.
        key_id: String,
    },
}

impl WorldError {
    /// The kind of this error, which decides its HTTP status.
    pub fn kind(&self) -> ErrorKind {
        match self {
            WorldError::NotFound { .. }
            | WorldError::UnknownWorkflow { .. }
            | WorldError::UnknownActivity { .. } => ErrorKind::NotFound,
            WorldError::Conflict { .. }
            | WorldError::InvalidTransition { .. }
            | WorldError::LeaseLost { .. } => ErrorKind::Conflict,
            WorldError::InvalidInput { .. } | WorldError::Serialization { .. } => {
                ErrorKind::InvalidInput
            }
            WorldError::PayloadTooLarge { .. } => ErrorKind::PayloadTooLarge,
            WorldError::RunFailed { .. } => ErrorKind::RunFailed,
            WorldError::RunCancelled { .. } => ErrorKind::RunCancelled,
            WorldError::Timeout { .. } => ErrorKind::Timeout,
            WorldError::Unavailable(_) => ErrorKind::Unavailable,
            // Like a feature this world was not set up for: the same answer whatever the
            // reason, so a caller need not tell a missing key from a wrong one.
            WorldError::Unsupported(_) | WorldError::Encrypted { .. } => ErrorKind::Unsupported,
            WorldError::Gone(_) => ErrorKind::Gone,
            WorldError::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            WorldError::RequestTimeout(_) => ErrorKind::RequestTimeout,
            WorldError::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            WorldError::StorageFull(_) => ErrorKind::StorageFull,
            WorldError::StorageIo(_) => ErrorKind::StorageIo,
            WorldError::Internal(_) => ErrorKind::Internal,
        }
    }

    /// The HTTP status code for this error.
    pub fn http_status(&self) -> u16 {
        self.kind().http_status()
    }

    pub(crate) fn not_found(what: &'static str, id: impl Into<String>) -> Self {
        WorldError::NotFound {
            what,
            id: id.into(),
        }
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        WorldError::Conflict {
            message: message.into(),
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        WorldError::InvalidInput {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn serde(what: impl Into<String>, source: serde_json::Error) -> Self {
        WorldError::Serialization {
            what: what.into(),
            source,
        }
    }
}

/// Stable error codes written into [`StructuredError::code`] by the engine.
pub mod codes {
    /// Replay met a command that differs from the recorded history.
    pub const NONDETERMINISM: &str = "NONDETERMINISM";
    /// A payload was over the size limit.
    pub const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
    /// A step failed with a [`FatalError`](crate::retry::FatalError) and was not retried.
    pub const FATAL: &str = "FATAL";
    /// A step or run ran past its timeout.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// A step stopped heartbeating for longer than its heartbeat timeout.
    pub const HEARTBEAT_TIMEOUT: &str = "HEARTBEAT_TIMEOUT";
    /// A step exhausted its retry attempts.
    pub const RETRIES_EXHAUSTED: &str = "RETRIES_EXHAUSTED";
    /// The run or step was cancelled.
    pub const CANCELLED: &str = "CANCELLED";
    /// A value could not be serialized or deserialized.
    pub const SERIALIZATION: &str = "SERIALIZATION";
    /// The workflow or activity is not registered in this process.
    pub const NOT_REGISTERED: &str = "NOT_REGISTERED";
    /// A child workflow failed.
    pub const CHILD_FAILED: &str = "CHILD_FAILED";
    /// A step attempt was lost because the process running it stopped.
    pub const WORKER_LOST: &str = "WORKER_LOST";
    /// The workflow awaited a future that is not a workflow command.
    pub const NOT_A_COMMAND: &str = "NOT_A_COMMAND";
    /// A hook's token was held by another live hook, so the hook was not created.
    pub const HOOK_CONFLICT: &str = "HOOK_CONFLICT";
    /// A hook expired before it was resumed.
    pub const HOOK_EXPIRED: &str = "HOOK_EXPIRED";
}

/// A failure as it is stored in history: a message, optionally a stack trace and a code.
///
/// Older records that stored a plain string read back as a `StructuredError` whose message is
/// that string.
///
/// ```
/// use worlds_engine::StructuredError;
/// let new: StructuredError = serde_json::from_str(r#"{"message":"boom","code":"E1"}"#).unwrap();
/// let old: StructuredError = serde_json::from_str(r#""boom""#).unwrap();
/// assert_eq!(new.message, old.message);
/// assert_eq!(StructuredError::from_stored("not json").message, "not json");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StructuredError {
    /// What went wrong.
    pub message: String,
    /// Where, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// A machine-readable code, see [`codes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The error as an outside runtime serialized it (a Workflow DevKit app's error bytes),
    /// kept byte for byte so that runtime can read it back; `message` then says what could be
    /// read of it.
    /// Boxed: few errors have it, and errors travel by value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<Payload>>,
}

impl StructuredError {
    /// An error with just a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            stack: None,
            code: None,
            data: None,
        }
    }

    /// Sets the code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Builds a structured error from any error, joining its chain of causes into the message.
    pub fn from_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        Self::new(message)
    }

    /// Reads a stored error: the JSON object form, or (older records) a plain string.
    pub fn from_stored(stored: &str) -> Self {
        serde_json::from_str(stored).unwrap_or_else(|_| Self::new(stored))
    }

    /// The JSON form written to storage.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| self.message.clone())
    }

    /// True if the code is `code`.
    pub fn has_code(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }
}

impl fmt::Display for StructuredError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{} [{code}]", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for StructuredError {}

/// Reads the stored forms of an error: a bare message string, or the object. `data` is taken
/// as raw JSON text (its bytes, key order included, as the runtime wrote them), so it needs a
/// `serde_json` deserializer, as [`Payload`] does.
impl<'de> Deserialize<'de> for StructuredError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StoredError)
    }
}

/// The visitor of [`StructuredError`]'s stored forms.
struct StoredError;

impl<'de> serde::de::Visitor<'de> for StoredError {
    type Value = StructuredError;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an error: a message string or an object with a message")
    }

    fn visit_str<E: serde::de::Error>(self, message: &str) -> Result<StructuredError, E> {
        Ok(StructuredError::new(message))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<StructuredError, A::Error> {
        let mut error = StructuredError::new("unknown error");
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "message" => {
                    if let Some(message) = map.next_value::<Option<String>>()? {
                        error.message = message;
                    }
                }
                "stack" => error.stack = map.next_value()?,
                "code" => error.code = map.next_value()?,
                "data" => error.data = map.next_value::<Option<Payload>>()?.map(Box::new),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(error)
    }
}

/// Replay met a command that differs from what the run's history recorded.
///
/// The workflow code changed in a way that is not compatible with runs already in flight (or it
/// reads time, randomness or other outside state without going through the context).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("non-deterministic workflow: at command #{position} the history holds {recorded} but the code now issues {issued}; the workflow code changed incompatibly for runs in flight, or it depends on time, randomness or outside state without using ctx.now()/ctx.random()/ctx.uuid() or a step")]
pub struct NonDeterminism {
    /// The command position (0-based, in program order) where the two differ.
    pub position: u32,
    /// The command that history recorded at that position.
    pub recorded: String,
    /// The command the code issued at that position ("nothing" if it issued none).
    pub issued: String,
}

impl NonDeterminism {
    /// The stored form, with code [`codes::NONDETERMINISM`].
    pub fn to_structured(&self) -> StructuredError {
        StructuredError::new(self.to_string()).with_code(codes::NONDETERMINISM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_http_statuses() {
        assert_eq!(WorldError::not_found("run", "x").http_status(), 404);
        assert_eq!(WorldError::conflict("dup").http_status(), 409);
        assert_eq!(WorldError::invalid("input", "bad").http_status(), 400);
        assert_eq!(WorldError::Internal("x".into()).http_status(), 500);
        assert_eq!(
            WorldError::UnknownWorkflow { name: "w".into() }.http_status(),
            404
        );
    }

    #[test]
    fn structured_error_reads_plain_and_object_forms() {
        let e = StructuredError::new("boom").with_code("X");
        let stored = e.to_stored();
        assert_eq!(StructuredError::from_stored(&stored), e);
        assert_eq!(
            StructuredError::from_stored("plain text").message,
            "plain text"
        );
        let no_message: StructuredError = serde_json::from_str("{}").unwrap();
        assert_eq!(no_message.message, "unknown error");
    }

    #[test]
    fn structured_error_data_keeps_its_bytes_and_key_order() {
        let data = r#"{"name":"TypeError","cause":{"nul":"a\u0000b"},"n":1.0}"#;
        let text = format!(r#"{{"message":"m","extra":[1],"data":{data},"code":"C"}}"#);
        let e: StructuredError = serde_json::from_str(&text).unwrap();
        assert_eq!(e.data.as_deref().map(Payload::as_json), Some(data));
        assert_eq!(e.code.as_deref(), Some("C"));
        let back: StructuredError = serde_json::from_str(&e.to_stored()).unwrap();
        assert_eq!(back, e);
        let null_data: StructuredError =
            serde_json::from_str(r#"{"message":null,"data":null}"#).unwrap();
        assert_eq!(null_data, StructuredError::new("unknown error"));
        assert!(serde_json::from_str::<StructuredError>("[1]").is_err());
    }

    #[test]
    fn from_error_joins_the_cause_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(StructuredError::from_error(&e).message, "outer: inner");
    }
}

#[cfg(test)]
mod code_tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_code_and_is_found_by_it() {
        let codes: std::collections::BTreeSet<&str> =
            ErrorKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), ErrorKind::ALL.len());
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(ErrorKind::from_code("FORBIDDEN"), None);
    }
}
