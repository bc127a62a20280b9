//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): one function per reader
//! of outside input, taking raw bytes. Each must return for every input without panicking;
//! where a value read can be written back, it checks that it reads back the same.
//!
//! The same functions replay the kept corpora (`fuzz/corpus/<target>/`) in the unit tests, so
//! an input that once crashed a reader stays fixed. Not part of the public API.

use crate::clock::Millis;
use crate::config::WorldConfig;
use crate::duration::{parse_duration, Dur};
use crate::hooks::WebhookSignature;
use crate::model::Event;
use crate::schedule::{CronExpr, ScheduleConfig};

/// A fuzz target: raw bytes in, a panic on a broken promise.
pub type Target = fn(&[u8]);

/// The fuzz targets, by the name of their corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("cron", cron),
    ("duration", duration),
    ("record", record),
    ("run_log", run_log),
    ("event_json", event_json),
    ("config_json", config_json),
    ("webhook_signature", webhook_signature),
];

/// Instants the cron target searches from: the epoch, 2026, a leap day, the far future and
/// the past.
const INSTANTS: [Millis; 5] = [
    0,
    1_767_225_600_000,
    1_709_164_800_000,
    253_402_300_799_000,
    -86_400_000,
];

/// A cron expression, then (after a newline) an optional time zone name.
pub fn cron(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (expression, zone) = match text.split_once('\n') {
        Some((e, z)) => (e, Some(z)),
        None => (text, None),
    };
    let Ok(cron) = CronExpr::parse(expression, zone) else {
        return;
    };
    for at in INSTANTS {
        if let Ok(next) = cron.next_after(at) {
            assert!(
                next > at,
                "{expression:?}: next time {next} is not after {at}"
            );
        }
        if let Some(latest) = cron.latest_at_or_before(at) {
            assert!(
                latest <= at,
                "{expression:?}: latest {latest} is after {at}"
            );
        }
    }
}

/// A duration as text; one that parses must display as a text that parses to the same.
pub fn duration(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(parsed) = parse_duration(text) {
        let shown = Dur(parsed).to_string();
        let again = parse_duration(&shown).expect("a displayed duration parses");
        assert_eq!(
            again.as_millis(),
            parsed.as_millis(),
            "{text:?} shown as {shown:?}"
        );
    }
    let _ = serde_json::from_slice::<Dur>(data);
}

/// One stored record line (without its newline).
pub fn record(data: &[u8]) {
    crate::store::file_fuzz::record_line(data);
}

/// A run log or write-ahead log: the first byte chooses whether lines are taken as they are
/// (odd) or given their checksums first (even), so that both the record layer and the events
/// and history rules under it are reached.
pub fn run_log(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    crate::store::file_fuzz::logs(bytes, mode % 2 == 0);
}

/// An event as JSON; one that reads must write back to JSON that reads the same.
pub fn event_json(data: &[u8]) {
    if let Ok(event) = serde_json::from_slice::<Event>(data) {
        let json = serde_json::to_vec(&event).expect("a read event writes");
        let again: Event = serde_json::from_slice(&json).expect("a written event reads");
        assert_eq!(again, event);
    }
}

/// A world configuration, a stored schedule, and a signature configuration, as JSON.
pub fn config_json(data: &[u8]) {
    if let Ok(config) = serde_json::from_slice::<WorldConfig>(data) {
        let _ = config.validate();
    }
    if let Ok(schedule) = serde_json::from_slice::<ScheduleConfig>(data) {
        if let Some(expression) = &schedule.cron_expression {
            if let Ok(cron) = CronExpr::parse(expression, schedule.time_zone.as_deref()) {
                let _ = cron.next_after(schedule.created_at);
            }
        }
    }
    if let Ok(signature) = serde_json::from_slice::<WebhookSignature>(data) {
        let _ = signature.validate("signature");
    }
}

/// A signed webhook request: the first byte picks the scheme, then header lines
/// (`name: value`) up to an empty line, then the body. Also checks that what a scheme signs,
/// it verifies.
pub fn webhook_signature(data: &[u8]) {
    let Some((&scheme, rest)) = data.split_first() else {
        return;
    };
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let signature = match scheme % 3 {
        0 => WebhookSignature::standard(secret),
        1 => WebhookSignature::stripe(secret),
        _ => WebhookSignature::github(secret),
    };
    let now: Millis = 1_767_225_600_000;
    let split = rest
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(rest.len());
    let (head, body) = (&rest[..split], rest.get(split + 2..).unwrap_or(&[]));
    let head = String::from_utf8_lossy(head);
    let headers: Vec<(&str, &str)> = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .collect();
    let _ = signature.verify(&headers, body, now);

    let signed = signature
        .sign("msg_fuzz", body, now)
        .expect("the fuzz target's secret is valid for every scheme");
    let signed: Vec<(&str, &str)> = signed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert!(
        signature.verify(&signed, body, now).is_ok(),
        "a request signed by a scheme does not verify"
    );
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::TARGETS;

    /// Every kept input of every target: the corpora grown by fuzzing and the inputs that once
    /// crashed a reader.
    #[test]
    fn the_kept_corpora_replay_without_a_panic() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        let mut replayed = 0;
        for (name, target) in TARGETS {
            let dir = root.join(name);
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
                panic!("no corpus for target {name} at {}: {e}", dir.display())
            });
            let mut count = 0;
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(
                    outcome.is_ok(),
                    "target {name} panicked on {}",
                    path.display()
                );
                count += 1;
            }
            assert!(count > 0, "the corpus of target {name} is empty");
            replayed += count;
        }
        assert!(replayed >= TARGETS.len());
    }
}
