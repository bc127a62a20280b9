//! Webhook signatures: proof that a request to a webhook URL came from the sender holding a
//! shared secret, so that knowing the URL is not enough to resume the webhook.
//!
//! Three schemes, all HMAC-SHA256 over the exact bytes received:
//!
//! | scheme | headers | signed content | signature |
//! |---|---|---|---|
//! | [`Standard`](SignatureScheme::Standard) ([Standard Webhooks]) | `webhook-id`, `webhook-timestamp`, `webhook-signature` | `{id}.{timestamp}.{body}` | `v1,<base64>`, several separated by spaces |
//! | [`Stripe`](SignatureScheme::Stripe) | `stripe-signature: t=…,v1=…` | `{t}.{body}` | hex, several `v1=` allowed |
//! | [`GitHub`](SignatureScheme::GitHub) | `x-hub-signature-256: sha256=…` | `{body}` | hex |
//!
//! The timestamped schemes refuse a request whose timestamp is further than the tolerance
//! (default 5 minutes) from now, so a captured request cannot be replayed later. GitHub signs
//! no timestamp; a replay of one of its requests can at most repeat a delivery, which the
//! webhook answers as it did the first time (see below).
//!
//! Secrets rotate without downtime: a [`WebhookSignature`] holds a list, and a request signed
//! with any of them is accepted; senders sign with both during the overlap.
//!
//! A webhook already resumed by a delivery answers a repeat of that same delivery (same
//! `webhook-id`, or `x-github-delivery`) with the first answer instead of a conflict, because
//! senders retry until they get a 2xx.
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/
//!
//! ```
//! use worlds_engine::hooks::WebhookSignature;
//!
//! let signature = WebhookSignature::github("It's a Secret to Everybody");
//! let headers = signature.sign("delivery-1", b"Hello, World!", 1_700_000_000_000)?;
//! assert_eq!(
//!     headers[0],
//!     (
//!         "x-hub-signature-256".to_owned(),
//!         "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned()
//!     )
//! );
//! let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
//! assert!(signature.verify(&headers, b"Hello, World!", 1_700_000_000_000).is_ok());
//! assert!(signature.verify(&headers, b"Hello, World?", 1_700_000_000_000).is_err());
//! # Ok::<(), worlds_engine::WorldError>(())
//! ```

use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::clock::Millis;
use crate::duration::Dur;
use crate::error::WorldError;

type HmacSha256 = Hmac<Sha256>;

/// The prefix of Standard Webhooks secrets (`whsec_` then base64).
const STANDARD_SECRET_PREFIX: &str = "whsec_";

/// The default distance allowed between a signed timestamp and now.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// How a sender signs its webhook requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureScheme {
    /// [Standard Webhooks](https://www.standardwebhooks.com/): id, timestamp and body signed;
    /// secrets are `whsec_` followed by base64.
    Standard,
    /// Stripe's `Stripe-Signature` header: timestamp and body signed.
    Stripe,
    /// GitHub's `X-Hub-Signature-256` header: the body signed, no timestamp.
    #[serde(rename = "github")]
    GitHub,
}

impl SignatureScheme {
    /// The header carrying the signature.
    pub fn header(self) -> &'static str {
        match self {
            SignatureScheme::Standard => "webhook-signature",
            SignatureScheme::Stripe => "stripe-signature",
            SignatureScheme::GitHub => "x-hub-signature-256",
        }
    }

    /// The header naming the delivery, which a sender keeps when it retries; `None` for
    /// Stripe, whose event id is inside the body.
    pub fn delivery_header(self) -> Option<&'static str> {
        match self {
            SignatureScheme::Standard => Some("webhook-id"),
            SignatureScheme::Stripe => None,
            SignatureScheme::GitHub => Some("x-github-delivery"),
        }
    }
}

/// A shared secret. Its `Debug` form hides it, so configurations can be logged.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WebhookSecret(String);

impl WebhookSecret {
    /// The secret as given.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl From<&str> for WebhookSecret {
    fn from(secret: &str) -> Self {
        WebhookSecret(secret.to_owned())
    }
}

