//! Deciding which firings are due: the catch-up policy as a pure function of the schedule's
//! next due time and now, and the changes to a schedule record that claim and settle firings.

use crate::clock::Millis;

use super::{CatchUp, CronError, CronExpr, ScheduleConfig, ON_TIME_GRACE_MS};

/// The firings to start now and when the schedule is due next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Firing times to start, oldest first.
    pub(crate) firings: Vec<Millis>,
    /// Due firings the policy drops.
    pub(crate) dropped: u64,
    /// The next firing time after now.
    pub(crate) next: Millis,
}

/// Plans a cron schedule due at `due` (its recorded next time, `<= now`): the times it matches
/// in `[due, now]` are the due firings, and `policy` picks which of them start a run.
pub(crate) fn plan_cron(
    cron: &CronExpr,
    policy: CatchUp,
    due: Millis,
    now: Millis,
) -> Result<Plan, CronError> {
    let next = cron.next_after(now)?;
    let latest = cron.latest_at_or_before(now).filter(|&at| at >= due);
    let Some(latest) = latest else {
        // Nothing matches in between (the expression changed under a stored due time).
        return Ok(Plan {
            firings: Vec::new(),
            dropped: 0,
            next,
        });
    };
    let (firings, dropped) = match policy {
        CatchUp::Latest => (vec![latest], count_between(cron, due, latest)),
        CatchUp::Skip if now - latest <= ON_TIME_GRACE_MS => {
            (vec![latest], count_between(cron, due, latest))
        }
        CatchUp::Skip => (Vec::new(), count_between(cron, due, latest) + 1),
        CatchUp::All { max } => {
            // Walk back from the latest, so a long downtime costs `max` searches, not one per
            // missed firing.
            let mut firings = vec![latest];
            while firings.len() < max as usize {
                let Some(before) = cron
                    .latest_at_or_before(firings[firings.len() - 1] - 1)
                    .filter(|&at| at >= due)
                else {
                    break;
                };
                firings.push(before);
            }
            firings.reverse();
            let dropped = count_between(cron, due, firings[0]);
            (firings, dropped)
        }
    };
    Ok(Plan {
        firings,
        dropped,
        next,
    })
}

/// How many times the expression matches in `[from, until)`, counting at most
/// [`COUNT_LIMIT`] (the figure is for a log line).
fn count_between(cron: &CronExpr, from: Millis, until: Millis) -> u64 {
    let mut count = 0;
    let mut at = from;
    while at < until && count < COUNT_LIMIT {
        count += 1;
        match cron.next_after(at) {
            Ok(next) => at = next,
            Err(_) => break,
        }
    }
    count
}

/// Where [`count_between`] stops counting.
const COUNT_LIMIT: u64 = 10_000;

/// Claims the due firings of a schedule at `now`: adds them to its pending firings and moves
/// its next time on. `None` if nothing is due (paused, or another process claimed them).
pub(crate) fn claim(
    mut schedule: ScheduleConfig,
    now: Millis,
) -> Option<(ScheduleConfig, Result<Plan, CronError>)> {
    if schedule.paused {
        return None;
    }
    let due = schedule.next_execution.filter(|&at| at <= now)?;
    let Some(expression) = schedule.cron_expression.clone() else {
        schedule.next_execution = None;
        schedule.pending_firings.push(due);
        let plan = Plan {
            firings: vec![due],
            dropped: 0,
            next: due,
        };
        return Some((schedule, Ok(plan)));
    };
    let planned = CronExpr::parse(&expression, schedule.time_zone.as_deref())
        .and_then(|cron| plan_cron(&cron, schedule.catch_up, due, now));
    match &planned {
        Ok(plan) => {
            for &at in &plan.firings {
                if !schedule.pending_firings.contains(&at) {
                    schedule.pending_firings.push(at);
                }
            }
            schedule.pending_firings.sort_unstable();
            schedule.next_execution = Some(plan.next);
        }
        Err(e) => {
            // Stop trying: the record says why, for whoever looks at the schedule.
            schedule.next_execution = None;
            schedule.last_error = Some(e.to_string());
        }
    }
    Some((schedule, planned))
}

/// How the start of one firing went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The firing's run exists: this attempt started it, or an earlier one did.
    Started {
        /// The run.
        run_id: String,
    },
    /// The run cannot be started, now or later (the input does not fit the workflow).
    Refused {
        /// Why.
        reason: String,
    },
}

