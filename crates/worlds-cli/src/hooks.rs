//! `worlds hooks resume TOKEN --data JSON`: delivers a payload to a waiting hook, in a world's
//! directory, on PostgreSQL, or through a world's API.

use std::io::Write;

use anyhow::Context;

use crate::cli::HookResumeArgs;
use crate::escape::escaped;
use crate::target::Target;

/// `worlds hooks resume`.
pub(crate) fn resume(args: &HookResumeArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let payload: serde_json::Value = serde_json::from_str(&args.data)
        .with_context(|| format!("--data is not JSON: {}", args.data))?;
    let resumed = Target::open(&args.world)?.resume_hook(&args.token, &payload)?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&resumed)?)?;
    } else {
        writeln!(
            out,
            "resumed hook {} of run {}",
            escaped(&resumed.hook_id),
            escaped(&resumed.run_id)
        )?;
    }
    Ok(())
}
