//! Retrying any async operation, inside or outside a workflow.
//!
//! Every helper runs the operation, and on failure:
//! - stops at once if the error chain holds a [`FatalError`](super::FatalError);
//! - otherwise retries while [`RetryConfig::should_attempt`] allows, waiting the
//!   [`RetryableError`](super::RetryableError)'s own delay if it has one, else
//!   [`RetryConfig::delay`];
//! - returns the last error when attempts run out.
//!
//! Waiting goes through a [`Clock`]; the helpers without a clock argument use [`SystemClock`].

use std::error::Error;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::config::RetryConfig;
use super::errors::{marker, RetryClass};
use crate::clock::{Clock, SystemClock};

/// Error types the helpers can inspect: any [`std::error::Error`], and boxed trait objects.
///
/// The `Marker` parameter only keeps the implementations apart (a blanket implementation for
/// every error type cannot coexist with one for `Box<dyn Error>`); it is inferred, so callers
/// never name it. Error handles that are not `Error` themselves (such as `anyhow::Error`) can
/// opt in with a marker of their own:
///
/// ```
/// use std::error::Error;
/// use worlds_engine::clock::VirtualClock;
/// use worlds_engine::retry::{with_retry_on, AsDynError, FatalError, RetryConfig};
///
/// #[derive(Debug)]
/// struct Report(Box<dyn Error + Send + Sync>);
///
/// enum ViaReport {}
/// impl AsDynError<ViaReport> for Report {
///     fn as_std_error(&self) -> &(dyn Error + 'static) {
///         &*self.0
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let mut calls = 0;
/// let result: Result<(), Report> = with_retry_on(&VirtualClock::new(0), &RetryConfig::new(), || {
///     calls += 1;
///     async { Err(Report(FatalError::new("no").into())) }
/// })
/// .await;
/// assert!(result.is_err());
/// assert_eq!(calls, 1);
/// # });
/// ```
pub trait AsDynError<Marker> {
    /// The error as a trait object, for [`classify`](super::classify) and the predicates.
    fn as_std_error(&self) -> &(dyn Error + 'static);
}

/// [`AsDynError`] marker for types that implement [`std::error::Error`].
#[derive(Debug)]
pub enum ViaError {}

/// [`AsDynError`] marker for `Box<dyn Error>`, with or without `Send` and `Sync`.
#[derive(Debug)]
pub enum ViaBox {}

impl<E: Error + 'static> AsDynError<ViaError> for E {
    fn as_std_error(&self) -> &(dyn Error + 'static) {
        self
    }
}

impl AsDynError<ViaBox> for Box<dyn Error + Send + Sync> {
    fn as_std_error(&self) -> &(dyn Error + 'static) {
        &**self
    }
}

impl AsDynError<ViaBox> for Box<dyn Error + Send> {
    fn as_std_error(&self) -> &(dyn Error + 'static) {
        &**self
    }
}

impl AsDynError<ViaBox> for Box<dyn Error> {
    fn as_std_error(&self) -> &(dyn Error + 'static) {
        &**self
    }
}

/// A failed attempt that is about to be retried, as passed to an `on_retry` hook.
#[derive(Debug)]
#[non_exhaustive]
pub struct RetryAttempt<'a, E> {
    /// The attempt that failed, 1-based.
    pub attempt: u32,
    /// The policy's total number of attempts.
    pub max_attempts: u32,
    /// How long the helper now waits before the next attempt.
    pub delay: Duration,
    /// The error the attempt failed with.
    pub error: &'a E,
}

