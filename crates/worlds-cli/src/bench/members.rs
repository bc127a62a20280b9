//! W1 with several member processes on one PostgreSQL schema (`--members M`): the contract's
//! row "members in M processes". This process starts M − 1 others (`worlds bench` again, with
//! the hidden `--member-of`), each opening a world on the same schema; at an agreed moment every
//! process starts its share of the N workflows (so each drives the runs it started, as each
//! application process would) and reports when its last result arrived. The wall time is from
//! that moment to the last result of any process.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use tokio::io::AsyncReadExt;
use worlds_engine::prelude::*;

use super::{chain, check, progress, start_world, step, Report, Settings};

/// How long before the agreed start the other processes are launched: time to open their worlds.
const LEAD: Duration = Duration::from_secs(3);

/// Wall-clock milliseconds since the Unix epoch (the processes share the machine's clock).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Sleeps until wall-clock `at_ms`.
async fn until(at_ms: i64) {
    let wait = at_ms.saturating_sub(now_ms());
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// One process's share: a world on the schema, `n` workflows of `k` steps started at `start_ms`;
/// returns when the last result arrived (wall-clock ms).
async fn share(settings: &Settings, n: usize, k: usize, start_ms: i64) -> anyhow::Result<i64> {
    let step = step();
    let flow = chain("w1", &step);
    let world = start_world(settings, n, vec![(&step).into(), (&flow).into()]).await?;
    until(start_ms).await;
    let starts = (0..n).map(|_| world.execute(&flow, k as u64, WorkflowOptions::default()));
    let handles = futures::future::try_join_all(starts).await?;
    for handle in handles {
        check(handle.result().await?, k as u64)?;
    }
    let end = now_ms();
    super::stop_world(world).await?;
    Ok(end)
}

/// The process started by [`run`]: runs its share and prints when it ended.
pub(crate) async fn member(settings: &Settings, start_ms: i64) -> anyhow::Result<()> {
    let (n, k) = (
        settings.n.unwrap_or(super::w1::N),
        settings.k.unwrap_or(super::w1::K),
    );
    let end = share(settings, n, k, start_ms).await?;
    println!("{end}");
    Ok(())
}

/// W1 over `members` processes on the schema `settings` names.
pub(crate) async fn run(settings: &Settings, members: usize) -> anyhow::Result<Report> {
    let (n, k) = (
        settings.n.unwrap_or(super::w1::N),
        settings.k.unwrap_or(super::w1::K),
    );
    let schema = settings
        .schema
        .clone()
        .context("a members run needs its schema")?;
    let per = n / members;
    let mine = n - per * (members - 1);
    progress(&format!(
        "W1: {n} workflows x {k} steps over {members} member processes, {} workers each",
        settings.workers
    ));
    let start_ms = now_ms() + LEAD.as_millis() as i64;
    let exe = std::env::current_exe().context("could not find the worlds executable")?;
    let mut children = Vec::new();
    for _ in 1..members {
        let child = tokio::process::Command::new(&exe)
            .args(["bench", "--workload", "w1", "--backend", "postgres"])
            .args(["--n", &per.to_string(), "--k", &k.to_string()])
            .args(["--workers", &settings.workers.to_string()])
            .args(["--database-url", &settings.database_url])
            .args(["--member-of", &schema, "--start-at", &start_ms.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("could not start a member process")?;
        children.push(child);
    }
    let mut ends = vec![share(settings, mine, k, start_ms).await?];
    for mut child in children {
        let mut out = String::new();
        if let Some(stdout) = child.stdout.as_mut() {
            stdout.read_to_string(&mut out).await?;
        }
        let status = child.wait().await?;
        if !status.success() {
            bail!("a member process failed ({status})");
        }
        ends.push(
            out.trim()
                .parse()
                .with_context(|| format!("a member process printed {out:?}"))?,
        );
    }
    let end = ends.into_iter().max().unwrap_or(start_ms);
    let wall = Duration::from_millis(u64::try_from(end - start_ms).unwrap_or(0));
    let mut report = Report::new(settings.backend.name(), "W1", n, k, wall.as_secs_f64());
    report.notes = format!(
        "{members} member processes on one schema, each starting its share of the runs ({mine} here, {per} in each other) at one moment; {} workers each",
        settings.workers
    );
    Ok(report)
}
