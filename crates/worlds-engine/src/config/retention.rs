//! How long finished runs are kept ([`WorldConfig::retention`](super::WorldConfig::retention)),
//! and the one pure reading of it that the sweep, its preview and the dashboard share.
//!
//! A finished run is kept for the duration its final status asks for, counted from its end:
//!
//! ```text
//! keep(run) = the run's workflow rule for its class, else the world's for that class
//! class     = quarantined   if the run was quarantined
//!             completed     if it completed
//!             cancelled     if it was cancelled
//!             failed        otherwise (failed, or compensated after a failure)
//! removable = keep(run) > 0                        (0 keeps for ever)
//!             and ended_at + keep(run) <= now
//!             and, if started with an idempotency key, created_at + idempotency_ttl <= now
//! ```
//!
//! Every duration defaults to 0, so no upgrade deletes anything until a policy is set.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::duration::Dur;
use crate::model::EndedRun;
use crate::RunStatus;

/// How long each kind of finished run is kept; a zero duration (the default) keeps it for ever.
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::RetentionRule;
///
/// let rule: RetentionRule =
///     serde_json::from_str(r#"{"completed":"7d","failed":"30d","cancelled":"30d","quarantined":"30d"}"#)
///         .unwrap();
/// assert_eq!(rule.completed.map(|d| d.0), Some(Duration::from_secs(7 * 86_400)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionRule {
    /// Runs that completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<Dur>,
    /// Runs that failed (compensated ones included), unless quarantined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<Dur>,
    /// Runs that were cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<Dur>,
    /// Runs that were quarantined (their history diverged from the code, or their strategy
    /// quarantines failures).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<Dur>,
}

impl RetentionRule {
    fn for_class(&self, class: Class) -> Option<Dur> {
        match class {
            Class::Completed => self.completed,
            Class::Failed => self.failed,
            Class::Cancelled => self.cancelled,
            Class::Quarantined => self.quarantined,
        }
    }

    fn durations(&self) -> impl Iterator<Item = Dur> + '_ {
        [
            self.completed,
            self.failed,
            self.cancelled,
            self.quarantined,
        ]
        .into_iter()
        .flatten()
    }
}

/// The retention policy of a world: how long finished runs stay, for the world and per
/// workflow, and how often the sweep that removes the rest runs.
///
/// ```
/// use worlds_engine::WorldConfig;
///
/// let config: WorldConfig = serde_json::from_str(r#"{
///     "retention": {
///         "completed": "7d", "failed": "30d", "cancelled": "30d", "quarantined": "30d",
///         "workflows": { "audit-export": { "completed": "0s" } },
///         "sweepInterval": "1h"
///     }
/// }"#).unwrap();
/// assert!(config.retention.is_enabled());
/// # config.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Runs that completed. Default 0: kept for ever.
    pub completed: Dur,
    /// Runs that failed (compensated ones included), unless quarantined. Default 0.
    pub failed: Dur,
    /// Runs that were cancelled. Default 0.
    pub cancelled: Dur,
    /// Runs that were quarantined. Default 0.
    pub quarantined: Dur,
    /// Rules of single workflows, by name: a field set there wins over the world's.
    pub workflows: BTreeMap<String, RetentionRule>,
    /// How often the sweep runs while the policy removes anything. Default 1 h.
    #[serde(alias = "sweepInterval")]
    pub sweep_interval: Dur,
    /// Write each run a sweep removes, with its history, to a file in this directory first
    /// (`runs-YYYY-MM-DD.ndjson.gz`, sealed when the world has encryption keys; see
    /// `store::archive`), readable with `worlds runs show --archive` and importable with
    /// `worlds runs import`. On PostgreSQL, the directory of whichever process drives the
    /// sweep. Default none: removed runs are gone.
    #[serde(alias = "archiveDir", skip_serializing_if = "Option::is_none")]
    pub archive_dir: Option<std::path::PathBuf>,
    /// The share of its time, in percent (1–100), a sweep spends removing while it keeps up:
    /// after each batch of removals it rests so that its batches take at most this share,
    /// leaving the store to the runs the world serves (the pause follows what the batch cost;
    /// see `clock::pace`). A sweep whose oldest run to remove is overdue by several
    /// `sweep_interval`s takes that many times this share, up to all of it, so a world that
    /// ends runs faster than its share removes them catches up. 100 removes without rest.
    /// Default 5 (at which a sweep added at most 0.7 ms to the p99 of runs served meanwhile in
    /// the R1 benchmark, and removed 370 runs a second on PostgreSQL).
    #[serde(alias = "sweepShare")]
    pub sweep_share: u8,
}