impl From<String> for WebhookSecret {
    fn from(secret: String) -> Self {
        WebhookSecret(secret)
    }
}

/// The signature webhook requests must carry: a scheme, its secrets (newest first; any of them
/// is accepted) and, for timestamped schemes, how old a request may be.
///
/// Set one for every webhook of a world
/// ([`WebhookServerOptions::signature`](crate::config::WebhookServerOptions::signature)), or
/// name one per webhook ([`HookOptions::signature`](crate::HookOptions::signature)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSignature {
    /// How requests are signed.
    pub scheme: SignatureScheme,
    /// The secrets, newest first. A request signed with any of them is accepted, so a secret
    /// can be rotated: add the new one first, let senders move to it, then drop the old one.
    pub secrets: Vec<WebhookSecret>,
    /// Longest distance between a request's signed timestamp and now. Default 5 minutes.
    #[serde(default = "default_tolerance")]
    pub tolerance: Dur,
}

fn default_tolerance() -> Dur {
    Dur(DEFAULT_TOLERANCE)
}

/// Why a request's signature was refused. [`code`](Self::code) is stable, for programs;
/// the message never includes the expected signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureRefusal {
    /// A header the scheme needs is absent.
    #[error("the request has no {0} header; sign it with the webhook's secret")]
    MissingHeader(&'static str),
    /// A header is present but not in the scheme's form.
    #[error("the {header} header is malformed: {why}")]
    MalformedHeader {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The signed timestamp is too far from now: a replayed or delayed request.
    #[error(
        "the signed timestamp is {seconds} s away from now, more than the {tolerance} allowed; send a freshly signed request (and check the sender's clock)"
    )]
    TimestampOutOfTolerance {
        /// Seconds between the timestamp and now.
        seconds: u64,
        /// The tolerance.
        tolerance: Dur,
    },
    /// No signature in the request matches any secret.
    #[error("the signature does not match the webhook's secret; sign the exact body sent, with the current secret")]
    SignatureMismatch,
    /// The webhook requires a named signature this world has no configuration for.
    #[error("the webhook requires signature {0:?}, which this world does not configure; add it to webhook_server.named_signatures")]
    NotConfigured(String),
}

impl SignatureRefusal {
    /// A stable code: `missing_header`, `malformed_header`, `timestamp_out_of_tolerance`,
    /// `signature_mismatch` or `not_configured`.
    pub fn code(&self) -> &'static str {
        match self {
            SignatureRefusal::MissingHeader(_) => "missing_header",
            SignatureRefusal::MalformedHeader { .. } => "malformed_header",
            SignatureRefusal::TimestampOutOfTolerance { .. } => "timestamp_out_of_tolerance",
            SignatureRefusal::SignatureMismatch => "signature_mismatch",
            SignatureRefusal::NotConfigured(_) => "not_configured",
        }
    }
}

/// A request whose signature holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The delivery's id header and its value, when the scheme has one: a sender's retry of
    /// the same delivery carries the same.
    pub delivery: Option<(&'static str, String)>,
}

impl WebhookSignature {
    /// Standard Webhooks with this secret (`whsec_…`).
    pub fn standard(secret: impl Into<WebhookSecret>) -> Self {
        Self::new(SignatureScheme::Standard, secret)
    }

    /// Stripe's scheme with this endpoint secret.
    pub fn stripe(secret: impl Into<WebhookSecret>) -> Self {
        Self::new(SignatureScheme::Stripe, secret)
    }

    /// GitHub's scheme with this webhook secret.
    pub fn github(secret: impl Into<WebhookSecret>) -> Self {
        Self::new(SignatureScheme::GitHub, secret)
    }

    fn new(scheme: SignatureScheme, secret: impl Into<WebhookSecret>) -> Self {
        WebhookSignature {
            scheme,
            secrets: vec![secret.into()],
            tolerance: default_tolerance(),
        }
    }

    /// Also accepts requests signed with `previous` (while senders move to the new secret).
    pub fn or_previous(mut self, previous: impl Into<WebhookSecret>) -> Self {
        self.secrets.push(previous.into());
        self
    }

