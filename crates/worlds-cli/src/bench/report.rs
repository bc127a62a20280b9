//! One benchmark result: the JSON line of the benchmark contract, and its human-readable form.

use serde::Serialize;

/// The `system` field of every result.
pub(crate) const SYSTEM: &str = "worlds-engine";

/// The benchmarked engine's version. The CLI and the engine share the workspace version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One workload's result, serialized as one JSON object per line.
///
/// Field names and order follow the contract; fields that do not apply are `null`. W6's extra
/// fields are present only on W6 results, `reexecuted_steps` only on W5's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Report {
    /// Always [`SYSTEM`].
    pub(crate) system: &'static str,
    /// Always [`VERSION`].
    pub(crate) version: &'static str,
    /// The backend: `memory`, …
    pub(crate) storage: &'static str,
    /// `W1` … `W6`.
    pub(crate) workload: &'static str,
    /// Workflows run.
    pub(crate) n: usize,
    /// Steps per workflow.
    pub(crate) k: usize,
    /// Wall time of the whole workload, in seconds.
    pub(crate) wall_s: f64,
    /// Finished workflows per second of wall time.
    pub(crate) workflows_per_s: Option<f64>,
    /// Finished steps per second of wall time.
    pub(crate) steps_per_s: Option<f64>,
    /// Median latency (W2) or lateness (W3), in ms.
    pub(crate) p50_ms: Option<f64>,
    /// 99th percentile latency (W2) or lateness (W3), in ms.
    pub(crate) p99_ms: Option<f64>,
    /// Peak resident set size of this process so far (VmHWM), in MiB.
    pub(crate) peak_rss_mb: Option<f64>,
    /// Free-form remarks on how the number was measured.
    pub(crate) notes: String,
    /// W5 only: executions after the restart of steps whose completion was already recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reexecuted_steps: Option<u64>,
    /// W6 only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) flat: Option<FlatSteps>,
    /// R1 only: the store's size, memory, sweep and reopen times per simulated day.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) curve: Option<Vec<super::r1::Day>>,
}

/// W6's per-step cost, early in a long history and late in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct FlatSteps {
    /// Mean step time over the first steps, in ms.
    pub(crate) early_ms: Option<f64>,
    /// Mean step time over the last steps, in ms.
    pub(crate) late_ms: Option<f64>,
    /// `late_ms / early_ms`.
    pub(crate) late_over_early: Option<f64>,
}

impl Report {
    /// A result with the common fields filled in from the wall time and sizes.
    pub(crate) fn new(
        storage: &'static str,
        workload: &'static str,
        n: usize,
        k: usize,
        wall_s: f64,
    ) -> Self {
        let per_s = |count: usize| (wall_s > 0.0).then(|| round(count as f64 / wall_s, 2));
        Report {
            system: SYSTEM,
            version: VERSION,
            storage,
            workload,
            n,
            k,
            wall_s: round(wall_s, 4),
            workflows_per_s: per_s(n),
            steps_per_s: per_s(n * k),
            p50_ms: None,
            p99_ms: None,
            peak_rss_mb: peak_rss_mb(),
            notes: String::new(),
            reexecuted_steps: None,
            flat: None,
            curve: None,
        }
    }

    /// The JSON line (without the newline).
    pub(crate) fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }

    /// A one-line human-readable summary.
    pub(crate) fn to_text_line(&self) -> String {
        let opt = |v: Option<f64>, unit: &str| match v {
            Some(v) => format!("{v}{unit}"),
            None => "-".to_owned(),
        };
        let mut line = format!(
            "{:<3} {:<7} n={:<5} k={:<6} wall {:>8.3} s  {:>10} wf/s  {:>11} steps/s  p50 {:>10}  p99 {:>10}  rss {}",
            self.workload,
            self.storage,
            self.n,
            self.k,
            self.wall_s,
            opt(self.workflows_per_s, ""),
            opt(self.steps_per_s, ""),
            opt(self.p50_ms, " ms"),
            opt(self.p99_ms, " ms"),
            opt(self.peak_rss_mb, " MiB"),
        );
        if let Some(count) = self.reexecuted_steps {
            line.push_str(&format!("  reexecuted_steps {count}"));
        }
        if let Some(flat) = &self.flat {
            line.push_str(&format!(
                "  early {}  late {}  late/early {}",
                opt(flat.early_ms, " ms"),
                opt(flat.late_ms, " ms"),
                opt(flat.late_over_early, ""),
            ));
        }
        if !self.notes.is_empty() {
            line.push_str(&format!("\n    {}", self.notes));
        }
        line
    }
}

/// Rounds to `digits` decimal places (keeps the JSON short without losing precision that
/// matters at these scales).
pub(crate) fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// Nearest-rank percentile (`p` in 0..=100) of some values, as the peer benchmarks compute it.
pub(crate) fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Python's `round` (ties to even), as in the peers' `pct`.
    let rank = (p / 100.0 * sorted.len() as f64 + 0.5).round_ties_even() as usize;
    let index = rank.saturating_sub(1).min(sorted.len() - 1);
    Some(sorted[index])
}

/// Peak resident set size of this process (VmHWM from `/proc/self/status`), in MiB; `None`
/// where that file does not exist (not Linux).
pub(crate) fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

/// Resident set size of this process now (`VmRSS`), in MiB.
pub(crate) fn rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&status, "VmRSS:")
}

/// The `VmHWM` line of a `/proc/<pid>/status` text, in MiB.
fn parse_vm_hwm(status: &str) -> Option<f64> {
    parse_status_kib(status, "VmHWM:")
}

/// The line starting with `key` of a `/proc/<pid>/status` text, in MiB.
fn parse_status_kib(status: &str, key: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(round(kib / 1024.0, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        Report {
            peak_rss_mb: Some(12.5),
            ..Report::new("memory", "W1", 1000, 10, 2.0)
        }
    }

    #[test]
    fn serializes_the_contract_fields_in_order_with_nulls() {
        let line = sample().to_json_line();
        assert_eq!(
            line,
            r#"{"system":"worlds-engine","version":"0.1.0","storage":"memory","workload":"W1","n":1000,"k":10,"wall_s":2.0,"workflows_per_s":500.0,"steps_per_s":5000.0,"p50_ms":null,"p99_ms":null,"peak_rss_mb":12.5,"notes":""}"#
                .replace("0.1.0", VERSION)
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn w6_adds_its_fields_and_null_when_unknown() {
        let mut report = Report::new("memory", "W6", 1, 10_000, 1.0);
        report.flat = Some(FlatSteps {
            early_ms: Some(0.5),
            late_ms: Some(0.6),
            late_over_early: None,
        });
        let value: serde_json::Value = serde_json::from_str(&report.to_json_line()).unwrap();
        assert_eq!(value["early_ms"], 0.5);
        assert_eq!(value["late_ms"], 0.6);
        assert!(value["late_over_early"].is_null());
        assert!(value.get("flat").is_none());
        assert_eq!(value.as_object().unwrap().len(), 13 + 3);
        for key in ["p50_ms", "p99_ms"] {
            assert!(value[key].is_null(), "{key}");
        }
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let values: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(100.0));
        assert_eq!(percentile(&values, 99.0), Some(198.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn reads_vm_hwm() {
        let status = "Name:\tworlds\nVmPeak:\t  10000 kB\nVmHWM:\t   20480 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(20.0));
        assert_eq!(parse_vm_hwm("Name: x\n"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_rss_mb().unwrap() > 0.0);
        }
    }
}
