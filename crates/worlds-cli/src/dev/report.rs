//! What `worlds dev` says besides its progress: what it is about to do (stderr), and how the
//! session ended (stdout).

use std::path::Path;
use std::time::Duration;

use worlds_demo::Demo;
use worlds_engine::Persistence;

use super::tally::Tally;
use super::tracker::Tracker;
use crate::cli::{DevArgs, PersistenceArg};

/// What the session is about to do, on stderr.
pub(crate) fn announce(args: &DevArgs, persistence: Persistence, demo: &Demo, tracker: &Tracker) {
    eprintln!("worlds dev: {}", storage(args, persistence));
    if tracker.resumed > 0 {
        eprintln!(
            "resuming {} {} left in flight",
            tracker.resumed,
            runs(tracker.resumed)
        );
    }
    if tracker.to_start > 0 {
        eprintln!(
            "starting {} new {} of {}",
            tracker.to_start,
            runs(tracker.to_start),
            demo.workflow_names().join(", ")
        );
    }
    if tracker.resumed == 0 && tracker.to_start == 0 {
        return;
    }
    if persistence == Persistence::Memory {
        eprintln!("Ctrl-C stops");
    } else {
        eprintln!(
            "Ctrl-C stops; `{}` again resumes what is in flight",
            resume_command(args)
        );
    }
}

/// `hybrid storage in ./.worlds-engine`.
fn storage(args: &DevArgs, persistence: Persistence) -> String {
    match persistence {
        Persistence::Memory => "memory storage (nothing is kept)".to_owned(),
        Persistence::File => format!("file storage in {}", args.dir.display()),
        Persistence::Hybrid => format!("hybrid storage in {}", args.dir.display()),
        Persistence::Postgres => match args.database.world() {
            Some(db) => format!(
                "PostgreSQL storage on {} (schema {})",
                db.server(),
                db.schema()
            ),
            None => "PostgreSQL storage".to_owned(),
        },
    }
}

/// "run" or "runs".
fn runs(n: usize) -> &'static str {
    if n == 1 {
        "run"
    } else {
        "runs"
    }
}

/// ` --dir PATH`, unless `dir` is the default (quoted for a shell when it needs to be).
fn dir_flag(dir: &Path) -> String {
    crate::target::dir::dir_flag(dir)
}

/// The options naming the session's world in a `worlds` command: `--dir`, or the database's.
fn world_flags(args: &DevArgs) -> String {
    match (args.persistence(), args.database.world()) {
        (PersistenceArg::Postgres, Some(db)) => db.flags(),
        _ => dir_flag(&args.dir),
    }
}

/// Where the session's runs are kept: the directory, or the database's schema.
fn kept_in(args: &DevArgs) -> String {
    match (args.persistence(), args.database.world()) {
        (PersistenceArg::Postgres, Some(db)) => db.describe(),
        _ => args.dir.display().to_string(),
    }
}

/// The `worlds dev` command that resumes this session's directory: the same `--dir` and
/// `--persistence` (a file-mode directory reopened in the default hybrid mode would not be the
/// same world).
pub(crate) fn resume_command(args: &DevArgs) -> String {
    let persistence = match args.persistence() {
        PersistenceArg::Hybrid => "",
        PersistenceArg::File => " --persistence file",
        PersistenceArg::Memory => " --persistence memory",
        PersistenceArg::Postgres => " --persistence postgres",
    };
    format!("worlds dev{}{persistence}", world_flags(args))
}

/// The closing summary once every run has finished, on stdout.
pub(crate) fn summary(
    args: &DevArgs,
    persistence: Persistence,
    tally: &Tally,
    tracker: &Tracker,
    took: Duration,
) {
    println!(
        "{} {} finished in {:.1}s: {}",
        tally.total(),
        runs(tally.total()),
        took.as_secs_f64(),
        tally.outcome_line()
    );
    if persistence == Persistence::Memory {
        println!("(memory storage: the runs end with this process)");
        return;
    }
    let dir = world_flags(args);
    println!("inspect them:");
    println!("  worlds runs list{dir}");
    let id = tracker.last.as_deref().unwrap_or("<run id>");
    println!("  worlds runs show {id}{dir}");
}

/// What a Ctrl-C left behind, on stdout.
pub(crate) fn stopped(args: &DevArgs, persistence: Persistence, tally: &Tally, took: Duration) {
    println!(
        "stopped after {:.1}s: {}",
        took.as_secs_f64(),
        tally.outcome_line()
    );
    let left = tally.in_flight();
    if left == 0 {
        println!("no runs in flight");
    } else if persistence == Persistence::Memory {
        println!(
            "{left} {} still in flight, lost with this process (memory storage)",
            runs(left)
        );
    } else {
        println!(
            "{left} {} still in flight, kept in {}: `{}` again resumes {}",
            runs(left),
            kept_in(args),
            resume_command(args),
            if left == 1 { "it" } else { "them" }
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::target::DEFAULT_DIR;

    #[test]
    fn dir_flag_only_when_not_the_default() {
        assert_eq!(dir_flag(Path::new(DEFAULT_DIR)), "");
        assert_eq!(dir_flag(&PathBuf::from("/tmp/w")), " --dir /tmp/w");
        assert_eq!(dir_flag(&PathBuf::from("/tmp/my w")), " --dir '/tmp/my w'");
        assert_eq!(
            dir_flag(&PathBuf::from("/tmp/it's")),
            r" --dir '/tmp/it'\''s'"
        );
        assert_eq!(runs(1), "run");
        assert_eq!(runs(2), "runs");
    }
}
