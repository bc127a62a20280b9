//! Durable HTTP: `ctx.fetch(url, request)` is a recorded step that makes an HTTP request.
//!
//! The response (status, headers, body) is recorded in history, so replay returns it without
//! calling the server again. Network errors, `429 Too Many Requests` and `5xx` responses are
//! retried with backoff (a `Retry-After` header in seconds is honoured); other statuses,
//! including `4xx`, are returned as they are — deciding what a `404` means is the workflow's
//! job. When retries run out the step fails and `fetch` returns the error.
//!
//! HTTPS uses rustls (with the `ring` crypto provider, installed as the process default if the
//! program has not chosen one) and the operating system's certificate store.
//!
//! ```
//! use worlds_engine::prelude::*;
//! use worlds_engine::fetch::FetchRequest;
//!
//! let flow = workflow("price-check", |ctx: WorkflowContext, sku: String| async move {
//!     let url = format!("http://prices.internal/sku/{sku}");
//!     let response = ctx.fetch(&url, FetchRequest::get()).await?;
//!     if !response.is_success() {
//!         return Err(WorkflowError::msg(format!("price service said {}", response.status)));
//!     }
//!     let price: u64 = response.json()?;
//!     Ok::<_, WorkflowError>(price)
//! });
//! # let _ = flow;
//! ```

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::engine::context::{CommandFuture, WorkflowContext};
use crate::engine::errors::StepError;
use crate::model::ActivityOptions;
use crate::retry::{RetryConfig, RetryableError};

/// Default time one attempt may take.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What to send: method, headers, body, and how to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// Headers to send.
    pub headers: BTreeMap<String, String>,
    /// The body, if any.
    pub body: Option<String>,
    /// Retry policy for network errors, 429 and 5xx. Default:
    /// [`retry_patterns::network`](crate::retry::retry_patterns::network).
    pub retry: Option<RetryConfig>,
    /// Time one attempt may take. Default 30 s.
    pub timeout: Option<Duration>,
}

impl FetchRequest {
    /// A request with this method and nothing else.
    pub fn new(method: impl Into<String>) -> Self {
        FetchRequest {
            method: method.into().to_ascii_uppercase(),
            headers: BTreeMap::new(),
            body: None,
            retry: None,
            timeout: None,
        }
    }

    /// A `GET`.
    pub fn get() -> Self {
        Self::new("GET")
    }

    /// A `POST` with a text body.
    pub fn post(body: impl Into<String>) -> Self {
        Self::new("POST").body(body)
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Sets a JSON body and its `content-type`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, serde_json::Error> {
        Ok(self
            .header("content-type", "application/json")
            .body(serde_json::to_string(value)?))
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers
            .insert(name.into().to_ascii_lowercase(), value.into());
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Sets the time one attempt may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// What came back, as recorded in history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchResponse {
    /// The HTTP status code.
    pub status: u16,
    /// Header names (lower case) and values; repeated headers are joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body as text (bytes that are not UTF-8 are replaced).
    pub body: String,
}

impl FetchResponse {
    /// True for a 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.body)
    }
}

/// The HTTP client every fetch shares (connection pooling across steps), or why there is none.
fn client() -> Result<&'static reqwest::Client, StepError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // TLS needs a process-wide crypto provider; keep the program's if it installed one.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .build()
                .map_err(|e| format!("could not build the HTTP client: {e}"))
        })
        .as_ref()
        .map_err(|e| StepError::fatal(e.clone()))
}

impl WorkflowContext {
    /// Makes an HTTP request as a durable step; see [`crate::fetch`]. The step is named
    /// `fetch METHOD URL`, so the URL must be deterministic like any step name.
    pub fn fetch(&self, url: &str, request: FetchRequest) -> CommandFuture<FetchResponse> {
        let name = format!("fetch {} {url}", request.method);
        let options = ActivityOptions::new()
            .retry(
                request
                    .retry
                    .clone()
                    .unwrap_or_else(crate::retry::retry_patterns::network),
            )
            .timeout(request.timeout.unwrap_or(DEFAULT_TIMEOUT));
        let url = url.to_owned();
        self.step_with(name, options, move |_step| {
            let (url, request) = (url.clone(), request.clone());
            async move { send(&url, &request).await }
        })
    }
}

/// Sends one attempt.
async fn send(url: &str, request: &FetchRequest) -> Result<FetchResponse, StepError> {
    let method = reqwest::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| StepError::fatal(format!("'{}' is not an HTTP method", request.method)))?;
    let mut builder = client()?.request(method, url);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    if let Some(body) = &request.body {
        builder = builder.body(body.clone());
    }
    let response = match builder.send().await {
        Ok(response) => response,
        Err(e) if e.is_builder() => {
            return Err(StepError::fatal(format!("cannot fetch {url}: {e}")));
        }
        Err(e) => {
            return Err(RetryableError::new(format!("fetch {url} failed: {e}"))
                .with_code("NETWORK")
                .into())
        }
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in response.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| RetryableError::new(format!("reading the body from {url} failed: {e}")))?;
    if status == 429 || status >= 500 {
        let error = RetryableError::new(format!("{url} answered {status}"))
            .with_code(format!("HTTP_{status}"));
        return Err(match retry_after {
            Some(delay) => error.with_retry_after(delay).into(),
            None => error.into(),
        });
    }
    Ok(FetchResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
