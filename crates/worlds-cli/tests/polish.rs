//! What a new user meets first, through the built `worlds` binary: errors under `--json`, an
//! unknown id, a `--dir` that does not exist or names the project instead of the world,
//! `--help`, and the benchmark's backends.

use std::path::Path;
use std::process::{Command, Output};

use worlds_engine::store::FileStore;

fn worlds(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn path(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

/// The one JSON error object on stderr, its message.
fn json_error(output: &Output) -> String {
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    let value: serde_json::Value = serde_json::from_str(stderr.trim())
        .unwrap_or_else(|e| panic!("stderr is not one JSON object ({e}):\n{stderr}"));
    value["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error.message in {stderr}"))
        .to_owned()
}

#[test]
fn the_cli_trips_new_users_with_text_errors_dead_ends_and_stale_help() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("my-app");
    let world = project.join(".worlds-engine");
    drop(FileStore::open(&world).unwrap());

    // --json errors are JSON, on stderr; stdout holds only data.
    let output = worlds(&["runs", "show", "nope", "--json", "--dir", path(&world)]);
    assert_eq!(text(&output.stdout), "");
    let message = json_error(&output);
    assert!(message.contains("nope"), "{message}");
    let output = worlds(&["runs", "list", "--json", "--status", "bogus"]);
    assert!(json_error(&output).contains("bogus"));

    // An unknown id points at the list of runs.
    let output = worlds(&["runs", "show", "nope", "--dir", path(&world)]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("worlds runs list"), "{stderr}");

    // A missing --dir says so; the project directory points at the world inside it.
    let missing = tmp.path().join("missing");
    for args in [
        vec!["runs", "list"],
        vec!["doctor"],
        vec!["schedules", "list"],
    ] {
        let output = worlds(&[args.as_slice(), &["--dir", path(&missing)]].concat());
        assert!(!output.status.success());
        let stderr = text(&output.stderr);
        assert!(stderr.contains("does not exist"), "{args:?}: {stderr}");
    }
    let output = worlds(&["runs", "list", "--dir", path(&project)]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("--dir {}", world.display())),
        "{stderr}"
    );

    // --help: examples, `dev` first, `runs` not called read-only (runs cancel writes).
    let output = worlds(&["--help"]);
    let help = text(&output.stdout);
    assert!(help.contains("Examples:"), "{help}");
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(commands.first(), Some(&"dev"), "{help}");
    let runs = help
        .lines()
        .find(|l| l.trim_start().starts_with("runs "))
        .unwrap();
    assert!(!runs.contains("read-only"), "{runs}");
    assert!(runs.contains("cancel"), "{runs}");

    // bench offers only backends that exist.
    let help = text(&worlds(&["bench", "--help"]).stdout);
    assert!(help.contains("postgres"), "{help}");
    assert!(!help.contains("sqlite"), "{help}");
    assert!(!worlds(&["bench", "--backend", "sqlite"]).status.success());
}