/// Records the outcome of the firing at `at`. `None` if it is no longer pending (another
/// process settled it); `Some(None)` if the schedule is done (a one-time schedule whose run is
/// started) and should be deleted.
pub(crate) fn settle(
    mut schedule: ScheduleConfig,
    at: Millis,
    outcome: &Outcome,
) -> Option<Option<ScheduleConfig>> {
    let index = schedule.pending_firings.iter().position(|&p| p == at)?;
    schedule.pending_firings.remove(index);
    match outcome {
        Outcome::Started { run_id } => {
            schedule.total_executions += 1;
            schedule.last_execution = Some(schedule.last_execution.map_or(at, |l| l.max(at)));
            schedule.last_run_id = Some(run_id.clone());
            schedule.removed_last_run_id = None;
            schedule.last_error = None;
        }
        Outcome::Refused { reason } => schedule.last_error = Some(reason.clone()),
    }
    let done = schedule.is_once()
        && schedule.next_execution.is_none()
        && schedule.pending_firings.is_empty();
    Some((!done).then_some(schedule))
}

/// Records that a retention sweep removed `run_id`: if it is still the schedule's last run, its
/// id moves from `last_run_id` to `removed_last_run_id`, and nothing else changes. `None` if the
/// schedule names another run (a newer firing settled meanwhile) or none.
pub(crate) fn unlink_removed_run(
    mut schedule: ScheduleConfig,
    run_id: &str,
) -> Option<ScheduleConfig> {
    if schedule.last_run_id.as_deref() != Some(run_id) {
        return None;
    }
    schedule.removed_last_run_id = schedule.last_run_id.take();
    Some(schedule)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;
    const HOUR: Millis = 60 * MIN;
    /// 2026-01-01T00:00:00Z.
    const T0: Millis = 1_767_225_600_000;

    fn hourly() -> CronExpr {
        CronExpr::parse("0 * * * *", None).unwrap()
    }

    #[test]
    fn on_time_firings_start_under_every_policy() {
        for policy in [CatchUp::Latest, CatchUp::Skip, CatchUp::All { max: 5 }] {
            let plan = plan_cron(&hourly(), policy, T0 + HOUR, T0 + HOUR + 20).unwrap();
            assert_eq!(plan.firings, vec![T0 + HOUR], "{policy:?}");
            assert_eq!(plan.dropped, 0);
            assert_eq!(plan.next, T0 + 2 * HOUR);
        }
    }

    #[test]
    fn after_downtime_each_policy_picks_its_firings() {
        // Due at 01:00, seen at 05:30: 01:00, 02:00, 03:00, 04:00 and 05:00 were missed.
        let (due, now) = (T0 + HOUR, T0 + 5 * HOUR + 30 * MIN);
        let latest = plan_cron(&hourly(), CatchUp::Latest, due, now).unwrap();
        assert_eq!(latest.firings, vec![T0 + 5 * HOUR]);
        assert_eq!(latest.dropped, 4);
        assert_eq!(latest.next, T0 + 6 * HOUR);

        let skip = plan_cron(&hourly(), CatchUp::Skip, due, now).unwrap();
        assert!(skip.firings.is_empty());
        assert_eq!(skip.dropped, 5);
        assert_eq!(skip.next, T0 + 6 * HOUR);

        let all = plan_cron(&hourly(), CatchUp::All { max: 10 }, due, now).unwrap();
        assert_eq!(
            all.firings,
            (1..=5).map(|h| T0 + h * HOUR).collect::<Vec<_>>()
        );
        assert_eq!(all.dropped, 0);

        let capped = plan_cron(&hourly(), CatchUp::All { max: 2 }, due, now).unwrap();
        assert_eq!(capped.firings, vec![T0 + 4 * HOUR, T0 + 5 * HOUR]);
        assert_eq!(capped.dropped, 3);
    }

    #[test]
    fn skip_keeps_a_firing_reached_within_the_grace() {
        let plan = plan_cron(&hourly(), CatchUp::Skip, T0 + HOUR, T0 + HOUR + MIN).unwrap();
        assert_eq!(plan.firings, vec![T0 + HOUR]);
        let late = plan_cron(&hourly(), CatchUp::Skip, T0 + HOUR, T0 + HOUR + MIN + 1).unwrap();
        assert!(late.firings.is_empty());
    }

    fn record(cron: Option<&str>, next: Millis) -> ScheduleConfig {
        ScheduleConfig {
            id: "s".into(),
            workflow_name: "w".into(),
            input: None,
            input_fn: false,
            cron_expression: cron.map(str::to_owned),
            time_zone: None,
            paused: false,
            total_executions: 0,
            last_execution: None,
            next_execution: Some(next),
            catch_up: CatchUp::Latest,
            created_at: T0,
            last_run_id: None,
            removed_last_run_id: None,
            last_error: None,
            pending_firings: Vec::new(),
        }
    }

    #[test]
    fn claiming_moves_the_next_time_on_once() {
        let s = record(Some("0 * * * *"), T0 + HOUR);
        assert!(claim(s.clone(), T0 + HOUR - 1).is_none(), "not due yet");
        let (claimed, plan) = claim(s, T0 + HOUR).unwrap();
        assert_eq!(plan.unwrap().firings, vec![T0 + HOUR]);
        assert_eq!(claimed.pending_firings, vec![T0 + HOUR]);
        assert_eq!(claimed.next_execution, Some(T0 + 2 * HOUR));
        // A second claim at the same time finds nothing due.
        assert!(claim(claimed, T0 + HOUR).is_none());

        let mut paused = record(Some("0 * * * *"), T0);
        paused.paused = true;
        assert!(claim(paused, T0 + HOUR).is_none());
    }

    #[test]
    fn settling_counts_a_firing_once_and_ends_one_time_schedules() {
        let started = Outcome::Started {
            run_id: "wrun_1".into(),
        };
        let (claimed, _) = claim(record(Some("0 * * * *"), T0), T0).unwrap();
        let settled = settle(claimed, T0, &started).unwrap().unwrap();
        assert_eq!(settled.total_executions, 1);
        assert_eq!(settled.last_execution, Some(T0));
        assert_eq!(settled.last_run_id.as_deref(), Some("wrun_1"));
        assert!(settle(settled, T0, &started).is_none(), "already settled");

        let (once, _) = claim(record(None, T0), T0 + 5).unwrap();
        assert_eq!(once.next_execution, None);
        assert_eq!(once.pending_firings, vec![T0]);
        assert_eq!(settle(once, T0, &started), Some(None), "deleted");
    }

    #[test]
    fn a_refused_firing_is_recorded_not_counted() {
        let (claimed, _) = claim(record(Some("0 * * * *"), T0), T0).unwrap();
        let refused = Outcome::Refused {
            reason: "bad input".into(),
        };
        let settled = settle(claimed, T0, &refused).unwrap().unwrap();
        assert_eq!(settled.total_executions, 0);
        assert_eq!(settled.last_error.as_deref(), Some("bad input"));
        assert!(settled.pending_firings.is_empty());
    }

    #[test]
    fn a_removed_last_run_is_unlinked_only_while_it_is_the_last() {
        let started = |id: &str| Outcome::Started { run_id: id.into() };
        let (claimed, _) = claim(record(Some("0 * * * *"), T0), T0).unwrap();
        let mut fired = settle(claimed, T0, &started("wrun_1")).unwrap().unwrap();
        fired.paused = true;

        let unlinked = unlink_removed_run(fired.clone(), "wrun_1").unwrap();
        assert_eq!(unlinked.last_run_id, None);
        assert_eq!(unlinked.removed_last_run_id.as_deref(), Some("wrun_1"));
        let mut rest = unlinked.clone();
        rest.last_run_id = fired.last_run_id.clone();
        rest.removed_last_run_id = None;
        assert_eq!(rest, fired, "nothing else changes");
        assert!(
            unlink_removed_run(unlinked.clone(), "wrun_1").is_none(),
            "done once"
        );
        assert!(
            unlink_removed_run(fired, "wrun_0").is_none(),
            "another run is named"
        );

        // The next firing names its own run and forgets the removed one.
        let mut resumed = unlinked;
        resumed.paused = false;
        let (claimed, _) = claim(resumed, T0 + HOUR).unwrap();
        let next = settle(claimed, T0 + HOUR, &started("wrun_2"))
            .unwrap()
            .unwrap();
        assert_eq!(next.last_run_id.as_deref(), Some("wrun_2"));
        assert_eq!(next.removed_last_run_id, None);
    }
}
