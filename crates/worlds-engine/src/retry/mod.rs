//! Retrying failed steps.
//!
//! - [`RetryConfig`] is the policy: attempts, [`Backoff`] strategy and intervals.
//! - [`retry_patterns`] holds ready-made policies for APIs, databases and networks.
//! - [`FatalError`] and [`RetryableError`] let a step say "never retry this" or "retry this,
//!   after this long"; [`classify`] reads them from any error chain.
//! - [`should_retry`] has predicates that guess from an error's text whether it is transient.
//! - [`with_retry`], [`retryable`] and friends retry any async operation.
//!
//! ```
//! use std::time::Duration;
//! use worlds_engine::retry::{retry_patterns, Backoff, RetryConfig};
//!
//! let config = RetryConfig::new()
//!     .max_attempts(4)
//!     .backoff(Backoff::Linear)
//!     .initial_interval(Duration::from_millis(500));
//! assert_eq!(config.base_delay(3), Duration::from_millis(1_500));
//! assert_eq!(retry_patterns::api().max_attempts, 5);
//! ```

mod config;
mod errors;
mod helpers;
mod patterns;
mod predicates;

pub use config::{Backoff, RetryConfig};
pub use errors::{classify, FatalError, RetryClass, RetryableError};
pub use helpers::{
    retryable, retryable_on, with_retry, with_retry_if, with_retry_notify, with_retry_on,
    AsDynError, RetryAttempt, ViaBox, ViaError,
};
pub use predicates::ShouldRetry;

/// Ready-made policies, all exponential:
///
/// | name       | attempts | initial | max  | multiplier |
/// |------------|----------|---------|------|------------|
/// | `api`      | 5        | 1 s     | 30 s | 2          |
/// | `database` | 3        | 500 ms  | 10 s | 2          |
/// | `network`  | 5        | 2 s     | 60 s | 3          |
pub mod retry_patterns {
    pub use super::patterns::{api, by_name, database, network, NAMES};
}

/// Predicates over an error's text; see [`is_transient_error`](should_retry::is_transient_error).
pub mod should_retry {
    pub use super::predicates::{
        is_network_error, is_network_error_message, is_rate_limit_error,
        is_rate_limit_error_message, is_server_error, is_server_error_message, is_transient_error,
        is_transient_error_message, ShouldRetry,
    };
}
