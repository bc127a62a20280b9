//! Predicates that guess from an error's text whether retrying could help.
//!
//! Each `is_*_error` function looks at the error and every error in its
//! [`source`](std::error::Error::source) chain; each `is_*_error_message` function looks at one
//! string. Matching ignores ASCII case. HTTP status codes match only as whole numbers:
//! `"HTTP 503"` and `"status=503,"` match, `"15003"`, `"503ms"` and `"1,503"` do not.

use std::error::Error;
use std::sync::Arc;

use super::errors::chain;

/// A shareable retry predicate, for example `Arc::new(is_transient_error)`.
///
/// ```
/// use std::sync::Arc;
/// use worlds_engine::retry::should_retry::{is_transient_error, ShouldRetry};
/// let should_retry: ShouldRetry = Arc::new(is_transient_error);
/// assert!(should_retry(&std::io::Error::other("HTTP 503 from upstream")));
/// ```
pub type ShouldRetry = Arc<dyn Fn(&(dyn Error + 'static)) -> bool + Send + Sync>;

const NETWORK_WORDS: &[&str] = &[
    "econnrefused",
    "enotfound",
    "etimedout",
    "econnreset",
    "network",
    "timeout",
    "timed out",
    "connection refused",
    "connection reset",
];

const RATE_LIMIT_WORDS: &[&str] = &["rate limit", "rate-limit", "ratelimit", "too many requests"];
const RATE_LIMIT_CODES: &[&str] = &["429"];

const SERVER_WORDS: &[&str] = &[
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
];
const SERVER_CODES: &[&str] = &["500", "502", "503", "504"];

/// A connection failure or timeout: `ECONNREFUSED`, `ENOTFOUND`, `ETIMEDOUT`, `ECONNRESET`,
/// "network", "timeout", "timed out", "connection refused", "connection reset".
pub fn is_network_error(err: &(dyn Error + 'static)) -> bool {
    any_in_chain(err, is_network_error_message)
}

/// A throttled request: "rate limit", "too many requests" or status 429.
pub fn is_rate_limit_error(err: &(dyn Error + 'static)) -> bool {
    any_in_chain(err, is_rate_limit_error_message)
}

/// A server-side failure: status 500, 502, 503 or 504, or their reason phrases.
pub fn is_server_error(err: &(dyn Error + 'static)) -> bool {
    any_in_chain(err, is_server_error_message)
}

/// Any of [`is_network_error`], [`is_rate_limit_error`] or [`is_server_error`].
pub fn is_transient_error(err: &(dyn Error + 'static)) -> bool {
    any_in_chain(err, is_transient_error_message)
}

/// [`is_network_error`] for one message.
pub fn is_network_error_message(message: &str) -> bool {
    let text = message.to_ascii_lowercase();
    NETWORK_WORDS.iter().any(|w| text.contains(w))
}

/// [`is_rate_limit_error`] for one message.
pub fn is_rate_limit_error_message(message: &str) -> bool {
    let text = message.to_ascii_lowercase();
    RATE_LIMIT_WORDS.iter().any(|w| text.contains(w))
        || RATE_LIMIT_CODES.iter().any(|c| contains_number(&text, c))
}

/// [`is_server_error`] for one message.
pub fn is_server_error_message(message: &str) -> bool {
    let text = message.to_ascii_lowercase();
    SERVER_WORDS.iter().any(|w| text.contains(w))
        || SERVER_CODES.iter().any(|c| contains_number(&text, c))
}

/// [`is_transient_error`] for one message.
pub fn is_transient_error_message(message: &str) -> bool {
    is_network_error_message(message)
        || is_rate_limit_error_message(message)
        || is_server_error_message(message)
}

fn any_in_chain(err: &(dyn Error + 'static), test: fn(&str) -> bool) -> bool {
    chain(err).any(|e| test(&e.to_string()))
}

/// True if `number` occurs in `text` as a number of its own, not as part of a longer number or
/// word (`503` in `"http 503"`, but not in `"15003"`, `"503ms"`, `"1,503"` or `"e503"`).
fn contains_number(text: &str, number: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices(number).any(|(start, found)| {
        let end = start + found.len();
        let before = start.checked_sub(1).map(|i| bytes[i]);
        let before_that = start.checked_sub(2).map(|i| bytes[i]);
        let after = bytes.get(end).copied();
        let after_that = bytes.get(end + 1).copied();
        !continues_number(before, before_that) && !continues_number(after, after_that)
    })
}

/// Whether `next` (then `beyond`) glues a number to its neighbour: a letter, digit or
/// underscore, or a `.`/`,` followed by a digit as in `1.5` or `1,000`.
fn continues_number(next: Option<u8>, beyond: Option<u8>) -> bool {
    match next {
        Some(b) if b.is_ascii_alphanumeric() || b == b'_' => true,
        Some(b'.' | b',') => beyond.is_some_and(|b| b.is_ascii_digit()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[derive(Debug)]
    struct Context(&'static str, std::io::Error);

    impl fmt::Display for Context {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Context {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.1)
        }
    }

    /// (message, network, rate limit, server)
    const TABLE: &[(&str, bool, bool, bool)] = &[
        ("connect ECONNREFUSED 127.0.0.1:5432", true, false, false),
        ("getaddrinfo ENOTFOUND api.example.com", true, false, false),
        ("read ETIMEDOUT", true, false, false),
        ("socket hang up: ECONNRESET", true, false, false),
        ("Network is unreachable", true, false, false),
        ("request Timeout after 30s", true, false, false),
        ("operation timed out", true, false, false),
        ("Connection refused (os error 111)", true, false, false),
        (
            "Connection reset by peer (os error 104)",
            true,
            false,
            false,
        ),
        ("Rate limit exceeded", false, true, false),
        ("HTTP 429", false, true, false),
        ("429 Too Many Requests", false, true, false),
        ("too many requests, slow down", false, true, false),
        ("status=4290", false, false, false),
        ("HTTP 500 Internal Server Error", false, false, true),
        ("upstream returned 502", false, false, true),
        ("503 Service Unavailable", false, false, true),
        ("(504)", false, false, true),
        ("gateway timeout", true, false, true),
        ("status: 503.", false, false, true),
        ("error 500, giving up", false, false, true),
        ("order 15003 not found", false, false, false),
        ("waited 500ms", false, false, false),
        ("processed 1,500 rows", false, false, false),
        ("version 2.503", false, false, false),
        ("code E503", false, false, false),
        ("5000 items", false, false, false),
        ("invalid argument", false, false, false),
        ("", false, false, false),
    ];

    #[test]
    fn message_table() {
        for &(message, network, rate, server) in TABLE {
            assert_eq!(
                is_network_error_message(message),
                network,
                "network: {message:?}"
            );
            assert_eq!(
                is_rate_limit_error_message(message),
                rate,
                "rate: {message:?}"
            );
            assert_eq!(
                is_server_error_message(message),
                server,
                "server: {message:?}"
            );
            assert_eq!(
                is_transient_error_message(message),
                network || rate || server,
                "transient: {message:?}"
            );
        }
    }

    #[test]
    fn error_predicates_walk_the_chain() {
        let err = Context(
            "fetching invoice",
            std::io::Error::other("upstream said 503"),
        );
        assert!(is_server_error(&err));
        assert!(is_transient_error(&err));
        assert!(!is_network_error(&err));
        assert!(!is_rate_limit_error(&err));

        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(is_network_error(&io), "{io}");
        let io = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert!(is_network_error(&io), "{io}");

        let boxed: Box<dyn Error + Send + Sync> = "Too Many Requests".into();
        assert!(is_rate_limit_error(&*boxed));
        assert!(!is_transient_error(&std::fmt::Error));
    }

    #[test]
    fn should_retry_alias_accepts_the_predicates() {
        let predicates: Vec<ShouldRetry> = vec![
            Arc::new(is_network_error),
            Arc::new(is_rate_limit_error),
            Arc::new(is_server_error),
            Arc::new(is_transient_error),
            Arc::new(|e| e.to_string().contains("custom")),
        ];
        let err = std::io::Error::other("custom 429");
        let answers: Vec<bool> = predicates.iter().map(|p| p(&err)).collect();
        assert_eq!(answers, [false, true, false, true, true]);
    }

    #[test]
    fn numbers_at_the_edges_of_the_text() {
        assert!(contains_number("500", "500"));
        assert!(contains_number("x 500", "500"));
        assert!(contains_number("500 x", "500"));
        assert!(!contains_number("1500", "500"));
        assert!(!contains_number("5001", "500"));
        assert!(contains_number("5001 500", "500"));
        assert!(contains_number("v1. 500", "500"));
    }
}
