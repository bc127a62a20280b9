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
    if let Some((from, to)) = circle_edges(&edges()).into_iter().next() {
        panic!("{from} uses {to}, and {to} leads back to {from}: an import circle");
    }
}

/// The uses in `edges` that lie on a circle: `from` uses `to`, and `to` leads back to `from`.
fn circle_edges(edges: &BTreeSet<(String, String)>) -> Vec<(String, String)> {
    let mut uses: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges {
        uses.entry(from).or_default().insert(to);
    }
    let mut circles = Vec::new();
    for (from, to) in edges {
        // Everything `to` reaches, directly or not.
        let mut seen = BTreeSet::new();
        let mut next = vec![to.as_str()];
        while let Some(module) = next.pop() {
            if seen.insert(module) {
                next.extend(uses.get(module).into_iter().flatten().copied());
            }
        }
        if seen.contains(from.as_str()) {
            circles.push((from.clone(), to.clone()));
        }
    }
    circles
}

/// Names a module file re-exports (`pub use`, `pub(crate) use`), and the first segment of the
/// path each comes from (`pub use event::{Event, EventKind}` gives Event and EventKind → event).
fn reexports(text: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in code_of(text).split(';') {
        let statement = statement.trim_start();
        let Some(rest) = statement.strip_prefix("pub") else {
            continue;
        };
        let rest = match rest.strip_prefix('(') {
            Some(scoped) => scoped.split_once(')').map_or("", |(_, after)| after),
            None => rest,
        };
        let Some(path) = rest.trim_start().strip_prefix("use ") else {
            continue;
        };
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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifiers of a path at the start of `text` (`a::b::{c}` gives a, b), and what follows
/// the last `::` (here `{c}`) or the path.
fn segments(text: &str) -> (Vec<String>, &str) {
    let mut found = Vec::new();
    let mut rest = text.trim_start();
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            return (found, rest);
        }
        found.push(rest[..end].to_owned());
        match rest[end..].trim_start().strip_prefix("::") {
            Some(after) => rest = after.trim_start(),
            None => return (found, &rest[end..]),
        }
    }
}

/// The items of a `{…}` group at the start of `text` (nested groups kept whole), and what
/// follows the group.
fn group_items(text: &str) -> (Vec<&str>, &str) {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 1);
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                items.push(&text[start..at]);
                start = at + 1;
                if c == '}' {
                    return (items, &text[at + 1..]);
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    (items, "")
}

/// Every path in `code` that starts with `crate::` or `super::`, as its identifiers, a group
/// read into one path per item (`super::{a::B, c}` gives super::a::B and super::c).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(['c', 's']) {
        let before = rest[..at].chars().next_back();
        let here = &rest[at..];
        let starts = here.starts_with("crate::") || here.starts_with("super::");
        if !starts || before.is_some_and(is_ident) {
            rest = &here[1..];
            continue;
        }
        let (prefix, after) = segments(here);
        match after.strip_prefix('{') {
            Some(_) => {
                let (items, after_group) = group_items(after);
                for item in items {
                    let (tail, _) = segments(item);
                    found.push([prefix.clone(), tail].concat());
                }
                rest = after_group;
            }
            None => {
                found.push(prefix);
                rest = after;
            }
        }
    }
    found
}

/// Every (from, to) use between the files of `folder` (a folder of `src/`, such as `model`).
///
/// Each `x.rs` of the folder is one part, `x`, and so is each sub-folder `x/` with all its files;
/// the folder's `mod.rs` is its root (as `lib.rs` is the crate's) and no part. A file uses part
/// `x` when its code names `super::x` or `crate::folder::x` (with as many `super`s as it lies
/// deep), or a name the folder's `mod.rs` (or, for a top-level folder, the crate root)
/// re-exports from `x`.
fn file_edges(folder: &str) -> BTreeSet<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join(folder);
    let folder_path: Vec<String> = folder.split('/').map(str::to_owned).collect();
    let mut parts = BTreeSet::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            parts.insert(name);
        } else if let Some(part) = name.strip_suffix(".rs") {
            if part != "mod" {
                parts.insert(part.to_owned());
            }
        }
    }
    let names = reexports(&fs::read_to_string(dir.join("mod.rs")).unwrap());
    let roots = root_names(&fs::read_to_string(src.join("lib.rs")).unwrap());
    // The part a name of the folder's module (a part, or a name re-exported from one) is in.
    let part_named = |name: &str| {
        if parts.contains(name) {
            Some(name.to_owned())
        } else {
            names.get(name).filter(|p| parts.contains(*p)).cloned()
        }
    };
    let mut files = Vec::new();
    visit(&dir, &mut files);
    let mut edges = BTreeSet::new();
    for file in files {
        let relative = file.strip_prefix(&dir).unwrap();
        let from = relative.components().next().unwrap().as_os_str();
        let from = from.to_string_lossy().trim_end_matches(".rs").to_owned();
        if from == "mod" {
            continue;
        }
        // The file's module path: `model/state/run.rs` is model::state::run, and
        // `model/state/mod.rs` is model::state.
        let mut module = folder_path.clone();
        for component in relative.components() {
            let name = component.as_os_str().to_string_lossy();
            let name = name.trim_end_matches(".rs");
            if name != "mod" {
                module.push(name.to_owned());
            }
        }
        let code = code_of(&fs::read_to_string(&file).unwrap());
        for path in paths(&code) {
            let absolute = if path[0] == "crate" {
                path[1..].to_vec()
            } else {
                let up = path.iter().take_while(|s| *s == "super").count();
                let Some(base) = module.len().checked_sub(up) else {
                    continue;
                };
                [&module[..base], &path[up..]].concat()
            };
            let to = if absolute.starts_with(&folder_path) {
                absolute.get(folder_path.len()).and_then(|n| part_named(n))
            } else if folder_path.len() == 1 {
                // A name the crate root re-exports from this folder.
                absolute
                    .first()
                    .filter(|n| roots.get(*n) == Some(&folder_path[0]))
                    .and_then(|n| part_named(n))
            } else {
                None
            };
            if let Some(to) = to.filter(|to| *to != from) {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges
}

/// Fails if two files of `folder` use each other (see [`file_edges`]), apart from the `known`
/// circles listed with the reason they stay; each of those must still be there.
fn assert_no_file_circles(folder: &str, known: &[(&str, &str)]) {
    let edges = file_edges(folder);
    assert!(
        !edges.is_empty(),
        "src/{folder}: no uses found, the reading is wrong"
    );
    let circles = circle_edges(&edges);
    let new: Vec<_> = circles
        .iter()
        .filter(|(from, to)| !known.contains(&(from.as_str(), to.as_str())))
        .collect();
    assert!(
        new.is_empty(),
        "in src/{folder}, these files use a file that leads back to them, an import circle: \
         {new:?}; move what both need to a third file, or pass it in"
    );
    let gone: Vec<_> = known
        .iter()
        .filter(|(from, to)| !circles.contains(&((*from).to_owned(), (*to).to_owned())))
        .collect();
    assert!(
        gone.is_empty(),
        "src/{folder}: these known circles are gone, take them off the list: {gone:?}"
    );
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
