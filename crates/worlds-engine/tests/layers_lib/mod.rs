//! The reading the `layers` tests of every crate share:
//! which top-level modules of a crate's `src/` use which ([`edges`]), which files of one folder
//! use which ([`file_edges`]), and the uses that lie on a circle.
//!
//! A module "uses" another when its code (not its comments, not the unit tests at the end of a
//! file) names `crate::module` (or reaches it with `super::`), or a name the crate root
//! re-exports from that module. The crate root (`lib.rs`) is no module: it may use every
//! module, and what it defines itself is not counted.
//!
//! worlds-engine's `tests/layers.rs` declares it as `mod layers_lib;`; the other crates'
//! tests include it with `#[path = "../../worlds-engine/tests/layers_lib/mod.rs"]` (it lies in
//! a folder so cargo does not build it as a test of its own).

// Each crate's test calls the parts it needs.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

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
/// (`$crate::` in a macro, and `other_crate::`, are not paths of this crate.)
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(['c', 's']) {
        let before = rest[..at].chars().next_back();
        let here = &rest[at..];
        let starts = here.starts_with("crate::") || here.starts_with("super::");
        if !starts || before.is_some_and(|c| is_ident(c) || c == '$') {
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

/// The module path of `file` under `src` (`batch/rows.rs` is batch::rows, `batch/mod.rs` is
/// batch, `lib.rs` the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let mut module = Vec::new();
    for component in file.strip_prefix(src).unwrap().components() {
        let name = component.as_os_str().to_string_lossy();
        let name = name.trim_end_matches(".rs");
        if !matches!(name, "mod" | "lib" | "main") {
            module.push(name.to_owned());
        }
    }
    module
}

/// The paths `file`'s code names, from the crate root (`super::x` in `a/b.rs` is a::x).
fn absolute_paths(src: &Path, file: &Path) -> Vec<Vec<String>> {
    let module = module_of(src, file);
    let code = code_of(&fs::read_to_string(file).unwrap());
    paths(&code)
        .into_iter()
        .filter_map(|path| {
            if path[0] == "crate" {
                return Some(path[1..].to_vec());
            }
            let up = path.iter().take_while(|s| *s == "super").count();
            let base = module.len().checked_sub(up)?;
            Some([&module[..base], &path[up..]].concat())
        })
        .filter(|path| !path.is_empty())
        .collect()
}

/// Names a module file (the crate root, a folder's `mod.rs`) re-exports (`pub use`,
/// `pub(crate) use`), and the first segment of the path each comes from
/// (`pub use world::{open, open_with_clock}` gives open and open_with_clock → world).
fn reexports(text: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in code_of(text).split(';') {
        let statement = statement.trim_start();
        // Attributes before the statement (`#[cfg(feature = "x")] pub use …`).
        let statement = match statement.rfind(']') {
            Some(at) if statement.starts_with("#[") => statement[at + 1..].trim_start(),
            _ => statement,
        };
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
        let path = path.trim_start();
        let path = path.strip_prefix("self::").unwrap_or(path);
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        let words = rest.split(|c: char| !is_ident(c)).filter(|w| !w.is_empty());
        for word in words {
            names
                .entry(word.to_owned())
                .or_insert(module.trim().to_owned());
        }
    }
    names
}

fn visit(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The crate's `src/`.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate's top-level modules: each `x.rs` and each folder `x/` of `src/` but the root.
pub(crate) fn modules() -> BTreeSet<String> {
    let mut modules = BTreeSet::new();
    for entry in fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let module = if path.is_dir() {
            name
        } else if let Some(module) = name.strip_suffix(".rs") {
            module.to_owned()
        } else {
            continue;
        };
        if module != "lib" && module != "main" {
            modules.insert(module);
        }
    }
    modules
}

/// Every (from, to) use between different top-level modules of the crate.
pub(crate) fn edges() -> BTreeSet<(String, String)> {
    let src = src();
    let modules = modules();
    let roots = reexports(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut edges = BTreeSet::new();
    for file in files {
        let Some(from) = module_of(&src, &file).into_iter().next() else {
            continue;
        };
        for path in absolute_paths(&src, &file) {
            let name = &path[0];
            let to = if modules.contains(name) {
                name.clone()
            } else if let Some(module) = roots.get(name).filter(|m| modules.contains(*m)) {
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

/// Every (from, to) use between the parts of `folder` (a folder of `src/`, such as `devkit`).
///
/// Each `x.rs` of the folder is one part, `x`, and so is each sub-folder `x/` with all its files;
/// the folder's `mod.rs` is its root (as `lib.rs` is the crate's) and no part. A file uses part
/// `x` when its code names `super::x` or `crate::folder::x` (with as many `super`s as it lies
/// deep), or a name the folder's `mod.rs` (or, for a top-level folder, the crate root)
/// re-exports from `x`.
pub(crate) fn file_edges(folder: &str) -> BTreeSet<(String, String)> {
    let src = src();
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
    let roots = reexports(&fs::read_to_string(src.join("lib.rs")).unwrap());
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
        let module = module_of(&src, &file);
        let Some(from) = module.get(folder_path.len()).cloned() else {
            continue;
        };
        for absolute in absolute_paths(&src, &file) {
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

/// The uses in `edges` that lie on a circle: `from` uses `to`, and `to` leads back to `from`.
pub(crate) fn circle_edges(edges: &BTreeSet<(String, String)>) -> Vec<(String, String)> {
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

/// Fails if two top-level modules of the crate use each other, directly or through others,
/// apart from the `known` uses on a circle, listed with the reason they stay; each of those
/// must still be on one.
pub(crate) fn assert_no_module_circles(known: &[(&str, &str)]) {
    let circles = circle_edges(&edges());
    assert_only_known(
        &circles,
        known,
        "these modules use a module that leads back to them, an import circle",
        "move what both need to a lower module both may use, or pass it in",
        "these known circles are gone",
    );
}

/// Fails if two parts of `folder` use each other (see [`file_edges`]), apart from the `known`
/// circles listed with the reason they stay; each of those must still be there.
pub(crate) fn assert_no_file_circles(folder: &str, known: &[(&str, &str)]) {
    let edges = file_edges(folder);
    assert!(
        !edges.is_empty(),
        "src/{folder}: no uses found, the reading is wrong"
    );
    let circles = circle_edges(&edges);
    assert_only_known(
        &circles,
        known,
        &format!(
            "in src/{folder}, these files use a file that leads back to them, an import circle"
        ),
        "move what both need to a third file, or pass it in",
        &format!("src/{folder}: these known circles are gone"),
    );
}

/// Fails if `circles` holds a use not in `known` (saying `found` and what to do), or `known`
/// one no longer on a circle (saying `gone`).
fn assert_only_known(
    circles: &[(String, String)],
    known: &[(&str, &str)],
    found: &str,
    advice: &str,
    gone: &str,
) {
    let new: Vec<_> = circles
        .iter()
        .filter(|(from, to)| !known.contains(&(from.as_str(), to.as_str())))
        .collect();
    assert!(new.is_empty(), "{found}: {new:?}; {advice}");
    let stale: Vec<_> = known
        .iter()
        .filter(|(from, to)| !circles.iter().any(|(f, t)| f == from && t == to))
        .collect();
    assert!(
        stale.is_empty(),
        "{gone}, take them off the list: {stale:?}"
    );
}