/// The default of [`RetentionConfig::sweep_share`], in percent.
const DEFAULT_SWEEP_SHARE: u8 = 5;

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            completed: Dur(Duration::ZERO),
            failed: Dur(Duration::ZERO),
            cancelled: Dur(Duration::ZERO),
            quarantined: Dur(Duration::ZERO),
            workflows: BTreeMap::new(),
            sweep_interval: Dur(Duration::from_secs(3600)),
            archive_dir: None,
            sweep_share: DEFAULT_SWEEP_SHARE,
        }
    }
}

/// What the policy says of one finished run at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionVerdict {
    /// It may go: ask the store to remove it if it ended before `ended_before` (its own end,
    /// plus one: the store re-checks the bound with the run's state at removal).
    Remove {
        /// The bound to pass to the store.
        ended_before: Millis,
        /// When it became free to go (its end plus its keep, or its idempotency key's
        /// expiry): how overdue it is tells a sweep whether it has fallen behind.
        due: Millis,
    },
    /// Not yet: it may go from `at` on.
    KeepUntil {
        /// When it may go.
        at: Millis,
    },
    /// The policy keeps it for ever.
    KeepForever,
}

/// The four classes a policy tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Completed,
    Failed,
    Cancelled,
    Quarantined,
}

fn class_of(run: &EndedRun) -> Class {
    if run.quarantined {
        return Class::Quarantined;
    }
    match run.status {
        RunStatus::Completed => Class::Completed,
        RunStatus::Cancelled => Class::Cancelled,
        _ => Class::Failed,
    }
}

use crate::clock::duration_ms as ms;

impl RetentionConfig {
    /// True if the policy removes anything: some duration is not zero.
    pub fn is_enabled(&self) -> bool {
        self.horizon().is_some()
    }

    /// The shortest time any finished run is kept (`None` when every run is kept for ever):
    /// no run that ended later than `now - horizon` can go.
    pub fn horizon(&self) -> Option<Duration> {
        [
            self.completed,
            self.failed,
            self.cancelled,
            self.quarantined,
        ]
        .into_iter()
        .chain(self.workflows.values().flat_map(RetentionRule::durations))
        .map(|d| d.0)
        .filter(|d| !d.is_zero())
        .min()
    }

    /// How long `run` is kept; `None` for ever.
    pub fn keep_for(&self, run: &EndedRun) -> Option<Duration> {
        let class = class_of(run);
        let world = match class {
            Class::Completed => self.completed,
            Class::Failed => self.failed,
            Class::Cancelled => self.cancelled,
            Class::Quarantined => self.quarantined,
        };
        let keep = self
            .workflows
            .get(&run.name)
            .and_then(|rule| rule.for_class(class))
            .unwrap_or(world);
        (!keep.0.is_zero()).then_some(keep.0)
    }

