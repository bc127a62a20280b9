//! A client for the HTTP API of a worlds-engine world (`worlds-server`, `worlds serve`): start
//! runs by workflow name, read and list them, wait for results, cancel them, resume hooks,
//! manage schedules — from any program that can reach the server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), worlds_client::ClientError> {
//! use worlds_client::{Client, RunFilter};
//! let client = Client::new("http://127.0.0.1:8080", std::env::var("WORLDS_API_KEY").unwrap())?;
//! let run = client.start("checkout", &serde_json::json!({ "order": "A-1" }), Default::default()).await?;
//! let outcome = client.result(&run.run_id, std::time::Duration::from_secs(30)).await?;
//! println!("{:?}: {:?}", outcome.status, outcome.output);
//! let failed = client.list_runs(&RunFilter { status: Some("failed".into()), ..Default::default() }).await?;
//! # Ok(()) }
//! ```
//!
//! Errors come back as [`ClientError::Api`] with the server's [`ErrorBody`] (its stable
//! `code`, a message saying what to do) and status; [`ClientError::kind`] maps the code to the
//! engine's [`ErrorKind`], so a program handles a remote error as it would a local one.
//!
//! The bodies sent and read ([`Started`], [`Outcome`], [`RunFilter`], [`ErrorBody`]…) are the
//! `worlds-wire` types the server itself reads and writes, so the two agree by construction.

#![forbid(unsafe_code)]

use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use worlds_engine::hooks::HookResumed;
use worlds_engine::model::{Page, ReopenRequest, Reopened, ResolveData};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::{
    BulkProgress, BulkRequest, ErrorKind, Event, PruneReport, RetentionStatus, WorkflowOptions,
    WorkflowState,
};
use worlds_wire::{
    Bulk, Cancel, PageBody, PageParams, Prune, Reopen, Reset, Resolve, Resume, Resumed, StartRun,
    Wait,
};

pub use worlds_wire::{ErrorBody, Outcome, RunFilter, Started};

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{} ({}): {}", .body.code, .status, .body.message)]
    Api {
        /// The HTTP status.
        status: u16,
        /// The server's answer.
        body: ErrorBody,
    },
    /// The server could not be reached, or the connection failed.
    #[error("could not reach the worlds-engine server: {0}")]
    Transport(#[from] reqwest::Error),
    /// The server's answer was not what this client expected (a different server, or version).
    #[error("the server's answer could not be read: {0}")]
    Unexpected(String),
    /// The client was given something it cannot use (a malformed URL).
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    /// The engine's kind of error, for an error answer whose code is one (`NOT_FOUND`,
    /// `CONFLICT`, …); `Unavailable` when the server could not be reached.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ClientError::Api { body, .. } => ErrorKind::from_code(&body.code),
            ClientError::Transport(_) => Some(ErrorKind::Unavailable),
            _ => None,
        }
    }

    /// The code of an error answer (`UNAUTHENTICATED`, `FORBIDDEN`, `NOT_FOUND`, …).
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { body, .. } => Some(&body.code),
            _ => None,
        }
    }
}

