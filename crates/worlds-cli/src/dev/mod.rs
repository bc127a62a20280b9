//! `worlds dev`: run the bundled demo workflows on a durable world and show their progress.
//!
//! A session opens a world on the directory, registers [`Demo`]'s definitions, notes the runs
//! the directory holds in flight (the world resumes them when it starts), starts new runs a
//! little apart, and redraws the [`Tally`](tally::Tally) of all those runs until every one has finished — or
//! until Ctrl-C, which shuts the world down gracefully and leaves the unfinished runs for the
//! next session.
//!
//! Progress goes to stderr; the closing summary to stdout.

mod dashboard;
mod display;
mod report;
mod tally;
mod tracker;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tokio::sync::{mpsc, watch};
use worlds_demo::{Demo, DemoOptions, DemoRun};
use worlds_engine::duration::Dur;
use worlds_engine::{Persistence, World, WorldConfig, WorldError};

use self::display::Display;
use self::tracker::Tracker;
use crate::cli::DevArgs;

/// New runs started when `--runs` is not given and nothing is in flight.
const DEFAULT_RUNS: usize = 20;
/// Each durable pause of a demo workflow, at speed 1.
const PAUSE: Duration = Duration::from_secs(3);
/// How long each demo step works, at speed 1.
const WORK: Duration = Duration::from_millis(300);
/// The gap between two new runs, at speed 1.
const START_EVERY: Duration = Duration::from_millis(250);
/// How often the runs are counted and the display redrawn.
const TICK: Duration = Duration::from_millis(100);
/// Workers kept running: enough that the steps of the default runs seldom wait for one.
const MIN_WORKERS: usize = 8;
/// Most workers the pool grows to.
const MAX_WORKERS: usize = 16;
/// How long Ctrl-C waits for the steps in progress (each takes [`WORK`]).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs `worlds dev`.
pub(crate) fn run(args: &DevArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the tokio runtime")?;
    let result = runtime.block_on(session(args));
    // Dropping the runtime drops the world's last tasks and so its store; hybrid storage then
    // compacts its write-ahead log into the run logs that `worlds runs …` reads.
    drop(runtime);
    result
}

/// How a session's loop ended.
enum Outcome {
    /// Every run finished.
    Finished,
    /// Ctrl-C.
    Interrupted,
    /// A new run could not be started.
    Failed(anyhow::Error),
}