/// Runs `f`, retrying per `config`, waiting on the system clock.
///
/// ```
/// use worlds_engine::retry::{with_retry, RetryConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let answer = with_retry(&RetryConfig::new(), || async { Ok::<_, std::io::Error>(42) }).await;
/// assert_eq!(answer.unwrap(), 42);
/// # }
/// ```
pub async fn with_retry<T, E, M, F, Fut>(config: &RetryConfig, f: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: AsDynError<M>,
{
    with_retry_on(&SystemClock, config, f).await
}

/// Runs `f`, retrying per `config`, waiting on `clock`.
///
/// ```
/// use worlds_engine::clock::{Clock, VirtualClock};
/// use worlds_engine::retry::{with_retry_on, FatalError, RetryConfig};
/// # futures::executor::block_on(async {
/// let clock = VirtualClock::new(0);
/// let mut calls = 0;
/// let result: Result<(), FatalError> = with_retry_on(&clock, &RetryConfig::new(), || {
///     calls += 1;
///     async { Err(FatalError::new("invalid account")) }
/// })
/// .await;
/// assert!(result.is_err());
/// assert_eq!(calls, 1); // fatal: not retried, nothing waited
/// # });
/// ```
pub async fn with_retry_on<T, E, M, F, Fut>(
    clock: &dyn Clock,
    config: &RetryConfig,
    f: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: AsDynError<M>,
{
    run(clock, config, f, |_: &E| true, |_: &RetryAttempt<'_, E>| {}).await
}

/// Like [`with_retry_on`], but an error without a retry marker is retried only if
/// `should_retry` returns true for it.
///
/// A [`FatalError`](super::FatalError) in the chain still stops at once and a
/// [`RetryableError`](super::RetryableError) is still retried, whatever `should_retry` says.
pub async fn with_retry_if<T, E, M, F, Fut, P>(
    clock: &dyn Clock,
    config: &RetryConfig,
    should_retry: P,
    f: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: AsDynError<M>,
    P: Fn(&E) -> bool,
{
    run(clock, config, f, should_retry, |_: &RetryAttempt<'_, E>| {}).await
}

/// Like [`with_retry_on`], calling `on_retry` before each wait, for logging or metrics.
pub async fn with_retry_notify<T, E, M, F, Fut, N>(
    clock: &dyn Clock,
    config: &RetryConfig,
    f: F,
    on_retry: N,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: AsDynError<M>,
    N: FnMut(&RetryAttempt<'_, E>),
{
    run(clock, config, f, |_: &E| true, on_retry).await
}

/// Wraps `f` so that every call retries per `config`, waiting on the system clock.
///
/// Each attempt gets its own clone of the arguments. The returned function is cheap to clone.
///
/// ```
/// use worlds_engine::retry::{retryable, RetryConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let double = retryable(RetryConfig::new(), |n: u32| async move { Ok::<_, std::io::Error>(n * 2) });
/// assert_eq!(double(21).await.unwrap(), 42);
/// # }
/// ```
pub fn retryable<A, T, E, M, F, Fut>(
    config: RetryConfig,
    f: F,
) -> impl Fn(A) -> BoxFuture<'static, Result<T, E>> + Clone + Send + Sync + 'static
where
    A: Clone + Send + 'static,
    T: Send + 'static,
    E: AsDynError<M> + Send + 'static,
    M: 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    retryable_on(Arc::new(SystemClock), config, f)
}

/// Like [`retryable`], waiting on `clock`.
pub fn retryable_on<A, T, E, M, F, Fut>(
    clock: Arc<dyn Clock>,
    config: RetryConfig,
    f: F,
) -> impl Fn(A) -> BoxFuture<'static, Result<T, E>> + Clone + Send + Sync + 'static
where
    A: Clone + Send + 'static,
    T: Send + 'static,
    E: AsDynError<M> + Send + 'static,
    M: 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    let f = Arc::new(f);
    let config = Arc::new(config);
    move |args: A| -> BoxFuture<'static, Result<T, E>> {
        let f = Arc::clone(&f);
        let config = Arc::clone(&config);
        let clock = Arc::clone(&clock);
        Box::pin(async move { with_retry_on(&*clock, &config, move || f(args.clone())).await })
    }
}

async fn run<T, E, M, F, Fut, P, N>(
    clock: &dyn Clock,
    config: &RetryConfig,
    mut f: F,
    should_retry: P,
    mut on_retry: N,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: AsDynError<M>,
    P: Fn(&E) -> bool,
    N: FnMut(&RetryAttempt<'_, E>),
{
    let mut attempt: u32 = 1;
    loop {
        let error = match f().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let after = match marker(error.as_std_error()) {
            Some(RetryClass::Fatal) => return Err(error),
            Some(RetryClass::Retry { after }) => after,
            None if should_retry(&error) => None,
            None => return Err(error),
        };
        if !config.should_attempt(attempt) {
            return Err(error);
        }
        let delay = after.unwrap_or_else(|| config.delay(attempt));
        on_retry(&RetryAttempt {
            attempt,
            max_attempts: config.max_attempts,
            delay,
            error: &error,
        });
        drop(error);
        clock.sleep(delay).await;
        // should_attempt(attempt) held, so attempt < max_attempts <= u32::MAX.
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{duration_ms, VirtualClock};
    use crate::retry::config::Backoff;
    use crate::retry::{FatalError, RetryableError};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    use tokio::task::JoinHandle;

    /// Runs `task` to completion, jumping the virtual clock to each deadline it sleeps until.
    async fn drive<T: Send + 'static>(clock: &VirtualClock, task: JoinHandle<T>) -> T {
        for _ in 0..10_000 {
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            if task.is_finished() {
                return task.await.expect("task panicked");
            }
            if let Some(deadline) = clock.next_deadline() {
                clock.set(deadline);
            }
        }
        panic!("task neither finished nor slept");
    }

    fn counter() -> (Arc<AtomicU32>, impl Fn() -> u32 + Clone) {
        let calls = Arc::new(AtomicU32::new(0));
        let c = Arc::clone(&calls);
        (calls, move || c.fetch_add(1, Ordering::SeqCst) + 1)
    }

    fn io(message: impl Into<String>) -> std::io::Error {
        std::io::Error::other(message.into())
    }

    #[tokio::test]
    async fn succeeds_on_third_attempt_after_exactly_the_backoff() {
        let clock = VirtualClock::new(1_000_000);
        let config = RetryConfig::new().max_attempts(5);
        let (calls, call) = counter();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (clock, config, seen) = (clock.clone(), config.clone(), Arc::clone(&seen));
            async move {
                with_retry_notify(
                    &clock,
                    &config,
                    || {
                        let n = call();
                        async move {
                            if n < 3 {
                                Err(io(format!("flaky {n}")))
                            } else {
                                Ok(n)
                            }
                        }
                    },
                    |a: &RetryAttempt<'_, std::io::Error>| {
                        seen.lock()
                            .unwrap()
                            .push((a.attempt, a.delay, a.error.to_string()));
                    },
                )
                .await
            }
        });
        assert_eq!(drive(&clock, task).await.unwrap(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let mut total = 0;
        for (i, (attempt, delay, message)) in seen.iter().enumerate() {
            let expected_attempt = i as u32 + 1;
            assert_eq!(*attempt, expected_attempt);
            assert_eq!(*message, format!("flaky {expected_attempt}"));
            let base = config.base_delay(*attempt);
            assert!(*delay >= base && *delay <= base + base / 10, "{delay:?}");
            total += duration_ms(*delay);
        }
        assert_eq!(clock.now_ms() - 1_000_000, total);
        assert!((3_000..=3_300).contains(&total), "{total}");
    }

    #[tokio::test]
    async fn fatal_error_stops_after_one_call() {
        #[derive(Debug, thiserror::Error)]
        #[error("charging failed")]
        struct ChargeError(#[source] FatalError);

        let clock = VirtualClock::new(0);
        let (calls, call) = counter();
        let result = with_retry_on(&clock, &RetryConfig::new(), || {
            call();
            async { Err::<(), _>(ChargeError(FatalError::new("card declined"))) }
        })
        .await;
        assert_eq!(result.unwrap_err().0.message(), "card declined");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(clock.now_ms(), 0);
        assert_eq!(clock.next_deadline(), None);
    }

    #[tokio::test]
    async fn retryable_error_delay_replaces_the_backoff() {
        let clock = VirtualClock::new(0);
        let (calls, call) = counter();
        let task = tokio::spawn({
            let clock = clock.clone();
            async move {
                with_retry_on(&clock, &RetryConfig::new(), || {
                    let n = call();
                    async move {
                        match n {
                            1 => Err(RetryableError::after("throttled", Duration::from_secs(42))),
                            _ => Ok("done"),
                        }
                    }
                })
                .await
            }
        });
        assert_eq!(drive(&clock, task).await.unwrap(), "done");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(clock.now_ms(), 42_000);
    }

    #[tokio::test]
    async fn exhausted_attempts_return_the_last_error() {
        let clock = VirtualClock::new(0);
        let config = RetryConfig::new()
            .max_attempts(4)
            .backoff(Backoff::Constant)
            .initial_interval(Duration::from_millis(100));
        let (calls, call) = counter();
        let task = tokio::spawn({
            let clock = clock.clone();
            async move {
                with_retry_on(&clock, &config, || {
                    let n = call();
                    async move { Err::<(), _>(io(format!("failure {n}"))) }
                })
                .await
            }
        });
        let error = drive(&clock, task).await.unwrap_err();
        assert_eq!(error.to_string(), "failure 4");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        let elapsed = clock.now_ms();
        assert!((300..=330).contains(&elapsed), "{elapsed}");
    }

    #[tokio::test]
    async fn one_attempt_means_no_retry() {
        let clock = VirtualClock::new(0);
        for config in [RetryConfig::none(), RetryConfig::new().max_attempts(0)] {
            let (calls, call) = counter();
            let result = with_retry_on(&clock, &config, || {
                call();
                async { Err::<(), _>(io("nope")) }
            })
            .await;
            assert!(result.is_err());
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
        assert_eq!(clock.now_ms(), 0);
    }

    fn transient<E: AsDynError<M>, M>(error: &E) -> bool {
        crate::retry::should_retry::is_transient_error(error.as_std_error())
    }

    #[tokio::test]
    async fn with_retry_if_consults_the_predicate_for_unmarked_errors() {
        let clock = VirtualClock::new(0);
        let config = RetryConfig::new().initial_interval(Duration::ZERO);
        let attempts = |error: fn(u32) -> Box<dyn Error + Send + Sync>, retry: bool| {
            let clock = clock.clone();
            let config = config.clone();
            async move {
                let (calls, call) = counter();
                let result = with_retry_if(
                    &clock,
                    &config,
                    |e| retry && transient(e),
                    || {
                        let n = call();
                        async move { Err::<(), _>(error(n)) }
                    },
                )
                .await;
                assert!(result.is_err());
                calls.load(Ordering::SeqCst)
            }
        };
        assert_eq!(attempts(|_| "HTTP 503".into(), true).await, 3);
        assert_eq!(attempts(|_| "HTTP 503".into(), false).await, 1);
        assert_eq!(attempts(|_| "invalid input".into(), true).await, 1);
        assert_eq!(
            attempts(|_| RetryableError::new("marked").into(), false).await,
            3
        );
        assert_eq!(
            attempts(|_| FatalError::new("HTTP 503 but fatal").into(), true).await,
            1
        );
    }

    #[tokio::test]
    async fn boxed_errors_are_classified() {
        let clock = VirtualClock::new(0);
        let config = RetryConfig::new().initial_interval(Duration::ZERO);

        let (calls, call) = counter();
        let result: Result<(), Box<dyn Error + Send + Sync>> =
            with_retry_on(&clock, &config, || {
                call();
                async { Err(FatalError::new("stop").into()) }
            })
            .await;
        assert_eq!(result.unwrap_err().to_string(), "stop");
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let (calls, call) = counter();
        let result: Result<(), Box<dyn Error>> = with_retry_on(&clock, &config, || {
            call();
            async { Err("again".into()) }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let (calls, call) = counter();
        let result: Result<(), Box<dyn Error + Send>> = with_retry_on(&clock, &config, || {
            call();
            async { Err(Box::new(FatalError::new("stop")) as Box<dyn Error + Send>) }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let (calls, call) = counter();
        let result: Result<(), Arc<dyn Error + Send + Sync>> =
            with_retry_on(&clock, &config, || {
                call();
                async { Err(Arc::new(FatalError::new("stop")) as Arc<dyn Error + Send + Sync>) }
            })
            .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn retryable_on_clones_the_arguments_for_each_attempt() {
        let clock = VirtualClock::new(0);
        let (calls, call) = counter();
        let fetch = retryable_on(
            Arc::new(clock.clone()),
            RetryConfig::new(),
            move |name: String| {
                let n = call();
                async move {
                    if n < 3 {
                        Err(io(format!("{name}: timeout")))
                    } else {
                        Ok(format!("{name} after {n}"))
                    }
                }
            },
        );
        let task = tokio::spawn(fetch.clone()("invoice".to_owned()));
        assert_eq!(drive(&clock, task).await.unwrap(), "invoice after 3");
        assert!((3_000..=3_300).contains(&clock.now_ms()));
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let task = tokio::spawn(fetch("receipt".to_owned()));
        assert_eq!(drive(&clock, task).await.unwrap(), "receipt after 4");
    }

    #[tokio::test(start_paused = true)]
    async fn system_clock_helpers() {
        let (calls, call) = counter();
        let result = with_retry(&retry_fast(), || {
            let n = call();
            async move {
                if n < 2 {
                    Err(io("flaky"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 2);

        let (calls2, call2) = counter();
        let add = retryable(retry_fast(), move |(a, b): (u32, u32)| {
            let n = call2();
            async move {
                if n < 2 {
                    Err(RetryableError::new("busy"))
                } else {
                    Ok(a + b)
                }
            }
        });
        assert_eq!(add((2, 3)).await.unwrap(), 5);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(calls2.load(Ordering::SeqCst), 2);
    }

    fn retry_fast() -> RetryConfig {
        RetryConfig::new().initial_interval(Duration::from_millis(5))
    }

    #[test]
    fn futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let clock = VirtualClock::new(0);
        let config = RetryConfig::new();
        let fut = with_retry_on(&clock, &config, || async { Ok::<_, FatalError>(()) });
        assert_send(&fut);
        let fut = with_retry(&config, || async {
            Err::<(), Box<dyn Error + Send + Sync>>("x".into())
        });
        assert_send(&fut);
    }
}
