//! `--via http`: W1 and W2 driven through the world's HTTP API, as another service would: a
//! `worlds-server` on loopback in this process, called with `worlds-client` (one client, so
//! its connections are kept alive between calls).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use worlds_client::Client;
use worlds_engine::model::keys::Scope;
use worlds_engine::{WorkflowOptions, World};
use worlds_server::auth::KeyRing;
use worlds_server::{ApiOptions, ApiServer};

/// Longest wait of one result call (the server caps it too).
const WAIT: Duration = Duration::from_secs(300);

/// A server over the benchmark's world and a client of it.
pub(super) struct Remote {
    server: ApiServer,
    client: Client,
}

impl Remote {
    /// Serves `world` on a free loopback port, with a fresh write key.
    pub(super) async fn serve(world: &Arc<World>) -> anyhow::Result<Remote> {
        let keys = Arc::new(KeyRing::new());
        let key = keys.create("bench", Scope::Write, world.clock().now_ms(), None);
        let server =
            worlds_server::serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys)).await?;
        let client = Client::new(&format!("http://{}", server.local_addr()), key.key)?;
        Ok(Remote { server, client })
    }

    /// Starts a run of `workflow` on `input`; its run id.
    pub(super) async fn start(&self, workflow: &str, input: u64) -> anyhow::Result<String> {
        Ok(self
            .client
            .start(workflow, &input, WorkflowOptions::default())
            .await?
            .run_id)
    }

    /// Starts a run of `workflow` on `input` and waits for its output, in one call.
    pub(super) async fn run(&self, workflow: &str, input: u64) -> anyhow::Result<u64> {
        let outcome = self
            .client
            .start_and_wait(workflow, &input, WorkflowOptions::default(), WAIT)
            .await?;
        if outcome.done {
            return output_of(&outcome.run_id, outcome.output, outcome.status);
        }
        self.result(&outcome.run_id).await
    }

    /// Waits for the run's output.
    pub(super) async fn result(&self, run_id: &str) -> anyhow::Result<u64> {
        loop {
            let outcome = self.client.result(run_id, WAIT).await?;
            if outcome.done {
                return output_of(run_id, outcome.output, outcome.status);
            }
        }
    }

    /// Stops the server; the world is the caller's again.
    pub(super) async fn stop(self) {
        self.server.shutdown().await;
    }
}

/// The world back from the `Arc` it was served from, once the server let go of it.
pub(super) fn unshare(world: Arc<World>) -> anyhow::Result<World> {
    Arc::try_unwrap(world).map_err(|_| anyhow::anyhow!("the API server still holds the world"))
}

/// A finished run's output, as a number.
fn output_of(
    run_id: &str,
    output: Option<serde_json::Value>,
    status: worlds_engine::RunStatus,
) -> anyhow::Result<u64> {
    let output =
        output.with_context(|| format!("run {run_id} ended {status:?} without an output"))?;
    serde_json::from_value(output).context("an output that is not a number")
}
