//! The commands that call a running world's HTTP API (`--server URL --api-key KEY`), through
//! `worlds-client`, and `worlds hooks resume`, which also works on a directory or database.

use std::io::Write;

use anyhow::{bail, Context};
use worlds_client::{Client, ClientError, RunFilter};
use worlds_engine::model::{ResolveData, SortOrder};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::{Event, RunStatus, WorkflowState, World, WorldError};

use crate::cli::{CancelArgs, HookResumeArgs, ListArgs, ServerArgs};
use crate::escape::escaped;
use crate::inspect::Place;
use crate::postgres::runtime;

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
    args: &ListArgs,
) -> anyhow::Result<(Vec<WorkflowState>, bool)> {
    let statuses: Vec<String> = args.statuses.iter().map(|s| s.to_string()).collect();
    let mut filter = RunFilter {
        status: (!statuses.is_empty()).then(|| statuses.join(",")),
        workflow: args.name.clone(),
        code_version: args.code_version.clone(),
        resolve: Some(if args.json {
            ResolveData::All
        } else {
            ResolveData::None
        }),
        order: args.oldest_first.then_some(SortOrder::Ascending),
        ..RunFilter::default()
    };
    runtime()?.block_on(async {
        let mut runs = Vec::new();
        loop {
            filter.limit = Some(PAGE.min(args.limit - runs.len()));
            let page = client.list_runs(&filter).await.map_err(explained)?;
            runs.extend(page.data);
            if !page.has_more {
                return Ok((runs, false));
            }
            if runs.len() >= args.limit {
                return Ok((runs, true));
            }
            filter.cursor = page.cursor;
        }
    })
}

/// What `worlds runs show --server` reads: the run, its whole history, its children's status.
pub(crate) struct Shown {
    pub(crate) state: WorkflowState,
    pub(crate) history: Vec<Event>,
    pub(crate) children: Vec<(String, RunStatus)>,
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
        })
    })
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
    action: crate::schedules::Action,
) -> anyhow::Result<Option<ScheduleConfig>> {
    use crate::schedules::Action;
    runtime()?
        .block_on(async {
            match action {
                Action::Pause => client.pause_schedule(id, true).await.map(Some),
                Action::Resume => client.pause_schedule(id, false).await.map(Some),
                Action::Delete => client.delete_schedule(id).await.map(|()| None),
            }
        })
        .map_err(explained)
}

/// `worlds runs cancel --server`.
pub(crate) fn cancel(client: &Client, args: &CancelArgs) -> anyhow::Result<WorkflowState> {
    let reason = args
        .reason
        .clone()
        .unwrap_or_else(|| "cancelled with `worlds runs cancel`".to_owned());
    runtime()?
        .block_on(client.cancel(&args.id, Some(&reason)))
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

/// `worlds hooks resume TOKEN --data JSON`.
pub(crate) fn resume_hook(args: &HookResumeArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let payload: serde_json::Value = serde_json::from_str(&args.data)
        .with_context(|| format!("--data is not JSON: {}", args.data))?;
    let resumed = match client(&args.remote)? {
        Some(client) => runtime()?
            .block_on(client.resume_hook(&args.token, &payload))
            .map_err(explained)?,
        None => {
            let resume = async |world: &World| -> anyhow::Result<_> {
                world
                    .resume_hook(&args.token, &payload)
                    .await
                    .map_err(|e: WorldError| {
                        anyhow::Error::new(e).context("could not resume the hook")
                    })
            };
            match Place::of(&args.dir, &args.database) {
                Place::Dir(dir) => crate::writer::with_world(
                    &dir,
                    "resume the hook through its API (`--server URL --api-key KEY`), or from that program (World::resume_hook).",
                    resume,
                )?,
                Place::Database(db) => crate::postgres::with_world(&db, resume)?,
            }
        }
    };
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&resumed)?)?;
    } else {
        writeln!(
            out,
            "resumed hook {} of run {}",
            escaped(&resumed.hook_id),
            escaped(&resumed.run_id)
        )?;
    }
    Ok(())
}
