//! `worlds pause|resume KIND NAME` and `worlds pauses`: the workflows and task queues held by
//! an operator.
//!
//! On a directory the pause is a file of its own under `pauses/`, written atomically beside a
//! running world (hybrid or file mode alike), which reads the pauses again within 2 s; on a
//! database it is a row; on a server, a call with an admin key.

use std::io::Write;

use comfy_table::{presets, Table};
use worlds_engine::model::{Pause, PauseTarget};

use crate::cli::{PauseArgs, PauseKind, PausesArgs};
use crate::escape::escaped;
use crate::target::Target;
use crate::text::{now_ms, timestamp};

/// The pause target `args` names.
fn target(args: &PauseArgs) -> anyhow::Result<PauseTarget> {
    let kind = match args.kind {
        PauseKind::Workflow => "workflow",
        PauseKind::Queue => "task_queue",
    };
    Ok(PauseTarget::parse(kind, &args.name)?)
}

/// Who pauses, as recorded: `--by`, else `cli:` and the user's name.
fn by(args: &PauseArgs) -> String {
    args.by.clone().unwrap_or_else(|| {
        let user = std::env::var("USER").unwrap_or_default();
        if user.is_empty() {
            "cli".to_owned()
        } else {
            format!("cli:{user}")
        }
    })
}

/// `worlds pause`.
pub(crate) fn pause(args: &PauseArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let target = target(args)?;
    let pause = Target::open(&args.world)?.pause(target, &by(args), &args.reason, now_ms())?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&pause)?)?;
    } else {
        writeln!(
            out,
            "{} is paused by {}; its runs and steps not started wait until `worlds resume {} {}`",
            escaped(&pause.target.to_string()),
            escaped(&pause.by),
            if matches!(pause.target, PauseTarget::Workflow(_)) {
                "workflow"
            } else {
                "queue"
            },
            escaped(pause.target.name()),
        )?;
    }
    Ok(())
}

/// `worlds resume`.
pub(crate) fn resume(args: &PauseArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let target = target(args)?;
    let lifted = Target::open(&args.world)?.resume(&target)?;
    match (lifted, args.json) {
        (Some(pause), true) => writeln!(out, "{}", serde_json::to_string(&pause)?)?,
        (Some(pause), false) => writeln!(
            out,
            "{} is resumed (paused by {} since {})",
            escaped(&pause.target.to_string()),
            escaped(&pause.by),
            timestamp(pause.since)
        )?,
        (None, _) => anyhow::bail!("{target} is not paused"),
    }
    Ok(())
}

/// `worlds pauses`.
pub(crate) fn list(args: &PausesArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let pauses = Target::open(&args.world)?.pauses()?;
    if args.json {
        for pause in &pauses {
            writeln!(out, "{}", serde_json::to_string(pause)?)?;
        }
    } else if pauses.is_empty() {
        writeln!(out, "nothing is paused")?;
    } else {
        writeln!(out, "{}", format_table(&pauses))?;
    }
    Ok(())
}

/// The pauses as a table for people.
fn format_table(pauses: &[Pause]) -> String {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_header(["KIND", "NAME", "BY", "SINCE (UTC)", "REASON"]);
    for p in pauses {
        table.add_row([
            p.target.kind().replace('_', " "),
            escaped(p.target.name()).to_string(),
            escaped(&p.by).to_string(),
            timestamp(p.since),
            escaped(&p.reason).to_string(),
        ]);
    }
    table.to_string()
}
