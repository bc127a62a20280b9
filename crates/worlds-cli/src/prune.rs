//! `worlds runs prune`: a retention sweep, or its preview, over a directory, a database or a
//! world's API.

use std::io::Write;

use anyhow::bail;
use worlds_engine::{PruneReport, RetentionConfig};

use crate::cli::PruneArgs;
use crate::escape::escaped;
use crate::target::Target;

/// Runs `worlds runs prune`: checks the policy, sweeps (or previews), says what it did.
pub(crate) fn prune(args: &PruneArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let target = Target::open(&args.world)?;
    if matches!(target, Target::Server(_)) && args.policy.archive_dir.is_some() {
        bail!("the serving world archives where its own policy says: set it where the server starts (`worlds serve --archive-dir DIR`)");
    }
    let policy = match (&target, args.policy.is_given()) {
        (Target::Server(_), true) => bail!(
            "the serving world judges by its own policy: set it where the server starts (`worlds serve --keep-completed 7d …`) and run `worlds runs prune` without --keep-…"
        ),
        (Target::Server(_), false) => None,
        (_, false) => bail!(
            "say how long finished runs are kept: --keep-completed, --keep-failed, --keep-cancelled, --keep-quarantined (`7d`, `12h`; 0s keeps them for ever); the program's own policy is not stored with its runs"
        ),
        (_, true) => {
            let mut policy = RetentionConfig::default();
            args.policy.apply(&mut policy);
            if !policy.is_enabled() {
                bail!("every --keep-… given is 0s, which keeps every run for ever: nothing to prune");
            }
            Some(policy)
        }
    };
    let report = target.prune(policy, args.dry_run)?;
    print_report(args.json, &report, out)
}

/// Says what a sweep did, or a preview would do.
pub(crate) fn print_report(
    json: bool,
    report: &PruneReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(report)?)?;
        return Ok(());
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let what = match &report.id {
        Some(id) => format!("sweep {}", escaped(id)),
        None => "preview".to_owned(),
    };
    let mut line = format!(
        "{what}: {verb} {} run(s) of {} finished run(s) looked at, {} event(s)",
        report.removed, report.looked_at, report.events
    );
    if let Some(bytes) = report.bytes {
        line.push_str(&format!(", {}", bytes_text(bytes)));
    }
    writeln!(out, "{line}")?;
    writeln!(
        out,
        "  kept: {} by the policy, {} in use (a parent or child unfinished), {} for an open bulk retry or resume",
        report.kept_by_policy, report.kept_in_use, report.kept_for_bulk
    )?;
    if report.archived > 0 {
        writeln!(
            out,
            "  {} run(s) archived before their removal",
            report.archived
        )?;
    }
    if report.already_gone > 0 {
        writeln!(
            out,
            "  {} run(s) were already removed (an earlier, interrupted sweep)",
            report.already_gone
        )?;
    }
    if let Some(due) = report.next_due {
        writeln!(
            out,
            "  the next run the policy keeps may go at {}",
            crate::text::timestamp(due)
        )?;
    }
    Ok(())
}

/// `1.5 MiB`.
fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The world's encryption keys from the environment, to open sealed archives.
fn keys() -> anyhow::Result<Option<worlds_engine::EncryptionKeys>> {
    Ok(worlds_engine::EncryptionKeys::from_env()?)
}

/// `worlds runs import --archive FILE`: writes archived runs back into a world.
pub(crate) fn import(args: &crate::cli::ImportArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let contents = worlds_engine::store::archive::read_archive(&args.archive, keys()?.as_ref())?;
    for warning in &contents.warnings {
        eprintln!("warning: {}", escaped(warning));
    }
    let runs: Vec<_> = if args.runs.is_empty() {
        contents.runs
    } else {
        let wanted = |run: &worlds_engine::WorkflowState| {
            args.runs
                .iter()
                .any(|id| *id == run.id || *id == run.workflow_id)
        };
        let found: Vec<_> = contents.runs.into_iter().filter(wanted).collect();
        if found.len() < args.runs.len() {
            bail!(
                "{} of the {} runs asked for are not in {}",
                args.runs.len() - found.len(),
                args.runs.len(),
                args.archive.display()
            );
        }
        found
    };
    let target = Target::open(&args.world)?;
    let (imported, existing) = target.import_runs(runs)?;
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "imported": imported, "already_there": existing })
        )?;
    } else {
        writeln!(
            out,
            "imported {imported} run(s) from {}; {existing} already there, left as they are",
            args.archive.display()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes_text(10), "10 bytes");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(5 * 1024 * 1024), "5.0 MiB");
    }
}
