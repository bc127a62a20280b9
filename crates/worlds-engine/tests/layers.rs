//! The engine crate's folders in layers: a module may use modules of its own layer or below.
//!
//! Modules of one layer may use each other, but no two modules may use each other (directly or
//! through others): the folders form no circle.
//!
//! A module "uses" another when its code (not its comments or tests) names `crate::module` or a
//! name the crate root re-exports from it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

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

/// Code without comments and without the unit tests at the end of a file.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segments after each `crate::` in `code` (`crate::{a::b, c}` gives a and c).
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    found.push(first.to_owned());
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
        rest = after;
    }
    found
}

/// Names the crate root re-exports, and the module each comes from.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let code = code_of(lib);
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = &statement[at + "pub use ".len()..];
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        let words = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty());
        for word in words {
            names
                .entry(word.to_owned())
                .or_insert(module.trim().to_owned());
        }
    }
    names
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// Every (from, to) use between different top-level modules.
fn edges() -> BTreeSet<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let roots = root_names(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut edges = BTreeSet::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let from = first.to_string_lossy().trim_end_matches(".rs").to_owned();
        if from == "lib" || from == "macro_support" {
            continue;
        }
        let code = code_of(&fs::read_to_string(&file).unwrap());
        for name in crate_paths(&code) {
            let to = if layer_of(&name).is_some() {
                name
            } else if let Some(module) = roots.get(&name) {
                module.clone()
            } else {
                continue;
            };
            if to != from {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges
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
    let edges = edges();
    let mut uses: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in &edges {
        uses.entry(from).or_default().insert(to);
    }
    for (from, to) in &edges {
        // Everything `to` reaches, directly or not.
        let mut seen = BTreeSet::new();
        let mut next = vec![to.as_str()];
        while let Some(module) = next.pop() {
            if seen.insert(module) {
                next.extend(uses.get(module).into_iter().flatten().copied());
            }
        }
        assert!(
            !seen.contains(from.as_str()),
            "{from} uses {to}, and {to} leads back to {from}: an import circle"
        );
    }
}
