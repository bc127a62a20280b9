//! W6, flat per-step cost: one workflow of many sequential steps; the mean step time early in
//! the run and late in it (when the history is long) should be about the same.
//!
//! Step times are measured from outside the workflow, which must stay deterministic: the step
//! activity records `Instant::now()` each time it runs (each step runs once), and a step's time
//! is the gap between its execution and the previous step's, which covers the whole cycle of
//! recording a result, advancing the workflow and dispatching the next step.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::bail;
use worlds_engine::prelude::*;

use super::report::{round, FlatSteps};
use super::{chain, check, ms, progress, start_world, Report, Settings};

/// Default number of steps.
const STEPS: usize = 10_000;
/// Steps averaged at each end (the contract's window).
const WINDOW: usize = 100;
/// A wider window, reported in the notes.
const WIDE_WINDOW: usize = 1000;

/// Runs W6.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let steps = settings.k.or(settings.n).unwrap_or(STEPS);
    progress(&format!(
        "W6: one workflow of {steps} sequential steps, {} workers",
        settings.workers
    ));
    let times: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::with_capacity(steps)));
    let step = {
        let times = times.clone();
        activity("step", move |_ctx: ActivityContext, n: u64| {
            let times = times.clone();
            async move {
                times
                    .lock()
                    .expect("the step-time log is never poisoned")
                    .push(Instant::now());
                Ok::<_, StepError>(n + 1)
            }
        })
    };
    let flow = chain("w6", &step);
    let world = start_world(settings, 1, vec![(&step).into(), (&flow).into()]).await?;

    let started = Instant::now();
    let handle = world
        .execute(&flow, steps as u64, WorkflowOptions::default())
        .await?;
    check(handle.result().await?, steps as u64)?;
    let wall = started.elapsed();
    super::stop_world(world).await?;

    let times = std::mem::take(&mut *times.lock().expect("not poisoned"));
    if times.len() != steps {
        bail!(
            "the step activity ran {} times for {steps} steps: a step ran more than once",
            times.len()
        );
    }
    let (flat, window) = flat_steps(&times);
    // A window of 100 steps lasts a millisecond or two, so one preemption on a busy machine
    // moves the ratio; the same ratio over windows ten times wider is given in the notes.
    let wide = match ends(&gaps_ms(&times), WIDE_WINDOW) {
        Some((early, late, w)) if early > 0.0 => format!(
            "; over the first/last {w} steps: {early:.4} / {late:.4} ms, ratio {:.3}",
            late / early
        ),
        _ => String::new(),
    };
    let mut report = Report::new(settings.backend.name(), "W6", 1, steps, wall.as_secs_f64());
    report.flat = Some(flat);
    report.notes = format!(
        "step time = gap between consecutive step executions (activity-side Instant); early = mean over steps 2..={}, late = over the last {window} steps{wide}; {} workers",
        window + 1,
        settings.workers
    );
    Ok(report)
}

/// The gaps between consecutive step executions, in ms.
fn gaps_ms(times: &[Instant]) -> Vec<f64> {
    times
        .windows(2)
        .map(|pair| ms(pair[1].duration_since(pair[0])))
        .collect()
}

/// Mean of the first and of the last `window` gaps, with `window` capped at half the gaps;
/// `None` if there are fewer than two gaps. Also returns the window used.
fn ends(gaps: &[f64], window: usize) -> Option<(f64, f64, usize)> {
    let window = window.min(gaps.len() / 2);
    if window == 0 {
        return None;
    }
    let mean = |slice: &[f64]| slice.iter().sum::<f64>() / slice.len() as f64;
    Some((
        mean(&gaps[..window]),
        mean(&gaps[gaps.len() - window..]),
        window,
    ))
}

/// W6's fields: mean step time over the first and the last `WINDOW` steps (fewer when the run
/// is short), and the window used.
fn flat_steps(times: &[Instant]) -> (FlatSteps, usize) {
    match ends(&gaps_ms(times), WINDOW) {
        None => {
            let none = FlatSteps {
                early_ms: None,
                late_ms: None,
                late_over_early: None,
            };
            (none, 0)
        }
        Some((early, late, window)) => {
            let flat = FlatSteps {
                early_ms: Some(round(early, 4)),
                late_ms: Some(round(late, 4)),
                late_over_early: (early > 0.0).then(|| round(late / early, 3)),
            };
            (flat, window)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn windows_average_the_ends() {
        let t0 = Instant::now();
        // Gaps of 1 ms for the first half, 3 ms for the second.
        let mut times = vec![t0];
        for i in 0..400u64 {
            let gap = if i < 200 { 1 } else { 3 };
            let last = *times.last().unwrap();
            times.push(last + Duration::from_millis(gap));
        }
        let (flat, window) = flat_steps(&times);
        assert_eq!(window, 100);
        assert_eq!(flat.early_ms, Some(1.0));
        assert_eq!(flat.late_ms, Some(3.0));
        assert_eq!(flat.late_over_early, Some(3.0));
        assert_eq!(flat_steps(&times[..1]).0.early_ms, None);
        assert_eq!(flat_steps(&times[..11]).1, 5);
        let (early, late, w) = ends(&gaps_ms(&times), WIDE_WINDOW).unwrap();
        assert_eq!((early, late, w), (1.0, 3.0, 200));
    }
}
