//! The command line parses as the commands expect.

use super::*;
use clap::CommandFactory;

#[test]
fn cli_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn parses_bench_options() {
    let cli = Cli::try_parse_from([
        "worlds",
        "bench",
        "--workload",
        "w1",
        "--backend",
        "memory",
        "--n",
        "5",
        "--json",
    ])
    .unwrap();
    let Command::Bench(args) = cli.command else {
        panic!("not bench: {:?}", cli.command);
    };
    assert_eq!(args.workload, WorkloadArg::W1);
    assert_eq!(args.backend, Backend::Memory);
    assert_eq!(args.n, Some(5));
    assert!(args.json);
    assert!(Cli::try_parse_from(["worlds", "bench", "--workers", "0"]).is_err());
}

#[test]
fn bench_help_gives_the_worker_counts_the_bench_uses() {
    use crate::bench::{DEFAULT_WORKERS, DURABLE_WORKERS, POSTGRES_WORKERS};
    let mut command = Cli::command();
    let bench = command
        .find_subcommand_mut("bench")
        .expect("a bench command");
    let help = bench.render_long_help().to_string();
    // The help wraps lines: read it as one line of words.
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        format!("Default: {DEFAULT_WORKERS} on memory"),
        format!("{DURABLE_WORKERS} on file and hybrid"),
        format!("{POSTGRES_WORKERS} on postgres"),
    ] {
        assert!(help.contains(&said), "`{said}` not in {help}");
    }
}

#[test]
fn parses_inspection_options() {
    let cli = Cli::try_parse_from([
        "worlds", "runs", "list", "--status", "failed", "--status", "running", "--name", "n",
    ])
    .unwrap();
    let Command::Runs(RunsCommand::List(args)) = cli.command else {
        panic!("not runs list: {:?}", cli.command);
    };
    assert_eq!(args.statuses, vec![RunStatus::Failed, RunStatus::Running]);
    assert_eq!(args.name.as_deref(), Some("n"));
    assert_eq!(args.world.local.dir, PathBuf::from(DEFAULT_DIR));
    assert_eq!(args.limit, 100);
    assert!(Cli::try_parse_from(["worlds", "runs", "list", "--status", "bogus"]).is_err());

    let cli =
        Cli::try_parse_from(["worlds", "runs", "show", "wf-1", "--dir", "d", "--json"]).unwrap();
    let Command::Runs(RunsCommand::Show(args)) = cli.command else {
        panic!("not runs show: {:?}", cli.command);
    };
    assert_eq!((args.id.as_deref(), args.json), (Some("wf-1"), true));
    assert_eq!(args.world.local.dir, PathBuf::from("d"));

    let cli = Cli::try_parse_from(["worlds", "doctor"]).unwrap();
    assert!(matches!(cli.command, Command::Doctor(_)));
}

#[test]
fn parses_schedules_options() {
    let cli = Cli::try_parse_from(["worlds", "schedules", "list", "--json"]).unwrap();
    let Command::Schedules(SchedulesCommand::List(args)) = cli.command else {
        panic!("not schedules list: {:?}", cli.command);
    };
    assert!(args.json);
    assert_eq!(args.world.local.dir, PathBuf::from(DEFAULT_DIR));
    for verb in ["pause", "resume", "delete"] {
        let cli =
            Cli::try_parse_from(["worlds", "schedules", verb, "daily-job", "--dir", "d"]).unwrap();
        let Command::Schedules(command) = cli.command else {
            panic!("not schedules: {:?}", cli.command);
        };
        let args = match command {
            SchedulesCommand::Pause(args)
            | SchedulesCommand::Resume(args)
            | SchedulesCommand::Delete(args) => args,
            SchedulesCommand::List(_) => panic!("{verb} parsed as list"),
        };
        assert_eq!((args.id.as_str(), args.json), ("daily-job", false));
        assert_eq!(args.world.local.dir, PathBuf::from("d"));
    }
    assert!(Cli::try_parse_from(["worlds", "schedules", "pause"]).is_err());
}

#[test]
fn parses_dev_options() {
    let cli = Cli::try_parse_from(["worlds", "dev"]).unwrap();
    let Command::Dev(args) = cli.command else {
        panic!("not dev: {:?}", cli.command);
    };
    assert_eq!(args.dir, PathBuf::from(DEFAULT_DIR));
    assert_eq!(args.runs, None);
    assert_eq!(args.persistence, None);
    assert_eq!(
        args.persistence(),
        if args.database.url().is_some() {
            PersistenceArg::Postgres // WORLDS_ENGINE_DATABASE_URL is set here
        } else {
            PersistenceArg::Hybrid
        }
    );
    assert_eq!(args.speed, 1.0);

    let cli = Cli::try_parse_from([
        "worlds",
        "dev",
        "--dir",
        "d",
        "--runs",
        "0",
        "--persistence",
        "memory",
        "--speed",
        "10",
    ])
    .unwrap();
    let Command::Dev(args) = cli.command else {
        panic!("not dev: {:?}", cli.command);
    };
    assert_eq!(args.dir, PathBuf::from("d"));
    assert_eq!(args.runs, Some(0));
    assert_eq!(args.persistence, Some(PersistenceArg::Memory));
    assert_eq!(args.speed, 10.0);
    assert!(Cli::try_parse_from(["worlds", "dev", "--speed", "0"]).is_err());
    assert!(Cli::try_parse_from(["worlds", "dev", "--persistence", "sqlite"]).is_err());
    let cli = Cli::try_parse_from([
        "worlds",
        "dev",
        "--persistence",
        "postgres",
        "--database-url",
        "postgres://u@h/db",
        "--schema",
        "demo",
    ])
    .unwrap();
    let Command::Dev(args) = cli.command else {
        panic!("not dev: {:?}", cli.command);
    };
    assert_eq!(args.persistence, Some(PersistenceArg::Postgres));
    assert_eq!(args.database.url(), Some("postgres://u@h/db"));
    assert_eq!(args.database.schema, "demo");
    // A URL alone is enough: the world is on PostgreSQL.
    let cli =
        Cli::try_parse_from(["worlds", "serve", "--database-url", "postgres://u@h/db"]).unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("not serve: {:?}", cli.command);
    };
    assert_eq!(args.persistence(), PersistenceArg::Postgres);
}