    /// Sets the tolerance for signed timestamps.
    pub fn tolerance(mut self, tolerance: impl Into<Dur>) -> Self {
        self.tolerance = tolerance.into();
        self
    }

    /// A fresh Standard Webhooks secret: `whsec_` and 32 random bytes in base64.
    pub fn generate_standard_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        format!("{STANDARD_SECRET_PREFIX}{}", BASE64.encode(bytes))
    }

    /// Checks the configuration, naming what is wrong (`field` prefixes the names).
    pub fn validate(&self, field: &str) -> Result<(), WorldError> {
        if self.secrets.is_empty() {
            return Err(WorldError::invalid(
                format!("{field}.secrets"),
                "needs at least one secret",
            ));
        }
        for (i, secret) in self.secrets.iter().enumerate() {
            self.key(secret)
                .map_err(|why| WorldError::invalid(format!("{field}.secrets[{i}]"), why))?;
        }
        if self.tolerance.0.is_zero() {
            return Err(WorldError::invalid(
                format!("{field}.tolerance"),
                "must be positive",
            ));
        }
        Ok(())
    }

    /// The HMAC key of a secret.
    fn key(&self, secret: &WebhookSecret) -> Result<Vec<u8>, String> {
        let text = secret.expose();
        if text.is_empty() {
            return Err("a secret must not be empty".into());
        }
        match self.scheme {
            SignatureScheme::Standard => {
                let encoded = text.strip_prefix(STANDARD_SECRET_PREFIX).unwrap_or(text);
                let key = BASE64.decode(encoded).map_err(|_| {
                    "a Standard Webhooks secret is whsec_ followed by base64; generate one with WebhookSignature::generate_standard_secret".to_owned()
                })?;
                if key.len() < 24 {
                    return Err(format!(
                        "a Standard Webhooks secret must hold at least 24 bytes; this one holds {}",
                        key.len()
                    ));
                }
                Ok(key)
            }
            SignatureScheme::Stripe | SignatureScheme::GitHub => Ok(text.as_bytes().to_vec()),
        }
    }

    fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// Checks a request: its headers (names in any case) and its body exactly as received,
    /// at `now`. Returns the delivery id (see [`Verified`]) when it holds.
    pub fn verify(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
        now: Millis,
    ) -> Result<Verified, SignatureRefusal> {
        let header = |name: &'static str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim())
                .ok_or(SignatureRefusal::MissingHeader(name))
        };
        let keys: Vec<Vec<u8>> = self
            .secrets
            .iter()
            .filter_map(|s| self.key(s).ok())
            .collect();
        let matches = |prefix: &[&[u8]], candidates: &[Vec<u8>]| {
            keys.iter().any(|key| {
                candidates
                    .iter()
                    .any(|sig| Self::mac(key, prefix).verify_slice(sig).is_ok())
            })
        };
        let delivery = match self.scheme {
            SignatureScheme::Standard => {
                let id = header("webhook-id")?;
                let timestamp = header("webhook-timestamp")?;
                let signatures = header("webhook-signature")?;
                let seconds: i64 = timestamp
                    .parse()
                    .map_err(|_| malformed_timestamp("webhook-timestamp"))?;
                self.check_time(seconds, now)?;
                let candidates: Vec<Vec<u8>> = signatures
                    .split(' ')
                    .filter_map(|s| s.strip_prefix("v1,"))
                    .filter_map(|s| BASE64.decode(s).ok())
                    .collect();
                if candidates.is_empty() {
                    return Err(SignatureRefusal::MalformedHeader {
                        header: "webhook-signature",
                        why: "it holds no v1,<base64> signature",
                    });
                }
                let signed = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
                if !matches(&signed, &candidates) {
                    return Err(SignatureRefusal::SignatureMismatch);
                }
                Some(("webhook-id", id.to_owned()))
            }
            SignatureScheme::Stripe => {
                let value = header("stripe-signature")?;
                let mut timestamp = None;
                let mut candidates = Vec::new();
                for item in value.split(',') {
                    match item.trim().split_once('=') {
                        Some(("t", t)) => timestamp = Some(t),
                        Some(("v1", sig)) => candidates.extend(hex::decode(sig).ok()),
                        _ => {}
                    }
                }
                let timestamp = timestamp.ok_or(SignatureRefusal::MalformedHeader {
                    header: "stripe-signature",
                    why: "it holds no t=<timestamp>",
                })?;
                let seconds: i64 = timestamp
                    .parse()
                    .map_err(|_| malformed_timestamp("stripe-signature"))?;
                self.check_time(seconds, now)?;
                if candidates.is_empty() {
                    return Err(SignatureRefusal::MalformedHeader {
                        header: "stripe-signature",
                        why: "it holds no v1=<hex> signature",
                    });
                }
                if !matches(&[timestamp.as_bytes(), b".", body], &candidates) {
                    return Err(SignatureRefusal::SignatureMismatch);
                }
                None
            }
            SignatureScheme::GitHub => {
                let value = header("x-hub-signature-256")?;
                let candidate = value
                    .strip_prefix("sha256=")
                    .and_then(|sig| hex::decode(sig).ok())
                    .ok_or(SignatureRefusal::MalformedHeader {
                        header: "x-hub-signature-256",
                        why: "it is not sha256=<hex>",
                    })?;
                if !matches(&[body], &[candidate]) {
                    return Err(SignatureRefusal::SignatureMismatch);
                }
                header("x-github-delivery")
                    .ok()
                    .map(|id| ("x-github-delivery", id.to_owned()))
            }
        };
        Ok(Verified { delivery })
    }

    fn check_time(&self, seconds: i64, now: Millis) -> Result<(), SignatureRefusal> {
        let distance = (now / 1000).abs_diff(seconds);
        if distance > self.tolerance.0.as_secs() {
            return Err(SignatureRefusal::TimestampOutOfTolerance {
                seconds: distance,
                tolerance: self.tolerance,
            });
        }
        Ok(())
    }

    /// The headers a sender adds to sign `body` as delivery `id` at `now`, with the first
    /// secret: for tests, and for programs that send webhooks to a world. (Stripe's scheme has
    /// no delivery header, so `id` is not sent with it.)
    ///
    /// Fails with `InvalidInput` (naming `secrets[0]`) when there is no secret or the first is
    /// not valid for the scheme, as [`validate`](Self::validate) would say.
    pub fn sign(
        &self,
        id: &str,
        body: &[u8],
        now: Millis,
    ) -> Result<Vec<(String, String)>, WorldError> {
        let secret = self.secrets.first().ok_or_else(|| {
            WorldError::invalid(
                "secrets",
                "nothing to sign with: give the signature at least one secret",
            )
        })?;
        let key = self.key(secret).map_err(|why| {
            WorldError::invalid("secrets[0]", format!("cannot sign with this secret: {why}"))
        })?;
        let seconds = (now / 1000).to_string();
        Ok(match self.scheme {
            SignatureScheme::Standard => {
                let mac = Self::mac(&key, &[id.as_bytes(), b".", seconds.as_bytes(), b".", body]);
                vec![
                    ("webhook-id".into(), id.to_owned()),
                    ("webhook-timestamp".into(), seconds),
                    (
                        "webhook-signature".into(),
                        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())),
                    ),
                ]
            }
            SignatureScheme::Stripe => {
                let mac = Self::mac(&key, &[seconds.as_bytes(), b".", body]);
                vec![(
                    "stripe-signature".into(),
                    format!(
                        "t={seconds},v1={}",
                        hex::encode(mac.finalize().into_bytes())
                    ),
                )]
            }
            SignatureScheme::GitHub => {
                let mac = Self::mac(&key, &[body]);
                vec![
                    (
                        "x-hub-signature-256".into(),
                        format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
                    ),
                    ("x-github-delivery".into(), id.to_owned()),
                ]
            }
        })
    }
}

