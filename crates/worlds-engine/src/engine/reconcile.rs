//! Keeping what a shared store says this process holds and what this process drives the same.
//!
//! On a store shared by several processes (PostgreSQL) a claim makes this process the holder of
//! runs in the store, and recovery then reads each run back to drive it. Either half can fail
//! on its own: the claim commits but its answer is lost with the connection, or a run claimed
//! cannot be read back. The store then names this process as the holder of a run nobody
//! drives, and no other process takes it, since its holder is alive. Two things keep that from
//! lasting:
//!
//! * A claimed run that cannot be read back does not stop recovery of the others, and is
//!   resumed from its history shortly (`resync.rs`), like any run whose store call failed.
//! * Every [`RECONCILE_EVERY`] polls the engine asks the store which unfinished runs are leased
//!   to it ([`LeaseStore::owned_runs`]) and resumes from its history every one it has not been
//!   driving for two looks in a row (one look could catch a run between its claim and its
//!   adoption, or between its end here and the store's record of it).
//!
//! [`LeaseStore::owned_runs`]: crate::store::LeaseStore::owned_runs

use parking_lot::Mutex;
use rustc_hash::FxHashSet;

use crate::error::WorldError;
use crate::telemetry::logs::world_log;

use super::recovery::Recovered;
use super::resync::is_passing;
use super::Engine;

/// The reconciliation runs every this many polls of the shared store (at the world's
/// `shared_poll_interval`, one second by default).
pub(crate) const RECONCILE_EVERY: i64 = 5;

/// What the last reconciliation saw.
#[derive(Default)]
pub(crate) struct Owned {
    state: Mutex<OwnedState>,
}

#[derive(Default)]
struct OwnedState {
    /// When the last reconciliation ran (engine clock).
    last_ms: Option<i64>,
    /// Runs leased to this process that it did not drive at the last look.
    undriven: FxHashSet<String>,
    /// Runs driven from outside (`WorkflowState::external`): held, never driven here.
    external: FxHashSet<String>,
}

impl Recovered {
    fn add(&mut self, other: &Recovered) {
        self.runs += other.runs;
        self.steps_requeued += other.steps_requeued;
        self.attempts_lost += other.attempts_lost;
        self.timers_rearmed += other.timers_rearmed;
        self.children_created += other.children_created;
    }
}

impl Owned {
    /// Notes a run recovery found to be driven from outside: it has no slot here, and that is
    /// as it should be.
    pub(crate) fn not_driven_here(&self, run_id: &str) {
        self.state.lock().external.insert(run_id.to_owned());
    }
}

impl Engine {
    /// Puts every unfinished run this world should drive back in motion as it starts. On a
    /// shared store a claim the store could not answer does not fail the start: the share loop
    /// claims at its next poll, and a claim that committed without its answer is found by the
    /// reconciliation.
    pub(crate) async fn recover_at_start(&self) -> Result<Recovered, WorldError> {
        match self.recover().await {
            Err(e) if self.store.is_shared() && is_passing(&e) => {
                tracing::warn!(error = %e, "could not claim runs as the world started; claiming them at the next poll");
                Ok(Recovered::default())
            }
            other => other,
        }
    }

    /// Puts claimed runs in motion one by one: a run that cannot be read back does not stop
    /// the others. One that failed passingly is resumed from its history shortly; one that
    /// failed otherwise is logged and tried again by the reconciliation.
    pub(crate) async fn recover_claimed(&self, runs: Vec<String>) -> Recovered {
        let mut found = Recovered::default();
        for run_id in runs {
            match self.recover_claimed_one(&run_id).await {
                Ok(one) => found.add(&one),
                Err(e) if is_passing(&e) => {
                    tracing::warn!(run_id, error = %e, "could not read a claimed run back; resuming it from its history shortly");
                    self.resume_from_history(&run_id);
                }
                // Finished and gone meanwhile.
                Err(WorldError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(
                    run_id,
                    error = %e,
                    "could not resume a claimed run; trying again when this process next compares the runs it holds with those it drives"
                ),
            }
        }
        found
    }

    /// Compares the runs the store leases to this process with those it drives, if it is
    /// time to, and resumes from its history each one left undriven two looks in a row.
    pub(crate) async fn reconcile_owned(&self) -> Result<(), WorldError> {
        let now = self.clock.now_ms();
        let every =
            (self.config.shared_poll_interval.0.as_millis() as i64).saturating_mul(RECONCILE_EVERY);
        {
            let mut state = self.owned.state.lock();
            if state
                .last_ms
                .is_some_and(|last| now.saturating_sub(last) < every)
            {
                return Ok(());
            }
            state.last_ms = Some(now);
        }
        let owned = self.store.owned_runs().await?;
        let mut resume = Vec::new();
        {
            let mut state = self.owned.state.lock();
            let held: FxHashSet<&str> = owned.iter().map(String::as_str).collect();
            state.external.retain(|run| held.contains(run.as_str()));
            let mut undriven = FxHashSet::default();
            for run_id in &owned {
                if self.runs.drives(run_id) || state.external.contains(run_id) {
                    continue;
                }
                if state.undriven.contains(run_id) {
                    resume.push(run_id.clone());
                } else {
                    undriven.insert(run_id.clone());
                }
            }
            state.undriven = undriven;
        }
        if !resume.is_empty() {
            world_log!(
                self.logs,
                WARN,
                World,
                "runs leased to this process were not driven here; resuming them from their history",
                runs = resume.len(),
                first = resume[0].clone(),
            );
            for run_id in &resume {
                self.resume_from_history(run_id);
            }
        }
        Ok(())
    }
}

impl Engine {
    /// The world starts: a shared store counts this process as a member again (after
    /// [`leave_store`](Self::leave_store)).
    pub(crate) async fn rejoin_store(&self) -> Result<(), WorldError> {
        self.store.rejoin().await
    }

    /// The world shut down: a shared store hands this process's runs to the others at once
    /// and stops counting it as a live member.
    pub(crate) async fn leave_store(&self) {
        if let Err(e) = self.store.leave().await {
            tracing::warn!(error = %e, "could not hand this process's runs over as the world stopped; the other processes take them when its lease expires");
        }
        *self.owned.state.lock() = OwnedState::default();
    }
}
