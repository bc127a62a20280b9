//! The engine crate's folders in layers: a module may use modules of its own layer or below.
//!
//! Modules of one layer may use each other, but no two modules may use each other (directly or
//! through others): the folders form no circle.
//!
//! A module "uses" another when its code (not its comments or tests) names `crate::module` or a
//! name the crate root re-exports from it.
//!
//! Inside a folder the same holds file by file: no two files (or sub-folders) of `src/model/`,
//! of `src/engine/` (where `authoring/`, the side workflow and step code touch, is one part that
//! uses nothing of the runtime around it) or of `src/engine/authoring/` use each other, directly
//! or through others (see [`file_edges`]).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

mod layers_lib;

use layers_lib::{assert_no_file_circles, circle_edges, file_edges};

/// Top-level modules of `src/`, lowest layer first.
const LAYERS: &[&[&str]] = &[
    // Plain services and values.
    &[
        "clock",
        "duration",
        "ids",
        "payload",
        "error",
        "atomic_file",
        "resources",
        "status",
    ],
    // The data model and retry policies.
    &["model", "retry"],
    // Configuration: plain data every part below the world reads.
    &["config"],
    // Storage.
    &["store"],
    // What the engine runs on: the task queue, metrics and logs, and the plain parts of hooks
    // (options, tokens, definitions) and schedules (builders, cron, planning).
    &["queue", "telemetry", "hooks", "schedule"],
    // The engine and its workers.
    &["engine"],
    &["worker"],
    // What workflows and the outside world use, built on the engine.
    &["streams", "fetch", "current", "http"],
    // The world and the ways in.
    &["world", "runtime", "testing"],
    // Commands a user's own binary answers, over a world.
    &["cli"],
    // The fuzz targets' entry points, over the readers of outside input.
    &["fuzzing"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every (from, to) use between different top-level modules (the macros' support module,
/// which the exported macros name from users' crates, stands apart).
fn edges() -> BTreeSet<(String, String)> {
    layers_lib::edges()
        .into_iter()
        .filter(|(from, _)| from != "macro_support")
        .collect()
}

#[test]
fn every_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if module == "lib" || module == "macro_support" {
            continue;
        }
        assert!(
            layer_of(module).is_some(),
            "src/{name} is in no layer: add it to LAYERS in tests/layers.rs"
        );
    }
}

#[test]
fn modules_use_only_their_own_layer_and_below() {
    let upward: Vec<_> = edges()
        .into_iter()
        .filter(|(from, to)| layer_of(from) < layer_of(to))
        .collect();
    assert!(
        upward.is_empty(),
        "these modules use a higher layer: {upward:?}; move what they need down (a type to \
         `model`, a part to `engine`), or pass a function down instead of calling up"
    );
}

#[test]
fn no_two_modules_use_each_other() {
    if let Some((from, to)) = circle_edges(&edges()).into_iter().next() {
        panic!("{from} uses {to}, and {to} leads back to {from}: an import circle");
    }
}

#[test]
fn no_two_files_of_model_use_each_other() {
    assert_no_file_circles("model", &[]);
}

#[test]
fn no_two_files_of_engine_use_each_other() {
    assert_no_file_circles("engine", &[]);
}

#[test]
fn no_two_files_of_engine_authoring_use_each_other() {
    assert_no_file_circles("engine/authoring", &[]);
}

/// The authoring side reaches its run through traits the runtime implements: it names no
/// other part of `engine/`.
#[test]
fn engine_authoring_uses_nothing_of_the_runtime() {
    let uses: Vec<_> = file_edges("engine")
        .into_iter()
        .filter(|(from, _)| from == "authoring")
        .collect();
    assert!(
        uses.is_empty(),
        "engine/authoring/ uses the runtime: {uses:?}; give it what it needs through a trait in \
         authoring/ that the runtime implements (see authoring/driver.rs)"
    );
}
