//! Errors a step returns to steer retrying, and the classifier that reads them.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::duration::{DurationError, IntoDuration};

/// A shared cause attached to a [`FatalError`] or [`RetryableError`].
type Cause = Arc<dyn Error + Send + Sync + 'static>;

/// A failure that must not be retried: the step fails at once, whatever attempts remain.
///
/// Found anywhere in an error's [`source`](Error::source) chain, it makes [`classify`] answer
/// [`RetryClass::Fatal`].
///
/// ```
/// use worlds_engine::retry::{classify, FatalError, RetryClass};
/// let err = FatalError::new("card declined").with_code("CARD_DECLINED");
/// assert_eq!(err.to_string(), "card declined [CARD_DECLINED]");
/// assert_eq!(classify(&err), RetryClass::Fatal);
/// ```
#[derive(Debug, Clone)]
pub struct FatalError {
    message: String,
    code: Option<String>,
    source: Option<Cause>,
}

impl FatalError {
    /// A fatal error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: None,
            source: None,
        }
    }

    /// Attaches a machine-readable code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Attaches the underlying error, reported by [`Error::source`].
    pub fn with_source(mut self, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The code, if one was attached.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for FatalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_message(f, &self.message, self.code.as_deref())
    }
}

impl Error for FatalError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// A failure that should be retried, optionally after a wait of its own choosing (for example
/// a server's `Retry-After`) instead of the policy's backoff.
///
/// Retrying still stops once the policy's `max_attempts` is reached.
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::retry::{classify, RetryClass, RetryableError};
/// let err = RetryableError::after("throttled", Duration::from_secs(30));
/// assert_eq!(classify(&err), RetryClass::Retry { after: Some(Duration::from_secs(30)) });
/// let err = RetryableError::try_after("throttled", "30s")?;
/// assert_eq!(err.retry_after(), Some(Duration::from_secs(30)));
/// # Ok::<(), worlds_engine::duration::DurationError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryableError {
    message: String,
    retry_after: Option<Duration>,
    code: Option<String>,
    source: Option<Cause>,
}

impl RetryableError {
    /// A retryable error that waits the policy's backoff.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry_after: None,
            code: None,
            source: None,
        }
    }

    /// A retryable error that waits `delay` before the next attempt.
    pub fn after(message: impl Into<String>, delay: Duration) -> Self {
        Self::new(message).with_retry_after(delay)
    }

    /// Like [`after`](Self::after), with the delay given as user input (`"30s"`, milliseconds).
    pub fn try_after(
        message: impl Into<String>,
        delay: impl IntoDuration,
    ) -> Result<Self, DurationError> {
        Ok(Self::after(message, delay.into_duration()?))
    }

    /// Sets the wait before the next attempt.
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// Attaches a machine-readable code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Attaches the underlying error, reported by [`Error::source`].
    pub fn with_source(mut self, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The wait this error asks for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The code, if one was attached.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for RetryableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_message(f, &self.message, self.code.as_deref())
    }
}

impl Error for RetryableError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

fn write_message(f: &mut fmt::Formatter<'_>, message: &str, code: Option<&str>) -> fmt::Result {
    match code {
        Some(code) => write!(f, "{message} [{code}]"),
        None => f.write_str(message),
    }
}

/// What to do about a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryClass {
    /// Do not retry.
    Fatal,
    /// Retry if attempts remain, after `after` if set, otherwise after the policy's backoff.
    Retry {
        /// The wait asked for by a [`RetryableError`].
        after: Option<Duration>,
    },
}

impl RetryClass {
    /// True for [`RetryClass::Fatal`].
    pub fn is_fatal(&self) -> bool {
        matches!(self, RetryClass::Fatal)
    }
}

/// Decides whether a failure is retried.
///
/// Walks the error and its [`source`](Error::source) chain, outermost first, and answers from
/// the first [`FatalError`] ([`RetryClass::Fatal`]) or [`RetryableError`] (retry, with its
/// delay) it meets. Any other error is retried with the policy's backoff. A marker wrapped in a
/// custom [`std::io::Error`], an `Arc<dyn Error>`, or a `Box`/`Arc` of its own type is found
/// too, although those wrappers' `source` skips it.
///
/// ```
/// use worlds_engine::retry::{classify, FatalError, RetryClass};
/// let wrapped = std::io::Error::other(FatalError::new("bad input"));
/// assert_eq!(classify(&wrapped), RetryClass::Fatal);
/// assert_eq!(classify(&std::fmt::Error), RetryClass::Retry { after: None });
/// ```
pub fn classify(err: &(dyn Error + 'static)) -> RetryClass {
    marker(err).unwrap_or(RetryClass::Retry { after: None })
}

/// The class set by a [`FatalError`] or [`RetryableError`] in the chain, if there is one.
pub(crate) fn marker(err: &(dyn Error + 'static)) -> Option<RetryClass> {
    chain(err).find_map(|e| {
        if find::<FatalError>(e).is_some() {
            Some(RetryClass::Fatal)
        } else {
            find::<RetryableError>(e).map(|r| RetryClass::Retry {
                after: r.retry_after,
            })
        }
    })
}

/// `e` as a `T`, also when it is a `Box<T>` or `Arc<T>`, whose `Error` impls hide the type.
fn find<'a, T: Error + 'static>(e: &'a (dyn Error + 'static)) -> Option<&'a T> {
    e.downcast_ref::<T>()
        .or_else(|| e.downcast_ref::<Box<T>>().map(|b| &**b))
        .or_else(|| e.downcast_ref::<Arc<T>>().map(|a| &**a))
}

