//! Ready-made retry policies for common kinds of remote calls.

use std::time::Duration;

use super::config::{Backoff, RetryConfig};

/// The names [`by_name`] accepts.
pub const NAMES: [&str; 3] = ["api", "database", "network"];

fn exponential(max_attempts: u32, initial_ms: u64, max_ms: u64, multiplier: f64) -> RetryConfig {
    RetryConfig::new()
        .max_attempts(max_attempts)
        .backoff(Backoff::Exponential)
        .initial_interval(Duration::from_millis(initial_ms))
        .max_interval(Duration::from_millis(max_ms))
        .multiplier(multiplier)
}

/// HTTP APIs: 5 attempts, exponential from 1 s doubling up to 30 s.
pub fn api() -> RetryConfig {
    exponential(5, 1_000, 30_000, 2.0)
}

/// Databases: 3 attempts, exponential from 500 ms doubling up to 10 s.
pub fn database() -> RetryConfig {
    exponential(3, 500, 10_000, 2.0)
}

/// Flaky networks: 5 attempts, exponential from 2 s tripling up to 60 s.
pub fn network() -> RetryConfig {
    exponential(5, 2_000, 60_000, 3.0)
}

/// The policy called `name` (`"api"`, `"database"` or `"network"`, exact spelling), if any.
///
/// ```
/// use worlds_engine::retry::retry_patterns;
/// assert_eq!(retry_patterns::by_name("database"), Some(retry_patterns::database()));
/// assert_eq!(retry_patterns::by_name("Database"), None);
/// ```
pub fn by_name(name: &str) -> Option<RetryConfig> {
    match name {
        "api" => Some(api()),
        "database" => Some(database()),
        "network" => Some(network()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Dur;

    #[test]
    fn patterns_match_their_documentation() {
        let cases = [
            (api(), 5, 1_000, 30_000, 2.0),
            (database(), 3, 500, 10_000, 2.0),
            (network(), 5, 2_000, 60_000, 3.0),
        ];
        for (config, attempts, initial, max, multiplier) in cases {
            assert_eq!(config.max_attempts, attempts);
            assert_eq!(config.backoff, Backoff::Exponential);
            assert_eq!(config.initial_interval, Dur::from_millis(initial));
            assert_eq!(config.max_interval, Dur::from_millis(max));
            assert_eq!(config.multiplier, multiplier);
            assert_eq!(config.validate(), Ok(()));
        }
        let network_waits: Vec<u128> = (1..5)
            .map(|a| network().base_delay(a).as_millis())
            .collect();
        assert_eq!(network_waits, [2_000, 6_000, 18_000, 54_000]);
    }

    #[test]
    fn by_name_knows_every_name() {
        for name in NAMES {
            assert!(by_name(name).is_some(), "{name}");
        }
        assert_eq!(by_name("api"), Some(api()));
        assert_eq!(by_name("network"), Some(network()));
        assert_eq!(by_name(""), None);
        assert_eq!(by_name(" api"), None);
    }
}
