//! Metrics in the Prometheus text format: the text is well formed, and a known workload gives
//! known values.

use std::collections::{BTreeMap, HashMap};

use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;

/// `(name, labels sorted and joined)` → value.
type Samples = BTreeMap<(String, String), f64>;

fn valid_name(name: &str, colons: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':');
    chars.next().is_some_and(first_ok)
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text
            .parse()
            .map_err(|_| format!("'{text}' is not a number")),
    }
}

/// Parses `k="v",k2="v2"`, checking names and escapes.
fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once("=\"")
            .ok_or(format!("bad labels '{text}'"))?;
        if !valid_name(name, false) {
            return Err(format!("bad label name '{name}'"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err(format!("bad escape in '{text}'")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in '{text}'")),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &after[end + 1..];
        if let Some(next) = rest.strip_prefix(',') {
            rest = next;
        } else if !rest.is_empty() {
            return Err(format!("junk after a label in '{text}'"));
        }
    }
    Ok(labels)
}

/// A strict reader of the text format (version 0.0.4): every sample belongs to the family
/// declared by the latest `# TYPE` line, names and labels are valid, values are numbers, and
/// no family is declared twice.
fn parse_exposition(text: &str) -> Result<Samples, String> {
    let mut samples = Samples::new();
    let mut types: HashMap<String, String> = HashMap::new();
    let mut current: Option<(String, String)> = None;
    assert!(text.ends_with('\n'), "the text ends with a newline");
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let (kind, name, rest) = (parts.next(), parts.next(), parts.next());
            let name = name.ok_or(format!("bad comment '{line}'"))?;
            if !valid_name(name, true) {
                return Err(format!("bad metric name '{name}'"));
            }
            match (kind, rest) {
                (Some("HELP"), Some(help)) if !help.is_empty() => {}
                (Some("TYPE"), Some(kind)) => {
                    let known = ["counter", "gauge", "histogram", "summary", "untyped"];
                    if !known.contains(&kind) {
                        return Err(format!("unknown type '{kind}'"));
                    }
                    if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                        return Err(format!("'{name}' is declared twice"));
                    }
                    current = Some((name.to_owned(), kind.to_owned()));
                }
                _ => return Err(format!("unexpected comment '{line}'")),
            }
            continue;
        }
        if line.trim().is_empty() {
            return Err("empty line".to_owned());
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or(format!("bad sample '{line}'"))?;
        let value = parse_value(value)?;
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels
                    .strip_suffix('}')
                    .ok_or(format!("bad labels in '{line}'"))?;
                (name, parse_labels(labels)?)
            }
            None => (series, Vec::new()),
        };
        if !valid_name(name, true) {
            return Err(format!("bad metric name '{name}'"));
        }
        let (family, kind) = current
            .as_ref()
            .ok_or(format!("sample '{line}' before any TYPE"))?;
        let belongs = name == family
            || (kind == "histogram"
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name.strip_suffix(suffix) == Some(family.as_str())));
        if !belongs {
            return Err(format!(
                "sample '{name}' does not belong to '{family}' ({kind})"
            ));
        }
        if kind == "histogram"
            && name.ends_with("_bucket")
            && !labels.iter().any(|(k, _)| k == "le")
        {
            return Err(format!("bucket without le: '{line}'"));
        }
        let mut labels = labels;
        labels.sort();
        let key = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        if samples.insert((name.to_owned(), key), value).is_some() {
            return Err(format!("duplicate sample '{line}'"));
        }
    }
    Ok(samples)
}

fn value(samples: &Samples, name: &str, labels: &str) -> f64 {
    *samples
        .get(&(name.to_owned(), labels.to_owned()))
        .unwrap_or_else(|| panic!("no sample {name}{{{labels}}} in {samples:#?}"))
}

#[test]
fn the_checker_refuses_malformed_text() {
    for bad in [
        "worlds_x 1\n",
        "# TYPE worlds_x gauge\nworlds_y 1\n",
        "# TYPE worlds_x gauge\nworlds_x one\n",
        "# TYPE worlds_x gauge\nworlds_x{a=\"1} 1\n",
        "# TYPE 1x gauge\n1x 1\n",
        "# TYPE worlds_x gauge\n# TYPE worlds_x gauge\n",
    ] {
        assert!(parse_exposition(bad).is_err(), "accepted {bad:?}");
    }
    let good = "# HELP worlds_x X.\n# TYPE worlds_x gauge\nworlds_x{a=\"q\\\"\"} 1.5\n";
    assert_eq!(
        value(&parse_exposition(good).unwrap(), "worlds_x", "a=q\""),
        1.5
    );
}