impl From<SignatureRefusal> for WorldError {
    fn from(refusal: SignatureRefusal) -> Self {
        WorldError::Unauthenticated {
            reason: refusal.code(),
            message: format!("webhook request refused: {refusal}"),
        }
    }
}

fn malformed_timestamp(header: &'static str) -> SignatureRefusal {
    SignatureRefusal::MalformedHeader {
        header,
        why: "its timestamp is not whole seconds since the Unix epoch",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_700_000_000_000;

    #[test]
    fn signing_with_a_bad_secret_is_an_error_not_a_panic() {
        for (signature, field) in [
            (
                WebhookSignature::standard("whsec_not base64!"),
                "secrets[0]",
            ),
            (WebhookSignature::standard("whsec_c2hvcnQ="), "secrets[0]"),
            (WebhookSignature::github(""), "secrets[0]"),
            (
                WebhookSignature {
                    secrets: Vec::new(),
                    ..WebhookSignature::stripe("x")
                },
                "secrets",
            ),
        ] {
            let err = signature.sign("msg_1", b"body", NOW).unwrap_err();
            assert!(
                matches!(&err, WorldError::InvalidInput { field: f, .. } if f == field),
                "{err}"
            );
        }
    }

    fn pairs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
        headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    fn standard_secret() -> String {
        format!("whsec_{}", BASE64.encode([7u8; 32]))
    }

    fn all() -> Vec<WebhookSignature> {
        vec![
            WebhookSignature::standard(standard_secret()),
            WebhookSignature::stripe("whsec_stripe_endpoint_secret"),
            WebhookSignature::github("It's a Secret to Everybody"),
        ]
    }

    #[test]
    fn github_matches_its_published_example() {
        let signature = WebhookSignature::github("It's a Secret to Everybody");
        let headers = [(
            "X-Hub-Signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        )];
        assert!(signature.verify(&headers, b"Hello, World!", NOW).is_ok());
    }

    #[test]
    fn standard_matches_the_reference_library() {
        // The test vector of the Standard Webhooks reference libraries.
        let signature = WebhookSignature::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let headers = [
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            (
                "webhook-signature",
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ];
        let body = br#"{"test": 2432232314}"#;
        let verified = signature.verify(&headers, body, 1_614_265_330_000).unwrap();
        assert_eq!(
            verified.delivery,
            Some(("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek".to_owned()))
        );
    }

    #[test]
    fn every_scheme_verifies_what_it_signs_and_nothing_else() {
        for signature in all() {
            let scheme = signature.scheme;
            signature.validate("s").unwrap();
            let body = b"{\"amount\":42}";
            let headers = signature.sign("msg_1", body, NOW).unwrap();
            assert!(
                signature.verify(&pairs(&headers), body, NOW).is_ok(),
                "{scheme:?}"
            );
            // A changed body.
            assert_eq!(
                signature.verify(&pairs(&headers), b"{\"amount\":43}", NOW),
                Err(SignatureRefusal::SignatureMismatch),
                "{scheme:?}"
            );
            // Another secret.
            let other = WebhookSignature {
                secrets: vec![WebhookSecret(format!("whsec_{}", BASE64.encode([9u8; 32])))],
                ..signature.clone()
            };
            assert_eq!(
                other.verify(&pairs(&headers), body, NOW),
                Err(SignatureRefusal::SignatureMismatch),
                "{scheme:?}"
            );
            // No headers.
            let refused = signature.verify(&[], body, NOW).unwrap_err();
            assert_eq!(refused.code(), "missing_header", "{scheme:?}");
        }
    }

    #[test]
    fn timestamps_outside_the_tolerance_are_refused() {
        for signature in all() {
            let body = b"x";
            let old = signature.sign("msg_1", body, NOW - 301_000).unwrap();
            let refused = signature.verify(&pairs(&old), body, NOW);
            match signature.scheme {
                // GitHub signs no timestamp.
                SignatureScheme::GitHub => assert!(refused.is_ok()),
                _ => assert_eq!(refused.unwrap_err().code(), "timestamp_out_of_tolerance"),
            }
            let future = signature.sign("msg_1", body, NOW + 301_000).unwrap();
            assert_eq!(
                signature.verify(&pairs(&future), body, NOW).is_err(),
                signature.scheme != SignatureScheme::GitHub
            );
            let recent = signature.sign("msg_1", body, NOW - 299_000).unwrap();
            assert!(signature.verify(&pairs(&recent), body, NOW).is_ok());
        }
    }

    #[test]
    fn a_previous_secret_still_verifies_during_rotation() {
        let old = standard_secret();
        let new = WebhookSignature::generate_standard_secret();
        let sender = WebhookSignature::standard(old.clone());
        let receiver = WebhookSignature::standard(new).or_previous(old);
        let headers = sender.sign("msg_1", b"body", NOW).unwrap();
        assert!(receiver.verify(&pairs(&headers), b"body", NOW).is_ok());
    }

    #[test]
    fn several_signatures_in_one_header_any_may_match() {
        let signature = WebhookSignature::standard(standard_secret());
        let mut headers = signature.sign("msg_1", b"body", NOW).unwrap();
        let good = headers[2].1.clone();
        headers[2].1 = format!("v1,AAAA v1a,ignored {good}");
        assert!(signature.verify(&pairs(&headers), b"body", NOW).is_ok());
    }

    #[test]
    fn empty_and_truncated_signatures_never_verify() {
        // A verifier that compared only the common prefix accepted `v1,` (an empty signature).
        let signature = WebhookSignature::standard(standard_secret());
        let mut headers = signature.sign("msg_1", b"body", NOW).unwrap();
        for forged in ["v1,", "v1,AA==", "v1"] {
            headers[2].1 = forged.to_owned();
            assert!(
                signature.verify(&pairs(&headers), b"body", NOW).is_err(),
                "{forged}"
            );
        }
        let github = WebhookSignature::github("secret");
        let mut headers = github.sign("d1", b"body", NOW).unwrap();
        let full = headers[0].1.clone();
        for forged in ["sha256=", &full[..20]] {
            headers[0].1 = forged.to_owned();
            assert!(
                github.verify(&pairs(&headers), b"body", NOW).is_err(),
                "{forged}"
            );
        }
        let stripe = WebhookSignature::stripe("secret");
        let mut headers = stripe.sign("", b"body", NOW).unwrap();
        headers[0].1 = format!("t={},v1=", NOW / 1000);
        assert!(stripe.verify(&pairs(&headers), b"body", NOW).is_err());
    }

    #[test]
    fn malformed_headers_are_named() {
        let stripe = WebhookSignature::stripe("secret");
        let refused = stripe
            .verify(&[("Stripe-Signature", "v1=00")], b"", NOW)
            .unwrap_err();
        assert_eq!(refused.code(), "malformed_header");
        assert!(
            refused.to_string().contains("stripe-signature"),
            "{refused}"
        );
        let standard = WebhookSignature::standard(standard_secret());
        let refused = standard
            .verify(
                &[
                    ("webhook-id", "m"),
                    ("webhook-timestamp", "soon"),
                    ("webhook-signature", "v1,AA=="),
                ],
                b"",
                NOW,
            )
            .unwrap_err();
        assert_eq!(refused.code(), "malformed_header");
    }

    #[test]
    fn configurations_are_checked_and_secrets_hidden() {
        let bad = WebhookSignature::standard("whsec_not base64!");
        let err = bad.validate("webhook_server.signature").unwrap_err();
        assert!(err.to_string().contains("secrets[0]"), "{err}");
        let short = WebhookSignature::standard(format!("whsec_{}", BASE64.encode([1u8; 8])));
        assert!(short.validate("s").is_err());
        let none = WebhookSignature {
            secrets: Vec::new(),
            ..WebhookSignature::github("x")
        };
        assert!(none.validate("s").is_err());
        let debug = format!("{:?}", WebhookSignature::github("hunter2"));
        assert!(!debug.contains("hunter2"), "{debug}");
        let json: WebhookSignature =
            serde_json::from_str(r#"{"scheme": "github", "secrets": ["s"]}"#).unwrap();
        assert_eq!(json.tolerance, Dur(DEFAULT_TOLERANCE));
    }
}
