//! D1, the dashboard with a full store: N runs (1 000 000 by default) that finished, plus one
//! run of K steps (3 334 by default, about 10 000 events); then the time the dashboard takes to
//! answer its runs page and that run's page, over loopback HTTP with a signed-in session
//! (median of a few requests each). Not a contract workload: the dashboard's own targets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use worlds_engine::model::keys::Scope;
use worlds_engine::prelude::*;
use worlds_engine::ResolveData;
use worlds_server::auth::KeyRing;
use worlds_server::ApiOptions;

use super::{progress, start_world, Report, Settings};

/// Default number of finished runs in the store.
const N: usize = 1_000_000;
/// Default steps of the long run: three events each, about 10 000 in all.
const K: usize = 3_334;
/// Starts in flight at once.
const IN_FLIGHT: usize = 1024;
/// Requests timed per page.
const SAMPLES: usize = 7;

/// Runs D1.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let n = settings.n.unwrap_or(N);
    let k = settings.k.unwrap_or(K);
    progress(&format!(
        "D1: {n} finished runs and one of {k} steps, then the dashboard's pages"
    ));
    let step = activity("d1-step", |_ctx: ActivityContext, i: u64| async move {
        Ok::<_, StepError>(i + 1)
    });
    let short = workflow("d1-short", |_ctx: WorkflowContext, i: u64| async move {
        Ok::<_, WorkflowError>(i)
    });
    let long = {
        let step = step.clone();
        workflow("d1-long", move |ctx: WorkflowContext, k: u64| {
            let step = step.clone();
            async move {
                let mut x = 0;
                for _ in 0..k {
                    x = ctx.run(&step, x).await?;
                }
                Ok::<_, WorkflowError>(x)
            }
        })
    };
    let world = Arc::new(
        start_world(
            settings,
            0,
            vec![(&step).into(), (&short).into(), (&long).into()],
        )
        .await?,
    );
    let filled = Instant::now();
    // Each run awaited to its end: the pages are timed on a store at rest, not while a
    // backlog of runs is still being worked off.
    futures::stream::iter(0..n as u64)
        .map(|i| {
            let world = &world;
            let short = &short;
            async move {
                let handle = world.execute(short, i, WorkflowOptions::default()).await?;
                handle.result().await.map(|_| ())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|()| async { Ok(()) })
        .await?;
    let big = world
        .execute(&long, k as u64, WorkflowOptions::default())
        .await?;
    big.result().await?;
    progress(&format!(
        "D1: store filled in {:.1} s",
        filled.elapsed().as_secs_f64()
    ));

    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("d1", Scope::Read, world.clock().now_ms(), None)
        .key;
    let server =
        worlds_server::serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys)).await?;
    let base = format!("http://{}", server.local_addr());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let login = http
        .post(format!("{base}/login"))
        // Signing in is refused unless it comes from the dashboard's own page.
        .header("origin", &base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("key={key}"))
        .send()
        .await?;
    let cookie = login
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("signing in to the dashboard gave no session")?
        .to_owned();
    let time = |path: String| {
        let http = http.clone();
        let cookie = cookie.clone();
        async move {
            let mut times = Vec::with_capacity(SAMPLES);
            for _ in 0..SAMPLES {
                let began = Instant::now();
                let page = http.get(&path).header("cookie", &cookie).send().await?;
                anyhow::ensure!(page.status().is_success(), "{path}: {}", page.status());
                page.bytes().await?;
                times.push(began.elapsed());
            }
            times.sort();
            Ok::<Duration, anyhow::Error>(times[SAMPLES / 2])
        }
    };
    let runs_page = time(format!("{base}/")).await?;
    let run_page = time(format!("{base}/runs/{}", big.id)).await?;
    let events = world.get_run(&big.id, ResolveData::None).await?.event_count;
    server.shutdown().await;
    let world = Arc::try_unwrap(world)
        .map_err(|_| anyhow::anyhow!("the benchmark world is still shared"))?;
    super::stop_world(world).await?;

    let mut report = Report::new(settings.backend.name(), "D1", n, k, 0.0);
    report.steps_per_s = None;
    report.workflows_per_s = None;
    report.p50_ms = Some(super::report::round(runs_page.as_secs_f64() * 1000.0, 3));
    report.notes = format!(
        "runs page (/): {:.1} ms; page of the run of {events} events: {:.1} ms (medians of {SAMPLES} requests over loopback, signed in); {n} runs in the store",
        runs_page.as_secs_f64() * 1000.0,
        run_page.as_secs_f64() * 1000.0,
    );
    Ok(report)
}