/// A client of one server, with one API key. Cheap to clone (clones share connections).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    /// A client of the server at `base_url` (`http://host:port`, or `https://…`) calling with
    /// `api_key`.
    pub fn new(base_url: &str, api_key: impl Into<String>) -> Result<Self, ClientError> {
        let base = base_url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::Invalid(format!(
                "'{base_url}' is not a server URL: give http://host:port or https://host"
            )));
        }
        // The TLS provider of this build; a program that installed one keeps its own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .build()
            .map_err(ClientError::Transport)?;
        Ok(Client {
            http,
            base,
            key: api_key.into(),
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
    }

    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, ClientError> {
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| ClientError::Unexpected(e.to_string()));
        }
        Err(Self::refusal(status, &bytes))
    }

    /// The error of an answer that is not a success.
    fn refusal(status: StatusCode, bytes: &[u8]) -> ClientError {
        let body = serde_json::from_slice::<ErrorBody>(bytes).unwrap_or_else(|_| ErrorBody {
            code: "UNEXPECTED".into(),
            message: String::from_utf8_lossy(bytes).into_owned(),
            details: Value::Null,
        });
        ClientError::Api {
            status: status.as_u16(),
            body,
        }
    }

    /// Starts a run of the workflow registered as `workflow`.
    pub async fn start(
        &self,
        workflow: &str,
        input: &impl Serialize,
        options: WorkflowOptions,
    ) -> Result<Started, ClientError> {
        let body = start_run(workflow, input, options)?;
        self.call(self.request(Method::POST, "/v1/runs").json(&body))
            .await
    }

    /// Starts a run and waits up to `wait` for it to finish, in one call: the outcome, done or
    /// not (its `run_id` names the run either way).
    pub async fn start_and_wait(
        &self,
        workflow: &str,
        input: &impl Serialize,
        options: WorkflowOptions,
        wait: Duration,
    ) -> Result<Outcome, ClientError> {
        let body = start_run(workflow, input, options)?;
        let request = self
            .request(Method::POST, "/v1/runs")
            .query(&wait_of(wait))
            .json(&body);
        self.outcome(request).await
    }

    /// The answer of a call that waits for an outcome: 200 (done) and 202 (not yet) both carry
    /// one.
    async fn outcome(&self, request: RequestBuilder) -> Result<Outcome, ClientError> {
        let response = request.send().await?;
        let status = response.status();
        if status == StatusCode::OK || status == StatusCode::ACCEPTED {
            return response
                .json()
                .await
                .map_err(|e| ClientError::Unexpected(e.to_string()));
        }
        Err(Self::refusal(status, &response.bytes().await?))
    }

    /// A run (by run id or workflow id).
    pub async fn get_run(
        &self,
        id: &str,
        resolve: ResolveData,
    ) -> Result<WorkflowState, ClientError> {
        self.call(
            self.request(Method::GET, &format!("/v1/runs/{}", segment(id)))
                .query(&Resolve {
                    resolve: Some(resolve),
                }),
        )
        .await
    }

    /// One page of runs, newest first.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Page<WorkflowState>, ClientError> {
        let page: PageBody<WorkflowState> = self
            .call(self.request(Method::GET, "/v1/runs").query(filter))
            .await?;
        Ok(page.into())
    }

    /// Waits up to `wait` (at most 5 minutes per call) for the run to finish.
    pub async fn result(&self, id: &str, wait: Duration) -> Result<Outcome, ClientError> {
        let request = self
            .request(Method::GET, &format!("/v1/runs/{}/result", segment(id)))
            .query(&wait_of(wait));
        self.outcome(request).await
    }

    /// Cancels a run (and its unfinished children); returns it as it is then.
    pub async fn cancel(
        &self,
        id: &str,
        reason: Option<&str>,
    ) -> Result<WorkflowState, ClientError> {
        self.call(
            self.request(Method::POST, &format!("/v1/runs/{}/cancel", segment(id)))
                .json(&Cancel {
                    reason: reason.map(str::to_owned),
                }),
        )
        .await
    }

    /// Reopens a failed or quarantined run (`POST /v1/runs/{id}/retry`, `/reset` or
    /// `/resume`, as `request.action` says; `request.by` is ignored: the server records the
    /// caller's key). See `World::reopen` for what each keeps.
    pub async fn reopen(&self, id: &str, request: &ReopenRequest) -> Result<Reopened, ClientError> {
        let path = format!("/v1/runs/{}/{}", segment(id), request.action.as_str());
        let reason = request.reason.clone();
        let call = self.request(Method::POST, &path);
        let call = match request.position {
            Some(position) => call.json(&Reset { position, reason }),
            None => call.json(&Reopen { reason }),
        };
        self.call(call).await
    }

    /// Starts a bulk operation (`POST /v1/bulk`) and answers its progress so far; follow it
    /// with [`bulk_progress`](Self::bulk_progress). `request.by` is ignored: the server
    /// records the caller's key.
    pub async fn bulk(&self, request: &BulkRequest) -> Result<BulkProgress, ClientError> {
        let body = Bulk {
            action: request.action,
            filter: request.filter.clone(),
            reason: request.reason.clone(),
            name: request.name.clone(),
        };
        self.call(self.request(Method::POST, "/v1/bulk").json(&body))
            .await
    }

    /// How far bulk operation `id` got (`GET /v1/bulk/{id}`).
    pub async fn bulk_progress(&self, id: &str) -> Result<BulkProgress, ClientError> {
        self.call(self.request(Method::GET, &format!("/v1/bulk/{}", segment(id))))
            .await
    }

    /// Starts a retention sweep (`POST /v1/prune`, admin scope) and answers its report so far;
    /// with `dry_run`, answers what a sweep would remove and removes nothing.
    pub async fn prune(&self, dry_run: bool) -> Result<PruneReport, ClientError> {
        self.call(
            self.request(Method::POST, "/v1/prune")
                .json(&Prune { dry_run }),
        )
        .await
    }

    /// What retention sweep `id` did so far (`GET /v1/prune/{id}`).
    pub async fn prune_report(&self, id: &str) -> Result<PruneReport, ClientError> {
        self.call(self.request(Method::GET, &format!("/v1/prune/{}", segment(id))))
            .await
    }

    /// The world's retention policy, next sweep and last sweep (`GET /v1/retention`).
    pub async fn retention(&self) -> Result<RetentionStatus, ClientError> {
        self.call(self.request(Method::GET, "/v1/retention")).await
    }

    /// One page of a run's history, oldest first, from `cursor`.
    pub async fn events(
        &self,
        id: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Event>, ClientError> {
        let query = PageParams {
            cursor: cursor.map(str::to_owned),
            limit: Some(limit),
            ..PageParams::default()
        };
        let page: PageBody<Event> = self
            .call(
                self.request(Method::GET, &format!("/v1/runs/{}/events", segment(id)))
                    .query(&query),
            )
            .await?;
        Ok(page.into())
    }

    /// Resumes the hook waiting with `token`.
    pub async fn resume_hook(
        &self,
        token: &str,
        payload: &impl Serialize,
    ) -> Result<HookResumed, ClientError> {
        let body = Resume {
            token: token.to_owned(),
            payload: json_of("payload", payload)?,
        };
        let resumed: Resumed = self
            .call(self.request(Method::POST, "/v1/hooks/resume").json(&body))
            .await?;
        Ok(resumed.into())
    }

    /// Every schedule.
    pub async fn schedules(&self) -> Result<Vec<ScheduleConfig>, ClientError> {
        self.call(self.request(Method::GET, "/v1/schedules")).await
    }

    /// Pauses (`true`) or resumes a schedule; needs an admin key.
    pub async fn pause_schedule(
        &self,
        id: &str,
        pause: bool,
    ) -> Result<ScheduleConfig, ClientError> {
        let action = if pause { "pause" } else { "resume" };
        self.call(self.request(
            Method::POST,
            &format!("/v1/schedules/{}/{action}", segment(id)),
        ))
        .await
    }

    /// The workflows and task queues paused, with who paused them, why and since when.
    pub async fn pauses(&self) -> Result<Vec<worlds_engine::model::Pause>, ClientError> {
        self.call(self.request(Method::GET, "/v1/pauses")).await
    }

    /// Pauses a workflow or a task queue (its runs and steps not started are held until it
    /// is resumed), for `reason`; needs an admin key. The world records the key as who paused
    /// it.
    pub async fn pause(
        &self,
        target: &worlds_engine::model::PauseTarget,
        reason: &str,
    ) -> Result<worlds_engine::model::Pause, ClientError> {
        self.call(
            self.request(
                Method::PUT,
                &format!("/v1/pauses/{}/{}", target.kind(), segment(target.name())),
            )
            .json(&serde_json::json!({ "reason": reason })),
        )
        .await
    }

    /// Lifts the pause on a workflow or a task queue; needs an admin key. Fails with a 404
    /// if it was not paused.
    pub async fn resume(
        &self,
        target: &worlds_engine::model::PauseTarget,
    ) -> Result<worlds_engine::model::Pause, ClientError> {
        self.call(self.request(
            Method::DELETE,
            &format!("/v1/pauses/{}/{}", target.kind(), segment(target.name())),
        ))
        .await
    }

    /// Deletes a schedule (runs it started go on); needs an admin key.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), ClientError> {
        let response = self
            .request(Method::DELETE, &format!("/v1/schedules/{}", segment(id)))
            .send()
            .await?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(Self::refusal(status, &response.bytes().await?))
    }
}