/// Longest chain followed, a guard against `source` implementations that loop.
const MAX_CHAIN: usize = 128;

/// `err` and its causes, outermost first.
///
/// Besides following [`Error::source`], this steps into the error wrapped by a custom
/// [`std::io::Error`] or by an `Arc<dyn Error>`: both forward `source` to the wrapped error's
/// own source, so the wrapped error itself would otherwise be skipped.
pub(crate) fn chain<'a>(
    err: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(err), |&e: &&'a (dyn Error + 'static)| {
        unwrap(e).or_else(|| e.source())
    })
    .take(MAX_CHAIN)
}

/// The error inside a transparent wrapper, if `e` is one.
fn unwrap<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io.get_ref().map(|inner| inner as &(dyn Error + 'static));
    }
    if let Some(arc) = e.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
        return Some(&**arc);
    }
    if let Some(arc) = e.downcast_ref::<Arc<dyn Error + Send>>() {
        return Some(&**arc);
    }
    e.downcast_ref::<Arc<dyn Error>>().map(|arc| &**arc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper {
        context: &'static str,
        cause: Box<dyn Error + Send + Sync>,
    }

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.context)
        }
    }

    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.cause)
        }
    }

    fn wrap(context: &'static str, cause: impl Into<Box<dyn Error + Send + Sync>>) -> Wrapper {
        Wrapper {
            context,
            cause: cause.into(),
        }
    }

    #[test]
    fn plain_errors_are_retried_with_backoff() {
        assert_eq!(
            classify(&std::fmt::Error),
            RetryClass::Retry { after: None }
        );
        let boxed: Box<dyn Error + Send + Sync> = "boom".into();
        assert_eq!(classify(&*boxed), RetryClass::Retry { after: None });
    }

    #[test]
    fn classify_walks_the_source_chain() {
        let err = wrap(
            "charging",
            wrap("calling bank", FatalError::new("card declined")),
        );
        assert_eq!(classify(&err), RetryClass::Fatal);
        assert!(classify(&err).is_fatal());

        let delay = Duration::from_secs(7);
        let err = wrap("outer", wrap("inner", RetryableError::after("busy", delay)));
        assert_eq!(classify(&err), RetryClass::Retry { after: Some(delay) });

        let err = wrap("outer", wrap("inner", std::fmt::Error));
        assert_eq!(classify(&err), RetryClass::Retry { after: None });
    }

    #[test]
    fn outermost_marker_wins() {
        let err = RetryableError::new("try again").with_source(FatalError::new("deep"));
        assert_eq!(classify(&err), RetryClass::Retry { after: None });
        let err = FatalError::new("stop").with_source(RetryableError::after("x", Duration::ZERO));
        assert_eq!(classify(&err), RetryClass::Fatal);
    }

    #[test]
    fn looks_inside_io_errors() {
        let io = std::io::Error::other(wrap("ctx", FatalError::new("nope")));
        assert_eq!(classify(&io), RetryClass::Fatal);
        let io = std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            RetryableError::after("slow", Duration::from_millis(5)),
        );
        let err = wrap("outer", io);
        assert_eq!(
            classify(&err),
            RetryClass::Retry {
                after: Some(Duration::from_millis(5))
            }
        );
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(classify(&plain), RetryClass::Retry { after: None });
    }

    #[test]
    fn looks_inside_arcs_and_boxes() {
        let arc: Arc<dyn Error + Send + Sync> = Arc::new(FatalError::new("shared"));
        assert_eq!(classify(&arc), RetryClass::Fatal);
        assert_eq!(classify(&wrap("ctx", arc)), RetryClass::Fatal);
        let arc: Arc<dyn Error> = Arc::new(wrap("ctx", FatalError::new("deep")));
        assert_eq!(classify(&arc), RetryClass::Fatal);
        let boxed = Box::new(RetryableError::after("x", Duration::from_secs(2)));
        assert_eq!(
            classify(&boxed),
            RetryClass::Retry {
                after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(classify(&Arc::new(FatalError::new("x"))), RetryClass::Fatal);
    }

    #[test]
    fn display_code_and_source() {
        let err = FatalError::new("bad")
            .with_code("E1")
            .with_source("root cause");
        assert_eq!(err.to_string(), "bad [E1]");
        assert_eq!(err.message(), "bad");
        assert_eq!(err.code(), Some("E1"));
        assert_eq!(
            err.source().map(|s| s.to_string()).as_deref(),
            Some("root cause")
        );

        let err = RetryableError::new("later");
        assert_eq!(err.to_string(), "later");
        assert_eq!(err.retry_after(), None);
        assert!(err.source().is_none());
        let err = err
            .with_code("BUSY")
            .with_retry_after(Duration::from_secs(1));
        assert_eq!(err.to_string(), "later [BUSY]");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
        assert!(RetryableError::try_after("x", "soon").is_err());
        assert_eq!(
            RetryableError::try_after("x", 250_u32)
                .unwrap()
                .retry_after(),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn errors_are_send_sync_and_boxable() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<FatalError>();
        assert_send_sync::<RetryableError>();
        let boxed: Box<dyn Error + Send + Sync> = FatalError::new("x").into();
        assert_eq!(classify(&*boxed), RetryClass::Fatal);
    }

    #[test]
    fn looping_chains_end() {
        #[derive(Debug)]
        struct Loop;
        impl fmt::Display for Loop {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("loop")
            }
        }
        impl Error for Loop {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&Loop)
            }
        }
        assert_eq!(chain(&Loop).count(), MAX_CHAIN);
        assert_eq!(classify(&Loop), RetryClass::Retry { after: None });
    }
}
