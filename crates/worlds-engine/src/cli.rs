//! Commands a user's own program can answer, with its workflows registered: the checks that
//! need the code, which the `worlds` tool (which knows only its demo workflows) cannot make.
//!
//! Call [`main`] from your binary when its first argument is a command of this module, and
//! run your program as you would the tool:
//!
//! ```text
//! $ my-service verify              # exit status 1 if the code breaks a run in flight
//! $ my-service verify --sample 500 --json
//! ```
//!
//! ```no_run
//! use worlds_engine::prelude::*;
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let world = World::new(WorldConfig::default()).unwrap();
//!     // … world.register(&…) for every workflow and step of this build …
//!     if worlds_engine::cli::handles(std::env::args().skip(1)) {
//!         return worlds_engine::cli::main(&world, std::env::args().skip(1)).await;
//!     }
//!     // … the program's own work …
//!     std::process::ExitCode::SUCCESS
//! }
//! ```
//!
//! `verify` opens nothing itself: the world given must be built on the store of the runs to
//! check (the directory or the database of the deployed program) with the new code
//! registered, and it need not be started.

use std::io::Write;
use std::process::ExitCode;

use crate::world::{VerifyOptions, VerifyReport, World};

const USAGE: &str = "usage: verify [--sample N] [--json]
  verify    replay every run in flight (and every quarantined run) against the workflows
            registered in this program, running nothing; exit status 1 if any would fail
            with non-determinism or names a workflow not registered
  --sample N  replay at most N runs, spread over them
  --json      print the report as JSON";

/// True when `args` (without the program name) start with a command of this module.
pub fn handles<I, S>(args: I) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    args.into_iter()
        .next()
        .is_some_and(|first| first.as_ref() == "verify")
}

/// Runs the command in `args` (without the program name) against `world`, printing to
/// standard output and errors to standard error: exit status 0 when all is well, 1 when the
/// check found runs the code would break, 2 for bad arguments or a store that failed.
pub async fn main<I, S>(world: &World, args: I) -> ExitCode
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let args: Vec<String> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run(world, &args, &mut out, &mut err).await;
    let _ = std::io::stdout().write_all(&out);
    let _ = std::io::stderr().write_all(&err);
    ExitCode::from(status)
}

/// [`main`] writing to `out` and `err`; returns the exit status.
pub async fn run(
    world: &World,
    args: &[String],
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> u8 {
    let options = match parse(args) {
        Ok(options) => options,
        Err(message) => {
            let _ = writeln!(err, "{message}\n{USAGE}");
            return 2;
        }
    };
    let report = match world.verify(options.verify).await {
        Ok(report) => report,
        Err(e) => {
            let _ = writeln!(err, "verify: could not read the runs: {e}");
            return 2;
        }
    };
    let written = if options.json {
        serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::other)
            .and_then(|json| writeln!(out, "{json}"))
    } else {
        write!(out, "{report}")
    };
    if let Err(e) = written {
        let _ = writeln!(err, "verify: could not print the report: {e}");
        return 2;
    }
    verdict(&report)
}

fn verdict(report: &VerifyReport) -> u8 {
    if report.is_clean() {
        0
    } else {
        1
    }
}

struct Parsed {
    verify: VerifyOptions,
    json: bool,
}

fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut args = args.iter();
    match args.next().map(String::as_str) {
        Some("verify") => {}
        Some(other) => return Err(format!("unknown command '{other}'")),
        None => return Err("no command given".to_owned()),
    }
    let mut parsed = Parsed {
        verify: VerifyOptions::default(),
        json: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => parsed.json = true,
            "--sample" => {
                let n = args
                    .next()
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--sample needs a number of runs, at least 1")?;
                parsed.verify.sample = Some(n);
            }
            other => return Err(format!("unknown option '{other}'")),
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn arguments_are_checked() {
        assert!(handles(["verify", "--json"]));
        assert!(!handles(["serve"]));
        assert!(!handles(Vec::<String>::new()));
        let ok = parse(&args(&["verify", "--sample", "20", "--json"])).unwrap();
        assert_eq!((ok.verify.sample, ok.json), (Some(20), true));
        for (bad, says) in [
            (&["verify", "--sample"][..], "--sample needs"),
            (&["verify", "--sample", "0"], "--sample needs"),
            (&["verify", "--fast"], "unknown option '--fast'"),
            (&["check"], "unknown command 'check'"),
            (&[], "no command"),
        ] {
            let error = parse(&args(bad)).err().unwrap();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }
}