/// The body of a start.
fn start_run(
    workflow: &str,
    input: &impl Serialize,
    options: WorkflowOptions,
) -> Result<StartRun, ClientError> {
    Ok(StartRun {
        workflow: workflow.to_owned(),
        input: json_of("input", input)?,
        options,
    })
}

/// `value` as JSON; `what` names it when it cannot be (a map with keys that are not text).
fn json_of(what: &str, value: &impl Serialize) -> Result<Value, ClientError> {
    serde_json::to_value(value)
        .map_err(|e| ClientError::Invalid(format!("the {what} cannot be written as JSON: {e}")))
}

/// `?wait_ms=` of a wait of `wait`.
fn wait_of(wait: Duration) -> Wait {
    Wait {
        wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// `id` as one path segment: characters that would end or escape it are percent-encoded.
fn segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_one_path_segment() {
        assert_eq!(segment("wrun_01ABC"), "wrun_01ABC");
        assert_eq!(segment("order/7?x#y"), "order%2F7%3Fx%23y");
        assert_eq!(segment("ü"), "%C3%BC");
    }

    #[test]
    fn a_url_must_name_a_server() {
        assert!(matches!(
            Client::new("localhost:8080", "k"),
            Err(ClientError::Invalid(_))
        ));
        assert!(Client::new("http://127.0.0.1:8080/", "k").is_ok());
    }
}