#[tokio::test]
async fn a_known_workload_gives_known_series() {
    let double = activity("double", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n * 2)
    });
    let refuse = activity("refuse", |_ctx: ActivityContext, _: ()| async move {
        Err::<(), _>(StepError::fatal("no"))
    });
    let (d, r) = (double.clone(), refuse.clone());
    let twice = workflow("twice", move |ctx: WorkflowContext, n: u64| {
        let d = d.clone();
        async move {
            let once = ctx.run(&d, n).await?;
            ctx.sleep("1s").await?;
            Ok::<_, WorkflowError>(ctx.run(&d, once).await?)
        }
    });
    let refused = workflow("refused", move |ctx: WorkflowContext, _: ()| {
        let r = r.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&r, ()).await?) }
    });
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    let mut config = WorldConfig::memory();
    config.min_workers = 2;
    config.max_workers = 2;
    config.failure_strategy = FailureStrategy::Ignore;
    let t = TestWorld::with_config(config).await;
    t.register(&double).unwrap().register(&refuse).unwrap();
    t.register(&twice).unwrap().register(&refused).unwrap();
    t.register(&nap).unwrap();
    let started = t.now();

    for n in 0..3 {
        let run = t
            .execute(&twice, n, WorkflowOptions::default())
            .await
            .unwrap();
        t.run_until_complete(&run.id, "1m").await.unwrap();
    }
    let run = t
        .execute(&refused, (), WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(
        t.run_until_complete(&run.id, "1m").await.unwrap().status,
        RunStatus::Failed
    );
    let sleeping = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    let cancelled = t
        .execute(&nap, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    t.cancel(&cancelled.id).await.unwrap();
    t.settle().await;

    let text = t.metrics_prometheus();
    let samples = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let metrics = t.get_metrics();

    assert_eq!(
        value(&samples, "worlds_runs_total", "status=completed"),
        3.0
    );
    assert_eq!(value(&samples, "worlds_runs_total", "status=failed"), 1.0);
    assert_eq!(
        value(&samples, "worlds_runs_total", "status=cancelled"),
        1.0
    );
    assert_eq!(
        value(&samples, "worlds_runs_total", "status=compensated"),
        0.0
    );
    assert_eq!(
        value(&samples, "worlds_runs_in_flight", "status=queued"),
        0.0
    );
    assert_eq!(
        value(&samples, "worlds_runs_in_flight", "status=running"),
        1.0
    );
    assert_eq!(value(&samples, "worlds_workers", "state=idle"), 2.0);
    assert_eq!(value(&samples, "worlds_workers", "state=busy"), 0.0);
    assert_eq!(value(&samples, "worlds_workload_ratio", ""), 0.0);
    assert_eq!(
        value(&samples, "worlds_steps_total", "outcome=completed"),
        6.0
    );
    assert_eq!(value(&samples, "worlds_steps_total", "outcome=failed"), 1.0);
    assert_eq!(value(&samples, "worlds_step_attempts_total", ""), 7.0);
    assert_eq!(
        value(&samples, "worlds_runs_completed_last_minute", ""),
        metrics.throughput.per_minute as f64
    );
    assert_eq!(metrics.throughput.per_minute, 3);
    let uptime = (t.now() - started) as f64 / 1_000.0;
    assert_eq!(value(&samples, "worlds_uptime_seconds", ""), uptime);
    assert_eq!(uptime, 3.0, "three runs of one second each");

    // Each completed run took exactly 1 s of virtual time; the failed one none.
    let h = "worlds_run_duration_seconds";
    assert_eq!(
        value(&samples, &format!("{h}_count"), "status=completed"),
        3.0
    );
    assert_eq!(
        value(&samples, &format!("{h}_sum"), "status=completed"),
        3.0
    );
    assert_eq!(
        value(&samples, &format!("{h}_bucket"), "le=0.5,status=completed"),
        0.0
    );
    assert_eq!(
        value(&samples, &format!("{h}_bucket"), "le=1,status=completed"),
        3.0
    );
    assert_eq!(
        value(&samples, &format!("{h}_bucket"), "le=+Inf,status=completed"),
        3.0
    );
    assert_eq!(value(&samples, &format!("{h}_count"), "status=failed"), 1.0);
    assert_eq!(value(&samples, &format!("{h}_sum"), "status=failed"), 0.0);
    assert_eq!(
        value(&samples, &format!("{h}_count"), "status=cancelled"),
        1.0
    );
    assert!(text.contains("# HELP worlds_runs_total "));
    assert!(text.contains("# TYPE worlds_run_duration_seconds histogram"));
    drop(sleeping);
}