    /// What the policy says of `run` at `now`, given the world's idempotency key lifetime (a
    /// run whose key still answers starts is kept until the key expires).
    pub fn verdict(
        &self,
        run: &EndedRun,
        now: Millis,
        idempotency_ttl: Duration,
    ) -> RetentionVerdict {
        let Some(keep) = self.keep_for(run) else {
            return RetentionVerdict::KeepForever;
        };
        let mut at = run.ended_at.saturating_add(ms(keep));
        if run.has_idempotency_key {
            at = at.max(run.created_at.saturating_add(ms(idempotency_ttl)));
        }
        if at <= now {
            RetentionVerdict::Remove {
                ended_before: run.ended_at.saturating_add(1),
                due: at,
            }
        } else {
            RetentionVerdict::KeepUntil { at }
        }
    }

    /// Checks the values, naming the first bad field.
    pub fn validate(&self) -> Result<(), crate::WorldError> {
        if self.sweep_interval.0 < Duration::from_secs(1) {
            return Err(crate::WorldError::invalid(
                "retention.sweep_interval",
                "must be at least 1s",
            ));
        }
        if !(1..=100).contains(&self.sweep_share) {
            return Err(crate::WorldError::invalid(
                "retention.sweep_share",
                "must be a percentage from 1 to 100",
            ));
        }
        for name in self.workflows.keys() {
            if name.is_empty() || name.contains('\0') {
                return Err(crate::WorldError::invalid(
                    "retention.workflows",
                    "workflow names must be non-empty and without NUL",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Millis = 86_400_000;

    fn run(name: &str, status: RunStatus, quarantined: bool, ended_at: Millis) -> EndedRun {
        EndedRun {
            run_id: "wrun_1".into(),
            name: name.into(),
            status,
            quarantined,
            created_at: ended_at.saturating_sub(1000),
            ended_at,
            has_idempotency_key: false,
        }
    }

    fn days(n: u64) -> Dur {
        Dur(Duration::from_millis(n * 86_400_000))
    }

    #[test]
    fn verdicts_follow_the_class_the_workflow_rule_and_the_end_time() {
        let mut policy = RetentionConfig {
            completed: days(7),
            failed: days(30),
            cancelled: days(30),
            quarantined: Dur(Duration::ZERO),
            ..RetentionConfig::default()
        };
        policy.workflows.insert(
            "audit".into(),
            RetentionRule {
                completed: Some(Dur(Duration::ZERO)),
                ..RetentionRule::default()
            },
        );
        policy.workflows.insert(
            "noisy".into(),
            RetentionRule {
                completed: Some(days(1)),
                failed: Some(days(2)),
                ..RetentionRule::default()
            },
        );
        let end = 100 * DAY;
        let ttl = Duration::from_secs(5);
        use RunStatus::*;
        // (workflow, status, quarantined, now, verdict)
        let table: &[(&str, RunStatus, bool, Millis, RetentionVerdict)] = &[
            (
                "a",
                Completed,
                false,
                end + 7 * DAY,
                RetentionVerdict::Remove {
                    ended_before: end + 1,
                    due: end + 7 * DAY,
                },
            ),
            (
                "a",
                Completed,
                false,
                end + 7 * DAY - 1,
                RetentionVerdict::KeepUntil { at: end + 7 * DAY },
            ),
            (
                "a",
                Failed,
                false,
                end + 7 * DAY,
                RetentionVerdict::KeepUntil { at: end + 30 * DAY },
            ),
            (
                "a",
                Compensated,
                false,
                end + 30 * DAY,
                RetentionVerdict::Remove {
                    ended_before: end + 1,
                    due: end + 30 * DAY,
                },
            ),
            (
                "a",
                Cancelled,
                false,
                end + 30 * DAY,
                RetentionVerdict::Remove {
                    ended_before: end + 1,
                    due: end + 30 * DAY,
                },
            ),
            // Quarantined runs are their own class: kept for ever here, failed or compensated.
            (
                "a",
                Failed,
                true,
                end + 365 * DAY,
                RetentionVerdict::KeepForever,
            ),
            (
                "a",
                Compensated,
                true,
                end + 365 * DAY,
                RetentionVerdict::KeepForever,
            ),
            // A workflow's rule wins for the classes it sets, the world's for the rest.
            (
                "audit",
                Completed,
                false,
                end + 365 * DAY,
                RetentionVerdict::KeepForever,
            ),
            (
                "audit",
                Failed,
                false,
                end + 30 * DAY,
                RetentionVerdict::Remove {
                    ended_before: end + 1,
                    due: end + 30 * DAY,
                },
            ),
            (
                "noisy",
                Completed,
                false,
                end + DAY,
                RetentionVerdict::Remove {
                    ended_before: end + 1,
                    due: end + DAY,
                },
            ),
            (
                "noisy",
                Failed,
                false,
                end + DAY,
                RetentionVerdict::KeepUntil { at: end + 2 * DAY },
            ),
            (
                "noisy",
                Cancelled,
                false,
                end + DAY,
                RetentionVerdict::KeepUntil { at: end + 30 * DAY },
            ),
        ];
        for (name, status, quarantined, now, want) in table {
            let got = policy.verdict(&run(name, *status, *quarantined, end), *now, ttl);
            assert_eq!(
                got, *want,
                "{name} {status:?} quarantined={quarantined} at {now}"
            );
        }
        assert_eq!(policy.horizon(), Some(Duration::from_secs(86_400)));
    }

    #[test]
    fn an_idempotency_key_keeps_its_run_until_it_expires() {
        let policy = RetentionConfig {
            completed: Dur(Duration::from_millis(10)),
            ..RetentionConfig::default()
        };
        let mut keyed = run("a", RunStatus::Completed, false, 1_000);
        keyed.created_at = 990;
        keyed.has_idempotency_key = true;
        let ttl = Duration::from_secs(60);
        assert_eq!(
            policy.verdict(&keyed, 1_010, ttl),
            RetentionVerdict::KeepUntil { at: 60_990 }
        );
        assert_eq!(
            policy.verdict(&keyed, 61_000, ttl),
            RetentionVerdict::Remove {
                ended_before: 1_001,
                due: 60_990,
            }
        );
    }

    #[test]
    fn the_default_keeps_everything_for_ever() {
        let policy = RetentionConfig::default();
        assert!(!policy.is_enabled());
        assert_eq!(policy.horizon(), None);
        for status in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Compensated,
        ] {
            assert_eq!(
                policy.verdict(&run("a", status, false, 0), Millis::MAX, Duration::ZERO),
                RetentionVerdict::KeepForever
            );
        }
    }

    #[test]
    fn config_names_read_in_both_styles_and_unknown_ones_are_refused() {
        let policy: RetentionConfig =
            serde_json::from_str(r#"{"completed":"7d","sweepInterval":"10m"}"#).unwrap();
        assert_eq!(policy.completed, days(7));
        assert_eq!(policy.sweep_interval.0, Duration::from_secs(600));
        let typo = serde_json::from_str::<RetentionConfig>(r#"{"complete":"7d"}"#).unwrap_err();
        assert!(
            typo.to_string().contains("unknown field `complete`"),
            "{typo}"
        );
        let bad = RetentionConfig {
            sweep_interval: Dur(Duration::from_millis(10)),
            ..RetentionConfig::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_sweep_share_is_a_percentage_defaulting_to_a_twentieth() {
        assert_eq!(RetentionConfig::default().sweep_share, 5);
        let policy: RetentionConfig = serde_json::from_str(r#"{"sweepShare":60}"#).unwrap();
        assert_eq!(policy.sweep_share, 60);
        assert!(policy.validate().is_ok());
        for share in [0, 101, 255] {
            let bad = RetentionConfig {
                sweep_share: share,
                ..RetentionConfig::default()
            };
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("retention.sweep_share"), "{e}");
        }
        assert!(serde_json::from_str::<RetentionConfig>(r#"{"sweep_share":-1}"#).is_err());
    }
}
