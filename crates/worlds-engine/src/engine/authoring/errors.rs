//! Errors that workflow and activity code deal with.
//!
//! * [`StepError`] is what an activity returns when it fails. Any error converts into it with `?`
//!   and is retried; wrap it in [`crate::retry::FatalError`] to fail for good, or in
//!   [`crate::retry::RetryableError`] to choose the delay.
//! * [`WorkflowError`] is what a workflow returns when it fails. Any error converts into it.
//! * [`ContextError`] is what a context call (`ctx.run`, `ctx.sleep`, `ctx.execute_child`)
//!   resolves to when it cannot produce a value.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::error::StructuredError;
use crate::retry::{FatalError, RetryableError};

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

macro_rules! boxed_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name {
            inner: BoxError,
        }

        impl $name {
            /// An error with just a message.
            pub fn msg(message: impl fmt::Display) -> Self {
                Self { inner: Box::new(Message(message.to_string())) }
            }

            /// The underlying error.
            pub fn as_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
                &*self.inner
            }

            /// The underlying error, if it is a `T`.
            pub fn downcast_ref<T: StdError + 'static>(&self) -> Option<&T> {
                self.inner.downcast_ref::<T>()
            }

            /// Unwraps the underlying error.
            pub fn into_inner(self) -> BoxError {
                self.inner
            }

            /// The stored form of this error, its causes joined into the message.
            pub fn to_structured(&self) -> StructuredError {
                if let Some(s) = self.downcast_ref::<StructuredError>() {
                    return s.clone();
                }
                let mut stored = StructuredError::from_error(&*self.inner);
                // A code given to a Fatal/RetryableError is kept as the stored code.
                let code = self
                    .downcast_ref::<FatalError>()
                    .and_then(|e| e.code())
                    .or_else(|| self.downcast_ref::<RetryableError>().and_then(|e| e.code()));
                if let Some(code) = code {
                    let suffix = format!(" [{code}]");
                    if let Some(at) = stored.message.find(&suffix) {
                        stored.message.replace_range(at..at + suffix.len(), "");
                    }
                    stored.code = Some(code.to_owned());
                }
                stored
            }
        }

        impl<E: StdError + Send + Sync + 'static> From<E> for $name {
            fn from(error: E) -> Self {
                Self { inner: Box::new(error) }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.inner, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.inner, f)
            }
        }
    };
}

boxed_error!(
    /// An activity's failure. Converts from any error with `?`; retried unless it is (or wraps) a
    /// [`FatalError`].
    ///
    /// ```
    /// use worlds_engine::{StepError, retry::FatalError};
    /// let retried: StepError = std::io::Error::other("connection reset").into();
    /// let fatal = StepError::fatal("card declined");
    /// assert!(!retried.is_fatal());
    /// assert!(fatal.is_fatal());
    /// ```
    StepError
);

impl StepError {
    /// A failure that must not be retried.
    pub fn fatal(message: impl Into<String>) -> Self {
        FatalError::new(message).into()
    }

    /// A failure to retry after `delay` instead of the backoff delay.
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        RetryableError::after(message, delay).into()
    }

    /// True if this failure must not be retried.
    pub fn is_fatal(&self) -> bool {
        crate::retry::classify(self.as_error()) == crate::retry::RetryClass::Fatal
    }
}

boxed_error!(
    /// A workflow's failure. Converts from any error with `?`, including a failed context call.
    WorkflowError
);

/// Why a context call (`ctx.run`, `ctx.sleep`, `ctx.execute_child`) did not produce a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The activity failed for good: a fatal error, or every attempt failed.
    #[error("activity '{name}' (command #{position}) failed after {attempts} attempt(s): {error}")]
    ActivityFailed {
        /// Activity name.
        name: String,
        /// Command position.
        position: u32,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        error: StructuredError,
    },
    /// The child workflow failed or was cancelled.
    #[error("child workflow '{name}' ({child_id}) failed: {error}")]
    ChildFailed {
        /// Child workflow name.
        name: String,
        /// Child run id.
        child_id: String,
        /// Its error.
        error: StructuredError,
    },
    /// The run is being cancelled.
    #[error("the run was cancelled")]
    Cancelled,
    /// An argument was rejected before anything was recorded (a bad duration, an input that
    /// does not serialize).
    #[error("invalid argument to {call}: {message}")]
    InvalidArgument {
        /// The call that rejected it.
        call: &'static str,
        /// Why.
        message: String,
    },
    /// A `current::` function was called outside a workflow.
    #[error("{call} was called outside a workflow; call it from workflow code (or pass the WorkflowContext)")]
    OutsideWorkflow {
        /// The function.
        call: &'static str,
    },
    /// A `current::` step function was called outside a step.
    #[error("{call} was called outside a step; call it from an activity or a named step")]
    OutsideStep {
        /// The function.
        call: &'static str,
    },
    /// The hook's token is held by another live hook, so this hook was never created.
    #[error("hook {hook_id} was not created: another live hook holds its token")]
    HookConflict {
        /// Hook id.
        hook_id: String,
    },
    /// The hook's expiry passed before anyone resumed it.
    #[error("hook {hook_id} expired before it was resumed")]
    HookExpired {
        /// Hook id.
        hook_id: String,
    },
    /// The store did not keep an earlier chunk of this stream written by the workflow (its
    /// `write` only queued it), so later writes to the stream are refused.
    #[error("stream '{stream}': an earlier chunk was not stored: {message}")]
    StreamWriteFailed {
        /// The stream's name.
        stream: String,
        /// Why the store refused the chunk.
        message: String,
    },
    /// A recorded result could not be converted to the type the code asked for.
    #[error("the recorded result of command #{position} does not deserialize into the requested type: {message}")]
    Decode {
        /// Command position.
        position: u32,
        /// The serde error.
        message: String,
    },
}

impl ContextError {
    /// The stored form of this error.
    pub fn to_structured(&self) -> StructuredError {
        match self {
            ContextError::ActivityFailed {
                name,
                position,
                attempts,
                error,
            } => {
                // The inner error's code becomes the code, not a suffix of the message.
                let message = format!(
                    "activity '{name}' (command #{position}) failed after {attempts} attempt(s): {}",
                    error.message
                );
                StructuredError {
                    message,
                    stack: None,
                    code: error.code.clone(),
                    data: None,
                }
            }
            ContextError::ChildFailed {
                name,
                child_id,
                error,
            } => StructuredError {
                message: format!(
                    "child workflow '{name}' ({child_id}) failed: {}",
                    error.message
                ),
                stack: None,
                code: error.code.clone(),
                data: None,
            },
            ContextError::Cancelled => {
                StructuredError::new(self.to_string()).with_code(crate::error::codes::CANCELLED)
            }
            ContextError::HookConflict { .. } => {
                StructuredError::new(self.to_string()).with_code(crate::error::codes::HOOK_CONFLICT)
            }
            ContextError::HookExpired { .. } => {
                StructuredError::new(self.to_string()).with_code(crate::error::codes::HOOK_EXPIRED)
            }
            _ => StructuredError::new(self.to_string()),
        }
    }
}
