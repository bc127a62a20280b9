//! A running world's HTTP API (`--server URL --api-key KEY`: `worlds serve`, or a program
//! serving `worlds-server`), called through `worlds-client`. It works while a hybrid world owns
//! its directory, and the serving program checks what only it can (a reopened run's replay).

use anyhow::bail;
use clap::Args;
use worlds_client::{Client, ClientError, RunFilter};
use worlds_engine::hooks::HookResumed;
use worlds_engine::model::{ResolveData, SortOrder};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::WorkflowState;

use super::{runtime, RunQuery, ScheduleAction, Shown};

/// A running world's HTTP API (`worlds serve`, or a program serving `worlds-server`): with
/// `--server` the command calls it instead of opening the directory or the database, so it
/// works while a hybrid world owns its directory.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ServerArgs {
    /// Call the world's API at this URL (http://host:port) instead of opening --dir.
    #[arg(long, env = "WORLDS_SERVER_URL", value_name = "URL")]
    pub(crate) server: Option<String>,

    /// The API key for --server.
    #[arg(
        long,
        env = "WORLDS_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub(crate) api_key: Option<String>,
}

/// Runs per page asked of the server.
const PAGE: usize = 500;

/// The client of `--server`, if one was given.
pub(crate) fn client(args: &ServerArgs) -> anyhow::Result<Option<Client>> {
    let Some(url) = args.server.as_deref().filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    let Some(key) = args.api_key.as_deref().filter(|k| !k.trim().is_empty()) else {
        bail!("--server needs an API key: give --api-key or set WORLDS_API_KEY (`worlds keys create` makes one)");
    };
    Ok(Some(Client::new(url, key.trim())?))
}

/// A server's refusal, said plainly.
fn explained(error: ClientError) -> anyhow::Error {
    match error.code() {
        Some("UNAUTHENTICATED") => {
            anyhow::anyhow!(
                "{error}\n(check --api-key / WORLDS_API_KEY: `worlds keys list` shows the keys)"
            )
        }
        Some("FORBIDDEN") => anyhow::anyhow!("{error}\n(use a key with a wider scope)"),
        _ => anyhow::Error::new(error),
    }
}

/// `worlds runs list --server`: up to `--limit` runs, newest first.
pub(crate) fn list_runs(
    client: &Client,
    query: &RunQuery,
) -> anyhow::Result<(Vec<WorkflowState>, bool)> {
    let statuses: Vec<String> = query.statuses.iter().map(|s| s.to_string()).collect();
    let mut filter = RunFilter {
        status: (!statuses.is_empty()).then(|| statuses.join(",")),
        workflow: query.name.clone(),
        code_version: query.code_version.clone(),
        resolve: Some(query.resolve_data()),
        order: query.oldest_first.then_some(SortOrder::Ascending),
        ..RunFilter::default()
    };
    runtime()?.block_on(async {
        let mut runs = Vec::new();
        loop {
            filter.limit = Some(PAGE.min(query.limit - runs.len()));
            let page = client.list_runs(&filter).await.map_err(explained)?;
            runs.extend(page.data);
            if !page.has_more {
                return Ok((runs, false));
            }
            if runs.len() >= query.limit {
                return Ok((runs, true));
            }
            filter.cursor = page.cursor;
        }
    })
}

/// `worlds runs show --server`.
pub(crate) fn show_run(client: &Client, id: &str) -> anyhow::Result<Shown> {
    runtime()?.block_on(async {
        let state = client
            .get_run(id, ResolveData::All)
            .await
            .map_err(explained)?;
        let mut history = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = client
                .events(&state.id, cursor.as_deref(), PAGE)
                .await
                .map_err(explained)?;
            history.extend(page.data);
            match page.cursor {
                Some(next) if page.has_more => cursor = Some(next),
                _ => break,
            }
        }
        let mut children = Vec::new();
        for child in &state.children {
            if let Ok(run) = client.get_run(child, ResolveData::None).await {
                children.push((run.id, run.status));
            }
        }
        Ok(Shown {
            state,
            history,
            children,
            driver: None,
            pauses: client.pauses().await.map_err(explained)?,
        })
    })
}

