//! `worlds serve`: a world's HTTP API (`worlds-server`) with the demo workflows registered,
//! authenticated by the world's API keys, until Ctrl-C.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use worlds_demo::{Demo, DemoOptions};
use worlds_engine::model::keys::Scope;
use worlds_engine::WorldConfig;
use worlds_server::auth::ApiKeys;
use worlds_server::ApiOptions;

use crate::cli::{PersistenceArg, ServeArgs};

/// Prints a line on stdout; a reader that went away (the output piped into a command that
/// exited) does not stop the server.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Workers a server taking DevKit deliveries keeps at least, and may grow to.
const DEVKIT_MIN_WORKERS: usize = 8;
const DEVKIT_MAX_WORKERS: usize = 64;
/// How long a DevKit message's idempotency key finds the message it made.
const DEVKIT_IDEMPOTENCY_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// `worlds serve`.
pub(crate) fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the tokio runtime")?;
    let result = runtime.block_on(serve(args));
    drop(runtime);
    result
}

async fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    // Listened for from the start: a SIGTERM while the world opens must not end the process
    // before it drains.
    let mut stop =
        crate::signals::Stop::listen().context("could not listen for Ctrl-C and SIGTERM")?;
    let mut config = WorldConfig::default();
    config.logs.console = false;
    args.retention.apply(&mut config.retention);
    config.retention.sweep_interval = args.sweep_interval;
    config.retention.sweep_share = args.sweep_share;
    if let Some(days) = args.keep_logs {
        config.logs.max_files = Some(usize::try_from(days).unwrap_or(usize::MAX));
    }
    if args.delivery_secret.is_some() {
        // Each DevKit delivery holds a worker while the app handles it (a step of the app may
        // run for a while): room for many at once from the start, not after the autoscaler's
        // first steps.
        config.min_workers = config.min_workers.max(DEVKIT_MIN_WORKERS);
        config.max_workers = config.max_workers.max(DEVKIT_MAX_WORKERS);
        // A message queued again after a crash (its idempotency key) may come minutes later:
        // it must still find the first.
        config.idempotency_ttl = config.idempotency_ttl.max(DEVKIT_IDEMPOTENCY_TTL.into());
    }
    let world = Arc::new(
        crate::target::open_world(args.persistence().into(), &args.dir, &args.database, config)
            .await?,
    );
    Demo::new(&DemoOptions::new()).register(&world)?;
    if let Some(secret) = &args.delivery_secret {
        worlds_server::devkit::register_delivery(
            &world,
            worlds_engine::hooks::WebhookSignature::standard(secret.as_str()),
        )
        .context("--delivery-secret (WORLDS_DELIVERY_SECRET)")?;
        if args.devkit_callback_origins.is_empty() {
            eprintln!(
                "warning: the DevKit queue delivers only to the origins it is given, and none is: allow the app's with --devkit-callback-origin http://localhost:3000 (or `loopback` for every port of this machine)"
            );
        }
    }

    let keys = ApiKeys::open(world.clone()).await?;
    let now = world.clock().now_ms();
    let usable = keys
        .list()
        .await?
        .iter()
        .filter(|k| k.revoked_at.is_none() && k.expires_at.is_none_or(|at| at > now))
        .count();
    if usable == 0 {
        let new = keys.create("worlds serve", Scope::Admin, None).await?;
        say!(
            "no API key was set up: created admin key {} (shown once, only its digest is kept):",
            new.record.id
        );
        say!("{}", new.key);
    } else {
        // A key's secret is shown once, when it is made: `keys list` cannot show it again.
        let flags = match (args.persistence(), args.database.world()) {
            (PersistenceArg::Postgres, Some(db)) => db.flags(),
            _ => crate::target::dir::dir_flag(&args.dir),
        };
        say!(
            "{usable} API key(s) can call this server; each key is shown only when it is made, so for one to use now run `worlds keys create --scope admin{flags}`"
        );
    }

    let addr: SocketAddr = args.addr.parse().with_context(|| {
        format!(
            "--addr {}: not an address (host:port, e.g. 127.0.0.1:8080)",
            args.addr
        )
    })?;
    if !addr.ip().is_loopback() {
        eprintln!(
            "warning: serving on {addr}, reachable from other machines over plain HTTP: keys and payloads travel unencrypted; put a TLS proxy in front, or listen on 127.0.0.1"
        );
    }
    let mut options = ApiOptions::with_world_keys(keys);
    options.rate_limit = args.rate_limit.map(|per_second| worlds_server::RateLimit {
        per_second,
        burst: per_second.saturating_mul(std::num::NonZeroU32::MIN.saturating_add(1)),
    });
    options.devkit_callback_origins = args.devkit_callback_origins.clone();
    let server = worlds_server::serve(world.clone(), addr, options).await?;
    // Started once the API answers: the runs it resumes (DevKit deliveries among them) may
    // call back into it at once.
    world.start().await?;
    let place = match args.persistence() {
        PersistenceArg::Postgres => "the PostgreSQL world".to_owned(),
        PersistenceArg::Memory => "a world in memory".to_owned(),
        _ => args.dir.display().to_string(),
    };
    say!(
        "serving the API of {place} on http://{} (workflows: {}); Ctrl-C stops",
        server.local_addr(),
        world.workflow_names().join(", ")
    );
    say!(
        "dashboard: http://{}/ (sign in with an API key)",
        server.local_addr()
    );
    let signal = stop.recv().await;
    say!("stopping ({signal}): answering the requests in flight");
    server.shutdown().await;
    world.shutdown().await?;
    Ok(())
}