/// One `worlds dev`, inside the runtime.
async fn session(args: &DevArgs) -> anyhow::Result<()> {
    // Listen for Ctrl-C and SIGTERM before anything else, so from here on neither is lost,
    // even while the world is starting, and SIGTERM stops it as gracefully as Ctrl-C.
    let mut interrupt =
        crate::signals::Stop::listen().context("could not listen for Ctrl-C and SIGTERM")?;

    let chosen = args.persistence();
    let persistence = Persistence::from(chosen);
    let demo = Demo::new(&demo_options(args.speed));
    let world = Arc::new(
        crate::target::open_world(chosen.into(), &args.dir, &args.database, world_config(args))
            .await?,
    );
    // Log files for `worlds logs`; the console belongs to the live display.
    world.logs().init();
    demo.register(&world)?;
    let mut tracker = Tracker::new(&world).await?;
    tracker.to_start = args.runs.unwrap_or(if tracker.resumed == 0 {
        DEFAULT_RUNS
    } else {
        0
    });
    report::announce(args, persistence, &demo, &tracker);
    if tracker.resumed == 0 && tracker.to_start == 0 {
        println!("nothing to do: no runs in flight and --runs 0");
        return Ok(());
    }

    world.start().await?;
    let dashboard = match dashboard::Dashboard::start(&world, &args.dashboard).await {
        Ok(dashboard) => dashboard,
        Err(e) => {
            eprintln!("no dashboard: {e:#}");
            None
        }
    };
    if let Some(dashboard) = &dashboard {
        eprintln!(
            "dashboard: {} (sign in with {}; it works for a day)",
            dashboard.url(),
            dashboard.key
        );
    }
    let began = Instant::now();
    let (stop, stopped) = watch::channel(false);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let starter = tokio::spawn(start_runs(
        world.clone(),
        demo,
        tracker.to_start,
        START_EVERY.div_f64(args.speed),
        stopped,
        started_tx,
    ));

    let mut display = Display::new(std::io::stderr().is_terminal());
    let mut tick = tokio::time::interval(TICK);
    let outcome = loop {
        tokio::select! {
            _ = interrupt.recv() => break Outcome::Interrupted,
            _ = tick.tick() => {
                if let Err(e) = tracker.receive(&mut started) {
                    break Outcome::Failed(e.into());
                }
                let tally = tracker.tally(&world).await?;
                display.update(&tally);
                if tally.is_done() {
                    break Outcome::Finished;
                }
            }
        }
    };

    match outcome {
        Outcome::Interrupted => display.freeze(),
        _ => display.finish(),
    }
    // No new runs from here on; the one being started, if any, is let finish.
    let _ = stop.send(true);
    let _ = starter.await;
    let late = tracker.receive(&mut started);
    match outcome {
        Outcome::Finished => {
            // In a terminal the dashboard stays up to look at the finished runs.
            if let Some(dashboard) = dashboard {
                if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                    let tally = tracker.tally(&world).await?;
                    report::summary(args, persistence, &tally, &tracker, began.elapsed());
                    eprintln!(
                        "every run finished; the dashboard stays at {} until Ctrl-C",
                        dashboard.url()
                    );
                    interrupt.recv().await;
                    dashboard.server.shutdown().await;
                    world.shutdown().await?;
                    return Ok(());
                }
                dashboard.server.shutdown().await;
            }
            world.shutdown().await?;
            let tally = tracker.tally(&world).await?;
            report::summary(args, persistence, &tally, &tracker, began.elapsed());
            Ok(())
        }
        Outcome::Interrupted => {
            eprintln!("stopping: no new runs; waiting for the steps in progress to finish…");
            tokio::select! {
                stopped = world.shutdown() => stopped?,
                _ = interrupt.recv() => bail!(
                    "interrupted again: stopped without waiting for the steps in progress \
                     (they are retried when `{}` resumes their runs)",
                    report::resume_command(args)
                ),
            }
            late?;
            let tally = tracker.tally(&world).await?;
            report::stopped(args, persistence, &tally, began.elapsed());
            Ok(())
        }
        Outcome::Failed(error) => {
            world.shutdown().await?;
            Err(error)
        }
    }
}

/// The demo's pacing at `speed`: every duration divided by it.
fn demo_options(speed: f64) -> DemoOptions {
    DemoOptions::new()
        .pause(PAUSE.div_f64(speed))
        .work(WORK.div_f64(speed))
}

/// The world of a session: the chosen storage in the chosen directory, with workers for many
/// concurrent steps and a short shutdown grace.
fn world_config(args: &DevArgs) -> WorldConfig {
    let mut config = WorldConfig::default();
    config.persistence = args.persistence().into();
    config.persistence_path = args.dir.clone();
    config.min_workers = MIN_WORKERS;
    config.max_workers = MAX_WORKERS;
    config.shutdown_grace = Dur(SHUTDOWN_GRACE);
    config.logs.console = false;
    config
}

/// Starts `count` demo runs, `every` apart, until told to stop; reports each on `started` and
/// gives up at the first that cannot be started.
async fn start_runs(
    world: Arc<World>,
    demo: Demo,
    count: usize,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    started: mpsc::UnboundedSender<Result<DemoRun, WorldError>>,
) {
    for n in 0..count {
        if n > 0 {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
        }
        if *stop.borrow() {
            return;
        }
        let run = demo.start(&world, n).await;
        let failed = run.is_err();
        if started.send(run).is_err() || failed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_divides_every_duration() {
        let options = demo_options(10.0);
        assert_eq!(options.pause, Duration::from_millis(300));
        assert_eq!(options.work, Duration::from_millis(30));
        assert!(!options.narrate);
    }
}