/// `worlds pauses --server`.
pub(crate) fn pauses(client: &Client) -> anyhow::Result<Vec<worlds_engine::model::Pause>> {
    runtime()?.block_on(client.pauses()).map_err(explained)
}

/// `worlds pause --server`.
pub(crate) fn pause(
    client: &Client,
    target: &worlds_engine::model::PauseTarget,
    reason: &str,
) -> anyhow::Result<worlds_engine::model::Pause> {
    runtime()?
        .block_on(client.pause(target, reason))
        .map_err(explained)
}

/// `worlds resume --server`: the pause lifted, `None` if there was none.
pub(crate) fn resume(
    client: &Client,
    target: &worlds_engine::model::PauseTarget,
) -> anyhow::Result<Option<worlds_engine::model::Pause>> {
    match runtime()?.block_on(client.resume(target)) {
        Ok(pause) => Ok(Some(pause)),
        Err(e) if e.code() == Some("NOT_FOUND") => Ok(None),
        Err(e) => Err(explained(e)),
    }
}

/// `worlds schedules list --server`.
pub(crate) fn schedules(client: &Client) -> anyhow::Result<Vec<ScheduleConfig>> {
    runtime()?.block_on(client.schedules()).map_err(explained)
}

/// `worlds schedules pause|resume|delete --server`: the schedule after the change, `None`
/// once deleted.
pub(crate) fn change_schedule(
    client: &Client,
    id: &str,
    action: ScheduleAction,
) -> anyhow::Result<Option<ScheduleConfig>> {
    runtime()?
        .block_on(async {
            match action {
                ScheduleAction::Pause => client.pause_schedule(id, true).await.map(Some),
                ScheduleAction::Resume => client.pause_schedule(id, false).await.map(Some),
                ScheduleAction::Delete => client.delete_schedule(id).await.map(|()| None),
            }
        })
        .map_err(explained)
}

/// `worlds runs cancel --server`.
pub(crate) fn cancel(client: &Client, id: &str, reason: &str) -> anyhow::Result<WorkflowState> {
    runtime()?
        .block_on(client.cancel(id, Some(reason)))
        .map_err(explained)
}

/// `worlds runs retry|reset|resume --server`.
pub(crate) fn reopen(
    client: &Client,
    id: &str,
    request: &worlds_engine::model::ReopenRequest,
) -> anyhow::Result<worlds_engine::model::Reopened> {
    runtime()?
        .block_on(client.reopen(id, request))
        .map_err(explained)
}

/// `worlds runs bulk --server`: submits the operation and follows it to its end.
pub(crate) fn bulk(
    client: &Client,
    request: &worlds_engine::BulkRequest,
) -> anyhow::Result<worlds_engine::BulkProgress> {
    runtime()?.block_on(async {
        let mut progress = client.bulk(request).await.map_err(explained)?;
        while !progress.done {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            progress = client
                .bulk_progress(&progress.id)
                .await
                .map_err(explained)?;
        }
        Ok(progress)
    })
}

/// `worlds runs prune --server`: starts a sweep (or asks for the preview) and follows it to
/// its end.
pub(crate) fn prune(client: &Client, dry_run: bool) -> anyhow::Result<worlds_engine::PruneReport> {
    runtime()?.block_on(async {
        let mut report = client.prune(dry_run).await.map_err(explained)?;
        while !report.done {
            let Some(id) = report.id.clone() else { break };
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            report = client.prune_report(&id).await.map_err(explained)?;
        }
        Ok(report)
    })
}

/// `worlds hooks resume --server`.
pub(crate) fn resume_hook(
    client: &Client,
    token: &str,
    payload: &serde_json::Value,
) -> anyhow::Result<HookResumed> {
    runtime()?
        .block_on(client.resume_hook(token, payload))
        .map_err(explained)
}
